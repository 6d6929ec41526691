"""What the MCP wire carries of a flow: its view, the ``InputRequiredResult`` a client shows or
retries with, the 2025-11-25 URL elicitation, and the API's answers built from them.

Pure shapes over a flow's fields (an ORM ``Flow`` or a ``FlowSnapshot``): nothing here reads or
writes the database, so the engine and the long-poll answers build the same bytes for the same
flow.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from service.db.base import CLIENT_ID, FLOW_ID
from service.flows.kinds import NormalizedFlow
from service.flows.repository import FlowFields
from service.flows.request_state import RequestStateCodec
from service.flows.schemas import (
    CreateFlowRequest,
    CreateFlowResponse,
    FlowError,
    FlowView,
    ResolveResponse,
    StatusResponse,
    Subject,
)
from service.flows.states import Outcome
from service.observability.context import tag
from service.settings import Settings

INPUT_KEY_PREFIX = "elicitd_"
LEGACY_URL_ELICITATION_REQUIRED = -32042


def input_key(flow_id: uuid.UUID) -> str:
    return INPUT_KEY_PREFIX + FLOW_ID.format(flow_id)


def tag_flow(flow: FlowFields, outcome: str) -> None:
    """Name the flow in this request's log line (``service.observability.context``)."""
    tag(
        flow_id=FLOW_ID.format(flow.id),
        server_client=CLIENT_ID.format(flow.server_client_id),
        kind=flow.kind,
        outcome=outcome,
    )


class FlowWire:
    """The API's shapes of a flow, for one deployment's public URL and request-state codec."""

    __slots__ = ("codec", "settings")

    def __init__(self, settings: Settings, codec: RequestStateCodec) -> None:
        self.settings = settings
        self.codec = codec

    def url_for(self, flow: FlowFields) -> str:
        if flow.external_url is not None:
            return flow.external_url
        return f"{self.settings.public_url}/f/{FLOW_ID.format(flow.id)}"

    def view(self, flow: FlowFields) -> FlowView:
        error = FlowError(code=flow.error_code, message=flow.error_message) if flow.error_code else None
        return FlowView(
            id=FLOW_ID.format(flow.id),
            kind=flow.kind,
            status=flow.status,
            url=self.url_for(flow),
            expires_at=flow.expires_at,
            created_at=flow.created_at,
            subject=Subject(iss=flow.subject_iss, sub=flow.subject_sub),
            provider=flow.provider,
            scopes=list(flow.scopes or []),
            completed_at=flow.completed_at,
            error=error,
        )

    def summary(self, flow: FlowFields) -> FlowView:
        """What a flow's id alone may tell a server client that must prove the subject: its state
        and outcome, not whose it is nor its page (``FlowService.whole_status``)."""
        error = FlowError(code=flow.error_code, message=flow.error_message) if flow.error_code else None
        return FlowView(
            id=FLOW_ID.format(flow.id),
            kind=flow.kind,
            status=flow.status,
            expires_at=flow.expires_at,
            created_at=flow.created_at,
            provider=flow.provider,
            scopes=list(flow.scopes or []),
            completed_at=flow.completed_at,
            error=error,
        )

    def _state_expiry(self, flow: FlowFields) -> int:
        return int(flow.expires_at.timestamp()) + self.settings.request_state_grace_seconds

    def mcp_input_required(self, flow: FlowFields, *, ask: bool) -> dict[str, Any]:
        """A complete 2026-07-28 ``InputRequiredResult``. With ``ask`` False it is state-only: the
        client retries at once without showing anything (the user is still in the browser)."""
        state = self.codec.mint(
            flow_id=flow.id,
            server_client_id=flow.server_client_id,
            subject=Subject(iss=flow.subject_iss, sub=flow.subject_sub),
            expires_at=self._state_expiry(flow),
            asked=ask,
        )
        result: dict[str, Any] = {"resultType": "input_required", "requestState": state}
        if ask:
            result["inputRequests"] = {
                input_key(flow.id): {
                    "method": "elicitation/create",
                    "params": {"mode": "url", "message": flow.message, "url": self.url_for(flow)},
                }
            }
        return result

    def legacy(self, flow: FlowFields) -> dict[str, Any]:
        """The 2025-11-25 equivalent: the URL elicitation and the -32042 error that carries it."""
        elicitation = {
            "mode": "url",
            "elicitationId": FLOW_ID.format(flow.id),
            "message": flow.message,
            "url": self.url_for(flow),
        }
        return {
            "code": LEGACY_URL_ELICITATION_REQUIRED,
            "message": "URL elicitation required",
            "elicitation": elicitation,
            "data": {"elicitations": [elicitation]},
        }

    # ---- the API's answers -----------------------------------------------------------------------
    def created(self, flow: FlowFields) -> CreateFlowResponse:
        return CreateFlowResponse(
            status=flow.status,
            flow=self.view(flow),
            mcp=self.mcp_input_required(flow, ask=True),
            legacy=self.legacy(flow),
        )

    @staticmethod
    def satisfied(
        request: CreateFlowRequest, normalized: NormalizedFlow, result: dict[str, Any], stamp: datetime
    ) -> CreateFlowResponse:
        """A create that needs no flow (the kind is satisfied already): completed at ``stamp``."""
        view = FlowView(
            id="",
            kind=normalized.kind,
            status="completed",
            url="",
            expires_at=stamp,
            created_at=stamp,
            subject=request.subject,
            provider=normalized.provider,
            scopes=list(normalized.scopes),
            completed_at=stamp,
        )
        return CreateFlowResponse(status="completed", flow=view, result=result)

    def resolved(self, flow: FlowFields, outcome: Outcome, *, ask: bool = False) -> ResolveResponse:
        tag_flow(flow, outcome.value)
        mcp = self.mcp_input_required(flow, ask=ask) if outcome is Outcome.INPUT_REQUIRED else None
        result = flow.result if outcome is Outcome.COMPLETED else None
        return ResolveResponse(outcome=outcome.value, flow=self.view(flow), result=result, mcp=mcp)

    def status_of(self, flow: FlowFields, *, whole: bool = True) -> StatusResponse:
        tag_flow(flow, flow.status)
        if not whole:
            return StatusResponse(flow=self.summary(flow))
        return StatusResponse(flow=self.view(flow), result=flow.result if flow.status == "completed" else None)
