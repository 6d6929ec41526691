"""The JSON log line: same shape as before it was made cheaper, and still allow-listed."""

from __future__ import annotations

import io
import json
import logging
import re
from datetime import UTC, datetime
from types import SimpleNamespace

from service.logs import JsonFormatter, _direct_handler, configure_logging, log_fields


def _record(created: float, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("elicitd.requests", logging.INFO, __file__, 1, "request", (), None)
    record.created = created
    record.msecs = int((created - int(created)) * 1000) + 0.0
    record.__dict__.update(extra)
    return record


def test_line_holds_allowed_fields_and_an_isoformat_timestamp() -> None:
    formatter = JsonFormatter()
    for created in (1_780_000_000.0, 1_780_000_000.999, 1_780_000_001.5, 1_780_086_399.042):
        record = _record(
            created,
            method="GET",
            route="/v1/flows/{flow_id:str}",
            status=200,
            duration_ms=1.25,
            access_token="planted-secret",
            flow_ref=object(),
        )
        line = formatter.format(record)
        assert "planted-secret" not in line
        assert json.loads(line) == {
            "ts": datetime.fromtimestamp(created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": "info",
            "logger": "elicitd.requests",
            "msg": "request",
            "method": "GET",
            "route": "/v1/flows/{flow_id:str}",
            "status": 200,
            "duration_ms": 1.25,
        }


def test_other_values_are_written_as_text() -> None:
    line = json.loads(JsonFormatter().format(_record(1_780_000_000.25, path=b"/f", count=None, outcome="déjà")))
    assert line["path"] == "b'/f'"
    assert line["count"] is None
    assert line["outcome"] == "déjà"


def _configured(stream: io.StringIO, *, json_lines: bool = True) -> None:
    settings = SimpleNamespace(
        log_json=json_lines, log_level="INFO", database_url="postgresql://elicitd@db.internal:5432/elicitd"
    )
    configure_logging(settings, stream=stream)  # type: ignore[arg-type]


REQUEST_FIELDS: dict[str, object] = {
    "flow_id": "elicitd_fl_0190",
    "outcome": "completed",
    "method": "GET",
    "route": "/v1/flows/{flow_id:str}",
    "status": 200,
    "duration_ms": 0.31,
    "access_token": "planted-secret",
    "count": None,
    "path": b"/f",
}


def _without_ts(line: str) -> tuple[str, dict[str, object]]:
    data = json.loads(line)
    return data.pop("ts"), data


def test_the_direct_request_line_is_the_line_logging_writes() -> None:
    """``log_fields`` skips ``logging`` when only the installed JSON handler would get the record:
    same keys in the same order, same values, same timestamp format."""
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    try:
        stream = io.StringIO()
        _configured(stream)
        logger = logging.getLogger("elicitd.requests")
        assert _direct_handler(logger, logging.INFO) is root.handlers[0]
        logger.info("request", extra=REQUEST_FIELDS)
        log_fields(logger, logging.INFO, "request", REQUEST_FIELDS)
        log_fields(logger, logging.DEBUG, "request", REQUEST_FIELDS)  # below the level: nothing
        through_logging, direct = stream.getvalue().splitlines()
        assert "planted-secret" not in direct
        ts_logging, rest_logging = _without_ts(through_logging)
        ts_direct, rest_direct = _without_ts(direct)
        assert list(rest_direct.items()) == list(rest_logging.items())
        assert rest_direct["path"] == "b'/f'" and rest_direct["count"] is None
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", str(ts_direct))
        assert ts_direct[:16] == ts_logging[:16]
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])


class _Seen(logging.Handler):
    """Keeps the records it sees, as a handler (``emit``) or as a logger's filter (which lets them through)."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.filter(record)

    def filter(self, record: logging.LogRecord) -> bool:
        if record not in self.records:  # a handler filters, then emits, the same record
            self.records.append(record)
        return True


def test_the_request_line_goes_through_logging_when_anything_else_listens() -> None:
    """A capturing handler, a filter, plain output: the record is made and handled as usual."""
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    logger = logging.getLogger("elicitd.requests")
    try:
        for setup in ("capture", "filter", "plain"):
            stream = io.StringIO()
            _configured(stream, json_lines=setup != "plain")
            capture = _Seen()
            records = capture.records
            if setup == "capture":
                logger.addHandler(capture)
            elif setup == "filter":
                logger.addFilter(capture)
            try:
                assert _direct_handler(logger, logging.INFO) is None
                log_fields(logger, logging.INFO, "request", REQUEST_FIELDS)
            finally:
                logger.removeHandler(capture)
                logger.removeFilter(capture)
            if setup != "plain":
                assert [r.getMessage() for r in records] == ["request"]
                assert records[0].__dict__["route"] == "/v1/flows/{flow_id:str}"
            line = stream.getvalue()
            assert line.count("\n") == 1 and "/v1/flows/{flow_id:str}" in line and "planted-secret" not in line
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
