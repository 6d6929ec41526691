"""An unhandled exception: one log record with its stack and no secret, a generic 500 to the caller."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from litestar import Litestar, get
from litestar.testing import AsyncTestClient
from sqlalchemy.exc import ProgrammingError

from service.logs import DATABASE_LOOPS, JsonFormatter, PlainFormatter, configure_logging, redacted_traceback
from service.problems import EXCEPTION_HANDLERS
from service.settings import KeyRing, Settings
from tests.support.apps import LogCapture, running_app

# Planted in exception messages: bare (no pattern could recognise it) and as name=value pairs.
BARE = "MARK-BARE-9f3e2"
PAIR = "MARK-PAIR-71ac"
CAUSE = "MARK-CAUSE-0b8d"
SQL_PARAM = "MARK-SQLPARAM-c4d1"
MARKERS = (BARE, PAIR, CAUSE, SQL_PARAM)

GENERIC_500 = {
    "type": "https://elicitd.dev/problems/internal_error",
    "title": "Internal error",
    "status": 500,
    "code": "internal_error",
    "detail": "Something went wrong on our side.",
}


class PgError(Exception):
    """Stands in for the driver's exception, as asyncpg's carry a ``sqlstate``."""

    sqlstate = "42P01"


def load_secret(name: str) -> str:
    try:
        return {"other": "x"}[name]
    except KeyError as exc:
        raise LookupError(f"no secret {CAUSE}") from exc


@get("/v1/boom", sync_to_thread=False)
def boom() -> None:
    try:
        load_secret("stripe")
    except LookupError as exc:
        raise RuntimeError(f"token={PAIR} while handling {BARE}") from exc


@get("/v1/boom-sql", sync_to_thread=False)
def boom_sql() -> None:
    raise ProgrammingError("SELECT * FROM missing WHERE secret = $1", (SQL_PARAM,), PgError(f"no table {SQL_PARAM}"))


@get("/v1/fine", sync_to_thread=False)
def fine() -> dict[str, str]:
    return {"ok": "yes"}


def the_app() -> Litestar:
    """The project's error handling, as ``create_app`` wires it: its exception handlers, no
    Litestar logging (``logging_config=None``: our handlers log), not in debug mode."""
    return Litestar(
        route_handlers=[boom, boom_sql, fine], exception_handlers=EXCEPTION_HANDLERS, debug=False, logging_config=None
    )


@pytest.fixture
def log_stream() -> Iterator[io.StringIO]:
    """The project's logging configuration, writing to a buffer instead of standard error."""
    stream = io.StringIO()
    settings = Settings(
        database_url="postgresql+asyncpg://u@h/db",
        redis_url=None,
        public_url="https://elicitd.example.com",
        keys=KeyRing.parse(KeyRing.generate_entry("k1"), name="keys"),
    )
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    configure_logging(settings, stream=stream)
    try:
        yield stream
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)


def records(stream: io.StringIO) -> list[dict[str, Any]]:
    """The lines of this test's requests. An app another test started in this process (the admin
    tests' session-wide instance) keeps its background loops running, and their lines — a webhook
    challenge retried, a sweep — land in the same root handler; they are not this test's."""
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    return [line for line in lines if line["logger"] not in DATABASE_LOOPS]


async def test_a_crash_is_logged_once_with_its_stack_and_answered_generically(log_stream: io.StringIO) -> None:
    async with AsyncTestClient(app=the_app()) as client:
        response = await client.get("/v1/boom")
    assert response.status_code == 500
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json() == GENERIC_500

    lines = records(log_stream)
    assert len(lines) == 1
    line = lines[0]
    stack = line.pop("traceback")
    line.pop("ts")
    assert line == {
        "level": "error",
        "logger": "elicitd.errors",
        "msg": "unhandled error",
        "code": "internal_error",
        "path": "/v1/boom",
        "error_type": "RuntimeError",
    }
    # The whole chain, root cause first, each exception by its type only, with every frame.
    blocks = stack.split("\n\nThe above exception was the direct cause of the following exception:\n\n")
    assert [block.splitlines()[-1] for block in blocks] == [
        "KeyError: [redacted]",
        "LookupError: [redacted]",
        "RuntimeError: [redacted]",
    ]
    assert all(block.startswith("Traceback (most recent call last):\n") for block in blocks)
    assert ", in load_secret\n" in blocks[0]
    assert ", in boom\n" in blocks[1]
    assert ", in load_secret\n" in blocks[1]
    assert ", in boom\n" in blocks[2]
    assert 'test_crash_logging.py", line' in blocks[2]
    for marker in MARKERS:
        assert marker not in log_stream.getvalue()
        assert marker not in response.text


async def test_the_served_app_logs_a_crash_once_too(make_settings: Callable[..., Settings]) -> None:
    """The same through ``create_app`` and a real server: the request line, one stack, no secret."""
    capture = LogCapture()
    root = logging.getLogger()
    level = root.level
    root.addHandler(capture)
    root.setLevel(logging.INFO)
    try:
        async with running_app(make_settings(background_tasks=False), routes=[boom]) as app, app.http() as http:
            response = await http.get("/v1/boom")
    finally:
        root.removeHandler(capture)
        root.setLevel(level)
    assert response.status_code == 500
    assert response.json() == GENERIC_500
    lines = [json.loads(line) for line in capture.lines]
    crashes = [line for line in lines if "traceback" in line]
    assert [(line["logger"], line["msg"], line["path"]) for line in crashes] == [
        ("elicitd.errors", "unhandled error", "/v1/boom")
    ]
    assert crashes[0]["traceback"].endswith("RuntimeError: [redacted]")
    requests = [line for line in lines if line["logger"] == "elicitd.requests" and line.get("route") == "/v1/boom"]
    assert [line["status"] for line in requests] == [500]
    assert [line for line in lines if line["level"] == "error"] == crashes
    for marker in MARKERS:
        assert not any(marker in line for line in capture.lines)
        assert marker not in response.text


async def test_a_database_crash_logs_its_sqlstate_but_not_its_sql_parameters(log_stream: io.StringIO) -> None:
    async with AsyncTestClient(app=the_app()) as client:
        response = await client.get("/v1/boom-sql")
    assert response.status_code == 500
    assert response.json() == GENERIC_500
    (line,) = records(log_stream)
    assert line["msg"] == "unhandled error"
    assert line["error_type"] == "ProgrammingError"
    assert line["traceback"].endswith("sqlalchemy.exc.ProgrammingError: [redacted] (sqlstate 42P01)")
    for marker in MARKERS:
        assert marker not in log_stream.getvalue()


async def test_a_request_that_does_not_crash_logs_nothing_here(log_stream: io.StringIO) -> None:
    async with AsyncTestClient(app=the_app()) as client:
        assert (await client.get("/v1/fine")).json() == {"ok": "yes"}
    assert records(log_stream) == []


def raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


def test_context_chains_and_groups_keep_their_shape_not_their_text() -> None:
    try:
        try:
            raise ConnectionRefusedError(111, f"connect failed {BARE}")
        except OSError:
            raise ExceptionGroup("several", [ValueError(PAIR), TypeError(CAUSE)]) from None
    except ExceptionGroup as group:
        suppressed = redacted_traceback(group)
    assert "ConnectionRefusedError" not in suppressed  # ``from None`` hides the context, as Python does
    assert "ExceptionGroup: [redacted]" in suppressed
    assert "| ValueError: [redacted]" in suppressed
    assert "| TypeError: [redacted]" in suppressed

    try:
        try:
            raise ConnectionRefusedError(111, f"connect failed {BARE}")
        except OSError:
            raise RuntimeError(PAIR)  # noqa: B904 - an implicit context is what this checks
    except RuntimeError as exc:
        chained = redacted_traceback(exc)
    assert "ConnectionRefusedError: [redacted] (errno 111)" in chained
    assert "During handling of the above exception, another exception occurred:" in chained
    for text in (suppressed, chained):
        for marker in MARKERS:
            assert marker not in text


def test_the_plain_format_puts_the_stack_under_the_line() -> None:
    exc = raised(RuntimeError(f"password={PAIR}"))
    record = logging.LogRecord("elicitd.errors", logging.ERROR, __file__, 1, "unhandled error", (), None)
    record.exc_info = (type(exc), exc, exc.__traceback__)
    head, _, stack = PlainFormatter().format(record).partition("\n")
    assert head.endswith("elicitd.errors: unhandled error error_type=RuntimeError")
    assert stack.startswith("Traceback (most recent call last):\n")
    assert stack.endswith("RuntimeError: [redacted]")
    assert PAIR not in JsonFormatter().format(record)


def test_a_library_record_with_exc_info_is_redacted_the_same_way() -> None:
    exc = raised(ValueError(f"https://cb.example/?code={PAIR}"))
    record = logging.LogRecord("uvicorn.error", logging.ERROR, __file__, 1, "Exception in ASGI app %s", (BARE,), None)
    record.exc_info = (type(exc), exc, exc.__traceback__)
    line = json.loads(JsonFormatter().format(record))
    assert line["traceback"].endswith("ValueError: [redacted]")
    assert PAIR not in json.dumps(line)
