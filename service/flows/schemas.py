"""Wire shapes of the MCP-server API. Inputs forbid unknown fields, so typos fail loudly.

Every string a person will read (a message, an account label, a failure message) keeps the text
rule (``service.text``), and every free-form object keeps the size rule (``service.limits``); both
are checked in ``__post_init__``, so a refusal is a 400 naming the field, before anything is stored.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal

import msgspec
from msgspec import Meta

from service.limits import MAX_RESULT_BYTES, check_object_size
from service.text import check_display_text

Text200 = Annotated[str, Meta(min_length=1, max_length=200)]
Issuer = Annotated[str, Meta(min_length=1, max_length=512, pattern=r"^\S+$")]
SubjectId = Annotated[str, Meta(min_length=1, max_length=255)]
Scope = Annotated[str, Meta(min_length=1, max_length=200, pattern=r"^[\x21\x23-\x5B\x5D-\x7E]+$")]
ProviderName = Annotated[str, Meta(min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9_.-]*$")]
ErrorCode = Annotated[str, Meta(min_length=1, max_length=64, pattern=r"^[a-z0-9_]+$")]
if TYPE_CHECKING:
    KindName = str
else:  # the allowed kinds are the registered plugins' names (``service.kinds``)
    from service.kinds import KIND_NAMES

    KindName = Literal[KIND_NAMES]
ActionName = Literal["accept", "decline", "cancel"]


class Subject(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The end user as the MCP server's *verified* access token names them: issuer plus ``sub``."""

    iss: Issuer
    sub: SubjectId

    def __post_init__(self) -> None:
        check_display_text(self.iss, "iss")
        check_display_text(self.sub, "sub")


class CreateFlowRequest(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    subject: Subject
    kind: KindName
    provider: ProviderName | None = None
    scopes: Annotated[list[Scope], Meta(max_length=50)] = []
    message: Annotated[str, Meta(min_length=1, max_length=1000)] | None = None
    ttl_seconds: Annotated[int, Meta(ge=30)] | None = None
    context: Annotated[dict[str, Any], Meta(max_length=20)] = {}
    params: Annotated[dict[str, Any], Meta(max_length=50)] = {}
    url: Annotated[str, Meta(min_length=8, max_length=2000)] | None = None
    account: Annotated[str, Meta(min_length=1, max_length=255)] | None = None
    # ``oauth_connect``: reconnect this connection (``cn_…``) in place, for the same provider account.
    reconnect: Annotated[str, Meta(min_length=1, max_length=64)] | None = None

    def __post_init__(self) -> None:
        # The message is shown on elicitd's page and in the MCP client's prompt.
        check_display_text(self.message, "message", multiline=True)
        check_display_text(self.account, "account")
        check_object_size(self.context, "context")
        check_object_size(self.params, "params")


class FlowError(msgspec.Struct):
    code: str
    message: str | None = None


class FlowView(msgspec.Struct, omit_defaults=True, kw_only=True):
    """A flow as the API shows it. ``url`` and ``subject`` are absent only from what a server client
    that must prove the subject reads with its API key alone (``FlowService.summary``)."""

    id: str
    kind: str
    status: str
    url: str | None = None
    expires_at: datetime
    created_at: datetime
    subject: Subject | None = None
    provider: str | None = None
    scopes: list[str] = []
    completed_at: datetime | None = None
    error: FlowError | None = None


class UrlElicitationParams(msgspec.Struct):
    mode: Literal["url"]
    message: str
    url: str


class ElicitationRequest(msgspec.Struct):
    method: Literal["elicitation/create"]
    params: UrlElicitationParams


class InputRequiredResult(msgspec.Struct, omit_defaults=True, rename="camel"):
    """The 2026-07-28 MCP ``InputRequiredResult`` that ``mcp`` holds: a tool returns it as is.
    Without ``inputRequests`` it is state-only: the client retries at once, nobody is asked."""

    result_type: Literal["input_required"]
    request_state: str
    input_requests: dict[str, ElicitationRequest] | None = None


class LegacyUrlElicitation(msgspec.Struct, rename="camel"):
    mode: Literal["url"]
    elicitation_id: str
    message: str
    url: str


class LegacyElicitations(msgspec.Struct):
    elicitations: list[LegacyUrlElicitation]


class LegacyUrlElicitationRequired(msgspec.Struct):
    """The 2025-11-25 equivalent: the ``-32042`` JSON-RPC error that carries the URL elicitation."""

    code: Literal[-32042]
    message: str
    elicitation: LegacyUrlElicitation
    data: LegacyElicitations


class CreateFlowResponse(msgspec.Struct, omit_defaults=True):
    status: str
    flow: FlowView
    result: dict[str, Any] | None = None
    mcp: dict[str, Any] | None = None
    legacy: dict[str, Any] | None = None


class InputResponse(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    action: ActionName
    content: dict[str, Any] | None = None
    meta: dict[str, Any] | None = msgspec.field(default=None, name="_meta")

    def __post_init__(self) -> None:
        check_object_size(self.content, "content")
        check_object_size(self.meta, "_meta")


class ResolveRequest(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    subject: Subject
    request_state: Annotated[str, Meta(min_length=1, max_length=4096)]
    input_responses: Annotated[dict[str, InputResponse], Meta(max_length=20)] = {}
    wait_seconds: Annotated[float, Meta(ge=0, le=300)] = 0


class ResolveResponse(msgspec.Struct, omit_defaults=True):
    outcome: str
    flow: FlowView
    result: dict[str, Any] | None = None
    mcp: dict[str, Any] | None = None


class StatusResponse(msgspec.Struct, omit_defaults=True):
    flow: FlowView
    result: dict[str, Any] | None = None


class CompleteRequest(msgspec.Struct, forbid_unknown_fields=True):
    result: Annotated[dict[str, Any], Meta(max_length=100)]

    def __post_init__(self) -> None:
        check_object_size(self.result, "result", MAX_RESULT_BYTES)


class FailRequest(msgspec.Struct, forbid_unknown_fields=True):
    code: ErrorCode
    message: Annotated[str, Meta(max_length=500)] | None = None

    def __post_init__(self) -> None:
        check_display_text(self.message, "message", multiline=True)
