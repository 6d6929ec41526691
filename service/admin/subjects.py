"""One subject at a glance: ``GET /admin/v1/subjects`` and the console's People page.

A person is known to elicitd only as a subject — an issuer and a ``sub`` — so the overview is
keyed by both (a ``sub`` is unique only per issuer). It is the diagnosis (``diagnosis.diagnose``:
connections with each authorization's health, every grant of each, the recent flows and the
findings, most decisive first) plus what the diagnosis has no use for: when each connection was
last used (its grants' latest use, the token endpoint's own record) and the subject's consent
receipts. Nothing is decided here a second time; the views are the admin views, none of which
carries a token, a key or a secret. A receipt is shown by its id, text digest and signing key,
never as the signed token itself: the receipt is the server client's to hand on, not ours.
"""

from __future__ import annotations

from datetime import datetime

import msgspec
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from service.admin.connections import ConnectionView
from service.admin.diagnosis import Finding, diagnose
from service.admin.schemas import AdminFlow
from service.consent.models import ConsentReceipt
from service.db.base import CLIENT_ID, FLOW_ID
from service.grants.operators import GrantView

RECENT_RECEIPTS = 20


class ReceiptView(msgspec.Struct):
    id: str
    flow_id: str
    server_client: str
    # The SHA-256 of the exact text the person approved, and the key that signed the receipt.
    text_sha256: str
    key_id: str
    issued_at: datetime


class SubjectConnection(msgspec.Struct):
    connection: ConnectionView  # with ``authorizations``: each token set's scopes and health
    grants: list[GrantView]  # live and revoked, by whom
    # The latest use of any of its grants at the token endpoint (None: never used).
    last_used_at: datetime | None


class SubjectOverview(msgspec.Struct):
    subject: dict[str, str]  # iss and sub
    connections: list[SubjectConnection]
    recent_flows: list[AdminFlow]
    consent_receipts: list[ReceiptView]
    # Why a tool call would fail now, most decisive first (``diagnosis.Finding`` codes).
    findings: list[Finding]


def receipt_view(row: ConsentReceipt) -> ReceiptView:
    return ReceiptView(
        id=row.id,
        flow_id=FLOW_ID.format(row.flow_id),
        server_client=CLIENT_ID.format(row.server_client_id),
        text_sha256=row.text_sha256,
        key_id=row.key_id,
        issued_at=row.issued_at,
    )


async def subject_overview(
    session: AsyncSession, *, iss: str, sub: str, server_client: str | None = None
) -> SubjectOverview:
    """400 ``invalid_request`` without both ``iss`` and ``sub``; an unknown subject is an empty overview
    (whom elicitd has never seen is not an error: it says "not connected"). With ``server_client``
    (name or id) the findings are that client's: whether it holds a grant, may use the provider,
    trusts the issuer; the recent flows are then its own."""
    found = await diagnose(session, iss=iss, sub=sub, server_client=server_client)
    receipts = (
        (
            await session.execute(
                select(ConsentReceipt)
                .where(ConsentReceipt.subject_iss == iss, ConsentReceipt.subject_sub == sub)
                .order_by(ConsentReceipt.issued_at.desc(), ConsentReceipt.id)
                .limit(RECENT_RECEIPTS)
            )
        )
        .scalars()
        .all()
    )
    connections = []
    for item in found.connections:
        used = [g.last_used_at for g in item.grants if g.last_used_at is not None]
        connections.append(SubjectConnection(item.connection, item.grants, max(used) if used else None))
    return SubjectOverview(
        subject={"iss": iss, "sub": sub},
        connections=connections,
        recent_flows=found.recent_flows,
        consent_receipts=[receipt_view(r) for r in receipts],
        findings=found.findings,
    )
