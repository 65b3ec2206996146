"""InstructionalMemory: the ordered, de-duplicated set of global instructions, rendered
verbatim as the system block.

Beyond the paper, it handles instructions that cancel or contradict earlier ones: each
instruction is tagged with "slots" it constrains (language, length, start, end, case, ...,
inferred by rules). A new instruction replaces an older one whose slots it fully covers
("respond in English" replaces "respond in French"); a revocation removes the entries on
its slot ("stop starting with O" removes "always start with O"). Unknown slots are never
guessed at: both entries are kept. Every change is recorded with its reason.

The `version` counter changes only when the rendered block changes, so the model can keep
reusing the KV cache of the block while it is unchanged.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from rhea.errors import require_text
from rhea.memory.recognizer import match_rules, split_sentences, strip_quotes

_LANGUAGES = (
    "english|french|spanish|german|japanese|italian|portuguese|dutch|korean|swedish|chinese|mandarin|"
    "russian|arabic|hindi|turkish|polish|greek|hebrew|norwegian|danish|finnish|vietnamese|thai|indonesian"
)
_NUMBER = r"(?:\d+|one|two|three|four|five|six|seven|eight|nine|ten|twenty|fifty|hundred|single)"

#: Slot name -> pattern. Two instructions on the same slot cannot both hold, so the newer
#: wins. Punctuation is keyed by the mark: "no commas" and "no exclamation marks" coexist.
SLOT_PATTERNS: dict[str, str] = {
    "language": rf"\b(?:{_LANGUAGES})\b",
    "format": r"\b(?:json|yaml|xml|csv|tables?|haikus?|rhymes?|dialogue|plain text|numbered list|bullet(?: points?)?|bulleted|formatting|format)\b",
    "length": rf"\b{_NUMBER}[- ](?:words?|sentences?|paragraphs?|characters?|lines?)\b|\b(?:short|shorter|concise|brief|longer|lengthy|word limits?|length)\b",
    "start": r"\b(?:start|begin|open)(?:s|ning|ing)?\b(?:\s+[\w']+){0,4}?\s+with\b",
    "end": r"\b(?:end|finish|close|conclude)(?:s|ing)?\b(?:\s+[\w']+){0,4}?\s+with\b|\bsign(?:ing)? off\b|\bat the end of\b",
    "case": r"\b(?:lowercase|lower case|uppercase|upper case|capital letters|all caps|capitali[sz]e)\b",
    "persona": r"\b(?:you are (?:now )?an? |act(?:ing)? as|pretend(?:ing)?|persona|talk(?:ing)? like|role|as if you were)\b",
    "tone": r"\b(?:formal|informal|casual|sarcastic|sarcasm|friendly|tone)\b",
    "address": r"\b(?:call(?:ing)? me|refer(?:ring)? to me as)\b",
    "punctuation:comma": r"\bcommas?\b",
    "punctuation:exclamation": r"\bexclamation(?: marks?| points?)?\b",
    "punctuation:semicolon": r"\bsemicolons?\b",
    "punctuation:question": r"\bquestion marks?\b",
    "punctuation:dash": r"\b(?:em )?dash(?:es)?\b",
    "emoji": r"\bemojis?\b",
}
_COMPILED_SLOTS = {name: re.compile(p, re.IGNORECASE) for name, p in SLOT_PATTERNS.items()}

HEADER = "Follow these instructions in every response. If two conflict, follow the later one."
#: What opens the reminder `InstructionalMemory.reminder` writes after the current message.
REMINDER_HEADER = "(Standing instructions: follow them in this reply."

#: A revocation that also says what to do now: "... instead", "..., and call me Alex".
_REPLACEMENT = re.compile(
    r"\binstead\b|\brather than\b|(?:\band|\bbut|[;,])\s+(?:from now on,?\s+|please\s+|just\s+)?"
    r"(?:always|never|call me|refer to me|use|answer|respond|reply|write|switch to|keep|start|end|speak|talk)\b",
    re.IGNORECASE,
)
_REVOKE_ALL = re.compile(r"\b(?:all|every)\b(?:\s+[\w']+){0,2}\s+(?:instructions?|rules?|requirements?|constraints?)\b", re.IGNORECASE)
_STOPWORDS = set(
    "a an the to of in on for with and or but is are be been it this that those these my your you me i "
    "now no not any more anymore again please just can may don't do does stop forget ignore disregard "
    "drop cancel scrap remove lift undo rule rules instruction instructions requirement restriction "
    "about what said longer need have all every each from answer answers response responses reply replies "
    "use using write always never".split()
)


def _sentences(text: str) -> list[str]:
    """Verbatim sentences of `text` (the recognizer's `split_sentences`)."""
    return split_sentences(text)


def _cued(sentence: str) -> bool:
    """The sentence carries its own standing-instruction cue (a recognizer rule of kind "add")."""
    rule = match_rules(sentence)
    return bool(rule) and rule[0] == "add"


def split_directives(text: str) -> list[str]:
    """Split a message that gives several standing instructions into one part per instruction.

    A part starts at each sentence carrying its own persistent cue (the recognizer's rules:
    "From now on, ...", "in all your answers", ...); sentences without one stay with the part
    before them (or the first part, when they open the message). The parts are verbatim
    slices of `text`, so joining them gives it back. With fewer than two cued sentences the
    whole message is one part. Storing parts separately lets a later revocation ("you no
    longer need to answer with those options") remove only the instruction it names.

    >>> split_directives("From now on, answer in French. From now on, keep it under 50 words.")
    ['From now on, answer in French.', 'From now on, keep it under 50 words.']
    >>> split_directives("I'm in Lisbon. From now on, answer in Portuguese.")
    ["I'm in Lisbon. From now on, answer in Portuguese."]
    """
    sentences = _sentences(text)
    cued = [i for i, sent in enumerate(sentences) if _cued(sent)]
    if len(cued) < 2:
        return [text.strip()]
    bounds = [0] + cued[1:] + [len(sentences)]
    return ["".join(sentences[a:b]).strip() for a, b in zip(bounds, bounds[1:])]


def infer_slots(text: str) -> tuple[str, ...]:
    """The slots an instruction constrains, in `SLOT_PATTERNS` order (empty if unknown).

    >>> infer_slots("From now on, respond in French in under 50 words.")
    ('language', 'length')
    >>> infer_slots("Stop starting your answers with O.")
    ('start',)
    """
    return tuple(name for name, pattern in _COMPILED_SLOTS.items() if pattern.search(text))


def _normalize(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip().lower()).rstrip(".!;: ")


def _content_words(text: str) -> set[str]:
    words = re.findall(r"[a-z0-9']+", text.lower())
    return {w[:-1] if len(w) > 3 and w.endswith("s") else w for w in words if w not in _STOPWORDS}


SCOPES = ("standing",)


@dataclass
class InstructionEntry:
    """One standing instruction, verbatim as the user gave it, with its provenance.

    text: the instruction (a part of the message when it gave several); source_message: the
    whole user message it came from; turn: that message's turn index; scope: "standing" (a
    rule for every later reply; one-off requests never become entries).
    """

    id: int
    text: str
    turn: int
    slots: tuple[str, ...] = ()
    source_message: str | None = None
    scope: str = "standing"


@dataclass
class MemoryEvent:
    """One change (or deliberate non-change) to the memory, and why.

    action: "add", "duplicate", "replace", "conflict-kept", "revoke", "revoke-unmatched",
    "one-off-ignored" (a request for this reply only; no entry changed).
    """

    action: str
    entry_id: int | None
    text: str
    turn: int | None
    reason: str
    by_id: int | None = None  # the entry that caused a replace / conflict-kept
    source_message: str | None = None  # for "add": the whole user message the entry came from


@dataclass
class InstructionalMemory:
    """Ordered, de-duplicated global instructions with conflict and revocation handling.

    >>> im = InstructionalMemory()
    >>> _ = im.add("From now on, respond in French.", turn=0)
    >>> _ = im.add("Respond in English from here on.", turn=3)
    >>> [e.text for e in im.entries], [h.action for h in im.history]
    (['Respond in English from here on.'], ['add', 'replace', 'add'])
    >>> _ = im.revoke("You no longer need to answer in English.", reason="user revoked at turn 5")
    >>> im.render(), im.version
    ('', 3)
    """

    _entries: list[InstructionEntry] = field(default_factory=list)
    history: list[MemoryEvent] = field(default_factory=list)
    version: int = 0
    _next_id: int = 0

    @property
    def entries(self) -> list[InstructionEntry]:
        return list(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, text: str, turn: int, *, source_message: str | None = None, scope: str = "standing") -> InstructionEntry:
        """Store `text`; replace entries of earlier turns whose slots it fully covers. Returns the entry kept.

        Instructions given in one message are kept together whatever slots they share ("... must be less than 4
        sentences. Keep all your responses under 200 words." holds two length rules, both meant).

        source_message: the whole user message `text` came from (default: `text` itself).
        """
        require_text(text, "instruction text")
        _check_turn(turn)
        if scope not in SCOPES:
            raise ValueError(f"scope={scope!r}: only standing instructions are stored (one of {SCOPES}); "
                             "a one-off request applies to one reply and never enters the memory")
        text = text.strip()
        source_message = text if source_message is None else require_text(source_message, "source message")
        for e in self._entries:
            if _normalize(e.text) == _normalize(text):
                self._log("duplicate", e.id, text, turn, f"same text as entry {e.id} (turn {e.turn}); nothing changed")
                return e
        entry = InstructionEntry(self._next_id, text, turn, infer_slots(text), source_message, scope)
        self._next_id += 1
        kept = []
        for old in self._entries:
            shared = set(old.slots) & set(entry.slots)
            if shared and old.turn == turn:
                self._log("conflict-kept", old.id, old.text, turn,
                          f"shares {sorted(shared)} with {text!r}, given in the same message; kept both", by_id=entry.id)
            elif shared and set(old.slots) <= set(entry.slots):
                self._log("replace", old.id, old.text, turn,
                          f"slot(s) {sorted(shared)} now set by turn {turn}: {text!r} replaces {old.text!r}", by_id=entry.id)
                continue
            elif shared:
                self._log("conflict-kept", old.id, old.text, turn,
                          f"overlaps {text!r} on {sorted(shared)} but also sets {sorted(set(old.slots) - shared)}; "
                          "kept both, the later one is listed last and wins", by_id=entry.id)
            kept.append(old)
        self._entries = kept + [entry]
        self._log("add", entry.id, text, turn, f"global instruction at turn {turn}; slots {list(entry.slots) or 'unknown'}",
                  source_message=source_message)
        self.version += 1
        return entry

    def revoke(self, text_or_id: str | int, reason: str, *, turn: int | None = None) -> list[InstructionEntry]:
        """Remove the entries a revocation refers to and return them ([] if none matched).

        An int removes that entry id. A text removes, in order of preference: every entry when
        it cancels "all instructions"; entries sharing one of its slots; else the entries
        sharing the most content words with it. An unmatched revocation is recorded, not ignored.
        """
        require_text(reason, "revoke reason")
        if turn is not None:
            _check_turn(turn)
        if isinstance(text_or_id, bool) or not isinstance(text_or_id, (int, str)):
            raise ValueError(f"revoke takes an entry id or the revoking message, got {text_or_id!r}")
        if isinstance(text_or_id, int):
            targets = [e for e in self._entries if e.id == text_or_id]
            if not targets:
                raise ValueError(f"no instruction with id {text_or_id}; live ids are {[e.id for e in self._entries]}")
            how = f"by id {text_or_id}"
            text = f"#{text_or_id}"
        else:
            text = require_text(text_or_id, "revocation text").strip()
            targets, how = self._match_revocation(text)
        for e in targets:
            self._log("revoke", e.id, e.text, turn, f"{reason} (matched {how}: {text!r})")
        if not targets:
            self._log("revoke-unmatched", None, text, turn,
                      f"{reason}; no live instruction matched by slot or content words")
            return []
        gone = {e.id for e in targets}
        self._entries = [e for e in self._entries if e.id not in gone]
        self.version += 1
        return targets

    def update(self, text: str, decision, turn: int) -> list[MemoryEvent]:
        """Apply a `RecognizerDecision` for message `text`; return the events it caused.

        A revocation that matches no live entry ("stop using em dashes" with no dash rule
        stored) is a new prohibition, so it is added rather than dropped. A revocation that
        names a replacement ("forget the JSON rule and use YAML instead") removes the old
        entry and keeps the message as the new one. A message with several cued instructions
        is stored as one entry per instruction (`split_directives`), each keeping the whole
        message as its `source_message`. Only the decision's `rule` (the sentences that carry the
        rule) is stored and rendered: a first message that sets a rule beside its question puts
        the rule, not the question, into the block. A one-off request (decision scope "one-off": "just this
        once, answer in English") changes nothing, so it never replaces a standing rule; it is
        recorded as a "one-off-ignored" event. Other non-global decisions are ignored silently.

        >>> from rhea.memory import InstructionRecognizer
        >>> im, rec = InstructionalMemory(), InstructionRecognizer(None)
        >>> msg = "Stop using em dashes in your replies."
        >>> [e.action for e in im.update(msg, rec(msg), turn=4)]
        ['revoke-unmatched', 'add']
        """
        start = len(self.history)
        if getattr(decision, "scope", None) == "one-off" or not decision.is_global:
            if getattr(decision, "scope", None) == "one-off":
                self._log("one-off-ignored", None, text, turn,
                          f"a request for this reply only ({decision.matched!r}); standing rules unchanged")
            return self.history[start:]
        if decision.kind == "add":
            for part in split_directives(getattr(decision, "rule", None) or text):
                self.add(part, turn, source_message=text)
        elif decision.kind == "revoke":
            if not self.revoke(text, reason=f"revoked by the user at turn {turn} ({decision.source})", turn=turn):
                self.add(text, turn, source_message=text)
                self.history[-1].reason += "; a revocation that matched nothing is kept as a standing instruction"
            elif _REPLACEMENT.search(strip_quotes(text)):
                self.add(text, turn, source_message=text)
                self.history[-1].reason += "; the revocation also sets a replacement, kept as a standing instruction"
        return self.history[start:]

    def _match_revocation(self, text: str) -> tuple[list[InstructionEntry], str]:
        slots = set(infer_slots(text))
        if slots:
            hit = [e for e in self._entries if slots & set(e.slots)]
            if hit:
                return hit, f"slot {sorted(slots)}"
        if _REVOKE_ALL.search(text) and not slots:
            return list(self._entries), "'all instructions'"
        words = _content_words(text)
        scored = [(len(words & _content_words(e.text)), e) for e in self._entries]
        best = max((s for s, _ in scored), default=0)
        if best == 0:
            return [], "nothing"
        return [e for s, e in scored if s == best], f"content words {sorted(words)}"

    def retired_turns(self) -> dict[int, str]:
        """Turns whose user message was nothing but standing instructions, all of them since revoked or
        replaced, each with why: {turn: reason}.

        Such a turn only restates a rule the user has taken back; kept in the context (as text or as
        latents) it would bring the rule back, so `RheaPolicy` drops it. A message that also says
        something else ("I'm in Lisbon. From now on, answer in Portuguese.": a sentence without its own
        cue) is never retired, whatever happens to its instruction.

        >>> im = InstructionalMemory()
        >>> _ = im.add("From now on, call me Captain.", turn=0)
        >>> _ = im.add("I'm in Lisbon. From now on, answer in Portuguese.", turn=2)
        >>> _ = im.revoke("Stop calling me Captain.", reason="user", turn=4)
        >>> _ = im.revoke("You no longer need to answer in Portuguese.", reason="user", turn=5)
        >>> im.retired_turns()
        {0: "its instruction was revoked at turn 4: 'From now on, call me Captain.'"}
        """
        added: dict[int, list[MemoryEvent]] = {}
        ended: dict[int, MemoryEvent] = {}
        for h in self.history:
            if h.action == "add" and h.turn is not None:
                added.setdefault(h.turn, []).append(h)
            elif h.action in ("revoke", "replace") and h.entry_id is not None:
                ended.setdefault(h.entry_id, h)
        out = {}
        for turn, adds in added.items():
            if all(a.entry_id in ended for a in adds) and all(_cued(s) for a in adds
                                                               for s in _sentences(a.source_message or a.text)):
                why = "; ".join(f"its instruction was {'revoked' if ended[a.entry_id].action == 'revoke' else 'replaced'}"
                                f" at turn {ended[a.entry_id].turn}: {a.text!r}" for a in adds)
                out[turn] = why
        return out

    def render(self) -> str:
        """The verbatim system block ("" when empty).

        >>> im = InstructionalMemory(); _ = im.add("Always answer in haiku.", 0)
        >>> print(im.render())
        Follow these instructions in every response. If two conflict, follow the later one.
        - Always answer in haiku.
        """
        if not self._entries:
            return ""
        return "\n".join([HEADER] + [f"- {e.text}" for e in self._entries])

    def reminder(self) -> str:
        """The standing instructions restated for the end of the current message ("" when there are none): the
        same verbatim texts as `render`, closest to where the reply begins.

        >>> im = InstructionalMemory(); _ = im.add("Always answer in haiku.", 0)
        >>> print(im.reminder())
        (Standing instructions: follow them in this reply.
        - Always answer in haiku.)
        """
        if not self._entries:
            return ""
        return "\n".join([REMINDER_HEADER] + [f"- {e.text}" for e in self._entries]) + ")"

    def to_dict(self) -> dict:
        return {
            "entries": [asdict(e) for e in self._entries],
            "history": [asdict(h) for h in self.history],
            "version": self.version,
            "next_id": self._next_id,
        }

    @classmethod
    def from_dict(cls, data: dict) -> "InstructionalMemory":
        try:
            # source_message / scope arrived later: older saved sessions lack them
            entries = [InstructionEntry(e["id"], e["text"], e["turn"], tuple(e["slots"]),
                                        e.get("source_message", e["text"]), e.get("scope", "standing"))
                       for e in data["entries"]]
            history = [MemoryEvent(**h) for h in data["history"]]
            return cls(entries, history, int(data["version"]), int(data["next_id"]))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not an InstructionalMemory dict ({exc}); pass what to_dict() returned") from exc

    def _log(self, action, entry_id, text, turn, reason, by_id=None, source_message=None) -> None:
        self.history.append(MemoryEvent(action, entry_id, text, turn, reason, by_id, source_message))


def _check_turn(turn) -> None:
    if isinstance(turn, bool) or not isinstance(turn, int) or turn < 0:
        raise ValueError(f"turn={turn!r} must be a turn index >= 0")
