"""``ElicitdClient``: the typed async client of elicitd's MCP-server API (``/v1``).

Retries: only what may pass by itself is retried, with exponential backoff (plus jitter,
honouring ``Retry-After``): connection failures, ``502``/``504`` (elicitd or a provider behind it
briefly unreachable) and a ``503`` that carries ``Retry-After`` (elicitd busy for a moment). A
``503`` without it is a permanent answer (``payments_unavailable``: this elicitd has no payment
provider), as is a ``500`` (a bug on elicitd's side): retrying those only delays the same answer,
so they are raised at once with elicitd's problem ``code``. Every call is safe to repeat: create
is create-or-reuse, resolve and status read or wait, revoke is idempotent, and complete/fail
recognise their own earlier success when the first answer was lost. A read timeout is *not*
retried: a long-poll that timed out already spent the caller's waiting budget.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any

import httpx

from elicitd_client.errors import ElicitdError, ElicitdUnavailable, FlowNotPending, error_from_problem
from elicitd_client.events import EventStream
from elicitd_client.types import CreatedFlow, FlowStatus, Resolution, Subject, Token

# Statuses that may pass by themselves; 503 only with ``Retry-After`` (see ``_transient``).
RETRY_STATUSES = frozenset({502, 503, 504})
# Transport failures where the request either never arrived or its answer was lost mid-way.
RETRY_ERRORS: tuple[type[Exception], ...] = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.ReadError,
    httpx.WriteError,
    httpx.RemoteProtocolError,
    httpx.PoolTimeout,
)


def _transient(response: httpx.Response) -> bool:
    """Whether another attempt may get a different answer."""
    if response.status_code == 503:
        return "retry-after" in response.headers
    return response.status_code in RETRY_STATUSES


SUBJECT_TOKEN_HEADER = "Elicitd-Subject-Token"


def sdk_access_token() -> str | None:
    """The access token the MCP SDK verified for the request being served, if any.

    The SDK's auth middleware keeps it in a context variable for the request's duration, so a call
    made from inside a tool forwards that request's user's token. Imported lazily: ``elicitd[client]``
    does not install the SDK, and then there is nothing to forward."""
    try:
        from mcp.server.auth.middleware.auth_context import get_access_token
    except ImportError:
        return None
    token = get_access_token()
    return token.token if token is not None else None


def _subject(subject: Subject | Mapping[str, str]) -> dict[str, str]:
    if isinstance(subject, Subject):
        return subject.as_json()
    return {"iss": str(subject["iss"]), "sub": str(subject["sub"])}


class ElicitdClient:
    """One server client's view of elicitd. Create it once per process and share it.

    >>> async with ElicitdClient("https://elicitd.example.com", api_key) as elicitd:
    ...     flow = await elicitd.create_flow(subject, "oauth_connect", provider="github", scopes=["repo"])
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 30.0,
        retries: int = 3,
        backoff: float = 0.2,
        max_backoff: float = 5.0,
        http: httpx.AsyncClient | None = None,
        subject_tokens: Callable[[], str | None] = sdk_access_token,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        # Where the user's access token comes from on calls that name a subject (the subject proof):
        # by default the MCP SDK's verified token of the current request.
        self.subject_tokens = subject_tokens
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.timeout = timeout
        self._owns_http = http is None
        self._http = http or httpx.AsyncClient(timeout=timeout)
        self._headers = {
            "Authorization": f"Bearer {api_key}",
            "Accept": "application/json",
            "User-Agent": "elicitd-client/0.1",
        }

    def __repr__(self) -> str:  # the API key stays out of reprs and logs
        return f"ElicitdClient({self.base_url!r})"

    async def __aenter__(self) -> ElicitdClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    # ---- transport ---------------------------------------------------------------------------------
    def _delay(self, attempt: int, retry_after: str | None) -> float:
        if retry_after is not None and retry_after.isdigit():
            return min(float(retry_after), self.max_backoff)
        base = min(self.backoff * (2**attempt), self.max_backoff)
        return float(base / 2 + random.random() * base / 2)  # noqa: S311 (jitter, not security)

    async def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        wait_seconds: float = 0,
        subject_token: str | None = None,
    ) -> tuple[int, Any]:
        """Send one API call with retries; return ``(status, json)`` or raise an ``ElicitdError``.

        ``subject_token`` (the user's access token) goes in ``Elicitd-Subject-Token``."""
        headers = self._headers if not subject_token else {**self._headers, SUBJECT_TOKEN_HEADER: subject_token}
        timeout = httpx.Timeout(self.timeout + wait_seconds, connect=min(self.timeout, 10.0))
        last = "no attempt made"
        last_response: httpx.Response | None = None
        retry_after: str | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(self._delay(attempt - 1, retry_after))
                retry_after = None
            try:
                response = await self._http.request(
                    method, self.base_url + path, json=json, params=params, headers=headers, timeout=timeout
                )
            except RETRY_ERRORS as exc:
                last, last_response = f"{type(exc).__name__} talking to elicitd", None
                continue
            except httpx.TimeoutException as exc:
                raise ElicitdUnavailable(f"elicitd did not answer in time ({type(exc).__name__})") from exc
            if _transient(response):
                retry_after = response.headers.get("retry-after")
                last, last_response = f"elicitd answered HTTP {response.status_code}", response
                continue
            return response.status_code, self._body(response)
        raise self._exhausted(f"{last} after {self.retries + 1} attempts", last_response)

    @staticmethod
    def _exhausted(detail: str, response: httpx.Response | None) -> ElicitdUnavailable:
        """``ElicitdUnavailable`` keeping the last answer's problem ``code`` (``unavailable``,
        ``provider_refresh_failed`` …) and status, so the caller still learns what kept failing."""
        if response is None:
            return ElicitdUnavailable(detail)
        problem = ElicitdClient._problem(response)
        code = problem.get("code")
        return ElicitdUnavailable(
            detail,
            code=code if isinstance(code, str) and code else None,
            status=response.status_code,
            problem=problem,
        )

    @staticmethod
    def _problem(response: httpx.Response) -> dict[str, Any]:
        try:
            body = response.json() if response.content else None
        except ValueError:
            body = None
        return body if isinstance(body, dict) else {"detail": f"elicitd answered HTTP {response.status_code}"}

    @staticmethod
    def _body(response: httpx.Response) -> Any:
        if response.status_code >= 400:
            raise error_from_problem(response.status_code, ElicitdClient._problem(response))
        try:
            return response.json() if response.content else None
        except ValueError:
            return None

    def _proof(self, subject_token: str | None) -> str | None:
        """The subject token for a call naming a subject: the caller's, else ``subject_tokens()``."""
        return subject_token if subject_token is not None else self.subject_tokens()

    # ---- flows -------------------------------------------------------------------------------------
    async def create_flow(
        self,
        subject: Subject | Mapping[str, str],
        kind: str,
        *,
        provider: str | None = None,
        scopes: Sequence[str] = (),
        message: str | None = None,
        ttl_seconds: int | None = None,
        context: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
        url: str | None = None,
        account: str | None = None,
        subject_token: str | None = None,
    ) -> CreatedFlow:
        """Create a flow or reuse the subject's pending equivalent (same id, same URL).

        ``status == "completed"`` means nothing needs asking (an ``oauth_connect`` whose connection
        already covers the scopes). ``subject_token`` is the user's access token, for a server
        client that must prove the subject; by default the MCP SDK's token of this request."""
        body: dict[str, Any] = {"subject": _subject(subject), "kind": kind, "scopes": list(scopes)}
        optional = {
            "provider": provider,
            "message": message,
            "ttl_seconds": ttl_seconds,
            "url": url,
            "account": account,
            "context": dict(context) if context else None,
            "params": dict(params) if params else None,
        }
        body.update({key: value for key, value in optional.items() if value is not None})
        status, data = await self.request("POST", "/v1/flows", json=body, subject_token=self._proof(subject_token))
        return CreatedFlow.from_json(data, created=status == 201)

    async def resolve(
        self,
        subject: Subject | Mapping[str, str],
        request_state: str,
        input_responses: Mapping[str, Mapping[str, Any]] | None = None,
        wait_seconds: float = 0,
        *,
        subject_token: str | None = None,
    ) -> Resolution:
        """Resolve an MCP client's retry: apply its action and, on ``accept``, wait up to
        ``wait_seconds`` for the flow to finish."""
        body = {
            "subject": _subject(subject),
            "request_state": request_state,
            "input_responses": {key: dict(value) for key, value in (input_responses or {}).items()},
            "wait_seconds": wait_seconds,
        }
        _, data = await self.request(
            "POST", "/v1/flows/resolve", json=body, wait_seconds=wait_seconds, subject_token=self._proof(subject_token)
        )
        return Resolution.from_json(data)

    async def status(self, flow_id: str, *, wait_seconds: float = 0, subject_token: str | None = None) -> FlowStatus:
        """A flow's status; with ``wait_seconds`` a long-poll that returns as soon as it is terminal.

        For a server client that must prove the subject, elicitd tells only the flow's state and
        outcome (no ``subject``, ``url`` or ``result``) unless ``subject_token`` is the flow's
        user's access token; by default the MCP SDK's token of this request, as on every call."""
        params = {"wait_seconds": wait_seconds} if wait_seconds else None
        _, data = await self.request(
            "GET",
            f"/v1/flows/{flow_id}",
            params=params,
            wait_seconds=wait_seconds,
            subject_token=self._proof(subject_token),
        )
        return FlowStatus.from_json(data)

    async def complete(self, flow_id: str, result: Mapping[str, Any]) -> FlowStatus:
        """Complete an ``external`` flow with the caller's result."""
        return await self._finish(flow_id, "complete", {"result": dict(result)}, "completed")

    async def fail(self, flow_id: str, code: str, message: str | None = None) -> FlowStatus:
        """Fail an ``external`` flow with a code the MCP server can act on."""
        body: dict[str, Any] = {"code": code} if message is None else {"code": code, "message": message}
        return await self._finish(flow_id, "fail", body, "failed")

    async def _finish(self, flow_id: str, verb: str, body: dict[str, Any], target: str) -> FlowStatus:
        try:
            _, data = await self.request("POST", f"/v1/flows/{flow_id}/{verb}", json=body)
        except FlowNotPending:
            # A retried call whose first attempt succeeded but whose answer was lost: the flow is
            # already where we wanted it. Any other terminal state is a real conflict. Only the
            # state is needed, which every status read tells: no subject token ("" sends none).
            current = await self.status(flow_id, subject_token="")
            if current.flow.status == target:
                return current
            raise
        return FlowStatus.from_json(data)

    # ---- events ------------------------------------------------------------------------------------
    def events(
        self,
        *,
        last_event_id: int | None = None,
        on_connected: Callable[[int], None] | None = None,
        restart_when_expired: bool = False,
    ) -> EventStream:
        """This server client's event stream (``GET /v1/events``): ``async for event in ...``.

        Starts after ``last_event_id`` (resume) or at the stream's current end; reconnects and
        resumes by itself. ``on_connected(position)`` is called on each (re)connection once elicitd
        told the position. ``restart_when_expired`` resumes from the current end, instead of
        raising ``EventsExpired``, when the events after the position are past elicitd's retention."""
        return EventStream(
            self, last_event_id=last_event_id, on_connected=on_connected, restart_when_expired=restart_when_expired
        )

    @contextlib.asynccontextmanager
    async def stream_get(
        self, path: str, *, headers: Mapping[str, str], timeout: httpx.Timeout
    ) -> AsyncIterator[httpx.Response]:
        """A streamed GET with this client's credentials (no retries: the caller resumes)."""
        async with self._http.stream(
            "GET", self.base_url + path, headers={**self._headers, **headers}, timeout=timeout
        ) as response:
            yield response

    # ---- connections -------------------------------------------------------------------------------
    async def token(
        self,
        provider: str,
        subject: Subject | Mapping[str, str],
        *,
        scopes: Sequence[str] = (),
        account: str | None = None,
        subject_token: str | None = None,
    ) -> Token:
        """A valid access token for the subject's connection (refreshed by elicitd when near expiry).

        Raises ``NotConnected`` (start an ``oauth_connect`` flow) or ``ReauthorizationRequired``."""
        params: dict[str, Any] = _subject(subject)
        if scopes:
            params["scopes"] = " ".join(scopes)
        if account is not None:
            params["account"] = account
        _, data = await self.request(
            "GET", f"/v1/connections/{provider}/token", params=params, subject_token=self._proof(subject_token)
        )
        return Token.from_json(data)

    async def revoke(
        self,
        provider: str,
        subject: Subject | Mapping[str, str],
        *,
        account: str | None = None,
        subject_token: str | None = None,
    ) -> dict[str, Any]:
        """Forget the subject's connection (and revoke it at the provider when it can). Returns
        elicitd's answer (``revoked`` connection ids, ``revoked_at_provider``)."""
        params: dict[str, Any] = _subject(subject)
        if account is not None:
            params["account"] = account
        _, data = await self.request(
            "DELETE", f"/v1/connections/{provider}", params=params, subject_token=self._proof(subject_token)
        )
        return data if isinstance(data, dict) else {}


__all__ = ["ElicitdClient", "ElicitdError"]
