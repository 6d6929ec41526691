"""Structured JSON logs, redacted by construction.

Only fields on an allow-list ever reach a log line: a secret cannot leak through a stray
``extra=`` because unknown keys are dropped, and messages are constant strings (values go in
fields). Exception *types* are logged, never their text, which may hold provider responses.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

from service.settings import Settings

ALLOWED_FIELDS = frozenset({
    "flow_id", "kind", "outcome", "server_client", "provider", "path", "method", "status", "duration_ms",
    "error_type", "code", "event", "count", "connection_id", "attempt", "delivery_id", "admin_token_id",
    "route", "role", "issuer",
})

_STANDARD = frozenset(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key in ALLOWED_FIELDS and key not in _STANDARD:
                line[key] = value if isinstance(value, int | float | bool) or value is None else str(value)
        if record.exc_info and record.exc_info[0] is not None:
            line["error_type"] = record.exc_info[0].__name__
        return json.dumps(line, separators=(",", ":"))


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
    # Libraries log request URLs and bodies at debug/info; those may carry codes or tokens.
    for noisy in ("httpx", "httpcore", "authlib", "uvicorn.access", "stripe", "asyncio"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
