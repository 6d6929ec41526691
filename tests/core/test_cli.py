"""The ``elicitd`` command against the test database."""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

import pytest
from sqlalchemy import text

from service.cli import build_parser
from service.settings import KeyRing, Settings
from tests.support import backends
from tests.support.apps import RunningApp, ServerClientHandle, free_port


def _run(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "ELICITD_DATABASE_URL": settings.database_url,
        "ELICITD_PUBLIC_URL": "http://127.0.0.1:1",
        "ELICITD_KEYS": KeyRing.generate_entry("c1"),
    }
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )


async def test_servers_create_prints_key_once_and_stores_hash(
    make_settings: Callable[..., Settings], elicitd: RunningApp
) -> None:
    settings = make_settings()
    result = _run(
        settings, "servers", "create", "cli-made", "--display-name", "CLI Made", "--provider", "github", "--json"
    )
    assert result.returncode == 0, result.stderr
    created = json.loads(result.stdout)
    assert created["name"] == "cli-made"
    assert created["api_key"].startswith("elk_")
    async with elicitd.state.sessions() as session:
        stored = (
            await session.execute(
                text(
                    "SELECT k.key_hash, c.allowed_providers, c.display_name FROM server_client_keys k "
                    "JOIN server_clients c ON c.id = k.server_client_id WHERE c.name = 'cli-made'"
                )
            )
        ).one()
    assert created["api_key"].encode() not in bytes(stored[0])
    assert list(stored[1]) == ["github"]
    assert stored[2] == "CLI Made"
    # The key works against the API.
    async with elicitd.http(created["api_key"]) as http:
        response = await http.get("/v1/flows/fl_" + "0" * 32)
    assert response.status_code == 404
    duplicate = _run(settings, "servers", "create", "cli-made")
    assert duplicate.returncode == 1
    assert "already exists" in duplicate.stderr
    bad = _run(settings, "servers", "create", "Bad Name!")
    assert bad.returncode == 1


def test_keys_generate_is_a_valid_ring_entry() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "service.cli", "keys", "generate", "--key-id", "k9"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    ring = KeyRing.parse(result.stdout.strip(), name="generated")
    assert ring.current[0] == "k9"


def test_missing_configuration_is_one_line_and_exit_3() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELICITD_")}
    result = subprocess.run(
        [sys.executable, "-m", "service.cli", "servers", "create", "x"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=False,
    )
    assert result.returncode == 3
    assert result.stderr.splitlines() == [
        "elicitd: ELICITD_DATABASE_URL is required (or run `elicitd dev` for embedded ones)"
    ]


def _bare(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ELICITD_")}
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args],
        capture_output=True,
        text=True,
        env={**clean, **(env or {})},
        timeout=60,
        check=False,
    )


def test_version() -> None:
    result = _bare("--version")
    assert (result.returncode, result.stdout.strip()) == (0, f"elicitd {version('elicitd')}")


@pytest.mark.parametrize(
    "command",
    [["migrate"], ["servers", "create", "x"], ["admin", "flows", "list"], ["serve", "--migrate", "--port", "0"]],
    ids=["migrate", "servers-create", "admin-flows-list", "serve-migrate"],
)
def test_unreachable_database_is_one_line_and_exit_4(command: list[str]) -> None:
    port = free_port()  # nothing listens there
    env = {
        "ELICITD_DATABASE_URL": f"postgresql://postgres:hunter2@127.0.0.1:{port}/elicitd",
        "ELICITD_PUBLIC_URL": "http://127.0.0.1:1",
        "ELICITD_KEYS": KeyRing.generate_entry("c1"),
    }
    result = _bare(*command, env=env)
    assert result.returncode == 4, result.stderr
    message = (
        f"elicitd: cannot reach PostgreSQL at 127.0.0.1:{port}/elicitd: connection refused (is PostgreSQL running?)"
    )
    if command[0] == "serve":  # a server logs its start (JSON lines) before it migrates
        assert result.stderr.splitlines()[-1] == message and "Traceback" not in result.stderr
    else:
        assert result.stderr.splitlines() == [message]
    assert "hunter2" not in result.stderr


def test_a_database_that_does_not_exist_is_exit_4(backend: backends.Backends) -> None:
    url = backends._with_database(backend.server_url, "elicitd_no_such_database")
    result = _bare("migrate", env={"ELICITD_DATABASE_URL": url})
    assert result.returncode == 4, result.stderr
    assert result.stderr.splitlines()[-1].endswith("/elicitd_no_such_database: the database does not exist")
    assert len(result.stderr.splitlines()) == 1


def test_a_busy_port_is_one_line_and_exit_5(make_settings: Callable[..., Settings]) -> None:
    settings = make_settings()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _run(settings, "serve", "--host", "127.0.0.1", "--port", str(port), "--migrate")
    assert result.returncode == 5
    assert result.stderr.splitlines() == [
        f"elicitd: cannot listen on 127.0.0.1:{port}: Address already in use (is another elicitd running? stop it, "
        "or pass --port)"
    ]


def test_not_found_exits_1(make_settings: Callable[..., Settings], elicitd: RunningApp) -> None:
    result = _run(make_settings(), "admin", "flows", "show", "fl_" + "0" * 32)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.splitlines() == ["elicitd: No flow with this id."]


def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found += _leaves(child, (*path, name))
    return found or [(path, parser)]


def test_every_command_takes_json() -> None:
    # `serve`, `dev`, `worker` and `admin mcp` run until stopped and print no result; `admin audit
    # export` prints JSON lines whatever is asked (its only format).
    servers = [("serve",), ("dev",), ("worker",), ("admin", "mcp"), ("admin", "audit", "export")]
    leaves = [
        (path, parser)
        for path, parser in _leaves(build_parser())
        if not any(tuple(path[: len(s)]) == s for s in servers)
    ]
    assert len(leaves) > 40
    missing = [" ".join(path) for path, parser in leaves if "--json" not in parser._option_string_actions]
    assert missing == []


async def test_tables_print_empty_cells_and_one_timestamp_format(
    make_settings: Callable[..., Settings], elicitd: RunningApp
) -> None:
    settings = make_settings()
    name = f"t-{uuid.uuid4().hex[:6]}"
    made = _run(settings, "admin", "tokens", "create", "--name", name, "--role", "viewer")
    assert made.returncode == 0, made.stderr
    listed = _run(settings, "admin", "tokens", "list")
    assert listed.returncode == 0, listed.stderr
    assert "None" not in listed.stdout and "False" not in listed.stdout
    header, *rows = listed.stdout.splitlines()
    assert header.split() == ["ID", "NAME", "ROLE", "PREFIX", "EXPIRES_AT", "REVOKED_AT", "LAST_USED_AT"]
    (mine,) = [row.split() for row in rows if f" {name} " in row]
    assert len(mine) == 5  # never revoked, never used: two empty cells
    stamps = re.findall(r"\d{4}-\d\d-\d\d[T ][\d:.]+\S*", listed.stdout)
    assert stamps and all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", stamp) for stamp in stamps)


async def test_flows_show_prints_tables(
    make_settings: Callable[..., Settings], elicitd: RunningApp, server_client: ServerClientHandle
) -> None:
    async with elicitd.http(server_client.api_key) as http:
        created = await http.post(
            "/v1/flows",
            json={
                "subject": {"iss": "https://id.example.com", "sub": "show-me"},
                "kind": "external",
                "url": "https://app.example.com/step",
            },
        )
    flow_id = created.json()["flow"]["id"]
    shown = _run(make_settings(), "admin", "flows", "show", flow_id)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    fields = {line.split(None, 1)[0]: (line.split(None, 1)[1:] or [""])[0] for line in lines[: lines.index("")]}
    assert fields["id"] == flow_id
    assert (fields["kind"], fields["status"], fields["subject.sub"]) == ("external", "pending", "show-me")
    assert fields["provider"] == "" and fields["completed_at"] == ""
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", fields["created_at"])
    events = lines[lines.index("EVENTS") + 1 :]
    assert events[0].split() == ["ID", "AT", "TYPE", "ACTOR", "FROM_STATUS", "TO_STATUS", "DETAIL"]
    assert "created" in events[1]
    as_json = json.loads(_run(make_settings(), "admin", "flows", "show", flow_id, "--json").stdout)
    assert as_json["flow"]["id"] == flow_id and as_json["events"][0]["type"] == "created"


def test_output_cells() -> None:
    from datetime import UTC, datetime, timedelta, timezone

    from service.cli_output import cell

    moment = datetime(2026, 5, 4, 9, 30, 0, 123456, tzinfo=UTC)
    assert [cell(None), cell(False), cell(True), cell([]), cell(["a", "b"]), cell({})] == [
        "",
        "",
        "yes",
        "",
        "a, b",
        "",
    ]
    later = moment.astimezone(timezone(timedelta(hours=2)))
    assert {cell(moment), cell(later), cell("2026-05-04T09:30:00.123456Z"), cell(str(moment))} == {
        "2026-05-04T09:30:00Z"
    }


def test_a_reader_that_goes_away_ends_the_command_quietly() -> None:
    """`elicitd … | head`: once the reader has closed the pipe, the command exits 0 with nothing on
    stderr (no BrokenPipeError traceback)."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line is written
    try:
        result = subprocess.run(
            [sys.executable, "-m", "service.cli", "keys", "generate"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)
    assert (result.returncode, result.stderr) == (0, "")
