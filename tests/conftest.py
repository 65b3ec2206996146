
@pytest.fixture
def tiny_model():
    from rhea.testing import tiny_rhea

    return tiny_rhea()
