"""The declared encrypted columns are exactly the columns that hold vault values, with the owner
and purpose their writers use — so key rotation re-encrypts every one of them."""

from __future__ import annotations

import importlib
import pkgutil
import uuid
from collections.abc import AsyncIterator, Callable

import pytest
from sqlalchemy import LargeBinary, text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

import service
from service.connections.providers import CLIENT_SECRET
from service.connections.sealing import ACCESS_TOKEN, PKCE_VERIFIER, REFRESH_TOKEN
from service.crypto.columns import ENCRYPTED_COLUMNS, EncryptedColumn
from service.db.base import CLIENT_ID, CONNECTION_ID, Base
from service.identity.issuers import INTROSPECTION_SECRET_PURPOSE, SECRET_PURPOSE
from service.identity.sessions import ATTEMPT_PURPOSE
from service.rotation import GRANTS_LABEL
from service.settings import normalize_database_url
from service.signals.webhooks import WEBHOOK_SECRET_PURPOSE


def all_models() -> None:
    """Import every ``service.<domain>.models`` module, found on disk rather than listed by hand."""
    for module in pkgutil.walk_packages(service.__path__, "service."):
        if module.name.endswith(".models"):
            importlib.import_module(module.name)


def stored_encrypted() -> set[str]:
    """``table.column`` of every column shaped like a vault value: a ``*_enc`` column, or binary
    data beside a ``*_key_id`` column."""
    all_models()
    found: set[str] = set()
    for table in Base.metadata.tables.values():
        names = set(table.columns.keys())
        for column in table.columns:
            stem = column.name.removesuffix("_enc")
            paired = isinstance(column.type, LargeBinary) and f"{stem}_key_id" in names
            if column.name.endswith("_enc") or paired:
                found.add(f"{table.name}.{column.name}")
    return found


def test_every_vault_column_is_declared_once() -> None:
    labels = [c.label for c in ENCRYPTED_COLUMNS]
    assert len(labels) == len(set(labels))
    # ``grants.mac`` sits beside a key id but holds a MAC, not a secret; rotation re-MACs it itself.
    assert set(labels) == stored_encrypted() - {GRANTS_LABEL}
    assert sorted(labels) == [
        "authorizations.access_token_enc",
        "authorizations.refresh_token_enc",
        "connections.access_token_enc",
        "connections.refresh_token_enc",
        "issuers.client_secret_enc",
        "issuers.introspection_secret_enc",
        "login_attempts.secrets_enc",
        "oauth_states.verifier_enc",
        "providers.client_secret_enc",
        "server_clients.webhook_secret_enc",
        "webhook_endpoints.previous_secret_enc",
        "webhook_endpoints.secret_enc",
    ]


@pytest.mark.parametrize("column", ENCRYPTED_COLUMNS, ids=lambda c: c.label)
def test_declared_columns_exist(column: EncryptedColumn) -> None:
    all_models()
    table = Base.metadata.tables[column.table]
    assert {column.id_column, column.key_id_column, column.blob_column} <= set(table.columns.keys())
    assert isinstance(table.columns[column.blob_column].type, LargeBinary)
    assert table.columns[column.id_column].primary_key


def test_purposes_are_the_writers() -> None:
    assert {c.label: c.purpose for c in ENCRYPTED_COLUMNS} == {
        "server_clients.webhook_secret_enc": WEBHOOK_SECRET_PURPOSE,
        "issuers.client_secret_enc": SECRET_PURPOSE,
        "issuers.introspection_secret_enc": INTROSPECTION_SECRET_PURPOSE,
        "login_attempts.secrets_enc": ATTEMPT_PURPOSE,
        "providers.client_secret_enc": CLIENT_SECRET,
        "authorizations.access_token_enc": ACCESS_TOKEN,
        "authorizations.refresh_token_enc": REFRESH_TOKEN,
        "connections.access_token_enc": ACCESS_TOKEN,
        "connections.refresh_token_enc": REFRESH_TOKEN,
        "oauth_states.verifier_enc": PKCE_VERIFIER,
        "webhook_endpoints.secret_enc": WEBHOOK_SECRET_PURPOSE,
        "webhook_endpoints.previous_secret_enc": WEBHOOK_SECRET_PURPOSE,
    }


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(normalize_database_url(database_url))
    yield engine
    await engine.dispose()


# How each writer computes the owner it passes to ``Vault.encrypt``, from the row's id.
UUID_ID = uuid.UUID("0190a3c4-5e6f-7a8b-9c0d-1e2f3a4b5c6d")
BYTES_ID = bytes(range(32))
PYTHON_OWNER: dict[str, tuple[object, Callable[[], str]]] = {
    "server_clients.webhook_secret_enc": (UUID_ID, lambda: CLIENT_ID.format(UUID_ID)),
    "issuers.client_secret_enc": (UUID_ID, lambda: str(UUID_ID)),
    "issuers.introspection_secret_enc": (UUID_ID, lambda: str(UUID_ID)),
    "login_attempts.secrets_enc": (BYTES_ID, BYTES_ID.hex),
    "providers.client_secret_enc": ("acme.eu-1", lambda: "acme.eu-1"),
    "authorizations.access_token_enc": (UUID_ID, lambda: CONNECTION_ID.format(UUID_ID)),
    "authorizations.refresh_token_enc": (UUID_ID, lambda: CONNECTION_ID.format(UUID_ID)),
    "connections.access_token_enc": (UUID_ID, lambda: CONNECTION_ID.format(UUID_ID)),
    "connections.refresh_token_enc": (UUID_ID, lambda: CONNECTION_ID.format(UUID_ID)),
    "oauth_states.verifier_enc": (UUID_ID, lambda: str(UUID_ID)),
    # An endpoint's secrets are sealed for its server client (``service.admin.endpoints``).
    "webhook_endpoints.secret_enc": (UUID_ID, lambda: CLIENT_ID.format(UUID_ID)),
    "webhook_endpoints.previous_secret_enc": (UUID_ID, lambda: CLIENT_ID.format(UUID_ID)),
}


@pytest.mark.parametrize("column", ENCRYPTED_COLUMNS, ids=lambda c: c.label)
async def test_owner_sql_gives_the_writers_owner(engine: AsyncEngine, column: EncryptedColumn) -> None:
    """Rotation recomputes the owner in SQL; it must be byte-for-byte what the writer sealed with."""
    value, owner = PYTHON_OWNER[column.label]
    sql_type = {uuid.UUID: "uuid", bytes: "bytea", str: "text"}[type(value)]
    # An owner computed from another column of the row (an endpoint's server client) reads it there.
    owner_column = "server_client_id" if "server_client_id" in column.owner_sql else column.id_column
    statement = text(
        f"SELECT {column.owner_sql} FROM (SELECT CAST(:v AS {sql_type}) AS {owner_column}) AS {column.table}"
    )
    async with engine.connect() as connection:
        assert (await connection.execute(statement, {"v": value})).scalar_one() == owner()
