"""The ``consent`` kind at creation: validate the text the user will be shown.

The parameters are the whole consent: nothing else reaches the page. They are normalized (details
become ordered ``[key, value]`` pairs) so that the same request reuses the same pending flow, and
so that the page and the receipt digest are computed from one canonical form.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import Meta
from sqlalchemy.ext.asyncio import AsyncSession

from service.errors import InvalidRequest, ServiceUnavailable
from service.flows.kinds import NormalizedFlow, Satisfied
from service.flows.schemas import CreateFlowRequest
from service.identity.keys import AuthenticatedClient
from service.text import check_display_text

# Plain text only (service/text.py): no control, format or separator character that would let a
# caller hide or reorder what the user reads; the description alone may span lines.
Title = Annotated[str, Meta(min_length=1, max_length=200)]
Description = Annotated[str, Meta(min_length=1, max_length=4000)]
DetailKey = Annotated[str, Meta(min_length=1, max_length=100)]
DetailValue = Annotated[str, Meta(min_length=1, max_length=500)]


class Detail(msgspec.Struct, forbid_unknown_fields=True):
    key: DetailKey
    value: DetailValue


class ConsentParams(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``params`` of a consent flow: a title, exactly what will happen, and optional facts."""

    title: Title
    description: Description
    details: (
        Annotated[list[Detail], Meta(max_length=20)] | Annotated[dict[DetailKey, DetailValue], Meta(max_length=20)]
    ) = []

    def __post_init__(self) -> None:
        check_display_text(self.title, "title")
        check_display_text(self.description, "description", multiline=True)
        pairs = self.details.items() if isinstance(self.details, dict) else ((d.key, d.value) for d in self.details)
        for key, value in pairs:
            check_display_text(key, "details")
            check_display_text(value, "details")


def parse_params(params: dict[str, Any]) -> tuple[str, str, list[tuple[str, str]]]:
    """Validated ``(title, description, details)``; the detail order is the caller's order."""
    try:
        parsed = msgspec.convert(params, ConsentParams)
    except msgspec.ValidationError as exc:
        raise InvalidRequest(f"Invalid consent params: {exc}", extra={"code": "invalid_params"}) from None
    details = (
        list(parsed.details.items()) if isinstance(parsed.details, dict) else [(d.key, d.value) for d in parsed.details]
    )
    return parsed.title.strip(), parsed.description.strip(), [(k.strip(), v.strip()) for k, v in details]


class ConsentKind:
    def __init__(self, *, signing_enabled: bool) -> None:
        self.signing_enabled = signing_enabled

    async def normalize(
        self, session: AsyncSession, client: AuthenticatedClient, request: CreateFlowRequest
    ) -> NormalizedFlow:
        if not self.signing_enabled:
            raise ServiceUnavailable(
                "Consent flows need a receipt signing key (ELICITD_SIGNING_KEY) on this elicitd.",
                extra={"code": "consent_unavailable"},
            )
        if request.url is not None or request.provider is not None or request.scopes:
            raise InvalidRequest(
                "A 'consent' flow takes only 'params' (title, description, details).", extra={"code": "invalid_params"}
            )
        title, description, details = parse_params(request.params)
        params = {"title": title, "description": description, "details": [{"key": k, "value": v} for k, v in details]}
        return NormalizedFlow(
            kind="consent",
            provider=None,
            scopes=(),
            params=params,
            message=request.message or f"Review and approve: {title}",
        )

    async def satisfied(
        self, session: AsyncSession, client: AuthenticatedClient, request: CreateFlowRequest, flow: NormalizedFlow
    ) -> Satisfied | None:
        # Every consent is asked anew: an earlier approval never stands in for this one.
        return None
