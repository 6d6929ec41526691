"""Consent pages as a service: what the page shows, and the decision its form posts.

Approving or declining is one unit of work each.

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
from service.errors import Conflict, InvalidRequest
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


@dataclass(frozen=True, slots=True)
class ConsentPage:
    """The consent page: the text, and who asks."""

    view: ConsentView
    client: str


@dataclass(frozen=True, slots=True)
class ConsentDecision:
    """What became of a decision: ``moved`` is the flow after it, or None when the flow was no
    longer pending and ``current`` is what it is now (None when it is gone)."""

    moved: Flow | None
    current: Flow | None
    client: str


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

    # ---- the page ----------------------------------------------------------------------------------
    async def page(self, flow: Flow) -> ConsentPage:
        display_name, _ = await self.flows.asker(flow.server_client_id)
        return ConsentPage(view=view_of(flow), client=display_name)

    async def decide(self, flow: Flow, *, decision: str | None, shown_digest: str | None) -> ConsentDecision:
        """The page's Approve or Decline (the caller has made every browser check).

        Approval carries the digest of the text the page showed: if the text the receipt would
        attest differs (it cannot change for a flow, but a deploy could change how it is shown),
        the approval is refused rather than signed."""
        display_name, name = await self.flows.asker(flow.server_client_id)
        if decision == "approve":
            view = view_of(flow)
            if shown_digest != view.digest:
                raise Conflict(
                    "The text of this request is not the one that was shown. Reload the page and review it again.",
                    extra={"code": "consent_text_changed"},
                )
            moved = await self.approve(flow, view, client_name=name)
        elif decision == "decline":
            moved = await self.decline(flow)
        else:
            raise InvalidRequest("Choose Approve or Decline.", extra={"code": "invalid_decision"})
        current = None if moved is not None else await self.flows.read(flow.id)
        return ConsentDecision(moved=moved, current=current, client=display_name)
