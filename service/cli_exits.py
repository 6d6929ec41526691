"""What an ``elicitd`` command that fails prints and exits with: one line on stderr, one code.

A person reads the line; a script or a process manager reads the code. Expected failures never
print a traceback (a 200-line stack for "PostgreSQL is not running" hides the one fact that
matters); anything else is a bug and keeps its traceback.

====  ==========================================================================================
code  meaning
====  ==========================================================================================
0     done
1     refused: not found, conflict, invalid input (the line says why)
2     usage: unknown command or bad arguments
3     configuration: a setting is missing or invalid, or a needed extra is not installed
4     PostgreSQL cannot be reached (refused, unknown host, wrong password, no such database)
5     in use: the port is taken, or another ``elicitd dev`` holds the data directory
6     the audit log's hash chain is broken (``elicitd admin audit verify`` names the first link)
130   interrupted (SIGINT, Ctrl-C)
143   terminated (SIGTERM)
====  ==========================================================================================
"""

from __future__ import annotations

import enum
import socket
from collections.abc import Iterator
from urllib.parse import urlsplit

from service.errors import ConfigurationError, ElicitdError


class ExitCode(enum.IntEnum):
    OK = 0
    REFUSED = 1
    USAGE = 2
    CONFIGURATION = 3
    DATABASE_UNREACHABLE = 4
    IN_USE = 5
    AUDIT_BROKEN = 6
    INTERRUPTED = 130
    TERMINATED = 143


class CommandFailed(Exception):
    """An expected failure of a command: ``message`` is the whole line shown, ``code`` the exit code."""

    def __init__(self, message: str, code: ExitCode) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class AddressInUse(CommandFailed):
    def __init__(self, message: str) -> None:
        super().__init__(message, ExitCode.IN_USE)


def ensure_port_free(host: str, port: int) -> None:
    """Fail at once, before anything starts, when ``host:port`` cannot be bound.

    uvicorn finds out only after the app and its backends started (and after our banner said
    "serving"); binding once here, with the same ``SO_REUSEADDR`` uvicorn uses, gives one clear line
    instead. A race with another process binding in between still fails in uvicorn, later.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise AddressInUse(
                f"cannot listen on {host}:{port}: {exc.strerror or exc} (is another elicitd running? stop it, "
                "or pass --port)"
            ) from None


# asyncpg's connect-time refusals, by class name (asyncpg is a server-only dependency).
_CONNECT_REFUSALS = {
    "InvalidPasswordError": "the password was refused",
    "InvalidAuthorizationSpecificationError": "the role was refused",
    "InvalidCatalogNameError": "the database does not exist",
    "CannotConnectNowError": "the server is starting up or shutting down",
    "TooManyConnectionsError": "the server has too many connections",
    "ClientCannotConnectError": "the server refused the connection",
}


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception, what it wraps (SQLAlchemy's ``.orig``, causes, contexts) and, for exception
    groups, their members."""
    seen: set[int] = set()
    pending = [exc]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
        for linked in (getattr(current, "orig", None), current.__cause__, current.__context__):
            if isinstance(linked, BaseException):
                pending.append(linked)


def where(database_url: str | None) -> str:
    """``host:port/database`` of a database URL, without its user or password."""
    if not database_url:
        return "PostgreSQL"
    parts = urlsplit(database_url)
    host = parts.hostname or ""
    if not host and "host=" in parts.query:  # a Unix socket: postgresql://user@/db?host=/run/...
        host = parts.query.split("host=", 1)[1].split("&", 1)[0]
    port = f":{parts.port}" if parts.port else ""
    return f"PostgreSQL at {host}{port}{parts.path or ''}"


def classify(exc: BaseException, *, database_url: str | None = None) -> CommandFailed | None:  # noqa: PLR0911 - one return per kind of failure
    """The one-line failure ``exc`` stands for, or None when it is unexpected (a bug)."""
    chain = list(_chain(exc))
    for item in chain:
        if isinstance(item, CommandFailed):
            return item
    for item in chain:
        if isinstance(item, ConfigurationError):
            return CommandFailed(item.detail, ExitCode.CONFIGURATION)
    for item in chain:
        name = type(item).__name__
        if name in _CONNECT_REFUSALS:
            return CommandFailed(
                f"cannot use {where(database_url)}: {_CONNECT_REFUSALS[name]}", ExitCode.DATABASE_UNREACHABLE
            )
        if isinstance(item, socket.gaierror):
            return CommandFailed(f"cannot reach {where(database_url)}: unknown host", ExitCode.DATABASE_UNREACHABLE)
        if isinstance(item, ConnectionRefusedError | FileNotFoundError) and _from_connect(chain):
            return CommandFailed(
                f"cannot reach {where(database_url)}: connection refused (is PostgreSQL running?)",
                ExitCode.DATABASE_UNREACHABLE,
            )
        if isinstance(item, TimeoutError | OSError) and _from_connect(chain):
            reason = "timed out" if isinstance(item, TimeoutError) else (item.strerror or type(item).__name__)
            return CommandFailed(f"cannot reach {where(database_url)}: {reason}", ExitCode.DATABASE_UNREACHABLE)
    for item in chain:
        if isinstance(item, ElicitdError):
            return CommandFailed(item.detail, ExitCode.REFUSED)
    return None


def _from_connect(chain: list[BaseException]) -> bool:
    """Whether an OS-level error happened while opening a database connection (not, say, while
    reading a file): the traceback passes through asyncpg's or SQLAlchemy's connect code."""
    for item in chain:
        frame = item.__traceback__
        while frame is not None:
            module = frame.tb_frame.f_globals.get("__name__", "")
            if module.startswith(("asyncpg.connect", "asyncpg.connection", "sqlalchemy.")):
                return True
            frame = frame.tb_next
    return False
