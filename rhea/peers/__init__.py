"""Peer methods a user would pick instead of Rhea, run through their own libraries as context
policies on the same conversations: kvpress's KV-cache presses (`rhea.peers.kvpress_policy`)
and LLMLingua's prompt compression (`rhea.peers.llmlingua_policy`). Their libraries are
optional peer dependencies (``make peers``); without them a policy raises `PeerMissingError`
when it is built, saying how to get it."""
from rhea.peers.kvpress_policy import PRESSES, KVPressPolicy, PeerMissingError
from rhea.peers.llmlingua_policy import LLMLinguaPolicy

__all__ = ["PRESSES", "KVPressPolicy", "LLMLinguaPolicy", "PeerMissingError"]
