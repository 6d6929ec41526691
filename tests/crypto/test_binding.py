"""A connection's secrets are bound to whose they are: issuer, subject, provider and account, beside
the connection id and the purpose. A row edited in the database to name another person (or
provider, or account) no longer decrypts, so a database write is not a token theft.

Values stored before the binding existed still open (the old associated data), and ``elicitd keys
rotate`` rewrites them under the new one — after which the same edit is refused too.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from types import SimpleNamespace

import pytest
from sqlalchemy import text

from service.connections.sealing import ACCESS_TOKEN, REFRESH_TOKEN, token_binding
from service.crypto.aead import SealError
from service.crypto.columns import CONNECTION_BINDING, ENCRYPTED_COLUMNS
from service.crypto.vault import Vault
from service.db.base import CONNECTION_ID
from service.rotation import rotate
from service.settings import KeyRing, Settings
from tests.connections.conftest import Env, get_token, new_sub, plant_connection, register_provider
from tests.support import backends
from tests.support.apps import new_server_client, running_app
from tests.support.oauth_server import OAuthServer
from tests.support.providers import register_issuer

RING = KeyRing.parse("bind1:" + "C" * 43, name="binding keys")


def test_an_optional_secret_is_absent_unless_both_columns_are_set() -> None:
    """Every optional secret column pair (a token, a provider's or issuer's client secret) is read
    through ``Vault.open_stored``: nothing stored unless both the key id and the value are, and a
    value that does not open is an error, never taken for "no secret"."""
    vault = Vault(RING)
    kid, blob = vault.encrypt("s3cret", owner="cn_1", purpose=ACCESS_TOKEN, bound=("a", "b"))
    assert vault.open_stored(kid, blob, owner="cn_1", purpose=ACCESS_TOKEN, bound=("a", "b")) == "s3cret"
    assert vault.open_stored(None, blob, owner="cn_1", purpose=ACCESS_TOKEN, bound=("a", "b")) is None
    assert vault.open_stored("", blob, owner="cn_1", purpose=ACCESS_TOKEN, bound=("a", "b")) is None
    assert vault.open_stored(kid, None, owner="cn_1", purpose=ACCESS_TOKEN, bound=("a", "b")) is None
    with pytest.raises(SealError):
        vault.open_stored(kid, blob, owner="cn_2", purpose=ACCESS_TOKEN, bound=("a", "b"))
    with pytest.raises(SealError):
        vault.open_stored(kid, blob, owner="cn_1", purpose=REFRESH_TOKEN, bound=("a", "b"))


def test_the_declared_binding_is_the_writers() -> None:
    """Rotation reads the bound fields from ``bound_sql``; they must be the writer's, in its order."""
    row = SimpleNamespace(subject_iss="https://id", subject_sub="alice", provider="acme", account_id="42")
    assert token_binding(row) == tuple(getattr(row, name) for name in CONNECTION_BINDING)  # type: ignore[arg-type]
    bound = {c.label: c.bound_sql for c in ENCRYPTED_COLUMNS if c.bound_sql}
    assert bound == {
        "authorizations.access_token_enc": CONNECTION_BINDING,
        "authorizations.refresh_token_enc": CONNECTION_BINDING,
        "connections.access_token_enc": CONNECTION_BINDING,
        "connections.refresh_token_enc": CONNECTION_BINDING,
    }


def test_every_bound_field_and_its_boundaries_count() -> None:
    vault = Vault(RING)
    bound = ("https://id.example", "alice", "acme", "42")
    key_id, blob = vault.encrypt("secret", owner="cn_1", purpose=ACCESS_TOKEN, bound=bound)
    assert vault.decrypt_text(key_id, blob, owner="cn_1", purpose=ACCESS_TOKEN, bound=bound) == "secret"
    for changed in (
        ("https://id.example", "mallory", "acme", "42"),
        ("https://evil.example", "alice", "acme", "42"),
        ("https://id.example", "alice", "other", "42"),
        ("https://id.example", "alice", "acme", "43"),
        # The same bytes split differently must not read as the same fields.
        ("https://id.example", "alic", "eacme", "42"),
        ("https://id.example", "alice\x003:acm", "e", "42"),
    ):
        with pytest.raises(SealError):
            vault.decrypt(key_id, blob, owner="cn_1", purpose=ACCESS_TOKEN, bound=changed, unbound_ok=True)
    with pytest.raises(SealError):
        vault.decrypt(key_id, blob, owner="cn_1", purpose=REFRESH_TOKEN, bound=bound, unbound_ok=True)
    # A value sealed with its fields never opens without them, whatever the reader accepts.
    with pytest.raises(SealError):
        vault.decrypt(key_id, blob, owner="cn_1", purpose=ACCESS_TOKEN)
    # One sealed before the binding opens the old way only when the reader says so.
    old_kid, old_blob = vault.encrypt("legacy", owner="cn_1", purpose=ACCESS_TOKEN)
    with pytest.raises(SealError):
        vault.decrypt(old_kid, old_blob, owner="cn_1", purpose=ACCESS_TOKEN, bound=bound)
    assert vault.decrypt(old_kid, old_blob, owner="cn_1", purpose=ACCESS_TOKEN, bound=bound, unbound_ok=True) == (
        b"legacy"
    )
    assert not vault.is_bound(old_kid, old_blob, owner="cn_1", purpose=ACCESS_TOKEN, bound=bound)
    assert vault.is_bound(key_id, blob, owner="cn_1", purpose=ACCESS_TOKEN, bound=bound)


@pytest.fixture(scope="module")
def oauth() -> Iterator[OAuthServer]:
    with OAuthServer() as server:
        yield server


@pytest.fixture(scope="module")
async def env(
    make_settings: Callable[..., Settings], oauth: OAuthServer, backend: backends.Backends
) -> AsyncIterator[Env]:
    """A database of its own: rotation rewrites rows, which must not touch other tests' data."""
    async with (
        backends.migrated_database(backend.server_url) as url,
        running_app(make_settings(database_url=url, keys=RING)) as app,
    ):
        await register_issuer(app, oauth)
        name = f"bind-{uuid.uuid4().hex[:6]}"
        await register_provider(app, oauth, name)
        yield Env(app=app, oauth=oauth, provider=name)


async def _move(env: Env, connection: str, **values: str) -> None:
    sets = ", ".join(f"{column} = :{column}" for column in values)
    async with env.app.state.sessions() as session:
        # Both rows, as a database writer would: the authorization names its connection's fields.
        for table in ("connections", "authorizations"):
            await session.execute(
                text(f"UPDATE {table} SET {sets} WHERE id = :id"), {**values, "id": CONNECTION_ID.parse(connection)}
            )
        await session.commit()


async def test_a_row_moved_to_another_person_or_account_does_not_decrypt(env: Env) -> None:
    client = await new_server_client(env.app)
    for column in ("subject_sub", "account_id"):
        alice, mallory = new_sub("alice"), new_sub("mallory")
        connection, minted = await plant_connection(env, alice, granted_to=client)
        assert (await get_token(env, client, alice)).json()["access_token"] == minted["access_token"]
        await _move(env, connection, **{column: mallory})
        if column == "subject_sub":
            answer = await get_token(env, client, mallory)
        else:
            answer = await get_token(env, client, alice, account=mallory)
        assert (answer.status_code, answer.json()["code"]) == (409, "reauthorization_required"), column
        assert minted["access_token"] not in answer.text


async def _seal_the_old_way(env: Env, connection: str, access: str, refresh: str) -> None:
    """What a connection stored before the binding holds: owner and purpose as associated data only."""
    vault, owner = env.app.state.vault, connection
    access_kid, access_blob = vault.encrypt(access, owner=owner, purpose=ACCESS_TOKEN)
    refresh_kid, refresh_blob = vault.encrypt(refresh, owner=owner, purpose=REFRESH_TOKEN)
    async with env.app.state.sessions() as session:
        await session.execute(
            text(
                "UPDATE authorizations SET access_token_enc = :a, access_token_key_id = :ak, refresh_token_enc = :r, "
                "refresh_token_key_id = :rk WHERE id = :id"
            ),
            {
                "a": access_blob,
                "ak": access_kid,
                "r": refresh_blob,
                "rk": refresh_kid,
                "id": CONNECTION_ID.parse(owner),
            },
        )
        await session.commit()


async def test_old_values_keep_working_until_rotation_binds_them(env: Env) -> None:
    client = await new_server_client(env.app)
    alice = new_sub("legacy")
    connection, minted = await plant_connection(env, alice, granted_to=client)
    await _seal_the_old_way(env, connection, minted["access_token"], minted["refresh_token"])

    # Refused by default: an unbound value opens only while the operator accepts them for an upgrade.
    vault = env.app.state.vault
    refused = await get_token(env, client, alice)
    assert (refused.status_code, refused.json()["code"]) == (409, "reauthorization_required")
    vault.accept_unbound = True
    try:
        # Served as before the upgrade: nobody has to reconnect.
        served = await get_token(env, client, alice)
        assert (served.status_code, served.json()["access_token"]) == (200, minted["access_token"])
    finally:
        vault.accept_unbound = False

    report = await rotate(env.app.state.sessions, env.app.state.vault, batch=2)
    assert report.rebound == {
        "authorizations.access_token_enc": 1,
        "authorizations.refresh_token_enc": 1,
        "connections.access_token_enc": 0,
        "connections.refresh_token_enc": 0,
    }
    bound = await get_token(env, client, alice)
    assert (bound.status_code, bound.json()["access_token"]) == (200, minted["access_token"])
    # (Rows the test above moved are reported as undecryptable, and left alone; this one is not.)
    row = str(CONNECTION_ID.parse(connection))
    assert all(row not in failed for failed in report.failed.values())
    again = await rotate(env.app.state.sessions, env.app.state.vault, batch=2)
    assert set(again.rebound.values()) == {0}

    # Bound now: still served to its owner, refused once the row names someone else.
    assert (await get_token(env, client, alice)).json()["access_token"] == minted["access_token"]
    mallory = new_sub("mallory")
    await _move(env, connection, subject_sub=mallory)
    stolen = await get_token(env, client, mallory)
    assert (stolen.status_code, stolen.json()["code"]) == (409, "reauthorization_required")
    assert minted["access_token"] not in stolen.text
