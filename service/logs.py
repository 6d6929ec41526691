"""Structured JSON logs, redacted by construction.

Only fields on an allow-list ever reach a log line: a secret cannot leak through a stray
``extra=`` because unknown keys are dropped, and messages are constant strings (values go in
fields). Exception *types* are logged, never their text, which may hold provider responses.

Third-party loggers (httpx, authlib, stripe, uvicorn, …) write free text we do not control: a
warning can quote a callback URL with ``code`` and ``state`` in its query string, or an
``Authorization`` header. Their messages pass through ``redact_foreign``: every query string and
fragment, every ``Bearer`` credential and every ``name=value`` / ``"name": value`` pair whose name
is sensitive is replaced before the line is written.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time

import msgspec

from service.settings import Settings

ALLOWED_FIELDS = frozenset(
    {
        "flow_id",
        "kind",
        "outcome",
        "server_client",
        "provider",
        "path",
        "method",
        "status",
        "duration_ms",
        "error_type",
        "code",
        "event",
        "count",
        "connection_id",
        "attempt",
        "delivery_id",
        "admin_token_id",
        "route",
        "role",
        "issuer",
    }
)

_STANDARD = frozenset(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}


_encode = msgspec.json.Encoder().encode

REDACTED = "[redacted]"
# A query string or fragment glued to a URL or path: ``…/cb?code=x&state=y`` or ``…/cb#access_token=x``.
_QUERY = re.compile(r"(?<=[^\s\"'<>(\[{,;=])[?#][^\s\"'<>]+")
_BEARER = re.compile(r"\b(Bearer|Basic|Token)\s+[^\s\"',;]+", re.IGNORECASE)
# ``code=…``, ``client_secret: …``, ``"refresh_token": "…"``, ``x-api-key=…`` (any name ending so).
_SECRET_PAIR = re.compile(
    r"\b((?:[\w-]*[_-])?(?:code|state|token|secret|password|key))(\"?\s*[=:]\s*\"?)[^\s\"'&,;})\]]+", re.IGNORECASE
)


def is_ours(name: str) -> bool:
    return name == "elicitd" or name.startswith("elicitd.")


def redact_foreign(message: str) -> str:
    """Strip what may be a credential from free text written by code we do not control."""
    message = _QUERY.sub("?" + REDACTED, message)
    message = _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", message)
    return _SECRET_PAIR.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", message)


class JsonFormatter(logging.Formatter):
    """One compact JSON object per record.

    Every request writes a line, so this is on the hot path: the timestamp's seconds part is
    formatted once per second (``2026-01-02T03:04:05.678+00:00``, as ``isoformat`` writes it) and
    the line is encoded by msgspec rather than ``json.dumps`` (which builds an encoder per call).
    """

    _second = -1
    _second_text = ""

    def _timestamp(self, record: logging.LogRecord) -> str:
        second = int(record.created)
        if second != self._second:
            self._second_text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._second = second
        return f"{self._second_text}.{int(record.msecs):03d}+00:00"

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": self._timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage() if is_ours(record.name) else redact_foreign(record.getMessage()),
        }
        for key, value in vars(record).items():
            if key in ALLOWED_FIELDS and key not in _STANDARD:
                line[key] = value if isinstance(value, int | float | bool) or value is None else str(value)
        if record.exc_info and record.exc_info[0] is not None:
            line["error_type"] = record.exc_info[0].__name__
        return _encode(line).decode()


class PlainFormatter(JsonFormatter):
    def format(self, record: logging.LogRecord) -> str:
        data = json.loads(super().format(record))
        head = f"{data.pop('ts')} {data.pop('level'):7} {data.pop('logger')}: {data.pop('msg')}"
        return head + "".join(f" {k}={v}" for k, v in data.items())


def configure_logging(settings: Settings) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if settings.log_json else PlainFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(settings.log_level)
    # No line carries a thread or process name: skip collecting them for every record.
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    # Libraries log request URLs and bodies at debug/info; those may carry codes or tokens.
    for noisy in ("httpx", "httpcore", "authlib", "uvicorn.access", "stripe", "asyncio"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
