"""`rhea chat --demo`: a scripted conversation showing compression into latents on a real model."""
from __future__ import annotations

import time
from typing import Callable

import torch

from rhea.context import ContextPlan, Conversation, Latent, Turn, render
from rhea.generation import generate_from_plan

SCRIPT = [
    "Hi! I'm planning a week in Lisbon in May. What should I pack?",
    "What are three good day trips from Lisbon?",
    "Thanks. Going back to packing: which shoes did you suggest?",
]


TIER_NAMES = {0: "drop", 1: "latent", 2: "raw"}


def _history_messages(conversation: Conversation, latent_turns: dict[int, torch.Tensor],
                      dropped: frozenset[int] = frozenset()) -> list[dict]:
    msgs = []
    for i, turn in enumerate(conversation):
        msgs.append({"role": "user", "content": turn.user})
        if i in dropped:  # HCR drops the reply; the user turn stays (the paper's layout)
            continue
        content = [Latent(latent_turns[i], i)] if i in latent_turns else turn.assistant
        msgs.append({"role": "assistant", "content": content})
    return msgs


def run_demo(model_name: str = "smollm2-135m", *, max_new_tokens: int = 48, echo: Callable[[str], None] = print,
             device: str = "cpu") -> dict:
    """Run the scripted demo and return what it measured (also printed through `echo`)."""
    from rhea.modeling.loading import MODEL_ZOO, cache_dir, load_base_model, load_default_model, resolve_device
    from rhea.modeling.rhea_model import RheaForCausalLM

    cached = (cache_dir() / "models" / model_name / "rhea_cache.json").is_file() if model_name in MODEL_ZOO else None
    t0 = time.perf_counter()
    if model_name == "smollm2-135m":
        model, tok = load_default_model()
    else:
        base, tok = load_base_model(model_name)
        model = RheaForCausalLM.from_base(base, tok)
    device = resolve_device(device)
    if device.type != "cpu":
        model.to(device)
    load_s = time.perf_counter() - t0
    model.eval()
    echo(f"== rhea demo on {model_name} ==")
    echo(f"loaded in {load_s:.1f}s ({'from the safetensors cache' if cached else 'first load: GGUF dequantized and cached' if cached is False else 'from disk'})")
    echo(f"n_mem={model.n_mem} latent vectors per reply, hidden size {model.hidden_size}")
    if not model.adapters_trained:
        echo("NOTE: the compress/generate adapters are UNTRAINED here: the latents are the base model's read-out "
             "at the <mem> slots, so answers from latents show the mechanism, not trained quality.")
    echo("")

    conversation, latents = Conversation(), {}
    for i, user in enumerate(SCRIPT[:-1]):
        plan = ContextPlan(_history_messages(conversation, {}) + [{"role": "user", "content": user}], policy="vanilla")
        gen = generate_from_plan(model, plan, max_new_tokens=max_new_tokens)
        conversation.append(Turn(user, gen.text))
        t1 = time.perf_counter()
        with torch.no_grad():
            latents[i] = model.compress([gen.text])[0]
        comp_s = time.perf_counter() - t1
        n_tok = len(tok(gen.text, add_special_tokens=False)["input_ids"])
        echo(f"[turn {i + 1}] user: {user}")
        echo(f"[turn {i + 1}] assistant ({gen.new_tokens} tokens, {gen.timings['prefill_s'] + gen.timings['decode_s']:.1f}s): {gen.text}")
        echo(f"           compressed {n_tok} reply tokens -> latents {tuple(latents[i].shape)} in {comp_s * 1000:.0f} ms "
             f"(mean norm {latents[i].norm(dim=-1).mean():.1f})")
        echo("")

    query = SCRIPT[-1]
    # Heuristic context retrieval exactly as the rhea policy does it: max-cosine through
    # rhea_kernels (centred when the model ships a calibrated centre), then the model's tiers.
    from rhea.memory.episodic import EpisodicEntry, EpisodicMemory
    from rhea_kernels import score_tiers

    cfg = model.config
    memory = EpisodicMemory(model.compress,
                            center=torch.tensor(cfg.latent_center) if cfg.latent_center is not None else None,
                            centering=cfg.latent_centering)
    for i, turn in enumerate(conversation):
        memory.entries.append(EpisodicEntry(i, turn.user, turn.assistant, latents[i].float().cpu()))
    with torch.no_grad():
        q_lat = model.compress([query])[0].float()
    score_t = memory.score(q_lat)
    tiers = score_tiers(score_t[None], cfg.tau_low, cfg.tau_high)[0].tolist()
    scores = {i: float(score_t[i]) for i in latents}
    calibrated = "calibration" in cfg.extra
    in_latent = {i: latents[i] for i, t in enumerate(tiers) if t == 1}
    dropped = frozenset(i for i, t in enumerate(tiers) if t == 0)
    full = ContextPlan(_history_messages(conversation, {}) + [{"role": "user", "content": query}], policy="vanilla")
    hybrid = ContextPlan(_history_messages(conversation, in_latent, dropped) + [{"role": "user", "content": query}],
                         policy="demo")
    n_full = render(full, tok).input_ids.shape[1]
    rendered = render(hybrid, tok)
    echo(f"[turn {len(SCRIPT)}] user: {query}")
    echo(f"  max-cosine score of the query's latents vs each past reply's latents "
         f"({'centred by the calibrated mean latent' if memory.score_center(q_lat) is not None else 'raw cosine'}; "
         f"tau_low={cfg.tau_low:g}, tau_high={cfg.tau_high:g}, {'calibrated by rhea calibrate' if calibrated else 'the paper defaults'}): "
         + ", ".join(f"turn {i + 1}: {s:.3f} -> {TIER_NAMES[tiers[i]]}" for i, s in scores.items()))
    echo(f"  context: {len(in_latent)} repl{'y' if len(in_latent) == 1 else 'ies'} as {model.n_mem} latents each, "
         f"{len(dropped)} dropped -> {rendered.input_ids.shape[1]} tokens ({model.n_mem * len(in_latent)} of them "
         f"<mem> slots) instead of {n_full} with the full text")
    echo("  rendered prompt (latent slots shown as <mem>):")
    for line in rendered.text.splitlines():
        echo("    | " + line)
    gen = generate_from_plan(model, hybrid, max_new_tokens=max_new_tokens)
    echo(f"[turn {len(SCRIPT)}] assistant from the hybrid context ({gen.new_tokens} tokens, "
         f"{gen.timings['prefill_s'] + gen.timings['decode_s']:.1f}s): {gen.text}")
    return {"load_s": load_s, "cached": cached, "scores": scores,
            "tiers": {i: TIER_NAMES[tiers[i]] for i in scores}, "tokens_full": n_full,
            "tokens_hybrid": int(rendered.input_ids.shape[1]), "final_reply": gen.text}
