"""A broken ``ELICITD_CONFIG_FILE`` stops ``elicitd serve`` with one line and exit 3, as
docs/operating.md promises (and ``elicitd dev`` does): an unset variable names the file and the
entry; a syntax error names the line and the column."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from service.config_file import load_config_file
from service.errors import ConfigurationError
from service.settings import KeyRing, Settings
from tests.support.apps import free_port

PROVIDER_NEEDING_A_SECRET = """\
[[providers]]
name = "files"
catalog = "oauth2"
issuer = "http://127.0.0.1:9100"
client_id = "elicitd-files"
client_secret_env = "ELICITD_TEST_NEVER_SET_SECRET"
"""


def serve(settings: Settings, config: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELICITD_")}
    env.update(
        {
            "ELICITD_DATABASE_URL": settings.database_url,
            "ELICITD_REDIS_URL": settings.redis_url or "",
            "ELICITD_PUBLIC_URL": "http://127.0.0.1:1",
            "ELICITD_KEYS": KeyRing.generate_entry("c1"),
            "ELICITD_CONFIG_FILE": str(config),
        }
    )
    return subprocess.run(
        [sys.executable, "-m", "service.cli", "serve", "--port", str(free_port())],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("name", "text", "line"),
    [
        (
            "unset.toml",
            PROVIDER_NEEDING_A_SECRET,
            "provider 'files': environment variable ELICITD_TEST_NEVER_SET_SECRET is not set",
        ),
        (
            "syntax.toml",
            '[[providers]\nname = "x"\n',
            "is not valid TOML at line 1, column 12: Expected ']]' at the end of an array declaration",
        ),
    ],
    ids=["unset-variable", "toml-syntax"],
)
def test_serve_stops_with_one_line_and_exit_3(
    make_settings: Callable[..., Settings], tmp_path: Path, name: str, text: str, line: str
) -> None:
    config = tmp_path / name
    config.write_text(text)
    started = serve(make_settings(), config)
    assert started.returncode == 3, started.stderr
    assert "Traceback" not in started.stderr
    last = started.stderr.splitlines()[-1]
    assert last.startswith("elicitd: ELICITD_CONFIG_FILE") and last.endswith(line), started.stderr
    assert str(config) in last
    assert "Application startup" not in started.stderr  # stopped before the server started


@pytest.mark.parametrize(
    ("name", "text", "where"),
    [
        (
            "a.toml",
            'x = "an unfinished\nsecret = 1\n',
            "is not valid TOML at line 1, column 19: Illegal character '\\n'",
        ),
        ("b.toml", "x = [1,\n", "is not valid TOML at the end of the file: Invalid value"),
        (
            "c.yaml",
            "providers:\n  - name: x\n   bad: y\n",
            "is not valid YAML at line 3, column 4: expected <block end>, but found '<block mapping start>'",
        ),
        ("d.yml", 'providers: "x\n', "is not valid YAML at line 2, column 1: found unexpected end of stream"),
    ],
)
def test_syntax_errors_name_the_line_and_column_not_the_values(
    tmp_path: Path, name: str, text: str, where: str
) -> None:
    config = tmp_path / name
    config.write_text(text)
    with pytest.raises(ConfigurationError) as refused:
        load_config_file(config)
    assert refused.value.detail == f"ELICITD_CONFIG_FILE: {config} {where}"
    assert "unfinished" not in refused.value.detail
