"""Why a subject's tool call fails: their connections, grants and recent flows, read as one answer.

A tool fails at the token endpoint for few reasons, checked there in this order: the server client
may not use the provider or does not trust the subject's issuer (403), the subject has no live
connection the client was granted (404 ``not_connected``: a missing connection and a missing grant
look alike to the client, on purpose), or no authorization of it is active (409
``reauthorization_required``). An operator sees each of them here, with the connection's health
reason, every grant of it (live or revoked, by whom), and how the subject's last flows ended.

Nothing is decided twice: the facts are the admin views (``connections``, ``grants.operators``,
``flows``), whether the client holds a grant is the token endpoint's own statement
(``granted_scopes``), and the provider and issuer checks are the flow engine's
(``check_provider_allowed``, ``check_issuer_trusted``). The findings only name what those say, most
decisive first, each with a stable code. No view here carries a token, a key or a secret.
"""

from __future__ import annotations

from typing import Any

import msgspec
from sqlalchemy.ext.asyncio import AsyncSession

from service.admin import clients, flows
from service.admin.connections import ConnectionView, list_connections, show_connection
from service.admin.schemas import AdminFlow
from service.db.base import CLIENT_ID, CONNECTION_ID
from service.errors import ElicitdError, InvalidRequest
from service.flows.kinds import check_issuer_trusted, check_provider_allowed
from service.grants import operators
from service.grants.operators import GrantView
from service.grants.repository import granted_scopes
from service.identity.keys import AuthenticatedClient, authenticated_client
from service.identity.models import ServerClient

RECENT_FLOWS = 10
MAX_CONNECTIONS = 20
MAX_GRANTS = 50


class Finding(msgspec.Struct):
    """One reason, by a stable code, with a sentence for the operator (fixed text and ids only)."""

    code: str
    detail: str
    connection_id: str | None = None
    flow_id: str | None = None


class ClientFacts(msgspec.Struct):
    id: str
    name: str
    display_name: str
    disabled: bool
    allowed_providers: list[str]
    trusted_issuers: list[str]
    subject_proof: str


class ConnectionFacts(msgspec.Struct):
    connection: ConnectionView
    grants: list[GrantView]
    # Only when a server client is named: the scopes its live grants give it here (None: no grant).
    granted_to_client: list[str] | None = None


class Diagnosis(msgspec.Struct):
    subject: dict[str, str]
    provider: str | None
    server_client: ClientFacts | None
    connections: list[ConnectionFacts]
    recent_flows: list[AdminFlow]
    findings: list[Finding]


async def _client(session: AsyncSession, ref: str) -> ServerClient:
    public = await clients.public_id_of(session, ref)  # a name or an id; 404 when neither
    row = await session.get(ServerClient, CLIENT_ID.parse(public))
    assert row is not None
    return row


def _client_findings(client: AuthenticatedClient, row: ServerClient, iss: str, provider: str | None) -> list[Finding]:
    found = []
    if row.disabled:
        found.append(Finding("client_disabled", "The server client is disabled: its API key is refused."))
    checks: list[tuple[Any, ...]] = [(check_provider_allowed, client, provider), (check_issuer_trusted, client, iss)]
    for check, *args in checks:
        try:
            check(*args)
        except ElicitdError as refused:
            found.append(Finding(refused.problem_code, refused.detail))
    return found


def _connection_findings(item: ConnectionFacts, client_named: bool) -> list[Finding]:
    conn = item.connection
    reason = f" ({conn.health_reason})" if conn.health_reason else ""
    if conn.status == "revoked":
        return [Finding("connection_revoked", f"The connection was revoked{reason}.", connection_id=conn.id)]
    found = []
    if client_named and item.granted_to_client is None:
        ended = [g for g in item.grants if g.revoked_at is not None]
        by = f" (a grant of it was revoked by {ended[-1].revoked_by})" if ended and ended[-1].revoked_by else ""
        found.append(
            Finding(
                "not_granted",
                "The server client holds no live grant on this connection, so the token endpoint answers "
                f"not_connected{by}.",
                connection_id=conn.id,
            )
        )
    if conn.status != "active" or conn.health == "needs_reauthorization":
        found.append(
            Finding(
                "reauthorization_required",
                f"No authorization of the connection works any more{reason}: the person must reconnect.",
                connection_id=conn.id,
            )
        )
    elif conn.health == "expiring":
        found.append(
            Finding("expiring", f"The connection still works but expires soon{reason}.", connection_id=conn.id)
        )
    return found


def _flow_findings(recent: list[AdminFlow]) -> list[Finding]:
    if not recent:
        return []
    last = recent[0]
    if last.status == "pending":
        return [Finding("flow_pending", "The latest flow still waits for the person in the browser.", flow_id=last.id)]
    if last.status in {"failed", "declined", "expired", "cancelled"}:
        code = f" with {last.error_code}" if last.error_code else ""
        return [Finding(f"last_flow_{last.status}", f"The latest flow ended {last.status}{code}.", flow_id=last.id)]
    return []


async def diagnose(
    session: AsyncSession, *, iss: str, sub: str, provider: str | None = None, server_client: str | None = None
) -> Diagnosis:
    """Everything an operator needs to answer "why did this person's tool call fail?"."""
    if not iss or not sub:
        raise InvalidRequest("Name the subject by its issuer and sub: a sub is unique only per issuer.")
    row = None if server_client is None else await _client(session, server_client)
    client = None if row is None else authenticated_client(row)
    page = await list_connections(session, provider=provider, subject_iss=iss, subject_sub=sub, limit=MAX_CONNECTIONS)
    connections = [await show_connection(session, c.id) for c in page.items]
    granted: dict[Any, set[str]] = {}
    if client is not None:
        ids = [parsed for c in connections if (parsed := CONNECTION_ID.parse(c.id)) is not None]
        granted = await granted_scopes(session, client.id, ids)
    items = []
    for conn in connections:
        grants = (await operators.list_grants(session, connection=conn.id, limit=MAX_GRANTS)).items
        scopes = granted.get(CONNECTION_ID.parse(conn.id))
        items.append(ConnectionFacts(conn, grants, None if client is None or scopes is None else sorted(scopes)))
    filters = flows.FlowFilters(
        subject_iss=iss,
        subject_sub=sub,
        provider=provider,
        server_client=None if client is None else CLIENT_ID.format(client.id),
    )
    recent = (await flows.list_flows(session, filters, cursor=None, limit=RECENT_FLOWS)).items

    findings = [] if row is None or client is None else _client_findings(client, row, iss, provider)
    what = f"'{provider}'" if provider else "any provider"
    if not items:
        findings.append(
            Finding("not_connected", f"The subject has no connection to {what}: a tool's next call starts a connect.")
        )
    for item in items:
        findings.extend(_connection_findings(item, client is not None))
    findings.extend(_flow_findings(recent))
    if not findings:
        findings.append(Finding("no_problem_found", "Nothing here stops a token: the connection is live and granted."))
    return Diagnosis(
        subject={"iss": iss, "sub": sub},
        provider=provider,
        server_client=None
        if row is None
        else ClientFacts(
            id=CLIENT_ID.format(row.id),
            name=row.name,
            display_name=row.display_name,
            disabled=row.disabled,
            allowed_providers=list(row.allowed_providers or ()),
            trusted_issuers=list(row.trusted_issuers or ()),
            subject_proof=row.subject_proof,
        ),
        connections=items,
        recent_flows=recent,
        findings=findings,
    )
