"""Chat sessions: a model, a context policy, and the conversation they share.

>>> from rhea.session import ChatSession
"""
from rhea.session.chat import ChatSession, MessageError, SessionError, TurnRecord

__all__ = ["ChatSession", "MessageError", "SessionError", "TurnRecord"]
