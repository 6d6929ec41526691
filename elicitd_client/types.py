"""Typed views of elicitd's answers. Plain dataclasses, so the client needs nothing beyond httpx.

Every view keeps the raw JSON it came from in ``raw``: fields elicitd adds later stay reachable
without a new release of this library.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

Outcome = Literal["completed", "input_required", "declined", "cancelled", "expired", "failed"]
Kind = Literal["oauth_connect", "api_key", "consent", "payment", "external"]
TERMINAL_STATUSES = frozenset({"completed", "declined", "cancelled", "expired", "failed"})


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


@dataclass(frozen=True, slots=True)
class Subject:
    """The end user as the MCP server's *verified* access token names them (issuer + ``sub``)."""

    iss: str
    sub: str

    def as_json(self) -> dict[str, str]:
        return {"iss": self.iss, "sub": self.sub}


@dataclass(frozen=True, slots=True)
class FlowError:
    code: str
    message: str | None = None


@dataclass(frozen=True, slots=True)
class Flow:
    id: str
    kind: str
    status: str
    url: str
    subject: Subject | None
    provider: str | None
    scopes: tuple[str, ...]
    expires_at: datetime | None
    created_at: datetime | None
    completed_at: datetime | None
    error: FlowError | None
    raw: dict[str, Any] = field(repr=False)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Flow:
        subject = data.get("subject")
        error = data.get("error")
        return cls(
            id=str(data.get("id", "")),
            kind=str(data.get("kind", "")),
            status=str(data.get("status", "")),
            url=str(data.get("url", "")),
            subject=Subject(subject["iss"], subject["sub"]) if isinstance(subject, dict) else None,
            provider=data.get("provider"),
            scopes=tuple(data.get("scopes") or ()),
            expires_at=_time(data.get("expires_at")),
            created_at=_time(data.get("created_at")),
            completed_at=_time(data.get("completed_at")),
            error=FlowError(error["code"], error.get("message")) if isinstance(error, dict) else None,
            raw=data,
        )


@dataclass(frozen=True, slots=True)
class CreatedFlow:
    """``POST /v1/flows``. ``created`` is True for a new flow (201), False for a reused or an
    already-satisfied one (200). ``mcp`` is a ready 2026-07-28 ``InputRequiredResult`` (JSON),
    ``legacy`` the 2025-11-25 ``-32042`` equivalent; both are absent when ``status == "completed"``."""

    created: bool
    status: str
    flow: Flow
    result: dict[str, Any] | None
    mcp: dict[str, Any] | None
    legacy: dict[str, Any] | None
    raw: dict[str, Any] = field(repr=False)

    @property
    def completed(self) -> bool:
        return self.status == "completed"

    @property
    def request_state(self) -> str | None:
        return None if self.mcp is None else self.mcp.get("requestState")

    @property
    def elicitation(self) -> dict[str, Any] | None:
        """The 2025-11-25 URL elicitation (``mode``, ``elicitationId``, ``message``, ``url``)."""
        return None if self.legacy is None else self.legacy.get("elicitation")

    @classmethod
    def from_json(cls, data: dict[str, Any], *, created: bool) -> CreatedFlow:
        return cls(
            created=created,
            status=str(data.get("status", "")),
            flow=Flow.from_json(data.get("flow") or {}),
            result=data.get("result"),
            mcp=data.get("mcp"),
            legacy=data.get("legacy"),
            raw=data,
        )


@dataclass(frozen=True, slots=True)
class Resolution:
    """``POST /v1/flows/resolve``: what the MCP server does with the client's retry.

    ``completed`` carries ``result``; ``input_required`` carries a fresh ``mcp`` object to return
    as is; ``declined`` / ``cancelled`` become a normal tool result; ``expired`` / ``failed`` mean
    start over."""

    outcome: str
    flow: Flow
    result: dict[str, Any] | None
    mcp: dict[str, Any] | None
    raw: dict[str, Any] = field(repr=False)

    @property
    def state_only(self) -> bool:
        """An ``input_required`` that asks nobody anything: "still pending, retry"."""
        return self.mcp is not None and not self.mcp.get("inputRequests")

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Resolution:
        return cls(
            outcome=str(data.get("outcome", "")),
            flow=Flow.from_json(data.get("flow") or {}),
            result=data.get("result"),
            mcp=data.get("mcp"),
            raw=data,
        )


@dataclass(frozen=True, slots=True)
class FlowStatus:
    """``GET /v1/flows/{id}`` (and the answer of complete/fail). For a server client that must prove
    the subject, read without the flow's user's token, ``result`` is None and ``flow.subject`` and
    ``flow.url`` are absent (None and "")."""

    flow: Flow
    result: dict[str, Any] | None
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FlowStatus:
        return cls(flow=Flow.from_json(data.get("flow") or {}), result=data.get("result"), raw=data)


@dataclass(frozen=True, slots=True)
class Token:
    """A third-party access token from ``GET /v1/connections/{provider}/token``.

    ``repr`` never shows the token itself, so logging the object is safe."""

    access_token: str = field(repr=False)
    token_type: str
    expires_at: datetime | None
    scopes: tuple[str, ...]
    connection_id: str | None
    account: str | None
    raw: dict[str, Any] = field(repr=False)

    @property
    def authorization(self) -> str:
        """The ``Authorization`` header value for the third-party API."""
        return f"{self.token_type or 'Bearer'} {self.access_token}"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Token:
        scopes = data.get("scopes")
        if scopes is None and isinstance(data.get("scope"), str):
            scopes = data["scope"].split()
        expires = data.get("expires_at")
        account = data.get("account") or data.get("account_id") or data.get("account_login")
        if isinstance(account, dict):
            account = account.get("login") or account.get("id")
        return cls(
            access_token=str(data.get("access_token", "")),
            token_type=str(data.get("token_type") or "Bearer"),
            expires_at=_time(expires) if isinstance(expires, str) else None,
            scopes=tuple(scopes or ()),
            connection_id=data.get("connection_id"),
            account=None if account is None else str(account),
            raw=data,
        )
