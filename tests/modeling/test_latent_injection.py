"""RheaConfig.latent_injection: how latents enter the generate pass, saved and reloaded with the adapters."""
import dataclasses
import json

import pytest
import torch

from rhea.errors import CheckpointError, RheaConfigError
from rhea.modeling import RheaConfig, RheaForCausalLM
from rhea.modeling.checkpoint import INJECTOR_WEIGHTS_NAME, MANIFEST_NAME
from rhea.modeling.projector import LatentInjector
from rhea.testing import tiny_llama, tiny_rhea, tiny_tokenizer


def _ids(model, prefix=(5, 6)):
    return torch.tensor([list(prefix) + [model.mem_token_id] * model.n_mem + [7]])


def test_default_is_raw_and_injects_hidden_states_unchanged():
    model = tiny_rhea()
    assert model.config.latent_injection == "raw" and model.latent_injector is None
    lat = torch.randn(1, model.n_mem, model.hidden_size) * 50
    emb = model.embed_with_latents(_ids(model), lat)
    torch.testing.assert_close(emb[0, 2:2 + model.n_mem], lat[0])


@pytest.mark.parametrize("mode", ["norm", "projector"])
def test_norm_modes_centre_and_rescale_to_embedding_norm(mode):
    model = tiny_rhea(latent_injection=mode)
    inj = model.latent_injector
    vocab = model.base_model.get_input_embeddings().weight[: model.config.base_vocab_size]
    assert float(inj.target_norm) == pytest.approx(float(vocab.norm(dim=-1).mean()), rel=1e-5)
    common = torch.randn(model.hidden_size) * 40
    lat = common + torch.randn(1, model.n_mem, model.hidden_size)
    inj.fit_center(lat)
    torch.testing.assert_close(inj.center.detach(), lat.reshape(-1, model.hidden_size).mean(0))
    with torch.no_grad():
        rows = model.embed_with_latents(_ids(model), lat)[0, 2:2 + model.n_mem]
    expected = (lat[0] - inj.center.detach())
    expected = expected / expected.norm(dim=-1, keepdim=True) * inj.target_norm
    torch.testing.assert_close(rows, expected, rtol=1e-4, atol=1e-5)  # projector starts at the identity
    # the common component is gone: slots are no longer one direction
    cos = torch.nn.functional.cosine_similarity(rows[0], rows[1], dim=0)
    assert abs(float(cos)) < 0.9


def test_injector_is_trained_by_the_generate_loss():
    model = tiny_rhea(latent_injection="projector")
    lat = model.compress(["the cat is blue"])
    out = model(input_ids=_ids(model), latent_embeds=lat, labels=_ids(model))
    out.loss.backward()
    assert model.latent_injector.center.grad is not None and model.latent_injector.proj.weight.grad.abs().sum() > 0
    assert model.mem_slot_embeds.grad is not None
    assert any(p is model.latent_injector.proj.weight for p in model.trainable_parameters())


@pytest.mark.parametrize("mode", ["norm", "projector"])
def test_save_and_reload_keep_the_injector(tmp_path, mode):
    model = tiny_rhea(latent_injection=mode)
    with torch.no_grad():
        model.latent_injector.center.normal_()
        if model.latent_injector.proj is not None:
            model.latent_injector.proj.weight.add_(torch.randn_like(model.latent_injector.proj.weight) * 0.1)
    model.config.fidelity = {"reconstruction_token_acc": 0.5, "control_gap": 0.1, "measured_on": "x", "n": 3}
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "rhea_config.json").read_text())
    assert saved["latent_injection"] == mode and saved["fidelity"]["n"] == 3
    assert (tmp_path / INJECTOR_WEIGHTS_NAME).is_file()
    tok = tiny_tokenizer()
    again = RheaForCausalLM.from_pretrained(tmp_path, base_model=tiny_llama(len(tok)))
    assert again.config.latent_injection == mode and again.config.fidelity["control_gap"] == 0.1
    lat = torch.randn(1, model.n_mem, model.hidden_size)
    with torch.no_grad():
        torch.testing.assert_close(again.embed_with_latents(_ids(again), lat), model.embed_with_latents(_ids(model), lat))


def test_old_directories_without_the_option_load_as_raw(tmp_path):
    model = tiny_rhea()
    model.save_pretrained(tmp_path)
    (tmp_path / MANIFEST_NAME).unlink()  # an older save: no digests either
    cfg = json.loads((tmp_path / "rhea_config.json").read_text())
    del cfg["latent_injection"], cfg["fidelity"]  # as written before the options existed
    (tmp_path / "rhea_config.json").write_text(json.dumps(cfg))
    tok = tiny_tokenizer()
    again = RheaForCausalLM.from_pretrained(tmp_path, base_model=tiny_llama(len(tok)))
    assert again.latent_injector is None and again.config.fidelity is None
    assert not (tmp_path / INJECTOR_WEIGHTS_NAME).exists()


def test_missing_or_mismatched_injector_file_is_a_checkpoint_error(tmp_path):
    model = tiny_rhea(latent_injection="projector")
    model.save_pretrained(tmp_path)
    (tmp_path / MANIFEST_NAME).unlink()  # the injector's own checks (with a manifest, its digest is checked first)
    tok = tiny_tokenizer()
    (tmp_path / INJECTOR_WEIGHTS_NAME).unlink()
    with pytest.raises(CheckpointError, match="latent_injector.safetensors is missing"):
        RheaForCausalLM.from_pretrained(tmp_path, base_model=tiny_llama(len(tok)))
    # a "norm" file where the config says "projector"
    tiny_rhea(latent_injection="norm").save_pretrained(tmp_path / "n")
    import shutil

    shutil.copy(tmp_path / "n" / INJECTOR_WEIGHTS_NAME, tmp_path / INJECTOR_WEIGHTS_NAME)
    with pytest.raises(CheckpointError, match="do not match"):
        RheaForCausalLM.from_pretrained(tmp_path, base_model=tiny_llama(len(tok)))


def test_config_validation():
    with pytest.raises(RheaConfigError, match="latent_injection"):
        RheaConfig(latent_injection="mlp")
    with pytest.raises(RheaConfigError, match="fidelity"):
        RheaConfig(fidelity={"reconstruction_token_acc": "high"})
    fid = {"reconstruction_token_acc": 0.95, "control_gap": 0.3, "measured_on": "x", "n": 9}
    facts = {"latent": 0.4, "raw": 0.8, "dropped": 0.0, "n": 60, "measured_on": "benchmarks/fact_recall.py"}
    assert RheaConfig(fidelity={**fid, "fact_recall": facts}).active_mode()["latent_tier"] is False
    for bad in ({**facts, "latent": 40}, {**facts, "n": 0}, {k: v for k, v in facts.items() if k != "raw"}, "0.4"):
        with pytest.raises(RheaConfigError, match=r"fidelity\['fact_recall'\]"):
            RheaConfig(fidelity={**fid, "fact_recall": bad})
    with pytest.raises(RheaConfigError, match="mode"):
        LatentInjector(4, "raw", 1.0)


# ---------------------------------------------------------------- "deep": the latent in every layer
def test_fresh_deep_injector_is_exactly_projector():
    from rhea.modeling import load_base_model  # noqa: F401  (import check only)

    tok = tiny_tokenizer()
    deep = RheaForCausalLM.from_base(tiny_llama(len(tok)), tok, RheaConfig(n_mem=4, latent_injection="deep"))
    proj = RheaForCausalLM.from_base(tiny_llama(len(tok)), tiny_tokenizer(), RheaConfig(n_mem=4, latent_injection="projector"))
    proj.load_state_dict({k: v for k, v in deep.state_dict().items() if ".layer_" not in k})
    assert deep.latent_injector.n_layers == len(deep.decoder_layers()) == 2
    assert not deep.latent_injector.layer_up.any()
    lat = torch.randn(1, 4, deep.hidden_size)
    with torch.no_grad():
        torch.testing.assert_close(deep(input_ids=_ids(deep), latent_embeds=lat).logits,
                                   proj(input_ids=_ids(proj), latent_embeds=lat).logits)


def _capture(model, layer_index):
    """(input of decoder layer `layer_index` before the deep hook, the residual its attention norm reads)."""
    layer = model.decoder_layers()[layer_index]
    seen = {}
    h1 = layer.register_forward_pre_hook(lambda m, a, k: seen.__setitem__("before", (a[0] if a else k["hidden_states"]).clone()),
                                         with_kwargs=True)
    h2 = layer.input_layernorm.register_forward_pre_hook(lambda m, a: seen.__setitem__("after", a[0].clone()))
    return seen, (h1, h2)


@pytest.mark.parametrize("layer_index", [0, 1])
def test_deep_adds_the_latent_term_at_the_slots_of_every_layer(layer_index):
    model = tiny_rhea(latent_injection="deep")
    ids = _ids(model)
    lat = torch.randn(1, model.n_mem, model.hidden_size)
    seen, handles = _capture(model, layer_index)
    with torch.no_grad():
        model(input_ids=ids, latent_embeds=lat)
        rows = model.latent_injector(lat.reshape(-1, model.hidden_size))
        term = model.latent_injector.at_layer(rows, layer_index)
    for h in handles:
        h.remove()
    slots = (ids == model.mem_token_id)[0]
    assert term.abs().sum() > 0
    torch.testing.assert_close(seen["after"][0, slots], seen["before"][0, slots] + term)
    torch.testing.assert_close(seen["after"][0, ~slots], seen["before"][0, ~slots])


def test_deep_injector_trains_and_refuses_activation_checkpointing():
    model = tiny_rhea(latent_injection="deep").train()
    lat = model.compress(["the cat is blue"])
    model(input_ids=_ids(model), latent_embeds=lat, labels=_ids(model)).loss.backward()
    inj = model.latent_injector
    assert inj.layer_up.grad.abs().sum() > 0 and inj.layer_down.grad.abs().sum() > 0
    assert model.mem_slot_embeds.grad is not None
    model.base_model.gradient_checkpointing_enable()
    with pytest.raises(RheaConfigError, match="gradient_checkpointing off"):
        model(input_ids=_ids(model), latent_embeds=lat, labels=_ids(model))


@pytest.mark.parametrize("mode", ["deep", "states"])
def test_deep_generate_matches_forward_batched_and_with_beams(mode):
    model = tiny_rhea(latent_injection=mode)
    tok = model.tokenizer
    lat = torch.randn(2, model.n_mem, model.latent_width)
    rows = [[5, 6] + [model.mem_token_id] * model.n_mem + [7], [5] + [model.mem_token_id] * model.n_mem + [8, 9, 7]]
    singles = []
    for r, row in enumerate(rows):
        ids = torch.tensor([row])
        with torch.no_grad():
            first = int(model(input_ids=ids, latent_embeds=lat[r:r + 1]).logits[0, -1].argmax())
        out = model.generate(ids, latent_embeds=lat[r:r + 1], max_new_tokens=4, do_sample=False)
        assert int(out[0, len(row)]) == first
        singles.append(out[0, len(row):].tolist())
    width = max(map(len, rows))
    ids = torch.tensor([[tok.pad_token_id] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    out = model.generate(ids, latent_embeds=lat, attention_mask=mask, max_new_tokens=4, do_sample=False)
    assert [out[b, width:].tolist() for b in range(2)] == singles
    # each beam reads its own row's latents: one row's beam search equals the same row inside a batch
    one = model.generate(torch.tensor([rows[1]]), latent_embeds=lat[1:], max_new_tokens=3, num_beams=2, do_sample=False)
    two = model.generate(ids, latent_embeds=lat, attention_mask=mask, max_new_tokens=3, num_beams=2, do_sample=False)
    assert one[0, len(rows[1]):].tolist() == two[1, width:].tolist()


@pytest.mark.parametrize("mode", ["deep", "states"])
def test_deep_replies_exact_with_history_and_prefix_reuse(mode):
    """The session's KV reuse feeds only new tokens: the deep term must reach their slots too."""
    from rhea.session import ChatSession

    script = ["from now on always answer in french .", "what is the capital of france ?",
              "what color is the cat ?", "the dog and the cat"]
    for kw in ({}, {"anchor_bias": 1.5}):
        model = tiny_rhea(latent_injection=mode, **kw)
        on = ChatSession(model, policy="reply-soft-compress", max_new_tokens=6)
        off = ChatSession(model, policy="reply-soft-compress", max_new_tokens=6, reuse_prefix_cache=False)
        for q in script:
            assert on.send(q) == off.send(q)
        assert sum(r.timings["prefix_reused_tokens"] for r in on.records) > 0


def test_deep_save_reload_round_trip(tmp_path):
    model = tiny_rhea(latent_injection="deep")
    model.save_pretrained(tmp_path)
    tok = tiny_tokenizer()
    again = RheaForCausalLM.from_pretrained(tmp_path, base_model=tiny_llama(len(tok)))
    assert again.config.latent_injection == "deep"
    torch.testing.assert_close(again.latent_injector.layer_up, model.latent_injector.layer_up)
    lat = torch.randn(1, model.n_mem, model.hidden_size)
    with torch.no_grad():
        torch.testing.assert_close(again(input_ids=_ids(again), latent_embeds=lat).logits,
                                   model(input_ids=_ids(model), latent_embeds=lat).logits)
    # a "projector" file where the config says "deep"
    tiny_rhea(latent_injection="projector").save_pretrained(tmp_path / "p")
    import shutil

    shutil.copy(tmp_path / "p" / INJECTOR_WEIGHTS_NAME, tmp_path / INJECTOR_WEIGHTS_NAME)
    with pytest.raises(CheckpointError, match="latent_injector.safetensors has .* bytes, but .* were saved"):
        RheaForCausalLM.from_pretrained(tmp_path, base_model=tiny_llama(len(tok)))
    (tmp_path / MANIFEST_NAME).unlink()  # without the digests, the injector's own check names the mismatch
    with pytest.raises(CheckpointError, match="do not match"):
        RheaForCausalLM.from_pretrained(tmp_path, base_model=tiny_llama(len(tok)))


@pytest.mark.parametrize("mode", ["deep", "states"])
def test_deep_prefill_after_a_cached_instruction_block_still_injects(mode):
    """With the instruction block's keys/values reused, generate's prefill feeds only the tokens after
    it: the latent slots among them must get the same deep term as in a full prefill."""
    from rhea.context import ContextPlan, Latent
    from rhea.session.generation import PrefixKVCache, generate_from_plan

    model = tiny_rhea(latent_injection=mode)
    lat = torch.randn(model.n_mem, model.latent_width)
    plan = ContextPlan([{"role": "system", "content": "always answer in french . never use the cat ."},
                        {"role": "user", "content": [Latent(lat, 0), "\nwhat is the capital of france ?"]}])
    cache = PrefixKVCache()
    kw = dict(max_new_tokens=12, repetition_penalty=1.0)
    plain = generate_from_plan(model, plan, **kw)
    generate_from_plan(model, plan, prefix_cache=cache, **kw)
    hit = generate_from_plan(model, plan, prefix_cache=cache, **kw)
    assert hit.timings["prefix_reused_tokens"] > 0 and hit.new_tokens == plain.new_tokens


# ---------------------------------------------------------------- "states": the compress pass's slot states in every layer
def _compress_pass_inputs(model, text):
    """Input of every decoder layer at the `<mem>` slots during `model.compress([text])`."""
    seen = {}
    hooks = [layer.register_forward_pre_hook(
        lambda m, a, k, i=i: seen.__setitem__(i, (a[0] if a else k["hidden_states"])[0, -model.n_mem:].clone()),
        with_kwargs=True) for i, layer in enumerate(model.decoder_layers())]
    with torch.no_grad():
        lat = model.compress([text])
    for h in hooks:
        h.remove()
    return lat, seen


def test_states_latents_hold_the_final_and_every_layer_slot_state():
    model = tiny_rhea(latent_injection="states")
    n_layers, hidden = len(model.decoder_layers()), model.hidden_size
    assert model.latent_width == n_layers * hidden
    lat, seen = _compress_pass_inputs(model, "the cat is blue")
    assert lat.shape == (1, model.n_mem, n_layers * hidden)
    for layer in range(1, n_layers):
        torch.testing.assert_close(lat[0, :, layer * hidden:(layer + 1) * hidden], seen[layer])
    # the first `hidden` columns are the final states: what the other modes return, and what is scored
    plain = tiny_rhea(latent_injection="projector")
    plain.load_state_dict(model.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(model.score_view(lat), plain.compress(["the cat is blue"]))
    assert model.compress([]).shape == (0, model.n_mem, model.latent_width)


@pytest.mark.parametrize("layer_index", [0, 1])
def test_states_replace_the_slot_state_at_every_layer_input(layer_index):
    model = tiny_rhea(latent_injection="states")
    hidden = model.hidden_size
    ids = _ids(model)
    lat = torch.randn(1, model.n_mem, model.latent_width)
    seen, handles = _capture(model, layer_index)
    with torch.no_grad():
        model(input_ids=ids, latent_embeds=lat)
        first = model.latent_injector(lat[0, :, :hidden])
    for h in handles:
        h.remove()
    slots = (ids == model.mem_token_id)[0]
    expected = first if layer_index == 0 else lat[0, :, layer_index * hidden:(layer_index + 1) * hidden]
    torch.testing.assert_close(seen["after"][0, slots], expected)
    torch.testing.assert_close(seen["after"][0, ~slots], seen["before"][0, ~slots])


def test_states_train_the_compressor_through_every_layer_and_refuse_activation_checkpointing():
    import warnings

    model = tiny_rhea(latent_injection="states").train()
    lat = model.compress(["the cat is blue"])
    with warnings.catch_warnings():  # the check reads transformers' current name, not the deprecated one
        warnings.simplefilter("error", FutureWarning)
        model(input_ids=_ids(model), latent_embeds=lat, labels=_ids(model)).loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters() if ".compress." in n and "lora_B" in n}
    # every layer's compress LoRA below the top one feeds a stored state the generate pass reads
    assert all(g is not None and g.abs().sum() > 0 for n, g in grads.items() if ".layers.0." in n)
    model.base_model.gradient_checkpointing_enable()
    with pytest.raises(RheaConfigError, match="latent_injection='states'.*gradient_checkpointing off"):
        model(input_ids=_ids(model), latent_embeds=lat, labels=_ids(model))


def test_states_width_is_checked_and_sessions_record_it(tmp_path):
    from rhea.errors import LatentMismatchError
    from rhea.session import ChatSession
    from rhea.session.chat import SessionError

    model = tiny_rhea(latent_injection="states")
    with pytest.raises(LatentMismatchError, match="layers x hidden"):
        model(input_ids=_ids(model), latent_embeds=torch.randn(1, model.n_mem, model.hidden_size))
    chat = ChatSession(model, policy="reply-soft-compress", max_new_tokens=4)
    chat.send("what is the capital of france ?")
    chat.send("and the cat ?")
    chat.save(tmp_path / "s")
    again = ChatSession.load(tmp_path / "s", model)
    assert again.send("the dog ?") == chat.send("the dog ?")
    with pytest.raises(SessionError, match="latent width"):
        ChatSession.load(tmp_path / "s", tiny_rhea(latent_injection="deep"))
    # the Rhea policy scores the final states and feeds the wide latents: the same replies with and without KV reuse
    kw = {"scorer": "latent", "latent_tier": "on", "tier_mode": "budget", "max_raw": 1, "max_latent": 4,
          "recognizer": None, "recent_raw": 0, "replan_every": 1}
    on = ChatSession(model, policy="rhea", max_new_tokens=4, policy_kwargs=kw)
    off = ChatSession(model, policy="rhea", max_new_tokens=4, policy_kwargs=kw, reuse_prefix_cache=False)
    for q in ["what is the capital of france ?", "the cat is blue .", "and the dog ?", "what color is the cat ?"]:
        assert on.send(q) == off.send(q)
    assert on.records[-1].latent_slots > 0


def test_states_save_reload_and_score_on_the_final_states(tmp_path):
    from rhea.context.conversation import Turn
    from rhea.memory.episodic import EpisodicMemory

    model = tiny_rhea(latent_injection="states")
    model.save_pretrained(tmp_path)
    again = RheaForCausalLM.from_pretrained(tmp_path, base_model=tiny_llama(len(tiny_tokenizer())))
    assert again.config.latent_injection == "states" and again.latent_width == model.latent_width
    lat = model.compress(["the cat is blue"]).detach()
    with torch.no_grad():
        torch.testing.assert_close(again(input_ids=_ids(again), latent_embeds=lat).logits,
                                   model(input_ids=_ids(model), latent_embeds=lat).logits)
    wide = EpisodicMemory(model.compress, score_view=model.score_view)
    final = EpisodicMemory(lambda texts: model.score_view(model.compress(texts)))
    for mem in (wide, final):
        mem.extend([Turn("a", "the cat is blue"), Turn("b", "paris is in france")])
    assert wide.entries[0].latents.shape[-1] == model.latent_width
    torch.testing.assert_close(wide.score("what colour is the cat ?"), final.score("what colour is the cat ?"))


def test_resize_mem_slots_keeps_trained_slots_and_round_trips(tmp_path):
    """resize_mem_slots grows (new slots copy the trained ones cyclically) or shrinks the read-out slots,
    clears the fidelity measured on the old slots, and the resized model saves and loads with its new count."""
    model = tiny_rhea(n_mem=3, latent_injection="states",
                      fidelity={"reconstruction_token_acc": 0.95, "control_gap": 0.3, "measured_on": "x", "n": 9})
    with torch.no_grad():
        model.mem_slot_embeds.copy_(torch.randn(model.mem_slot_embeds.shape, generator=torch.Generator().manual_seed(0)))
    old = model.mem_slot_embeds.detach().clone()
    model.resize_mem_slots(7)
    assert model.n_mem == 7 and model.config.fidelity is None and model.mem_slot_embeds.requires_grad
    assert torch.equal(model.mem_slot_embeds.detach(), old[torch.arange(7) % 3])
    with torch.no_grad():
        lat = model.compress(["one reply", "another reply"])
    assert lat.shape == (2, 7, model.latent_width)
    # the new slots sit at other positions of the compress pass: their states are not the old slots' copies
    assert not torch.allclose(lat[:, 3:6], lat[:, :3])
    model.save_pretrained(tmp_path)
    again = RheaForCausalLM.from_pretrained(tmp_path, base_model=tiny_llama(len(tiny_tokenizer())))
    assert again.n_mem == 7 and json.loads((tmp_path / "rhea_config.json").read_text())["n_mem"] == 7
    with torch.no_grad():
        torch.testing.assert_close(again.compress(["one reply", "another reply"]), lat)
    model.resize_mem_slots(2)
    assert model.n_mem == 2 and torch.equal(model.mem_slot_embeds.detach(), old[:2])
    for bad in (0, 513, 2.0, True):
        with pytest.raises(RheaConfigError, match="n_mem"):
            model.resize_mem_slots(bad)


def test_resize_lora_rank_keeps_the_function_and_round_trips(tmp_path):
    """resize_lora_rank grows one adapter's rank with the trained directions kept and the new B columns zero:
    compress and generate outputs are unchanged, alpha/r is kept, the other adapter is untouched, the new
    directions train (non-zero gradient on the new B columns), and the saved directory loads at the new rank."""
    model = tiny_rhea(n_mem=3, latent_injection="states")
    texts = ["one reply", "another reply"]
    ids = torch.tensor([[5, *[model.mem_token_id] * 3, 6, 7]])
    with torch.no_grad():
        lat = model.compress(texts)
        logits = model(input_ids=ids, latent_embeds=lat[:1]).logits
    from peft.tuners.lora import LoraLayer

    scales = {n: m.scaling["compress"] for n, m in model.peft_model.named_modules() if isinstance(m, LoraLayer)}
    assert scales
    model.resize_lora_rank("compress", 10)
    assert model.lora_rank("compress") == 10 and model.lora_rank("generate") == 4
    assert model.peft_model.peft_config["compress"].lora_alpha == 20  # alpha / r kept at 8 / 4
    for n, m in model.peft_model.named_modules():
        if n in scales:
            assert m.scaling["compress"] == scales[n] and m.lora_A["compress"].weight.shape[0] == 10
            assert m.lora_B["compress"].weight.shape[1] == 10 and not m.lora_B["compress"].weight[:, 4:].any()
            assert m.lora_A["generate"].weight.shape[0] == 4
    with torch.no_grad():
        torch.testing.assert_close(model.compress(texts), lat)
        torch.testing.assert_close(model(input_ids=ids, latent_embeds=lat[:1]).logits, logits)
    # the new directions learn: B's new columns get a gradient (A's new rows start from B's zero columns)
    for p in model.peft_model.parameters():
        p.requires_grad_(False)
    bs = [m.lora_B["compress"].weight for n, m in model.peft_model.named_modules() if n in scales]
    for b in bs:
        b.requires_grad_(True)
    model.compress(texts).pow(2).mean().backward()
    assert any(b.grad[:, 4:].abs().sum() > 0 for b in bs)
    model.save_pretrained(tmp_path)
    again = RheaForCausalLM.from_pretrained(tmp_path, base_model=tiny_llama(len(tiny_tokenizer())))
    assert again.lora_rank("compress") == 10 and again.lora_rank("generate") == 4
    with torch.no_grad():
        torch.testing.assert_close(again.compress(texts), lat)
    model.resize_lora_rank("compress", 10)  # same rank: nothing to do
    for bad, match in ((3, "only grows"), (0, ">= 1"), (True, ">= 1"), (2.5, ">= 1")):
        with pytest.raises(RheaConfigError, match=match):
            model.resize_lora_rank("compress", bad)
    with pytest.raises(RheaConfigError, match="not one of"):
        model.resize_lora_rank("decoder", 12)


def test_compress_replies_in_chunks():
    """compress_replies: whole texts = compress(); in pieces, each piece's block equals compressing the piece's text
    alone, blocks in reading order; an empty text is one block; the config's chunking is the default; bad values fail."""
    model = tiny_rhea(n_mem=3, latent_injection="states")
    tok = model.tokenizer
    texts = ["the cat is blue and the dog is red", "", "paris"]
    with torch.no_grad():
        whole = model.compress_replies(texts, chunk_tokens=None)
        torch.testing.assert_close(torch.stack(whole), model.compress(texts))
        parts = model.compress_replies(texts, chunk_tokens=3)
        ids = tok(texts[0], add_special_tokens=False)["input_ids"]
        pieces = [ids[i:i + 3] for i in range(0, len(ids), 3)]
        assert [x.shape for x in parts] == [(3 * len(pieces), model.latent_width), (3, model.latent_width), (3, model.latent_width)]
        alone = torch.cat([model._compress_ids([p]) [0] for p in pieces])
        torch.testing.assert_close(parts[0], alone, atol=1e-5, rtol=1e-4)  # padding differs: batched vs alone
        model.config = dataclasses.replace(model.config, compress_chunk_tokens=3)
        assert [x.shape[0] for x in model.compress_replies(texts)] == [x.shape[0] for x in parts]
        # a text longer than the context is fine in pieces, refused whole
        long = " ".join(["cat"] * 600)
        assert model.compress_replies([long], chunk_tokens=100)[0].shape[0] % 3 == 0
        with pytest.raises(ValueError, match="exceeds the model's context"):
            model.compress_replies([long], chunk_tokens=None)
    for bad in (0, True, 2.5):
        with pytest.raises(RheaConfigError, match="chunk_tokens"):
            model.compress_replies(texts, chunk_tokens=bad)
    for bad in (0, True, "48"):
        with pytest.raises(RheaConfigError, match="compress_chunk_tokens"):
            RheaConfig(compress_chunk_tokens=bad)


def test_piece_embeddings_order_the_blocks_of_a_reply(tmp_path):
    """compress_piece_embeddings: zero offsets change nothing; a trained offset for piece index i changes that
    piece's block only (the same words at another index compress differently); indices past the last offset use
    it; a whole text is piece 0; gradients reach the offsets; they save, reload and resize without changing what
    the model computes; a mem_tokens file that does not match the config is refused."""
    model = tiny_rhea(n_mem=2, latent_injection="states")
    text = ["a b c a b c a b c a b c"]  # every 3-token piece of the same words (tiny tokenizer: one token a word)
    with torch.no_grad():
        plain = model.compress_replies(text, chunk_tokens=3)[0]
    model.resize_piece_embeddings(2)
    assert model.config.compress_piece_embeddings == 2 and model.mem_piece_embeds.shape == (2, model.hidden_size)
    with torch.no_grad():
        torch.testing.assert_close(model.compress_replies(text, chunk_tokens=3)[0], plain)  # zero offsets: unchanged
        model.mem_piece_embeds[1].normal_(generator=torch.Generator().manual_seed(0))
        ordered = model.compress_replies(text, chunk_tokens=3)[0].reshape(4, 2, -1)
        blocks = plain.reshape(4, 2, -1)
        torch.testing.assert_close(ordered[0], blocks[0])  # piece 0 keeps offset 0 (still zero)
        assert not torch.allclose(ordered[1], blocks[1])   # piece 1: same words, another index
        torch.testing.assert_close(ordered[2], ordered[1])  # pieces 2, 3 use the last offset
        torch.testing.assert_close(ordered[3], ordered[1])
        model.mem_piece_embeds[0].normal_(generator=torch.Generator().manual_seed(1))
        whole = model.compress(["a b c"])[0]
        torch.testing.assert_close(whole, model.compress_replies(text, chunk_tokens=3)[0][:2], atol=1e-5, rtol=1e-4)
    model.compress_replies(text, chunk_tokens=3)[0].pow(2).mean().backward()
    assert model.mem_piece_embeds.grad is not None and model.mem_piece_embeds.grad.abs().sum() > 0
    with torch.no_grad():
        before = model.compress_replies(text, chunk_tokens=3)[0]
    model.save_pretrained(tmp_path / "m")
    again = RheaForCausalLM.from_pretrained(tmp_path / "m", base_model=tiny_llama(len(tiny_tokenizer())))
    assert again.config.compress_piece_embeddings == 2
    with torch.no_grad():
        torch.testing.assert_close(again.compress_replies(text, chunk_tokens=3)[0], before)
        again.resize_piece_embeddings(4)  # new offsets copy the old last one: the same latents
        torch.testing.assert_close(again.compress_replies(text, chunk_tokens=3)[0], before)
        again.resize_piece_embeddings(0)
        assert again.mem_piece_embeds is None and again.config.compress_piece_embeddings == 0
    for bad in (-1, True, 1.5):
        with pytest.raises(RheaConfigError, match="compress_piece_embeddings"):
            model.resize_piece_embeddings(bad)
    (tmp_path / "m" / MANIFEST_NAME).unlink()  # the file checks below, not the digests
    cfg = json.loads((tmp_path / "m" / "rhea_config.json").read_text())
    cfg["compress_piece_embeddings"] = 0
    (tmp_path / "m" / "rhea_config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="mem_piece_embeds"):
        RheaForCausalLM.from_pretrained(tmp_path / "m", base_model=tiny_llama(len(tiny_tokenizer())))
    cfg["compress_piece_embeddings"] = 3
    (tmp_path / "m" / "rhea_config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="mem_piece_embeds should have shape"):
        RheaForCausalLM.from_pretrained(tmp_path / "m", base_model=tiny_llama(len(tiny_tokenizer())))
