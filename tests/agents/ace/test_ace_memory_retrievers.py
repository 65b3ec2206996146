"""Working memory and the two passage retrievers."""
import numpy as np
import pytest

from rhea.agents.ace import BM25Passages, CorpusError, DensePassages, WorkingMemory, make_retriever
from rhea.backends.embedding import HashingEmbedder

CORPUS = ["Mary got the milk there.", "John moved to the bedroom.", "Mary travelled to the hallway.",
          "Sandra went back to the kitchen.", "Mary went to the garden."]


def test_memory_prefix_and_render_in_corpus_order():
    m = WorkingMemory("Where is the milk?")
    m.add_passage(2, CORPUS[2])
    m.add_thought("Who has the milk?", "Mary.")
    m.add_passage(0, CORPUS[0])
    assert m.passage_indices == [2, 0]
    assert m.render().splitlines() == ["[0] Mary got the milk there.", "[2] Mary travelled to the hallway.",
                                       "Sub-question: Who has the milk? Answer: Mary."]
    assert m.prefix(1).render() == "[2] Mary travelled to the hallway."
    assert WorkingMemory("q?").render() == "(empty)"


@pytest.mark.parametrize("make", [lambda: BM25Passages(CORPUS), lambda: DensePassages(CORPUS, HashingEmbedder(128))])
def test_search_excludes_already_retrieved(make):
    r = make()
    first = [i for i, _ in r.search("where is Mary", k=2)]
    again = [i for i, _ in r.search("where is Mary", k=2, exclude=first)]
    assert len(first) == 2 and not set(first) & set(again)
    assert all(i not in {0, 2, 4} for i, _ in r.search("Mary", k=5, exclude={0, 2, 4}))


def test_bm25_returns_only_matching_passages_and_dense_ranks_by_cosine():
    assert [i for i, _ in BM25Passages(CORPUS).search("kitchen", k=3)] == [3]
    emb = HashingEmbedder(256)
    hits = DensePassages(CORPUS, emb).search("Sandra went back to the kitchen", k=1)
    assert hits[0][0] == 3 and np.isclose(hits[0][1], 1.0)


def test_bad_corpus_and_kind_are_named():
    with pytest.raises(CorpusError, match=r"passages\[1\]"):
        BM25Passages(["ok text", "  "])
    with pytest.raises(CorpusError, match="single text"):
        BM25Passages("one string")
    with pytest.raises(CorpusError, match="retriever='tfidf'"):
        make_retriever("tfidf", CORPUS)
    with pytest.raises(ValueError, match="k=0"):
        BM25Passages(CORPUS).search("Mary", k=0)


def test_bm25_over_unindexable_corpus_finds_nothing():
    assert BM25Passages(["a b", "c"]).search("a", k=2) == []
