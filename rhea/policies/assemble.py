"""Steps every policy shares: resolving the system block, turning tiered turns into
messages, and filling the token ledger. Policies decide tiers; this file builds the plan."""
from __future__ import annotations

import re
from typing import Any, Callable, Sequence, Union

from rhea.context.budget import count_text_tokens
from rhea.context.conversation import Conversation, Turn, session_header, session_of
from rhea.context.latent import Latent
from rhea.context.plan import ContextPlan, PlanDecisions, TokenLedger, TurnDecision
from rhea.errors import InvalidTurnError, RheaConfigError, require_text

SystemSource = Union[str, Callable[[], str], Any, None]
_APPROX_TOKEN = re.compile(r"\w+|[^\w\s]")


def check_system_source(source: SystemSource) -> SystemSource:
    if source is None or isinstance(source, str) or hasattr(source, "render") or callable(source):
        return source
    raise RheaConfigError(
        f"system_prompt={source!r} must be a str, an object with render() (e.g. InstructionalMemory) or a callable returning str"
    )


def resolve_system(source: SystemSource) -> tuple[str, list[str]]:
    """(system text, instruction texts recorded in the plan) for a policy's system source."""
    if source is None:
        return "", []
    if isinstance(source, str):
        return source, [source] if source.strip() else []
    if hasattr(source, "render"):
        text = source.render()
        entries = getattr(source, "entries", None)
        return text, [e.text for e in entries] if entries is not None else ([text] if text else [])
    text = source()
    if not isinstance(text, str):
        raise InvalidTurnError(f"system_prompt callable returned {type(text).__name__}, expected str")
    return text, [text] if text.strip() else []


def with_reminder(query: str, reminder: str) -> str:
    """The current user message as the plan shows it: `query`, then `reminder` after a blank line when there is one."""
    return f"{query}\n\n{reminder}" if reminder and reminder.strip() else query


def count_tokens(text: str, tokenizer: Any = None) -> int:
    """Tokens in `text`: exact with a tokenizer, else a words-and-punctuation approximation.

    >>> count_tokens("Hello, world!")
    4
    """
    if not text:
        return 0
    if tokenizer is None:
        return len(_APPROX_TOKEN.findall(text))
    return count_text_tokens(text, tokenizer)  # remembered per text: a long history is counted once


def assemble_plan(
    policy: str,
    conversation: Conversation,
    query: str,
    decisions: Sequence[TurnDecision],
    *,
    system_source: SystemSource = None,
    extra_system: Sequence[str] = (),
    latents: dict[int, Latent] | None = None,
    records: Sequence[dict] = (),
    tokenizer: Any = None,
    reminder: str = "",
) -> ContextPlan:
    """Build the plan: [system] + kept turns in chronological order + recalled turns + [user: query].

    `decisions` must hold exactly one `TurnDecision` per past turn, so no turn leaves the
    context without a recorded reason. "raw" turns keep both texts; "latent" turns keep the
    user text and put `latents[turn]` in place of the reply; "drop" turns are left out.
    A decision with ``recalled`` also shows its turn as raw text, whatever its tier in place, after the turn
    ``recalled_after`` names (after the newest turn when it is None or names no earlier turn; copies after one
    turn in turn order): a plan kept from an earlier query keeps each copy where it first appeared, so the
    prompt of the next query extends this one and the history cache reuses all of it.
    A turn whose meta places it in a session (`rhea.context.conversation.session_header`) opens its user
    message with that header wherever it is shown away from its place: the first turn shown, the first
    of its session, the first after dropped turns, and every recalled turn, so a question about when
    something was said can be answered from a turn shown out of order.
    `extra_system` (e.g. a summary) follows the instructions inside the system block. A `reminder` (e.g.
    `InstructionalMemory.reminder`) follows the query in its message, after a blank line.
    Ledger token counts cover message text only (chat-template markup excluded), the same
    way for the plan and for the full history, so the two compare.
    """
    require_text(query, "query")
    by_turn = {d.turn: d for d in decisions}
    if len(by_turn) != len(decisions) or set(by_turn) != set(range(len(conversation))):
        raise InvalidTurnError(
            f"policy {policy!r} decided turns {sorted(by_turn)} but the conversation has turns 0..{len(conversation) - 1}; "
            "record exactly one decision per turn"
        )
    latents = latents or {}
    system_text, instructions = resolve_system(system_source)
    system = "\n\n".join(part for part in (system_text, *extra_system) if part and part.strip())

    messages: list[dict] = [{"role": "system", "content": system}] if system else []
    sources: list[int | None] = [None] * len(messages)
    text_tokens = count_tokens(system, tokenizer)
    full_tokens = count_tokens(system_text, tokenizer) + count_tokens(query, tokenizer)
    latent_slots = dropped = 0
    shown_before = None  # the index of the last turn shown in place
    newest = len(conversation) - 1
    copies: dict[int, list[TurnDecision]] = {}  # recalled copies by the turn they follow
    for d in sorted((d for d in decisions if d.recalled), key=lambda d: d.turn):
        after = d.recalled_after if d.recalled_after is not None and d.recalled_after < newest else newest
        copies.setdefault(after, []).append(d)

    def recalled_after(index: int) -> None:
        nonlocal text_tokens
        for d in copies.get(index, ()):
            turn = conversation[d.turn]
            user, header_tokens = _placed(turn, True, tokenizer)
            messages.extend([{"role": "user", "content": user}, {"role": "assistant", "content": turn.assistant}])
            sources.extend([d.turn, d.turn])
            text_tokens += header_tokens + count_tokens(turn.user, tokenizer) + count_tokens(turn.assistant, tokenizer)

    for index, turn in enumerate(conversation):
        turn_tokens = count_tokens(turn.user, tokenizer) + count_tokens(turn.assistant, tokenizer)
        opens_session = index == 0 or session_of(turn) != session_of(conversation[index - 1])
        full_tokens += turn_tokens + (_header_tokens(turn, tokenizer) if opens_session else 0)
        tier = by_turn[index].tier
        if tier == "drop":
            dropped += not by_turn[index].recalled  # a recalled turn is in the context, as its copy
            recalled_after(index)
            continue
        user, header_tokens = _placed(turn, opens_session or shown_before != index - 1, tokenizer)
        shown_before = index
        messages.append({"role": "user", "content": user})
        text_tokens += header_tokens
        sources += [index, index]
        if tier == "raw":
            messages.append({"role": "assistant", "content": turn.assistant})
            text_tokens += turn_tokens
        else:
            if index not in latents:
                raise InvalidTurnError(f"turn {index} is tiered 'latent' but policy {policy!r} supplied no Latent for it")
            messages.append({"role": "assistant", "content": [latents[index]]})
            text_tokens += count_tokens(turn.user, tokenizer)
            latent_slots += latents[index].n_slots
        recalled_after(index)
    message = with_reminder(query, reminder)
    messages.append({"role": "user", "content": message})
    sources.append(None)
    text_tokens += count_tokens(message, tokenizer)

    ledger = TokenLedger(
        text_tokens=text_tokens,
        latent_slots=latent_slots,
        dropped_turns=dropped,
        full_history_tokens=full_tokens,
        counter="tokenizer" if tokenizer is not None else "regex-approx",
    )
    ordered = sorted(decisions, key=lambda d: d.turn)
    return ContextPlan(messages, PlanDecisions(ordered, instructions, list(records)), ledger, policy, sources)


def _header_tokens(turn: Turn, tokenizer: Any) -> int:
    header = session_header(turn)
    return count_tokens(header + " ", tokenizer) if header else 0


def _placed(turn: Turn, away: bool, tokenizer: Any) -> tuple[str, int]:
    """`turn`'s user text, opened by its session header when it is shown `away` from its place, and the
    header's tokens (0 without one)."""
    header = session_header(turn) if away else None
    if header is None:
        return turn.user, 0
    return f"{header} {turn.user}", count_tokens(header + " ", tokenizer)
