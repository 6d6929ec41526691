"""What the current request is about, for its one log line.

The request observer opens a small dict per HTTP request in a ``ContextVar``; code that learns
which flow the request concerns (``FlowService``) writes the flow id, server client, kind and
outcome into it, and the observer logs them with the request. The observer *mutates* the dict it
created rather than re-setting the variable, so a value written in a copied context (a task the
framework spawned) still reaches the log line. Outside a request (sweeper, webhook worker) there is
no dict and tagging costs one ``ContextVar.get``.

Only allow-listed log fields are ever written here (``service.logs.ALLOWED_FIELDS``): ids, kinds
and outcomes, never query strings, bodies or tokens.
"""

from __future__ import annotations

from contextvars import ContextVar, Token

_fields: ContextVar[dict[str, str] | None] = ContextVar("elicitd_request_fields", default=None)


def open_request() -> tuple[dict[str, str], Token[dict[str, str] | None]]:
    fields: dict[str, str] = {}
    return fields, _fields.set(fields)


def close_request(token: Token[dict[str, str] | None]) -> None:
    _fields.reset(token)


def tag(**values: str | None) -> None:
    """Record what the current request concerns (no-op outside a request; ``None`` values skipped)."""
    fields = _fields.get()
    if fields is None:
        return
    for key, value in values.items():
        if value is not None:
            fields[key] = value
