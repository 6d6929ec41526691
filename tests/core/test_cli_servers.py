"""``elicitd servers create`` / ``update`` and ``elicitd admin clients …`` take a client the same
way (its name or its id) and leave an audit row with the status the admin API would answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy import text

from service.settings import KeyRing, Settings
from tests.support.apps import RunningApp


def elicitd_cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELICITD_")}
    env.update(
        {
            "ELICITD_DATABASE_URL": settings.database_url,
            "ELICITD_REDIS_URL": settings.redis_url or "",
            "ELICITD_PUBLIC_URL": "http://127.0.0.1:1",
            "ELICITD_KEYS": KeyRing.generate_entry("c1"),
        }
    )
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )


async def audit_rows(app: RunningApp, target: str) -> list[tuple[Any, ...]]:
    async with app.state.sessions() as session:
        found = await session.execute(
            text(
                "SELECT actor, operation, status, detail->>'result', detail->>'code' FROM admin_audit_log "
                "WHERE target = :target ORDER BY id"
            ),
            {"target": target},
        )
        return [tuple(row) for row in found]


async def test_servers_update_sets_what_create_warned_about(
    make_settings: Callable[..., Settings], elicitd: RunningApp
) -> None:
    settings = make_settings()
    name = f"files-{uuid.uuid4().hex[:6]}"
    made = elicitd_cli(settings, "servers", "create", name)
    assert made.returncode == 0, made.stderr
    assert (
        "subject proof: required, but no resource URI: every call naming a user is refused until one is set "
        "(elicitd servers update NAME --resource-uri URL)"
    ) in made.stdout.splitlines()
    run = elicitd_cli(
        settings, "servers", "update", name, "--resource-uri", "https://files.example.com/mcp",
        "--display-name", "Files Assistant", "--json",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    updated = json.loads(run.stdout)
    assert (updated["name"], updated["display_name"], updated["subject_proof"], updated["resource_uris"]) == (
        name,
        "Files Assistant",
        "required",
        ["https://files.example.com/mcp"],
    )
    # By id too, as every `admin clients` command takes it; and by name there.
    by_id = elicitd_cli(settings, "servers", "update", updated["id"], "--subject-proof", "none")
    assert by_id.returncode == 0, by_id.stderr
    assert by_id.stdout.splitlines()[-1] == "subject proof: none (its API key alone names any user)"
    shown = elicitd_cli(settings, "admin", "clients", "show", name, "--json")
    assert (shown.returncode, json.loads(shown.stdout)["id"]) == (0, updated["id"]), shown.stderr
    assert await audit_rows(elicitd, name) == [("cli", "adminCreateServerClient", 200, "ok", None)]
    assert await audit_rows(elicitd, updated["id"]) == [
        ("cli", "adminUpdateServerClient", 200, "ok", None),
        ("cli", "adminUpdateServerClient", 200, "ok", None),
        ("cli", "adminGetServerClient", 200, "ok", None),
    ]


async def test_a_refused_command_is_one_line_and_audited_as_refused(
    make_settings: Callable[..., Settings], elicitd: RunningApp
) -> None:
    settings = make_settings()
    missing = f"nobody-{uuid.uuid4().hex[:6]}"
    for command in (["servers", "update", missing, "--display-name", "X"], ["admin", "clients", "rotate-key", missing]):
        refused = elicitd_cli(settings, *command)
        assert refused.returncode == 1
        assert refused.stderr.splitlines() == [
            f"elicitd: No server client named or numbered '{missing}' (`elicitd admin clients list` shows them)."
        ]
    assert await audit_rows(elicitd, missing) == [
        ("cli", "adminUpdateServerClient", 404, "error", "server_client_not_found"),
        ("cli", "adminRotateServerClientKey", 404, "error", "server_client_not_found"),
    ]
    nothing = elicitd_cli(settings, "servers", "update", missing)
    assert (nothing.returncode, nothing.stderr.splitlines()) == (
        2,
        ["elicitd: servers update: nothing to change; give --display-name, --resource-uri or --subject-proof"],
    )


def test_admin_webhooks_show_names_the_last_error() -> None:
    from service.admin.cli import _HOOK_DETAIL_COLUMNS

    assert _HOOK_DETAIL_COLUMNS[-1] == "last_error"


async def test_providers_and_issuers_commands_leave_audit_rows_too(
    make_settings: Callable[..., Settings], elicitd: RunningApp
) -> None:
    settings = make_settings()
    name = f"files-{uuid.uuid4().hex[:6]}"
    added = elicitd_cli(
        settings, "providers", "add", name, "--catalog", "oauth2", "--client-id", "files-client",
        "--client-secret-env", "PATH", "--issuer", "http://127.0.0.1:9", "--no-discover",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    disabled = elicitd_cli(settings, "providers", "disable", name)
    assert disabled.returncode == 0, disabled.stderr
    missing = f"nothing-{uuid.uuid4().hex[:6]}"
    refused = elicitd_cli(settings, "providers", "enable", missing)
    assert refused.returncode == 1, refused.stderr
    assert await audit_rows(elicitd, name) == [
        ("cli", "cliSaveProvider", 200, "ok", None),
        ("cli", "cliDisableProvider", 200, "ok", None),
    ]
    [(actor, operation, status, result, code)] = await audit_rows(elicitd, missing)
    assert (actor, operation, status, result) == ("cli", "cliEnableProvider", 404, "error")
    assert code is not None
