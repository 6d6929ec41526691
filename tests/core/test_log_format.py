"""The JSON log line: same shape as before it was made cheaper, and still allow-listed."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

from service.logs import JsonFormatter


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
