"""Scripted replies for the Sculptor loop tests."""
from __future__ import annotations

import json

from rhea.agents.sculptor import AcmStore, SculptorLoop, SculptorToolbox
from rhea.backends.llm import ScriptedGenerator


def hermes(name: str, **arguments) -> str:
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


def make_loop(history, replies, *, seed=0, summaries=(), **kwargs):
    generator = ScriptedGenerator(replies)
    toolbox = SculptorToolbox(AcmStore(history, seed=seed), ScriptedGenerator(list(summaries)))
    return SculptorLoop(generator, toolbox, **kwargs), generator


def planned_fragment_ids(history, seed, start_marker, end_marker, n, searches_before=()):
    # Ids are deterministic for a seed and the sequence of id-issuing ops (searches, one id
    # per search and per result kept, and fragmentings share one id stream), so a script can
    # name fragments before they exist. `searches_before`: the search_context arguments the
    # script runs first, in order.
    store = AcmStore(history, seed=seed)
    for arguments in searches_before:
        store.search(**arguments)
    return [f.id for f in store.fragment(start_marker, end_marker, n)]
