"""Who may call `rhea serve`: an API key, a JSON-only POST, a Host check and CORS (off by default).

`AccessPolicy` holds the settings; `AccessMiddleware` (pure ASGI, so streaming replies pass through
untouched) enforces them before a route runs:

- **API key** (``--api-key`` or ``RHEA_API_KEY``): every ``/v1/*`` request must send
  ``Authorization: Bearer KEY`` (what the `openai` client sends); otherwise 401 with OpenAI's body
  (code ``invalid_api_key``). The key is compared in constant time. ``/health``, ``/`` and
  ``/static/`` stay open; the chat page sends no key, so with one set its requests are refused
  (serve it behind a proxy that adds the header, docs/serving.md).
- **JSON only**: a POST whose ``Content-Type`` is not ``application/json`` is refused with 415, so a
  cross-site ``text/plain`` form POST (which browsers send without a CORS preflight) never runs.
- **Host check** (``--allowed-hosts``): a request whose ``Host`` header names another host gets 421;
  bound to a loopback address the default is the localhost names, which stops DNS-rebinding pages.
- **CORS** (``--cors-origins``): off by default (no ``Access-Control-Allow-*`` header, so browsers
  keep other sites' pages from reading replies); the listed origins (or ``*``) are allowed, and
  their preflight ``OPTIONS`` requests answered.
"""
from __future__ import annotations

import hmac
import ipaddress
import json
from dataclasses import dataclass, field

from rhea.serve.errors import ServeConfigError

LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1", "[::1]")
API_KEY_ENV = "RHEA_API_KEY"


def is_loopback(host: str) -> bool:
    """Whether a listening address only takes connections from this machine.

    >>> is_loopback("127.0.0.1"), is_loopback("localhost"), is_loopback("0.0.0.0")
    (True, True, False)
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _error(status: int, message: str, code: str, type_: str = "invalid_request_error") -> tuple[int, bytes]:
    return status, json.dumps({"error": {"message": message, "type": type_, "param": None, "code": code}}).encode()


@dataclass
class AccessPolicy:
    """The access settings of one server (see the module docstring)."""

    api_key: str | None = None
    #: hosts the Host header may name (without port); empty: any host
    allowed_hosts: tuple[str, ...] = ()
    #: origins allowed to read replies from a browser; ``("*",)``: any; empty: CORS off
    cors_origins: tuple[str, ...] = ()
    json_only: bool = True
    protected_prefix: str = "/v1/"
    _hosts: frozenset = field(init=False, repr=False)

    def __post_init__(self):
        if self.api_key is not None and (not isinstance(self.api_key, str) or not self.api_key.strip()
                                         or any(c.isspace() for c in self.api_key)):
            raise ServeConfigError("--api-key (or RHEA_API_KEY) must be a non-empty key without spaces")
        for origin in self.cors_origins:
            if origin != "*" and not origin.startswith(("http://", "https://")):
                raise ServeConfigError(f"--cors-origins {origin!r}: write each origin as scheme://host[:port], "
                                       "e.g. https://app.example.com, or * for any")
        self._hosts = frozenset(h.lower().strip("[]") for h in self.allowed_hosts)

    @classmethod
    def for_server(cls, host: str, *, api_key: str | None = None, allowed_hosts: str | None = None,
                   cors_origins: str | None = None, environ: dict | None = None) -> "AccessPolicy":
        """The policy of ``rhea serve --host HOST``: the key from the option or ``RHEA_API_KEY``; hosts
        from ``--allowed-hosts`` (comma list, ``*`` for any), else the localhost names when bound to a
        loopback address and any host otherwise; origins from ``--cors-origins`` (comma list)."""
        import os

        environ = os.environ if environ is None else environ
        key = api_key if api_key is not None else (environ.get(API_KEY_ENV) or None)
        if allowed_hosts is None:
            hosts = LOCAL_HOSTS if is_loopback(host) else ()
        else:
            hosts = tuple(h.strip() for h in allowed_hosts.split(",") if h.strip())
            if not hosts:
                raise ServeConfigError("--allowed-hosts names no host; pass a comma list (e.g. "
                                       "chat.example.com,localhost) or * for any")
            if "*" in hosts:
                hosts = ()
        origins = tuple(o.strip().rstrip("/") for o in (cors_origins or "").split(",") if o.strip())
        return cls(api_key=key, allowed_hosts=hosts, cors_origins=origins)

    # ------------------------------------------------------------ checks
    def check_host(self, host_header: str | None) -> tuple[int, bytes] | None:
        if not self._hosts:
            return None
        host = (host_header or "").strip().lower()
        name = host[1:].split("]", 1)[0] if host.startswith("[") else host.rsplit(":", 1)[0]
        if name not in self._hosts:
            return _error(421, f"Host {host_header!r} is not served here; this server answers for "
                               f"{', '.join(sorted(self._hosts))} (set --allowed-hosts to add names)",
                          "host_not_allowed")
        return None

    def check_key(self, path: str, authorization: str | None) -> tuple[int, bytes] | None:
        if self.api_key is None or not path.startswith(self.protected_prefix):
            return None
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return _error(401, "You didn't provide an API key. You need to provide your API key in an Authorization "
                               "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).", "invalid_api_key")
        if not hmac.compare_digest(token.strip().encode(), self.api_key.encode()):
            return _error(401, "Incorrect API key provided. The server's key is set with --api-key or RHEA_API_KEY.",
                          "invalid_api_key")
        return None

    def check_content_type(self, method: str, content_type: str | None) -> tuple[int, bytes] | None:
        if not self.json_only or method != "POST":
            return None
        media = (content_type or "").split(";", 1)[0].strip().lower()
        if media != "application/json" and not (media.startswith("application/") and media.endswith("+json")):
            return _error(415, f"Content-Type {content_type or '(none)'!r} is not accepted: send the body as JSON "
                               "with Content-Type: application/json", "unsupported_media_type")
        return None

    def allow_origin(self, origin: str | None) -> str | None:
        if not origin or not self.cors_origins:
            return None
        if "*" in self.cors_origins:
            return "*"
        return origin if origin.rstrip("/") in self.cors_origins else None


class AccessMiddleware:
    """Enforce an `AccessPolicy` on every HTTP request of an ASGI app."""

    def __init__(self, app, policy: AccessPolicy):
        self.app, self.policy = app, policy

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        method, path = scope["method"], scope["path"]
        origin = self.policy.allow_origin(headers.get("origin"))
        cors = [(b"access-control-allow-origin", origin.encode("latin-1")), (b"vary", b"Origin")] if origin else []
        refusal = self.policy.check_host(headers.get("host"))
        if refusal is None and method == "OPTIONS" and headers.get("access-control-request-method"):
            if origin is None:  # CORS off, or an origin not listed: no preflight grant
                refusal = _error(403, f"cross-origin requests from {headers.get('origin')!r} are not allowed (set "
                                      "--cors-origins to allow an origin)", "origin_not_allowed")
            else:
                await _respond(send, 204, b"", cors + [
                    (b"access-control-allow-methods", b"GET, POST, OPTIONS"),
                    (b"access-control-allow-headers", b"authorization, content-type"),
                    (b"access-control-max-age", b"600")], content_type=None)
                return
        if refusal is None:
            refusal = self.policy.check_key(path, headers.get("authorization"))
        if refusal is None:
            refusal = self.policy.check_content_type(method, headers.get("content-type"))
        if refusal is not None:
            status, body = refusal
            extra = [(b"www-authenticate", b'Bearer realm="rhea"')] if status == 401 else []
            await _respond(send, status, body, cors + extra)
            return
        if not cors:
            return await self.app(scope, receive, send)

        async def send_with_cors(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": list(message.get("headers", [])) + cors}
            await send(message)

        return await self.app(scope, receive, send_with_cors)


async def _respond(send, status: int, body: bytes, headers: list, content_type: bytes | None = b"application/json"):
    head = [(b"content-length", str(len(body)).encode())] + headers
    if content_type is not None:
        head.append((b"content-type", content_type))
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


__all__ = ["API_KEY_ENV", "AccessMiddleware", "AccessPolicy", "LOCAL_HOSTS", "is_loopback"]
