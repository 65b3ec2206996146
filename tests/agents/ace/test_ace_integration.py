"""ACE on the embedded SmolLM2-135M-Instruct with both retrievers (short runs)."""
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("embedded")]

STORY = ["Mary got the milk there.", "John moved to the bedroom.", "Sandra went back to the kitchen.",
         "Mary travelled to the hallway.", "Daniel went to the office."]


@pytest.fixture(scope="module")
def llm():
    from rhea import load_default_model
    from rhea.backends.llm import HFGenerator

    model, tok = load_default_model()
    return HFGenerator(model.eval(), tok, seed=0)


@pytest.mark.parametrize("retriever", ["bm25", "dense"])
def test_ace_runs_on_the_embedded_model(llm, retriever):
    from rhea.agents.ace import ACE, make_retriever

    ace = ACE(llm, make_retriever(retriever, STORY), n_agents=3, rounds=2, passages_per_retrieval=2,
              vote_mode="constrained", query_mode="memory", answer_max_new_tokens=4, think_max_new_tokens=6)
    ans = ace.answer("Where is the milk?")
    first, second = ans.trace.rounds
    assert first.action == "RETRIEVE" and first.votes == [] and STORY[first.retrieved[0][0]] == "Mary got the milk there."
    assert len(second.votes) == 3 and all(v.choice in ("RETRIEVE", "THINK") for v in second.votes)
    assert second.action in ("RETRIEVE", "THINK") and ans.trace.think_share in (0.0, 0.5)
    assert ans.trace.counter == "generator" and ans.trace.tokens.prompt["voting"] > 0
    assert ans.trace.tokens.prompt["answering"] > 0 and isinstance(ans.text, str)
