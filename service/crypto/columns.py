"""Every column that holds a vault value, declared in one place.

Key rotation (``elicitd keys rotate``) re-encrypts exactly these, so a column missing here would
keep its values under a retired key until that key is dropped from the ring — and then they could
never be opened again. The list is a literal, not something modules append to when imported: what
rotation covers does not depend on which modules happen to be loaded. ``tests/crypto/test_columns``
fails when a model gains a ``*_enc`` column that is not declared here, or a declaration names a
column, owner or purpose that the code writing the value does not use.

Each entry names the table, its id column, the key-id and blob columns, the SQL expression that
yields the *owner* string the writer passed to ``Vault.encrypt`` (public ids come from
:class:`service.db.base.PrefixedId`, the same definition Python formats them with), the purpose,
and the columns bound beside them (``bound_sql``: a connection's issuer, subject, provider and
account, so a row edited to name another person no longer decrypts).
"""

from __future__ import annotations

from dataclasses import dataclass

from service.db.base import CLIENT_ID, CONNECTION_ID


@dataclass(frozen=True, slots=True, kw_only=True)
class EncryptedColumn:
    table: str
    id_column: str
    key_id_column: str
    blob_column: str
    owner_sql: str
    purpose: str
    # Columns of the row bound into the associated data after owner and purpose, in the writer's
    # order (``Vault.encrypt(bound=…)``): whose the secret is. Empty for values bound by owner alone.
    bound_sql: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.table}.{self.blob_column}"


def _column(
    table: str, stem: str, *, id_column: str = "id", owner_sql: str, purpose: str, bound_sql: tuple[str, ...] = ()
) -> EncryptedColumn:
    """Every pair is ``<stem>_enc`` (nonce + ciphertext) beside ``<stem>_key_id``."""
    return EncryptedColumn(
        table=table,
        id_column=id_column,
        key_id_column=f"{stem}_key_id",
        blob_column=f"{stem}_enc",
        owner_sql=owner_sql,
        purpose=purpose,
        bound_sql=bound_sql,
    )


# Whose a connection's secret is (``service.connections.sealing.token_binding``), in its order.
CONNECTION_BINDING = ("subject_iss", "subject_sub", "provider", "account_id")


ENCRYPTED_COLUMNS: tuple[EncryptedColumn, ...] = (
    # identity
    # An endpoint's secrets are the server client's (0018 moved the single webhook's sealed value
    # as it was into the client's first endpoint). Before ``server_clients``: re-keying that column
    # rewrites the legacy endpoint's copy (the 0018 trigger), which must then not be counted twice.
    _column("webhook_endpoints", "secret", owner_sql=CLIENT_ID.sql("server_client_id"), purpose="webhook_secret"),
    _column(
        "webhook_endpoints",
        "previous_secret",
        owner_sql=CLIENT_ID.sql("server_client_id"),
        purpose="webhook_secret",
    ),
    _column("server_clients", "webhook_secret", owner_sql=CLIENT_ID.sql("id"), purpose="webhook_secret"),
    _column("issuers", "client_secret", owner_sql="id::text", purpose="issuer_client_secret"),
    _column("issuers", "introspection_secret", owner_sql="id::text", purpose="issuer_introspection_secret"),
    _column("login_attempts", "secrets", owner_sql="encode(id, 'hex')", purpose="login_attempt"),
    # connections: an API key on the connection row; OAuth tokens on its authorizations, owned by
    # the authorization's id in the connection-id form (``service.connections.authorizations``)
    _column("providers", "client_secret", id_column="name", owner_sql="name", purpose="client_secret"),
    _column(
        "authorizations",
        "access_token",
        owner_sql=CONNECTION_ID.sql("id"),
        purpose="access_token",
        bound_sql=CONNECTION_BINDING,
    ),
    _column(
        "authorizations",
        "refresh_token",
        owner_sql=CONNECTION_ID.sql("id"),
        purpose="refresh_token",
        bound_sql=CONNECTION_BINDING,
    ),
    _column(
        "connections",
        "access_token",
        owner_sql=CONNECTION_ID.sql("id"),
        purpose="access_token",
        bound_sql=CONNECTION_BINDING,
    ),
    _column(
        "connections",
        "refresh_token",
        owner_sql=CONNECTION_ID.sql("id"),
        purpose="refresh_token",
        bound_sql=CONNECTION_BINDING,
    ),
    _column("oauth_states", "verifier", owner_sql="id::text", purpose="pkce_verifier"),
)
