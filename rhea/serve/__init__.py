"""`rhea serve`: an OpenAI-compatible chat server over a Rhea model and a context policy.

Stateless: every request carries the whole message list and the server rebuilds the
conversation from it; what is expensive (reply latents, recognizer verdicts, embeddings, the
instruction block's keys/values) is cached by content. See docs/guides/serving.md.
"""
from rhea.serve.errors import APIError, ModelNotFoundError, QueueFullError, ServeConfigError

__all__ = ["APIError", "ModelNotFoundError", "QueueFullError", "ServeConfigError"]
