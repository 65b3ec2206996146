"""A sample of `benchmarks/hostile_inputs.py`'s cases from every family: none may end in a bad outcome
(a traceback, a 500, a silent acceptance, a write before the error, a check after the model load)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.repo_scripts import load_script

BENCH = load_script(Path(__file__).resolve().parents[2] / "benchmarks" / "hostile_inputs.py")

#: every Nth case of each family, so the sample reaches all of a family's kinds of input
STRIDE = {"cli": 12, "session": 6, "adapter": 5, "http": 8}


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    pytest.importorskip("fastapi")
    e = BENCH.Env(tmp_path_factory.mktemp("hostile"))
    yield e
    e.close()


def _sample():
    cases = []
    for family, build in BENCH.FAMILIES.items():
        cases.extend(build()[:: STRIDE[family]])
    return cases


SAMPLE = _sample()


def test_the_benchmark_has_over_300_cases_in_four_families():
    cases = BENCH.all_cases()
    assert len(cases) >= 300 and {c.family for c in cases} == set(BENCH.FAMILIES)
    assert len({(c.family, c.name) for c in cases}) == len(cases)  # names are unique


@pytest.mark.parametrize("case", SAMPLE, ids=[f"{c.family}: {c.name}" for c in SAMPLE])
def test_a_hostile_input_gets_a_named_error_or_is_handled(env, case):
    row = BENCH.run_case(case, env)
    assert row["outcome"] in BENCH.GOOD, row


def test_the_harness_stops_every_model_load():
    """The classifier relies on it: inside `no_model_load` a load raises `ModelLoadAttempted`, and after it the
    loaders are restored."""
    import rhea.modeling.loading as loading

    before = loading.load_zoo_model
    with BENCH.no_model_load():
        with pytest.raises(BENCH.ModelLoadAttempted):
            loading.load_rhea_model("smollm2-135m")
    assert loading.load_zoo_model is before
