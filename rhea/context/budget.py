"""Token budgets against the model's window, and the one guard every plan passes through.

A `TokenBudget` is what one prompt may spend: the model's window minus the reply's
``max_new_tokens``; its `template_overhead` (the tokens a chat template writes around an empty
message, measured by rendering one) and `per_message` (what one more message adds) let a
policy estimate a plan's rendered length from its text. `fit_plan` makes any policy's plan fit
the budget: past turns are cut (their start and end kept around a visible
``[… N tokens cut …]`` marker) or dropped, lowest priority first, each with its reason recorded
in the plan's decisions; the instruction block is cut only when no past turn is left to give
way. A message that alone cannot fit is a `ContextWindowError` (`check_message`), raised before
any model work.
"""
from __future__ import annotations

import dataclasses
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from rhea.context.latent import Latent
from rhea.context.plan import ContextPlan, PlanDecisions, TokenLedger
from rhea.context.rendering import render
from rhea.errors import ContextWindowError, RheaConfigError

#: the text a cut leaves in place of what it removed (N: the tokens removed)
CUT_MARKER = "[… {n} tokens cut …]"
#: a past turn is cut only if at least this many of its tokens would remain; otherwise it is dropped
MIN_KEPT_TOKENS = 32


@dataclass(frozen=True)
class TokenBudget:
    """How many tokens one prompt may hold: ``window - max_new_tokens``.

    template_overhead: tokens the chat template writes for a prompt holding one empty user message
    (its markup, a default system prompt some templates insert, the generation prompt);
    per_message: the tokens one more (empty) message adds. Both are measured with `measure_budget`.

    >>> b = TokenBudget(window=512, max_new_tokens=64, template_overhead=7, per_message=4)
    >>> b.prompt_tokens, b.message_tokens
    (448, 441)
    """

    window: int
    max_new_tokens: int
    template_overhead: int = 0
    per_message: int = 0

    def __post_init__(self) -> None:
        for name in ("window", "max_new_tokens", "template_overhead", "per_message"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise RheaConfigError(f"TokenBudget.{name}={v!r} must be an int >= 0")
        if self.max_new_tokens >= self.window:
            raise ContextWindowError(
                f"max_new_tokens={self.max_new_tokens} leaves no room for a prompt in the model's window of "
                f"{self.window} tokens; lower max_new_tokens below {self.window}")

    @property
    def prompt_tokens(self) -> int:
        """The most tokens a rendered prompt may hold."""
        return self.window - self.max_new_tokens

    @property
    def message_tokens(self) -> int:
        """The most tokens the query's text may hold, alone in a prompt."""
        return self.prompt_tokens - self.template_overhead

    def to_dict(self) -> dict:
        return {"window": self.window, "max_new_tokens": self.max_new_tokens, "template_overhead": self.template_overhead,
                "per_message": self.per_message, "prompt_tokens": self.prompt_tokens}


def _length(messages: list[dict], tokenizer, add_generation_prompt: bool) -> int:
    return int(render(ContextPlan(messages), tokenizer, add_generation_prompt=add_generation_prompt,
                      literal_mem="escape").input_ids.shape[1])


def measure_budget(tokenizer, window: int, max_new_tokens: int) -> TokenBudget:
    """The budget of a `window`-token model answering with up to `max_new_tokens`, the template's own
    tokens measured on `tokenizer` by rendering an empty message (and an empty exchange).

    >>> from rhea.testing import tiny_tokenizer
    >>> b = measure_budget(tiny_tokenizer(), 512, 64)
    >>> b.prompt_tokens, b.template_overhead > 0
    (448, True)
    """
    for name, v in (("window", window), ("max_new_tokens", max_new_tokens)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise RheaConfigError(f"{name}={v!r} must be an int >= 1")
    one = [{"role": "user", "content": ""}]
    overhead = _length(one, tokenizer, True)
    exchange = _length([{"role": "user", "content": ""}, {"role": "assistant", "content": ""}], tokenizer, False)
    per_message = max(0, exchange - _length(one, tokenizer, False))
    return TokenBudget(window, max_new_tokens, overhead, per_message)


_COUNTS: "weakref.WeakKeyDictionary[Any, OrderedDict[str, int]]" = weakref.WeakKeyDictionary()
_COUNTS_MAX = 16384


def count_text_tokens(text: str, tokenizer) -> int:
    """Tokens of `text` as message content (no special tokens added); the last `_COUNTS_MAX` texts'
    counts are kept per tokenizer, since every turn of a long conversation is counted again each query."""
    if not text:
        return 0
    try:
        counts = _COUNTS.setdefault(tokenizer, OrderedDict())
    except TypeError:  # a tokenizer that cannot be weakly referenced: count every time
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])
    n = counts.get(text)
    if n is None:
        n = counts[text] = len(tokenizer(text, add_special_tokens=False)["input_ids"])
        if len(counts) > _COUNTS_MAX:
            counts.popitem(last=False)
    else:
        counts.move_to_end(text)
    return n


def check_message(text: str, budget: TokenBudget, tokenizer) -> int:
    """The tokens of `text` rendered alone as the query; a `ContextWindowError` if even that
    exceeds the budget (no policy could answer it). Cheap: no model is run.

    >>> from rhea.testing import tiny_tokenizer
    >>> tok = tiny_tokenizer(); b = measure_budget(tok, 64, 16)
    >>> check_message("the cat", b, tok) <= b.prompt_tokens
    True
    >>> check_message("the cat " * 40, b, tok)
    Traceback (most recent call last):
    ...
    rhea.errors.ContextWindowError: the message is 80 tokens; ...
    """
    n = _length([{"role": "user", "content": text}], tokenizer, True)
    if n > budget.prompt_tokens:
        raise ContextWindowError(
            f"the message is {n - budget.template_overhead} tokens; the model's window of {budget.window} tokens, less "
            f"max_new_tokens={budget.max_new_tokens} and the chat template's {budget.template_overhead}, leaves "
            f"{budget.message_tokens} for it. Split the message into parts of at most {max(budget.message_tokens, 0)} "
            "tokens, or lower max_new_tokens")
    return n


def cut_text(text: str, keep: int, tokenizer) -> tuple[str, int]:
    """`text` cut to about `keep` tokens: its start and its end around `CUT_MARKER`.
    Returns ``(text, tokens removed)``; text already within `keep` comes back unchanged.

    >>> from rhea.testing import tiny_tokenizer
    >>> cut_text("one two three four five " * 20, 20, tiny_tokenizer())[1]
    87
    """
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) <= keep:
        return text, 0
    marker_tokens = count_text_tokens("\n" + CUT_MARKER.format(n=len(ids)) + "\n", tokenizer)
    room = max(2, keep - marker_tokens)
    head, tail = (room + 1) // 2, room // 2
    removed = len(ids) - head - tail
    start = tokenizer.decode(ids[:head], skip_special_tokens=False)
    end = tokenizer.decode(ids[len(ids) - tail:], skip_special_tokens=False) if tail else ""
    return f"{start}\n{CUT_MARKER.format(n=removed)}\n{end}", removed


@dataclass
class _Unit:
    """One past turn's messages in a plan (positions in `plan.messages`)."""

    positions: list[int]
    turn: int | None
    priority: tuple


def _units(plan: ContextPlan) -> list[_Unit]:
    """The plan's past turns, lowest priority first: between the system block and the query, grouped
    by `plan.sources` when the policy recorded them, else a user message and what follows it."""
    messages = plan.messages
    first = 1 if messages and messages[0]["role"] == "system" else 0
    last = len(messages) - 1  # the query
    sources = plan.sources if len(plan.sources) == len(messages) else [None] * len(messages)
    groups: list[list[int]] = []
    for i in range(first, last):
        same = groups and sources[i] is not None and sources[groups[-1][-1]] == sources[i]
        follows = groups and sources[i] is None and messages[i]["role"] != "user"
        if same or follows:
            groups[-1].append(i)
        else:
            groups.append([i])
    decisions = {d.turn: d for d in plan.decisions.turns}
    units = []
    for order, g in enumerate(groups):
        turn = sources[g[0]]
        d = decisions.get(turn) if turn is not None else None
        # scored turns give way lowest score first, then unscored ones oldest first; a recalled copy
        # (after the newest turn) goes after its turn's place in order
        score = d.score if d is not None else None
        units.append(_Unit(g, turn, (score is None, score if score is not None else 0.0, order)))
    return sorted(units, key=lambda u: u.priority)


def _estimate(plan: ContextPlan, budget: TokenBudget, tokenizer) -> int:
    """The plan's rendered length from its texts' token counts and the template's measured overhead."""
    whole = _Unit(list(range(len(plan.messages))), None, ())
    return budget.template_overhead + _unit_cost(plan, whole, tokenizer, budget.per_message) - budget.per_message


def _unit_cost(plan: ContextPlan, unit: _Unit, tokenizer, per_message: int) -> int:
    total = per_message * len(unit.positions)
    for i in unit.positions:
        content = plan.messages[i]["content"]
        for part in [content] if isinstance(content, str) else content:
            total += part.n_slots if isinstance(part, Latent) else count_text_tokens(part, tokenizer)
    return total


def _cut_unit(plan: ContextPlan, unit: _Unit, by: int, tokenizer) -> int:
    """Cut the longest text of `unit` by about `by` tokens; the tokens removed (0: nothing could go)."""
    best, best_len = None, 0
    for i in unit.positions:
        content = plan.messages[i]["content"]
        if isinstance(content, str):
            n = count_text_tokens(content, tokenizer)
            if n > best_len:
                best, best_len = i, n
    if best is None or best_len - by < MIN_KEPT_TOKENS:
        return 0
    text, removed = cut_text(plan.messages[best]["content"], best_len - by, tokenizer)
    plan.messages[best] = {**plan.messages[best], "content": text}
    return removed


def _ledger(plan: ContextPlan, tokenizer, dropped: int) -> TokenLedger:
    text = slots = 0
    for m in plan.messages:
        for part in [m["content"]] if isinstance(m["content"], str) else m["content"]:
            if isinstance(part, Latent):
                slots += part.n_slots
            else:
                text += count_text_tokens(part, tokenizer)
    old = plan.ledger
    return TokenLedger(text_tokens=text, latent_slots=slots, dropped_turns=old.dropped_turns + dropped,
                       full_history_tokens=old.full_history_tokens, counter="tokenizer")


def fit_plan(plan: ContextPlan, budget: TokenBudget | None, tokenizer) -> ContextPlan:
    """`plan` made to fit `budget`, rendered with `tokenizer`: returned as is when it fits (with the
    budget recorded), else a copy whose past turns were cut or dropped, lowest priority first (the
    lowest score first, then the oldest unscored turn), each with ``reason="budget"`` recorded in its
    `TurnDecision` note and in the plan's ``{"event": "budget"}`` record. A turn is cut rather than
    dropped when at least `MIN_KEPT_TOKENS` of it can stay. When no past turn is left and the system
    block and query still do not fit, the system block is cut; when the query alone does not fit,
    `ContextWindowError`. `budget=None` (no known window) returns `plan` unchanged.

    >>> from rhea.testing import tiny_tokenizer
    >>> tok = tiny_tokenizer(); b = measure_budget(tok, 96, 16)
    >>> plan = ContextPlan([{"role": "user", "content": "the cat " * 60}, {"role": "assistant", "content": "yes"},
    ...                     {"role": "user", "content": "and the dog?"}])
    >>> fitted = fit_plan(plan, b, tok)
    >>> render(fitted, tok).input_ids.shape[1] <= b.prompt_tokens, fitted.decisions.records[-1]["cut"][0]["turn"]
    (True, None)
    """
    if budget is None:
        return plan
    limit = budget.prompt_tokens
    # a plan far over the budget (a long history kept whole) is not rendered whole: its estimate decides
    estimate = _estimate(plan, budget, tokenizer)
    n = estimate if estimate > 2 * limit else int(render(plan, tokenizer).input_ids.shape[1])
    record = {"event": "budget", **budget.to_dict(), "rendered_tokens": n, "dropped": [], "cut": []}
    if n <= limit:
        plan.decisions.records.append(record)
        return plan
    plan = ContextPlan([dict(m) for m in plan.messages], PlanDecisions(list(plan.decisions.turns),
                       list(plan.decisions.instructions), list(plan.decisions.records)),
                       dataclasses.replace(plan.ledger), plan.policy, list(plan.sources))
    record["over_by"] = n - limit
    units = _units(plan)
    removed: set[int] = set()  # positions in plan.messages, compacted once at the end
    notes: dict[int, str] = {}
    margin = 0
    while n > limit:
        excess = n - limit + margin
        while excess > 0 and units:  # estimated from token counts: one render per round, not per turn
            unit = units[0]
            cost = _unit_cost(plan, unit, tokenizer, budget.per_message)
            cut = _cut_unit(plan, unit, excess, tokenizer) if cost - excess >= MIN_KEPT_TOKENS else 0
            if cut:
                record["cut"].append({"turn": unit.turn, "tokens_cut": cut})
                if unit.turn is not None:
                    notes[unit.turn] = (f"reason=budget: {cut} tokens cut from its middle to fit the "
                                        f"{limit}-token prompt the window allows")
                excess -= cut
            else:
                units.pop(0)
                removed.update(unit.positions)
                record["dropped"].append(unit.turn if unit.turn is not None else f"message {unit.positions[0]}")
                if unit.turn is not None:
                    notes[unit.turn] = f"reason=budget: dropped to fit the {limit}-token prompt the window allows"
                excess -= cost
        if excess > 0:
            _cut_system(plan, excess, tokenizer, record, budget)
        n = int(render(_without(plan, removed), tokenizer).input_ids.shape[1])
        margin = margin * 2 + 4  # token counts of pieces need not add up to the render's: take more next round
    plan = _without(plan, removed)
    plan.decisions.turns = _noted(plan, notes)
    plan.ledger = _ledger(plan, tokenizer, len(record["dropped"]))
    record["rendered_tokens"] = n
    plan.decisions.records.append(record)
    return plan


def _without(plan: ContextPlan, removed: set[int]) -> ContextPlan:
    """`plan` without the messages at `removed` (decisions and ledger shared)."""
    if not removed:
        return plan
    keep = [i for i in range(len(plan.messages)) if i not in removed]
    sources = [plan.sources[i] for i in keep] if len(plan.sources) == len(plan.messages) else []
    return ContextPlan([plan.messages[i] for i in keep], plan.decisions, plan.ledger, plan.policy, sources)


def _turns_left(plan: ContextPlan) -> set:
    return {s for s in plan.sources if s is not None}


def _noted(plan: ContextPlan, notes: dict[int, str]) -> list:
    left = _turns_left(plan)
    out = []
    for d in plan.decisions.turns:
        if d.turn not in notes:
            out.append(d)
            continue
        note = f"{d.note}; {notes[d.turn]}" if d.note else notes[d.turn]
        if d.turn not in left:  # every copy of the turn is gone
            out.append(dataclasses.replace(d, tier="drop", recalled=False, note=note))
        else:
            out.append(dataclasses.replace(d, note=note))
    return out


def _cut_system(plan: ContextPlan, by: int, tokenizer, record: dict, budget: TokenBudget) -> None:
    """Cut the system block by `by` tokens (no past turn is left); `ContextWindowError` when the
    query alone is over the budget, or the block cannot shrink further."""
    query = plan.messages[-1]["content"]
    if isinstance(query, str):
        check_message(query, budget, tokenizer)
    if not plan.messages or plan.messages[0]["role"] != "system" or not isinstance(plan.messages[0]["content"], str):
        raise ContextWindowError(
            f"the plan of policy {plan.policy!r} renders over the {budget.prompt_tokens}-token prompt the window allows "
            "with no past turn or system block left to cut; shorten the message or lower max_new_tokens")
    text = plan.messages[0]["content"]
    have = count_text_tokens(text, tokenizer)
    new, removed = cut_text(text, max(0, have - by), tokenizer)
    if removed == 0:
        raise ContextWindowError(
            f"the instruction block ({have} tokens) and the message do not fit the {budget.prompt_tokens}-token prompt "
            "the window allows; shorten the message or the instructions, or lower max_new_tokens")
    plan.messages[0] = {**plan.messages[0], "content": new}
    record.setdefault("system_cut", 0)
    record["system_cut"] += removed


def with_max_new_tokens(budget: TokenBudget | None, max_new_tokens: int) -> TokenBudget | None:
    """The same budget for a reply of `max_new_tokens` (a request's own ``max_tokens``)."""
    if budget is None or budget.max_new_tokens == max_new_tokens:
        return budget
    return dataclasses.replace(budget, max_new_tokens=max_new_tokens)


def budget_of(model: Any, max_new_tokens: int, tokenizer=None) -> TokenBudget | None:
    """The budget for `model` (its ``max_context``, e.g. ``max_position_embeddings``), or None when
    the model declares no window."""
    window = getattr(model, "max_context", None)
    if window is None:
        return None
    return measure_budget(tokenizer if tokenizer is not None else model.tokenizer, int(window), max_new_tokens)


def even_cap(lengths: list[int], total: int) -> int:
    """The largest per-text cap so that ``sum(min(n, cap)) <= total`` (water-filling: short texts stay whole).

    >>> even_cap([10, 50, 200], 120)
    60
    """
    rest, left = sorted(lengths), len(lengths)
    for n in rest:
        share = total // left
        if n > share:
            return max(1, share)
        total -= n
        left -= 1
    return max(rest, default=1)


#: an inner prompt's kept message (system, the last ones) is not cut below this many tokens
MIN_PROMPT_TOKENS = 8
INNER_EVENT = "inner_budget"
_FRAMES: "weakref.WeakKeyDictionary[Any, tuple[int, int]]" = weakref.WeakKeyDictionary()


def _frame(tokenizer) -> tuple[int, int]:
    """(template overhead, per-message tokens) of `tokenizer`'s chat template, measured once."""
    try:
        frame = _FRAMES.get(tokenizer)
    except TypeError:
        frame = None
    if frame is None:
        b = measure_budget(tokenizer, 1 << 30, 1)
        frame = (b.template_overhead, b.per_message)
        try:
            _FRAMES[tokenizer] = frame
        except TypeError:
            pass
    return frame


def prompt_length(messages: list[dict], tokenizer) -> int:
    """Tokens of `messages` rendered with `tokenizer`'s chat template and the generation prompt, as
    `rhea.backends.llm.HFGenerator` feeds a prompt to its model."""
    from rhea.backends.chat_template import apply_chat_template

    text = apply_chat_template(tokenizer, [{"role": m["role"], "content": m["content"]} for m in messages])
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def _window_of(obj: Any) -> int | None:
    for name in ("window", "max_context"):
        w = getattr(obj, name, None)
        if isinstance(w, int) and not isinstance(w, bool):
            return w
    return None


def prompt_room_of(generator: Any, max_new_tokens: int) -> int | None:
    """The most prompt tokens `generator` (a `TextGenerator`, or a model) takes with a reply of
    `max_new_tokens`: its ``prompt_room(max_new_tokens)`` (`HFGenerator`), else its ``window`` or its
    model's ``max_context`` less `max_new_tokens`; None when no window is known (a remote endpoint,
    a test double), and then nothing is fitted.

    >>> class Gen: window = 512
    >>> prompt_room_of(Gen(), 64), prompt_room_of(object(), 64)
    (448, None)
    """
    room_of = getattr(generator, "prompt_room", None)
    if callable(room_of):
        room = room_of(max_new_tokens)
        return None if room is None else int(room)
    w = _window_of(generator)
    if w is None:
        w = _window_of(getattr(generator, "model", None))
    return None if w is None else w - int(max_new_tokens)


def fit_prompt(messages: list[dict], budget_or_room: "TokenBudget | int | None", tokenizer, *, keep_last: int = 1,
               record: list | None = None, call: str = "inner", count=None) -> list[dict]:
    """`messages` (an inner model call's chat prompt) cut to fit `budget_or_room` tokens as rendered with
    `tokenizer`'s chat template (a `TokenBudget`: its ``prompt_tokens``).

    The system message (first, when it is one) and the last `keep_last` messages are kept; the messages
    between them give way oldest first: the oldest is cut around `CUT_MARKER` when at least
    `MIN_KEPT_TOKENS` of it can stay, else dropped. When nothing is left between them, the longest kept
    message is cut in its middle (`cut_text`). Every text is counted once (`count_text_tokens`); the
    result is rendered once to check it (``count(messages)``, default `prompt_length`), a second time
    only if the counts fell short. A prompt that fits comes back as is (the same list); one that was
    cut appends ``{"event": "inner_budget", "call", "tokens_before", "tokens_after", "room", "cut",
    "dropped", "dropped_tokens", "dropped_messages"}`` to `record` (a list, e.g. the turn's decisions):
    ``cut`` lists each message cut (position, role, tokens cut), ``dropped_messages`` the first and last
    position of the messages dropped (``tokens_before`` is estimated from the texts' counts when the
    prompt is over twice the room). ``budget_or_room=None`` or no tokenizer (no known
    window): `messages` unchanged. A room that not even the kept messages cut down can fit is a
    `ContextWindowError`, raised before the model is called.

    >>> from rhea.testing import tiny_tokenizer
    >>> tok, log = tiny_tokenizer(), []
    >>> msgs = [{"role": "system", "content": "be brief ."}] + [{"role": "user", "content": "the cat " * 40}] * 3 + [
    ...     {"role": "user", "content": "and the dog ?"}]
    >>> out = fit_prompt(msgs, 120, tok, record=log, call="demo")
    >>> prompt_length(out, tok) <= 120, out[0] == msgs[0], out[-1] == msgs[-1], log[0]["event"], log[0]["call"]
    (True, True, True, 'inner_budget', 'demo')
    """
    room = budget_or_room.prompt_tokens if isinstance(budget_or_room, TokenBudget) else budget_or_room
    if room is None or tokenizer is None or not messages:
        return messages
    if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 0:
        raise RheaConfigError(f"keep_last={keep_last!r} must be an int >= 0")
    room = int(room)
    count = count if count is not None else (lambda ms: prompt_length(ms, tokenizer))
    overhead, per_message = _frame(tokenizer)
    sizes = [count_text_tokens(m["content"], tokenizer) if isinstance(m.get("content"), str) else 0 for m in messages]
    estimate = overhead + sum(sizes) + per_message * (len(messages) - 1)
    # a prompt far over the room (a long history sent whole) is not rendered whole: its estimate decides
    n = estimate if estimate > 2 * room else int(count(messages))
    if n <= room:
        return messages
    before = n
    out = [dict(m) for m in messages]
    alive = [True] * len(out)
    first = 1 if out[0].get("role") == "system" and len(out) > 1 else 0
    last = max(first, len(out) - keep_last)
    middle = list(range(first, last))  # oldest first
    cuts: list[dict] = []
    dropped: list[int] = []  # oldest first, so one span of positions
    dropped_tokens = 0

    def cut(i: int, keep: int) -> int:
        text, removed = cut_text(out[i]["content"], keep, tokenizer)
        if removed:
            out[i]["content"] = text
            sizes[i] = count_text_tokens(text, tokenizer)
            cuts.append({"message": i, "role": out[i].get("role"), "tokens_cut": removed})
        return removed

    margin = 0
    for _ in range(8):
        excess = n - room + margin
        while excess > 0 and middle:
            i = middle[0]
            if isinstance(out[i].get("content"), str) and sizes[i] - excess >= MIN_KEPT_TOKENS:
                removed = cut(i, sizes[i] - excess)
                if removed:
                    excess -= removed
                    continue
            middle.pop(0)
            alive[i] = False
            dropped.append(i)
            dropped_tokens += sizes[i]
            excess -= sizes[i] + per_message
        while excess > 0:  # nothing left between the kept messages: cut the longest of them
            kept = [i for i in range(len(out)) if alive[i] and i not in middle and isinstance(out[i].get("content"), str)]
            i = max(kept, key=lambda j: sizes[j], default=None)
            removed = 0 if i is None or sizes[i] <= MIN_PROMPT_TOKENS else cut(i, max(MIN_PROMPT_TOKENS, sizes[i] - excess))
            if not removed:
                raise ContextWindowError(
                    f"the {call} prompt does not fit the {room} tokens the inner model's window leaves for it, even "
                    "with its history dropped and its kept messages cut; use a model with a longer window or lower "
                    "the call's max_new_tokens")
            excess -= removed
        n = int(count([m for m, a in zip(out, alive) if a]))
        if n <= room:
            break
        margin = margin * 2 + 4  # token counts of pieces need not add up to the render's: take more next round
    else:
        raise ContextWindowError(f"the {call} prompt could not be fitted to the {room} tokens the inner model's "
                                 "window leaves for it; lower the call's max_new_tokens")
    if record is not None:
        record.append({"event": INNER_EVENT, "call": call, "tokens_before": before, "tokens_after": n, "room": room,
                       "cut": cuts, "dropped": len(dropped), "dropped_tokens": dropped_tokens,
                       "dropped_messages": [dropped[0], dropped[-1]] if dropped else []})
    return [m for m, a in zip(out, alive) if a]


def fit_inner(generator: Any, messages: list[dict], max_new_tokens: int, *, call: str, record: list | None = None,
              keep_last: int = 1, tokenizer: Any = None) -> list[dict]:
    """`messages` fitted (`fit_prompt`) to what `generator`'s window leaves for a reply of `max_new_tokens`
    (`prompt_room_of`), counted with the generator's own ``count_prompt_tokens`` when it has one;
    unchanged for a generator with no known window or no tokenizer."""
    room = prompt_room_of(generator, max_new_tokens)
    if room is None:
        return messages
    tok = getattr(generator, "tokenizer", None) or tokenizer
    own = getattr(generator, "count_prompt_tokens", None)
    return fit_prompt(messages, room, tok, keep_last=keep_last, record=record, call=call,
                      count=own if callable(own) else None)
