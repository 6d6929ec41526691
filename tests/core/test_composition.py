"""The composition root is the only wiring: no handler reads ``app.state``, and the commands
build their services without a web app."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from service.settings import KeyRing, Settings

SERVICE = Path(__file__).resolve().parents[2] / "service"

# Runs one ``elicitd`` command in this interpreter, then reports whether the module that builds
# the web app was ever imported: ``create_app`` lives only in ``service.app``.
_PROBE = """
import json, sys
import service.cli
code = 0
try:
    service.cli.main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code or 0
print(json.dumps({"web_app_module_loaded": "service.app" in sys.modules, "code": code}), file=sys.stderr)
"""


def _probe(settings: Settings, *args: str) -> tuple[dict[str, object], str, str]:
    env = {
        **os.environ,
        "ELICITD_DATABASE_URL": settings.database_url,
        "ELICITD_REDIS_URL": settings.redis_url or "",
        "ELICITD_PUBLIC_URL": "http://127.0.0.1:1",
        "ELICITD_KEYS": KeyRing.generate_entry("c1"),
    }
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    *messages, last = result.stderr.strip().splitlines()
    return json.loads(last), result.stdout, "\n".join(messages)


def test_no_module_reads_app_state() -> None:
    offenders = [
        f"{path.relative_to(SERVICE)}:{number}"
        for path in SERVICE.rglob("*.py")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\bapp\.state\b|\.state\.\w+\(", line) and "``app.state``" not in line
    ]
    assert offenders == []


def test_commands_run_without_a_web_app(make_settings: Callable[..., Settings]) -> None:
    settings = make_settings()
    for args in (
        ("admin", "flows", "list", "--json"),
        ("admin", "clients", "list", "--json"),
        ("servers", "create", "composition-probe", "--json"),
    ):
        report, stdout, _ = _probe(settings, *args)
        assert report == {"web_app_module_loaded": False, "code": 0}, (args, report, stdout)
        assert json.loads(stdout) is not None
    # A command whose service is not configured fails with its one line, still without a web app.
    report, _, messages = _probe(settings, "payments", "reconcile", "--json")
    assert report == {"web_app_module_loaded": False, "code": 1}
    assert messages == "elicitd: Payments are not configured on this elicitd."
