"""Trust groups and grants the operator's ways: the config file and the ``elicitd`` command (audited)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from typing import Any

import pytest
from sqlalchemy import text

from service.config_file import apply_config
from service.errors import ConfigurationError
from service.grants.groups import get_group
from tests.grants.conftest import Story, new_sub, plant, token
from tests.support.apps import new_server_client

TEST_RING = "test2:" + "A" * 43 + ",test1:" + "B" * 43  # tests/conftest.py's key ring


async def test_the_config_file_declares_groups_and_owns_their_members(story: Story) -> None:
    files = await new_server_client(story.app, display_name="Acme Files Assistant")
    mail = await new_server_client(story.app, display_name="Acme Mail")
    name = f"corp-{uuid.uuid4().hex[:6]}"
    state = story.app.state
    entry: dict[str, Any] = {"name": name, "display_name": "Example Corp", "members": [files.name, mail.name]}
    assert await apply_config(state.sessions, state.vault, {"trust_groups": [entry]}, {}) == {"trust_groups": 1}
    async with state.sessions() as session:
        group = await get_group(session, name)
    assert (group.display_name, sorted(m.name for m in group.members)) == (
        "Example Corp",
        sorted([files.name, mail.name]),
    )

    # Applied again (every start) with one member fewer: the file is the truth for its groups.
    await apply_config(state.sessions, state.vault, {"trust_groups": [{**entry, "members": [files.name]}]}, {})
    async with state.sessions() as session:
        assert [m.name for m in (await get_group(session, name)).members] == [files.name]

    for broken, says in (
        ({**entry, "members": ["no-such-client"]}, "no-such-client"),
        ({**entry, "colour": "blue"}, "unknown keys"),
        ({"name": name}, "needs 'name' and 'display_name'"),
    ):
        with pytest.raises(ConfigurationError) as refused:
            await apply_config(state.sessions, state.vault, {"trust_groups": [broken]}, {})
        assert "trust_groups[0]" in refused.value.detail and says in refused.value.detail


async def run_cli(story: Story, *args: str) -> tuple[int, Any, str]:
    env = {
        **os.environ,
        "ELICITD_DATABASE_URL": story.app.settings.database_url,
        "ELICITD_PUBLIC_URL": "http://127.0.0.1:8000",
        "ELICITD_KEYS": TEST_RING,
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "service.cli",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, json.loads(out) if out.strip().startswith((b"{", b"[")) else out.decode(), err.decode()


async def test_the_command_groups_clients_and_grants_audited(story: Story) -> None:
    files = await new_server_client(story.app, display_name="Acme Files Assistant")
    mail = await new_server_client(story.app, display_name="Acme Mail")
    alice = new_sub("alice")
    connection, _ = await plant(story, alice)  # written by hand: nobody's flow, nobody's grant
    assert (await token(story, files, alice)).status_code == 404
    name = f"corp-{uuid.uuid4().hex[:6]}"

    code, made, err = await run_cli(
        story, "groups", "create", name, "--display-name", "Example Corp", "--member", files.name, "--json"
    )
    assert code == 0, err
    assert [m["name"] for m in made["members"]] == [files.name]
    code, grown, err = await run_cli(story, "groups", "add-members", name, mail.name, "--json")
    assert code == 0, err
    assert sorted(m["name"] for m in grown["members"]) == sorted([files.name, mail.name])

    code, given, err = await run_cli(story, "grants", "give", connection, made["id"], "--scope", "files:read", "--json")
    assert code == 0, err
    assert (given["grantee"]["type"], given["origin"], given["scopes"]) == ("trust_group", "admin", ["files:read"])
    assert [(await token(story, c, alice)).status_code for c in (files, mail)] == [200, 200]

    code, table, err = await run_cli(story, "grants", "list", "--connection", connection)
    assert code == 0, err
    assert given["id"] in table and "Example Corp" in table
    code, revoked, err = await run_cli(story, "grants", "revoke", given["id"], "--json")
    assert code == 0 and revoked["revoked_by"] == "admin", err
    assert [(await token(story, c, alice)).status_code for c in (files, mail)] == [404, 404]

    code, _, err = await run_cli(story, "groups", "create", f"x-{uuid.uuid4().hex[:6]}", "--member", "nobody-at-all")
    assert code != 0 and "nobody-at-all" in err and "Traceback" not in err

    async with story.app.state.sessions() as session:
        audit = (
            await session.execute(
                text(
                    "SELECT operation, target FROM admin_audit_log WHERE actor = 'cli' AND target LIKE :t ORDER BY at"
                ),
                {"t": f"%{connection}%"},
            )
        ).all()
    assert [tuple(row) for row in audit] == [("cliGiveGrant", f"connection_id={connection},grantee={made['id']}")]
