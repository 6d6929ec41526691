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
    entry: dict[str, Any] = {
        "name": name,
        "display_name": "Example Corp",
        "members": [files.name, mail.name],
        "allow_unproven": True,  # the test clients name users without their tokens
    }
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


async def test_the_config_file_refuses_unproven_members_it_does_not_allow(story: Story) -> None:
    unproven = await new_server_client(story.app, subject_proof="none")
    proven = await new_server_client(story.app, subject_proof="required")
    name = f"corp-{uuid.uuid4().hex[:6]}"
    state = story.app.state
    entry: dict[str, Any] = {"name": name, "display_name": "Example Corp", "members": [unproven.name]}
    for broken, says in (
        (entry, f"'{unproven.name}' proves no subject (subject_proof none)"),
        ({**entry, "members": [], "display_name": "Example\u202e Corp"}, "(found U+202E)"),
        ({**entry, "allow_unproven": "yes"}, "'allow_unproven' must be true or false"),
    ):
        with pytest.raises(ConfigurationError) as refused:
            await apply_config(state.sessions, state.vault, {"trust_groups": [broken]}, {})
        assert refused.value.detail.startswith(f"trust_groups[0] ({name}): ") and says in refused.value.detail
    async with state.sessions() as session:
        assert (
            await session.execute(text("SELECT count(*) FROM trust_groups WHERE name = :n"), {"n": name})
        ).one() == (0,)

    await apply_config(state.sessions, state.vault, {"trust_groups": [{**entry, "members": [proven.name]}]}, {})
    # The server_clients section may not drop the proof of a member of a group that does not allow it.
    with pytest.raises(ConfigurationError) as lowered:
        await apply_config(
            state.sessions, state.vault, {"server_clients": [{"name": proven.name, "subject_proof": "none"}]}, {}
        )
    assert lowered.value.detail == (
        f"server client '{proven.name}' has subject_proof none but is in trust group '{name}', which does not "
        "allow members without subject proof (set allow_unproven = true on the group, or require the proof)"
    )
    async with state.sessions() as session:
        assert (await get_group(session, name)).members[0].subject_proof == "required"
    both = {"name": name, "display_name": "Example Corp", "members": [proven.name, unproven.name]}
    applied = await apply_config(state.sessions, state.vault, {"trust_groups": [{**both, "allow_unproven": True}]}, {})
    assert applied == {"trust_groups": 1}
    async with state.sessions() as session:
        group = await get_group(session, name)
    assert (group.allow_unproven, sorted(m.name for m in group.members)) == (
        True,
        sorted([proven.name, unproven.name]),
    )


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
        story,
        "groups",
        "create",
        name,
        "--display-name",
        "Example Corp",
        "--member",
        files.name,
        "--allow-unproven",
        "--json",
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

    refused_name = f"x-{uuid.uuid4().hex[:6]}"
    code, _, err = await run_cli(story, "groups", "create", refused_name, "--member", "nobody-at-all")
    assert code != 0 and "nobody-at-all" in err and "Traceback" not in err

    # Members without subject proof need --allow-unproven, and the allowance stays while one remains.
    other = f"y-{uuid.uuid4().hex[:6]}"
    code, _, err = await run_cli(story, "groups", "create", other, "--member", files.name)
    assert (code, err.strip().endswith("(unproven_member)"), "Traceback" in err) == (1, True, False), err
    code, _, err = await run_cli(story, "groups", "create", other)
    assert code == 0, err
    code, _, err = await run_cli(story, "groups", "add-members", other, files.name, "--allow-unproven")
    assert (code, err.strip().endswith("(in_another_group)")) == (1, True), err
    code, shown, err = await run_cli(story, "groups", "show", other, "--json")
    assert (code, shown["allow_unproven"], shown["members"]) == (0, False, []), err  # nothing of it stayed
    code, _, err = await run_cli(story, "groups", "require-proof", name)
    assert (code, err.strip().endswith("(unproven_member)")) == (1, True), err
    code, shown, err = await run_cli(story, "groups", "show", name, "--json")
    assert (code, shown["allow_unproven"], shown["warnings"]) == (0, True, ["unproven_members_allowed"]), err

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

    # The rows read as the admin CLI's do: the status the admin API would have answered, and a
    # refused command is audited as refused.
    async with story.app.state.sessions() as session:
        rows = (
            await session.execute(
                text(
                    "SELECT operation, status, detail FROM admin_audit_log WHERE actor = 'cli' "
                    "AND target IN (:given, :refused) ORDER BY at"
                ),
                {"given": f"connection_id={connection},grantee={made['id']}", "refused": refused_name},
            )
        ).all()
    assert [tuple(row) for row in rows] == [
        ("cliGiveGrant", 200, {"result": "ok"}),
        ("cliCreateTrustGroup", 400, {"result": "error", "code": "unknown_server_client"}),
    ]
