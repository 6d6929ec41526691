"""Approving or declining a consent: one unit of work each.

Approval signs the receipt first (pure computation), then makes the terminal transition with the
receipt as the result and records the receipt row in the same transaction. If the flow is no
longer pending (declined from the MCP client, expired, approved in another tab) the transition
matches no row and nothing is recorded: a receipt exists only for the approval that won.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import text

from service.clock import Clock, SystemClock
from service.consent.kind import parse_params
from service.consent.receipts import ReceiptSigner, consent_text, text_digest
from service.db.base import CLIENT_ID, FLOW_ID, PrefixedId
from service.flows.models import Flow
from service.flows.repository import Transition
from service.flows.service import FlowService
from service.flows.states import Actor, FlowStatus

# A receipt's ``jti``: unique per receipt, named like every other public id.
RECEIPT_ID = PrefixedId("cr")


@dataclass(frozen=True, slots=True)
class ConsentView:
    """What the page shows, and the digest of exactly that."""

    title: str
    description: str
    details: list[tuple[str, str]]
    text: str
    digest: str


def view_of(flow: Flow) -> ConsentView:
    title, description, details = parse_params(flow.params)
    shown = consent_text(title, description, details)
    return ConsentView(title=title, description=description, details=details, text=shown, digest=text_digest(shown))


class ConsentService:
    def __init__(
        self, flows: FlowService, signer: ReceiptSigner | None, issuer: str, *, clock: Clock | None = None
    ) -> None:
        self.flows = flows
        self.signer = signer
        self.issuer = issuer
        # The receipt's ``iat`` and ``approved_at``: when this replica signed, a claim, not a deadline.
        self.clock: Clock = clock or SystemClock()

    def receipt_claims(self, flow: Flow, view: ConsentView, *, client_name: str, now: int) -> dict[str, Any]:
        flow_ref = FLOW_ID.format(flow.id)
        return {
            "iss": self.issuer,
            "sub": flow.subject_sub,
            "subject_iss": flow.subject_iss,
            "aud": CLIENT_ID.format(flow.server_client_id),
            "server_client": {"id": CLIENT_ID.format(flow.server_client_id), "name": client_name},
            "flow_id": flow_ref,
            "jti": RECEIPT_ID.format(uuid.uuid4()),
            "decision": "approved",
            "text_sha256": view.digest,
            "iat": now,
        }

    async def approve(self, flow: Flow, view: ConsentView, *, client_name: str) -> Flow | None:
        """Complete with a signed receipt; None when the flow was no longer pending."""
        if self.signer is None:  # normalize() refuses consent flows without a key; defence in depth
            return None
        now = int(self.clock.time())
        claims = self.receipt_claims(flow, view, client_name=client_name, now=now)
        receipt = self.signer.sign(claims)
        result = {
            "decision": "approved",
            "receipt": receipt,
            "receipt_id": claims["jti"],
            "key_id": self.signer.key_id,
            "text_sha256": view.digest,
            "approved_at": datetime.fromtimestamp(now, tz=UTC).isoformat(),
        }
        change = Transition(
            FlowStatus.COMPLETED,
            Actor.BROWSER,
            result=result,
            detail={"decision": "approved", "text_sha256": view.digest},
        )
        async with self.flows.unit_of_work() as uow:
            moved = await uow.transition(flow.id, change)
            if moved is not None:
                await uow.session.execute(
                    text(
                        "INSERT INTO consent_receipts (id, flow_id, server_client_id, subject_iss, subject_sub, "
                        "text_sha256, key_id, receipt) VALUES (:id, :flow, :client, :iss, :sub, :digest, :kid, "
                        ":receipt)"
                    ),
                    {
                        "id": claims["jti"],
                        "flow": flow.id,
                        "client": flow.server_client_id,
                        "iss": flow.subject_iss,
                        "sub": flow.subject_sub,
                        "digest": view.digest,
                        "kid": self.signer.key_id,
                        "receipt": receipt,
                    },
                )
        return moved

    async def decline(self, flow: Flow) -> Flow | None:
        change = Transition(FlowStatus.DECLINED, Actor.BROWSER, error_code="declined", detail={"decision": "declined"})
        return await self.flows.finish(flow.id, change)
