"""Wire shapes of the admin API. Views are built field by field from columns that hold no secret:
a server client shows whether a webhook secret is set, never the secret; a flow shows neither its
``result`` nor its ``params`` (both are caller-supplied and may hold anything)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from service.flows.schemas import ProviderName, Subject

RoleName = Literal["viewer", "operator", "admin"]
Name = Annotated[str, Meta(min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$")]
IssuerUrl = Annotated[str, Meta(min_length=1, max_length=512, pattern=r"^\S+$")]
WebhookUrl = Annotated[str, Meta(min_length=8, max_length=2000)]
Limit = Annotated[int, Meta(ge=1, le=1_000_000)]
SubjectProof = Literal["required", "none"]
ResourceUri = Annotated[str, Meta(min_length=1, max_length=2000, pattern=r"^\S+$")]


class AdminFlow(msgspec.Struct):
    id: str
    kind: str
    status: str
    server_client: str
    subject: Subject
    provider: str | None
    scopes: list[str]
    message: str
    created_at: datetime
    expires_at: datetime
    completed_at: datetime | None
    error_code: str | None
    error_message: str | None
    connection_id: str | None
    context: dict[str, Any]
    has_result: bool


class AdminFlowEvent(msgspec.Struct):
    id: int
    at: datetime
    type: str
    actor: str
    from_status: str | None
    to_status: str | None
    detail: dict[str, Any]


class WebhookDeliveryView(msgspec.Struct):
    id: str
    server_client: str
    flow_id: str | None  # None for a connection event
    event_type: str
    state: Literal["pending", "in_flight", "delivered", "abandoned"]
    attempts: int
    next_attempt_at: datetime
    last_attempt_at: datetime | None
    last_status: int | None
    last_error: str | None
    delivered_at: datetime | None
    abandoned_at: datetime | None
    created_at: datetime


class FlowDetail(msgspec.Struct):
    flow: AdminFlow
    events: list[AdminFlowEvent]
    webhooks: list[WebhookDeliveryView]
    # The result's keys and each value's JSON type ("string", "number" …), never a value; None
    # while the flow has no result.
    result_shape: Any = None


class FlowPage(msgspec.Struct):
    items: list[AdminFlow]
    next_cursor: str | None


class WebhookPage(msgspec.Struct):
    items: list[WebhookDeliveryView]
    next_cursor: str | None


class ApiKeyView(msgspec.Struct):
    id: str
    prefix: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    active: bool


class ServerClientView(msgspec.Struct):
    id: str
    name: str
    display_name: str
    allowed_providers: list[str]
    trusted_issuers: list[str]
    webhook_url: str | None
    # None: every event type.
    webhook_events: list[str] | None
    webhook_secret_set: bool
    disabled: bool
    flows_per_minute: int | None
    pending_per_subject: int | None
    subject_proof: SubjectProof
    resource_uris: list[str]
    created_at: datetime
    keys: list[ApiKeyView]
    # Stable codes an operator should act on, e.g. ``subject_proof_not_required``.
    warnings: list[str]


class ServerClientPage(msgspec.Struct):
    items: list[ServerClientView]
    next_cursor: str | None


class CreateServerClient(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    name: Name
    display_name: Annotated[str, Meta(min_length=1, max_length=200)] | None = None
    allowed_providers: Annotated[list[ProviderName], Meta(max_length=100)] = []
    trusted_issuers: Annotated[list[IssuerUrl], Meta(max_length=100)] = []
    flows_per_minute: Limit | None = None
    pending_per_subject: Limit | None = None
    subject_proof: SubjectProof = "required"
    resource_uris: Annotated[list[ResourceUri], Meta(max_length=20)] = []


class UpdateServerClient(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Only the fields present change; ``null`` clears a limit (no limit)."""

    display_name: Annotated[str, Meta(min_length=1, max_length=200)] | msgspec.UnsetType = msgspec.UNSET
    allowed_providers: Annotated[list[ProviderName], Meta(max_length=100)] | msgspec.UnsetType = msgspec.UNSET
    trusted_issuers: Annotated[list[IssuerUrl], Meta(max_length=100)] | msgspec.UnsetType = msgspec.UNSET
    flows_per_minute: Limit | msgspec.UnsetType | None = msgspec.UNSET
    pending_per_subject: Limit | msgspec.UnsetType | None = msgspec.UNSET
    subject_proof: SubjectProof | msgspec.UnsetType = msgspec.UNSET
    resource_uris: Annotated[list[ResourceUri], Meta(max_length=20)] | msgspec.UnsetType = msgspec.UNSET


class CreatedServerClient(msgspec.Struct):
    """The only response that carries the API key: shown once."""

    client: ServerClientView
    api_key: str


class RotateKey(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    grace_seconds: Annotated[int, Meta(ge=0, le=30 * 86400)] = 86400


class RotatedKey(msgspec.Struct):
    client: ServerClientView
    api_key: str
    old_keys_expire_at: datetime


class SetWebhook(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    url: WebhookUrl | None
    # The event types to deliver (``flow.completed``, ``connection.needs_reauthorization`` …);
    # omitted or null: every type.
    events: list[Annotated[str, Meta(min_length=1, max_length=48)]] | None = None


class WebhookSecret(msgspec.Struct):
    """The signing secret, shown once when a webhook is first set or its secret rotated."""

    client: ServerClientView
    webhook_secret: str | None


class ReplayResult(msgspec.Struct):
    delivery: WebhookDeliveryView


class StatusKindCount(msgspec.Struct):
    status: str
    kind: str
    count: int


class ProviderStats(msgspec.Struct):
    provider: str | None
    created: int
    completed: int
    completion_rate: float | None
    median_seconds_to_complete: float | None


class Stats(msgspec.Struct):
    window_seconds: int
    since: datetime
    counts: list[StatusKindCount]
    providers: list[ProviderStats]
    webhook_backlog: int


class AuditEntryView(msgspec.Struct):
    id: str
    at: datetime
    admin_token_id: str | None
    actor: str
    role: str | None
    operation: str
    method: str | None
    route: str | None
    target: str | None
    status: int | None
    seq: int  # the row's place in the audit hash chain
    detail: dict[str, Any]  # a command's result and problem code; ``corrects``: the row a correction amends


class AuditPage(msgspec.Struct):
    items: list[AuditEntryView]
    next_cursor: str | None


class AuditBrokenLink(msgspec.Struct):
    kind: str  # edited | deleted | inserted
    seq: int
    id: str | None  # the row named (au_…); None when no row is left to name
    reason: str


class AuditVerification(msgspec.Struct):
    ok: bool
    checked: int  # rows whose hash and link were checked before the first broken link
    tail_seq: int  # the chain starts after this seq (rows up to it were deleted by retention)
    head_seq: int
    head_hash: str  # hex: keep it outside the database to detect a rewrite of the whole chain
    broken: AuditBrokenLink | None
