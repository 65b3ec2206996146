"""rhea.training.factqa: bAbI and cloze fact-QA items, the batch laid out as the policy lays out a latent
turn, and the loss training the compress adapter through the latents only."""
import pytest
import torch

from rhea.testing import tiny_rhea
from rhea.training.compressor import TextChunk
from rhea.training.errors import TrainingDataError
from rhea.training.factqa import (BLANK, QAItem, answer_accuracy, cloze_qa, factqa_batch, factqa_loss, factqa_scores,
                                  load_babi_qa, split_items)

BABI = """1 John travelled to the hallway.
2 Mary journeyed to the bathroom.
3 Where is John? \thallway\t1
4 Daniel went back to the bathroom.
5 Where is Mary? \tbathroom\t2
1 Sandra took the apple.
2 Sandra took the milk.
3 What is Sandra carrying? \tapple,milk\t1 2
"""


def _babi(tmp_path, text=BABI, name="qa1_single-supporting-fact_test.txt"):
    (tmp_path / name).write_text(text)
    return tmp_path


def test_babi_questions_see_the_story_so_far(tmp_path):
    items = load_babi_qa(_babi(tmp_path), tasks=[1])
    assert [(it.question, it.answer) for it in items] == [
        ("Where is John?", "hallway"), ("Where is Mary?", "bathroom"), ("What is Sandra carrying?", "apple and milk")]
    assert items[0].reply == "John travelled to the hallway. Mary journeyed to the bathroom."
    assert items[1].reply.endswith("Daniel went back to the bathroom.")
    assert items[2].reply == "Sandra took the apple. Sandra took the milk."  # a new story starts at line 1
    assert items[0].source == items[1].source != items[2].source
    # stories longer than max_statements are left out
    assert [it.answer for it in load_babi_qa(tmp_path, tasks=[1], max_statements=2)] == ["hallway", "apple and milk"]


def test_babi_errors_name_the_problem(tmp_path):
    with pytest.raises(TrainingDataError, match="does not exist"):
        load_babi_qa(tmp_path / "nope", tasks=[1])
    with pytest.raises(TrainingDataError, match="bAbI task 7"):
        load_babi_qa(_babi(tmp_path), tasks=[7])
    with pytest.raises(TrainingDataError, match="line number"):
        load_babi_qa(_babi(tmp_path, "x John went home.\n"), tasks=[1])
    with pytest.raises(TrainingDataError, match="question line"):
        load_babi_qa(_babi(tmp_path, "1 A b.\n2 Where? \t\t1\n"), tasks=[1])


def test_cloze_blanks_one_unique_span_in_its_sentence():
    text = ("Good question. The eco programme uses 9.5 litres of water per cycle, far less than by hand. "
            "Visit Paris in May, said Dr Jane Smith.")
    items = cloze_qa([TextChunk("r:1:0", text)], per_chunk=10)
    got = {it.answer: it.question for it in items}
    assert set(got) == {"9.5", "Paris", "May", "Dr Jane Smith"}  # "Good"/"The"/"Visit" start sentences
    assert '"The eco programme uses ____ litres of water per cycle, far less than by hand."' in got["9.5"]
    assert got["Dr Jane Smith"].endswith('said ____."')
    for answer, question in got.items():
        assert question.count(BLANK) == 1 and answer not in question
        assert all(it.reply == text and it.source == "r:1:0" for it in items)
    # a span that occurs twice is ambiguous, a chunk without a span gives nothing
    assert cloze_qa([TextChunk("a", "we met on 12 and left on 12 too")]) == []
    assert cloze_qa([TextChunk("a", "nothing concrete here.")]) == []
    assert cloze_qa([TextChunk("a", text)], seed=3) == cloze_qa([TextChunk("a", text)], seed=3)


def test_split_keeps_a_source_on_one_side():
    items = [QAItem(f"babi:qa1:{i // 3}", "u", "r", "q", "a") for i in range(300)]
    train, held = split_items(items)
    assert train and held and len(train) + len(held) == 300
    assert not {it.source for it in train} & {it.source for it in held}
    with pytest.raises(TrainingDataError):
        split_items(items, share=1.0)


ITEMS = [QAItem("a", "what", "the cat is blue", "what is the color of the cat ?", "blue"),
         QAItem("b", "what", "the dog is red", "what is the color of the dog ?", "red"),
         QAItem("c", "what", "the cat is green", "what is the color of the cat ?", "green"),
         QAItem("d", "what", "the dog is blue", "what is the color of the dog ?", "blue")]


def test_batch_puts_the_latents_where_the_policy_puts_a_latent_turn():
    model = tiny_rhea()
    b = factqa_batch(model, ITEMS[:2])
    tok = model.tokenizer
    for row, it in enumerate(ITEMS[:2]):
        ids = b["input_ids"][row][b["attention_mask"][row].bool()].tolist()
        labels = [x for x in b["labels"][row].tolist() if x != -100]
        answer = tok(it.answer, add_special_tokens=False)["input_ids"]
        assert labels[: len(answer)] == answer and len(labels) <= len(answer) + 2  # answer + end of turn
        text = tok.decode(ids)
        # user, assistant(<mem> x n), user: question, assistant: answer
        assert text.count("<mem>") == model.n_mem
        assert text.index("user") < text.index("<mem>") < text.rindex("user") < text.rindex("assistant")
        assert it.reply not in text  # the reply reaches the model only through its latents
    with pytest.raises(TrainingDataError):
        factqa_batch(model, [])


def test_loss_reaches_the_answer_through_the_compress_adapter_only():
    torch.manual_seed(0)
    model = tiny_rhea(n_mem=2, latent_injection="states")
    with torch.no_grad():  # a fresh generate adapter (B = 0) is the base model, as the compressor stage runs it
        for n, p in model.named_parameters():
            if ".generate." in n and "lora_B" in n:
                p.zero_()
    for n, p in model.named_parameters():
        p.requires_grad_(("lora_" in n and ".compress." in n) or "mem_slot" in n)
    params = [p for p in model.parameters() if p.requires_grad]
    first = factqa_loss(model, ITEMS, decoder=model.peft_model.disable_adapter)
    first.backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for n, p in model.named_parameters() if ".compress." in n)
    assert all(p.grad is None for n, p in model.named_parameters() if ".generate." in n)
    opt = torch.optim.Adam(params, lr=1e-2)
    for _ in range(20):
        opt.zero_grad()
        loss = factqa_loss(model, ITEMS, decoder=model.peft_model.disable_adapter)
        loss.backward()
        opt.step()
    assert float(loss) < float(first)  # the answers' loss falls through the latents alone
    # the latents are the only channel carrying the reply: another item's latents change the answer logits
    b = factqa_batch(model, ITEMS)
    with torch.no_grad():
        lat = model.compress([it.reply for it in ITEMS])
        own = model(input_ids=b["input_ids"], latent_embeds=lat, attention_mask=b["attention_mask"]).logits
        other = model(input_ids=b["input_ids"], latent_embeds=lat[[2, 3, 0, 1]], attention_mask=b["attention_mask"]).logits
    assert not torch.allclose(own[:, -3], other[:, -3])


def test_scores_pair_each_item_with_another_items_latents(monkeypatch):
    model = tiny_rhea()
    seen = []
    import rhea.training.factqa as fq

    def spy(m, items, latents):
        seen.append(latents.clone())
        return [{"exact": False, "token_share": 0.0, "first": False} for _ in items]

    monkeypatch.setattr(fq, "answer_accuracy", spy)
    out = factqa_scores(model, ITEMS, batch_size=4)
    assert len(out["own"]) == len(out["control"]) == 4
    assert torch.equal(seen[1], seen[0][[2, 3, 0, 1]])


def test_answer_accuracy_counts_the_answer_tokens_only():
    model = tiny_rhea()
    with torch.no_grad():
        lat = model.compress([it.reply for it in ITEMS[:2]])
    rows = answer_accuracy(model, ITEMS[:2], lat)
    assert len(rows) == 2 and all(set(r) == {"exact", "token_share", "first"} for r in rows)
    assert all(r["exact"] == (r["token_share"] == 1.0) for r in rows)


def test_raw_reference_shows_the_reply_as_text():
    model = tiny_rhea()
    b = factqa_batch(model, ITEMS[:1], raw=True)
    text = model.tokenizer.decode(b["input_ids"][0])
    assert "<mem>" not in text and "the cat is blue" in text
    out = factqa_scores(model, ITEMS, raw=True)
    assert len(out["raw"]) == len(out["own"]) == 4
