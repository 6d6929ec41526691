"""The ``payment`` kind at creation: amount, currency, description, optional idempotency key.

Amounts are integers in the currency's minor unit (cents), exactly as Stripe takes them: no float
ever touches money. The caller's idempotency key makes "pay for order 42" safe to repeat: while
the flow is pending the same request reuses it (the key is part of the reuse key), and once it is
paid a repeat answers ``completed`` with the same payment instead of asking to pay again.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import Meta
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from service.errors import Conflict, InvalidRequest, ServiceUnavailable
from service.flows.kinds import NormalizedFlow, Satisfied
from service.flows.schemas import CreateFlowRequest
from service.identity.keys import AuthenticatedClient
from service.text import check_display_text

# ISO 4217 currencies without minor units (Stripe's list): the amount is already whole units.
ZERO_DECIMAL = frozenset(
    {"bif", "clp", "djf", "gnf", "jpy", "kmf", "krw", "mga", "pyg", "rwf", "ugx", "vnd", "vuv", "xaf", "xof", "xpf"}
)


class PaymentParams(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    amount: Annotated[int, Meta(ge=1, le=99_999_999)]
    currency: Annotated[str, Meta(pattern=r"^[A-Za-z]{3}$")]
    description: Annotated[str, Meta(min_length=1, max_length=300)]
    idempotency_key: Annotated[str, Meta(min_length=1, max_length=200, pattern=r"^[\x21-\x7e]+$")] | None = None

    def __post_init__(self) -> None:
        check_display_text(self.description, "description")  # on the page and at the checkout


def parse_params(params: dict[str, Any]) -> PaymentParams:
    try:
        parsed = msgspec.convert(params, PaymentParams)
    except msgspec.ValidationError as exc:
        raise InvalidRequest(f"Invalid payment params: {exc}", extra={"code": "invalid_params"}) from None
    return msgspec.structs.replace(parsed, currency=parsed.currency.lower(), description=parsed.description.strip())


def format_amount(amount: int, currency: str) -> str:
    """``1999, "eur"`` → ``"19.99 EUR"``; zero-decimal currencies as whole numbers."""
    code = currency.upper()
    if currency.lower() in ZERO_DECIMAL:
        return f"{amount:,} {code}"
    return f"{amount // 100:,}.{amount % 100:02d} {code}"


class PaymentKind:
    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled

    async def normalize(
        self, session: AsyncSession, client: AuthenticatedClient, request: CreateFlowRequest
    ) -> NormalizedFlow:
        if not self.enabled:
            raise ServiceUnavailable(
                "Payments are not configured on this elicitd (ELICITD_STRIPE_SECRET_KEY).",
                extra={"code": "payments_unavailable"},
            )
        if request.url is not None or request.provider is not None or request.scopes:
            raise InvalidRequest(
                "A 'payment' flow takes only 'params' (amount, currency, description, idempotency_key).",
                extra={"code": "invalid_params"},
            )
        parsed = parse_params(request.params)
        params: dict[str, Any] = {
            "amount": parsed.amount,
            "currency": parsed.currency,
            "description": parsed.description,
        }
        if parsed.idempotency_key is not None:
            params["idempotency_key"] = parsed.idempotency_key
        message = request.message or f"Pay {format_amount(parsed.amount, parsed.currency)} for {parsed.description}."
        return NormalizedFlow(kind="payment", provider=None, scopes=(), params=params, message=message)

    async def satisfied(
        self, session: AsyncSession, client: AuthenticatedClient, request: CreateFlowRequest, flow: NormalizedFlow
    ) -> Satisfied | None:
        key = flow.params.get("idempotency_key")
        if key is None:
            return None
        row = (
            await session.execute(
                text(
                    "SELECT params, result FROM flows WHERE server_client_id = :c AND subject_iss = :i "
                    "AND subject_sub = :s AND kind = 'payment' AND status = 'completed' "
                    "AND params->>'idempotency_key' = :k ORDER BY completed_at DESC LIMIT 1"
                ),
                {"c": client.id, "i": request.subject.iss, "s": request.subject.sub, "k": key},
            )
        ).first()
        if row is None:
            return None
        paid_params, result = row
        if paid_params != flow.params:
            raise Conflict(
                "This idempotency key was already used for a different payment.",
                extra={"code": "idempotency_key_reused"},
            )
        return Satisfied(result=result)
