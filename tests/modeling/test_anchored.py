import torch

from rhea.testing import tiny_rhea


def test_anchor_bias_wires_the_anchored_attention():
    plain, anchored = tiny_rhea(), tiny_rhea(anchor_bias=2.0)
    assert anchored.anchor_attention_registered and not plain.anchor_attention_registered
    ids = torch.tensor([[7, 8, 9, 10, 11, 12, 13]])
    with torch.no_grad():
        a = plain(ids).logits
        b0 = anchored(ids, prefix_len=torch.tensor([0])).logits
        b3 = anchored(ids, prefix_len=torch.tensor([3])).logits
    torch.testing.assert_close(a, b0, rtol=1e-4, atol=1e-4)  # no prefix: plain causal attention
    assert not torch.allclose(a[:, 3:], b3[:, 3:], atol=1e-4)  # +beta on the prefix keys changes the body
    out = anchored.generate(ids, prefix_len=torch.tensor([3]), max_new_tokens=3, do_sample=False)
    assert out.shape == (1, 10)


def test_anchored_left_padding_matches_unpadded_row():
    model = tiny_rhea(anchor_bias=2.0)
    pad = model.tokenizer.pad_token_id
    row = [7, 8, 9, 10, 11]
    ids = torch.tensor([[pad, pad] + row, [12, 13, 14, 15, 16, 17, 18]])
    mask = (ids != pad).long()
    mask[1] = 1
    with torch.no_grad():
        batch = model(ids, attention_mask=mask, prefix_len=torch.tensor([2 + 2, 3])).logits  # absolute, as render_batch
        single = model(torch.tensor([row]), prefix_len=torch.tensor([2])).logits
    torch.testing.assert_close(batch[0, 2:], single[0], rtol=1e-4, atol=1e-4)
