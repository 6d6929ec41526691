"""Structured JSON logs, redacted by construction.

Only fields on an allow-list ever reach a log line: a secret cannot leak through a stray
``extra=`` because unknown keys are dropped, and messages are constant strings (values go in
fields). Exception *types* are logged, never their text, which may hold provider responses, SQL
parameters or tokens. A record logged with ``exc_info`` also carries a ``traceback``: every frame
(file, line, function, source line) of the exception and of each one chained to it, with each
exception shown as its type and ``[redacted]`` in place of its message.

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
import traceback
from collections.abc import Callable, Mapping
from typing import TextIO
from urllib.parse import urlsplit

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
        "dependency",
        "reason",
        "database",
        "seconds",
    }
)

_STANDARD = frozenset(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}


_encode = msgspec.json.Encoder().encode

REDACTED = "[redacted]"
# A query string or fragment glued to a URL or path: ``…/cb?code=x&state=y`` or ``…/cb#access_token=x``.
_QUERY = re.compile(r"(?<=[^\s\"'<>(\[{,;=])[?#][^\s\"'<>]+")
# The word after ``Bearer``/``Basic``/``Token`` is redacted when it looks like a credential, not a
# word: 6+ characters with a digit, one of ``-._~+/=`` or a lower-then-upper case change, or 20+ of
# anything (base64), up to a bracket (no token holds one). "(the token vault)." and "Token expired"
# are prose and stay as written.
_CREDENTIAL = (
    r"(?=[^\s\"',;()]{6})(?=[^\s\"',;()]*(?:[\d._~+/=-]|(?-i:[a-z][^\s\"',;()]*[A-Z]))|[^\s\"',;()]{20})[^\s\"',;()]+"
)
_BEARER = re.compile(rf"\b(Bearer|Basic|Token)\s+{_CREDENTIAL}", re.IGNORECASE)
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


_CAUSE = "\nThe above exception was the direct cause of the following exception:\n\n"
_CONTEXT = "\nDuring handling of the above exception, another exception occurred:\n\n"
_SQLSTATE = re.compile(r"^[0-9A-Z]{5}$")
_MAX_GROUP_DEPTH = 3


def _describe(exc: BaseException) -> str:
    """The exception's qualified type and the codes that say what happened without saying with
    which values: a SQLSTATE, an errno."""
    kind = type(exc)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    codes = []
    for source in (exc, getattr(exc, "orig", None)):  # SQLAlchemy wraps the driver's error in .orig
        sqlstate = getattr(source, "sqlstate", None) or getattr(source, "pgcode", None)
        if isinstance(sqlstate, str) and _SQLSTATE.match(sqlstate):
            codes.append(f"sqlstate {sqlstate}")
            break
    if isinstance(exc, OSError) and isinstance(exc.errno, int):
        codes.append(f"errno {exc.errno}")
    return f"{name}: {REDACTED}" + (f" ({', '.join(codes)})" if codes else "")


def _stack(exc: BaseException, depth: int) -> str:
    frames = traceback.StackSummary.extract(traceback.walk_tb(exc.__traceback__), capture_locals=False)
    text = "Traceback (most recent call last):\n" + "".join(frames.format()) + _describe(exc) + "\n"
    if isinstance(exc, BaseExceptionGroup) and depth < _MAX_GROUP_DEPTH:
        for index, inner in enumerate(exc.exceptions, 1):
            nested = redacted_traceback(inner, _depth=depth + 1)
            text += f"+---- {index} ----\n" + "".join(f"| {line}\n" for line in nested.splitlines())
    return text


def redacted_traceback(exc: BaseException, *, _depth: int = 0) -> str:
    """Like ``traceback.format_exception(exc)``, root cause first, but no exception's message.

    The frames' source lines are our code; they still pass through :func:`redact_foreign`, as
    every free text does, in case a line spells out a credential.
    """
    chain: list[tuple[BaseException, str]] = []  # each exception and how it led to the one before
    seen: set[int] = set()
    current: BaseException | None = exc
    how = ""
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append((current, how))
        if current.__cause__ is not None:
            current, how = current.__cause__, _CAUSE
        elif current.__context__ is not None and not current.__suppress_context__:
            current, how = current.__context__, _CONTEXT
        else:
            current = None
    text = "".join(_stack(item, _depth) + link for item, link in reversed(chain))
    return redact_foreign(text.rstrip("\n"))


class JsonFormatter(logging.Formatter):
    """One compact JSON object per record.

    Every request writes a line, so this is on the hot path: the timestamp's seconds part is
    formatted once per second (``2026-01-02T03:04:05.678+00:00``, as ``isoformat`` writes it) and
    the line is encoded by msgspec rather than ``json.dumps`` (which builds an encoder per call).
    """

    _second = -1
    _second_text = ""

    def _timestamp(self, record: logging.LogRecord) -> str:
        return self._stamp(record.created, int(record.msecs))

    def _stamp(self, created: float, msecs: int) -> str:
        second = int(created)
        if second != self._second:
            self._second_text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._second = second
        return f"{self._second_text}.{msecs:03d}+00:00"

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": self._timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage() if is_ours(record.name) else redact_foreign(record.getMessage()),
        }
        for key, value in vars(record).items():
            if key in ALLOWED_FIELDS and key not in _STANDARD:
                line[key] = _field(value)
        if record.exc_info and record.exc_info[0] is not None:
            line["error_type"] = record.exc_info[0].__name__
            if record.exc_info[1] is not None:
                line["traceback"] = redacted_traceback(record.exc_info[1])
        return _encode(line).decode()

    def fields_line(self, created: float, level: int, name: str, message: str, fields: Mapping[str, object]) -> str:
        """What ``format`` writes for a record of ``name`` at ``level`` with ``message`` (a constant
        of ours) and ``fields`` as its ``extra``, made without the record."""
        line: dict[str, object] = {
            "ts": self._stamp(created, int((created - int(created)) * 1000)),
            "level": logging.getLevelName(level).lower(),
            "logger": name,
            "msg": message,
        }
        for key, value in fields.items():
            if key in ALLOWED_FIELDS and key not in _STANDARD:
                line[key] = _field(value)
        return _encode(line).decode()


_SCALARS = (int, float, bool, type(None))  # a tuple: ``int | float | bool`` builds a union per call


def _field(value: object) -> object:
    return value if isinstance(value, _SCALARS) else str(value)


class LineHandler(logging.StreamHandler[TextIO]):
    """The handler ``configure_logging`` installs on the root logger; ``log_fields`` may write to it directly."""


def _direct_handler(logger: logging.Logger, level: int) -> LineHandler | None:
    """The installed handler, when it writes JSON, is the only place a record of ``logger`` would
    go, and nothing on the way would filter it; else None."""
    current: logging.Logger | None = logger
    while current is not None:
        if current.filters:
            return None
        if current.handlers:
            if current.parent is not None or len(current.handlers) != 1:
                return None
            handler = current.handlers[0]
            if type(handler) is not LineHandler or type(handler.formatter) is not JsonFormatter:
                return None
            return None if handler.filters or level < handler.level else handler
        if not current.propagate:
            return None
        current = current.parent
    return None


def log_fields(logger: logging.Logger, level: int, message: str, fields: Mapping[str, object]) -> None:
    """``logger.log(level, message, extra=fields)`` for the line written on every request, the same
    bytes at a fraction of the cost (no ``LogRecord``, no handler chain: ~3 µs instead of ~10).

    Only when the line would reach the JSON handler ``configure_logging`` installed and nothing
    else (no other handler, no filter, JSON output): otherwise, as in tests that capture records
    or with plain output, the record goes through ``logging`` as usual. ``message`` must be a
    constant of ours (it is written as is)."""
    if not logger.isEnabledFor(level):
        return
    handler = _direct_handler(logger, level)
    if handler is None:
        logger.log(level, message, extra=dict(fields))
        return
    formatter = handler.formatter
    assert isinstance(formatter, JsonFormatter)
    try:
        text = formatter.fields_line(time.time(), level, logger.name, message, fields) + handler.terminator
        with handler.lock:  # type: ignore[union-attr]
            handler.stream.write(text)
            handler.stream.flush()
    except Exception:  # as StreamHandler.emit: a failed write is reported, never raised
        handler.handleError(logger.makeRecord(logger.name, level, "(request)", 0, message, (), None))


class PlainFormatter(JsonFormatter):
    def format(self, record: logging.LogRecord) -> str:
        data = json.loads(super().format(record))
        head = f"{data.pop('ts')} {data.pop('level'):7} {data.pop('logger')}: {data.pop('msg')}"
        stack = data.pop("traceback", None)
        return head + "".join(f" {k}={v}" for k, v in data.items()) + (f"\n{stack}" if stack else "")


# The loops that read PostgreSQL on their own schedule and log a warning for each failed round:
# with the database down they add up to about one line a second, none saying where it is.
DATABASE_LOOPS = (
    "elicitd.sweeper",
    "elicitd.retention",
    "elicitd.webhooks",
    "elicitd.events",
    "elicitd.signals",
    "elicitd.connections.refresher",
    "elicitd.connections.probes",
)
# What a round fails with when PostgreSQL cannot be reached (asyncpg raises the socket's own errors).
_UNREACHABLE = frozenset(
    {
        "ConnectionRefusedError",
        "ConnectionResetError",
        "ConnectionDoesNotExistError",
        "CannotConnectNowError",
        "TimeoutError",
        "gaierror",
        "OSError",
    }
)


def database_label(database_url: str) -> str:
    """``host:port/database`` of a database URL, never its user or password."""
    parts = urlsplit(database_url)
    host = parts.hostname or ""
    if not host and "host=" in parts.query:  # a Unix socket: postgresql://user@/db?host=/run/...
        host = parts.query.split("host=", 1)[1].split("&", 1)[0]
    port = f":{parts.port}" if parts.port else ""
    return f"{host}{port}{parts.path or ''}"


class DatabaseOutage(logging.Filter):
    """While PostgreSQL is unreachable: one warning naming it, then one summary every
    ``summary_seconds`` (how long, how many failed rounds), instead of a line per round.

    One instance sits on every loop's logger, so the count covers them all. A failure after
    twice the summary interval without any starts a new outage with a new first warning.
    """

    def __init__(self, database: str, *, summary_seconds: float = 60.0, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.database = database
        self.summary_seconds = summary_seconds
        self.clock = clock
        self._since = self._last = self._reported = -float("inf")
        self._held = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING or getattr(record, "error_type", None) not in _UNREACHABLE:
            return True
        now = self.clock()
        if now - self._last > 2 * self.summary_seconds:  # the first failure of an outage
            self._since = self._reported = now
            self._held = 0
            record.msg = "database unreachable: background work retries, a summary follows every %d s"
            record.args = (int(self.summary_seconds),)
        elif now - self._reported < self.summary_seconds:
            self._last = now
            self._held += 1
            return False
        else:
            record.msg, record.args = "database still unreachable", ()
            record.count = self._held + 1
            record.seconds = int(now - self._since)
            self._reported, self._held = now, 0
        self._last = now
        record.database = self.database
        return True


def configure_logging(settings: Settings, *, stream: TextIO | None = None) -> None:
    """Send every record to ``stream`` (standard error by default) through our formatter."""
    handler = LineHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(JsonFormatter() if settings.log_json else PlainFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(settings.log_level)
    # No line carries a thread or process name, nor the caller's file and line: skip collecting
    # them for every record (finding the caller walks the stack: a few µs per request line).
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logging._srcfile = None
    outage = DatabaseOutage(database_label(settings.database_url))
    for name in DATABASE_LOOPS:
        loop_logger = logging.getLogger(name)
        loop_logger.filters[:] = [f for f in loop_logger.filters if not isinstance(f, DatabaseOutage)] + [outage]
    # Libraries log request URLs and bodies at debug/info; those may carry codes or tokens.
    for noisy in ("httpx", "httpcore", "authlib", "uvicorn.access", "stripe", "asyncio"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
