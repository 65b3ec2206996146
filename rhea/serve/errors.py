"""Errors of `rhea serve`, each with the HTTP status and OpenAI error body it is answered with."""
from __future__ import annotations

from rhea.errors import RheaError


class APIError(RheaError):
    """A request the server answers with an OpenAI-style error body ``{"error": {...}}``.

    >>> e = APIError("messages must not be empty", param="messages", code="empty_messages")
    >>> e.status, e.body()["error"]["type"]
    (400, 'invalid_request_error')
    """

    status = 400
    type = "invalid_request_error"

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None,
                 status: int | None = None, type: str | None = None):
        super().__init__(message)
        self.message, self.param, self.code = message, param, code
        if status is not None:
            self.status = status
        if type is not None:
            self.type = type

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class ModelNotFoundError(APIError):
    """The request names a model this server does not serve (404 ``model_not_found``)."""

    status = 404

    def __init__(self, model: object, served: str):
        super().__init__(f"The model {model!r} does not exist on this server; it serves {served!r} "
                         "(GET /v1/models lists it)", param="model", code="model_not_found")


class QueueFullError(APIError):
    """Every slot of the request queue is taken (503 with ``Retry-After``): retry later or add replicas."""

    status = 503
    type = "server_error"

    def __init__(self, max_queue: int, retry_after: int):
        self.retry_after = retry_after
        super().__init__(f"the server's request queue is full ({max_queue} waiting); retry after {retry_after} s "
                         "(or raise --max-queue, or add replicas)", code="queue_full")


class ServeConfigError(RheaError, ValueError):
    """`rhea serve` was given an argument it cannot run with (port, model, policy, cache settings)."""


__all__ = ["APIError", "ModelNotFoundError", "QueueFullError", "ServeConfigError"]
