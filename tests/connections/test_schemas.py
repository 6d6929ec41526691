"""The one shape of a finished connect's result, whoever builds it: an OAuth connect, an API-key
form or a grant of a connection that already exists (``service.connections.schemas``)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from service.connections.schemas import connection_result, result_of
from service.db.base import CONNECTION_ID


@dataclass(frozen=True)
class Row:
    id: uuid.UUID
    provider: str
    account_id: str
    account_login: str | None
    scopes: list[str] | None
    access_token_enc: bytes = b"sealed"


def test_an_oauth_connection_names_its_login_and_the_scopes_given() -> None:
    row = Row(uuid.uuid4(), "github", "42", "octo", ["repo", "read:user"])
    expected = {
        "connection_id": CONNECTION_ID.format(row.id),
        "provider": "github",
        "account_id": "42",
        "account_login": "octo",
        "scopes": ["repo", "read:user"],
    }
    assert connection_result(row) == expected
    assert connection_result(row, scopes=["repo"]) == {**expected, "scopes": ["repo"]}
    assert connection_result(Row(row.id, "github", "42", "octo", None)) == {**expected, "scopes": []}


def test_an_api_key_connection_names_its_fields_and_no_scopes() -> None:
    connection_id = uuid.uuid4()
    expected = {
        "connection_id": CONNECTION_ID.format(connection_id),
        "provider": "acme",
        "account_id": "eu",
        "fields": {"region": "eu"},
    }
    assert result_of(connection_id, "acme", "eu", fields={"region": "eu"}) == expected
    row = Row(connection_id, "acme", "eu", None, [])
    assert connection_result(row, fields={"region": "eu"}) == expected
