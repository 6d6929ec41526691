"""elicitd inside an ``MCPServer`` tool: one call gives the tool the user's token (or consent, or
payment), whatever the protocol revision.

    elicitd = Elicitd(ElicitdClient(url, api_key))
    elicitd.install(mcp)                       # once: lets helpers answer ``input_required``

    @mcp.tool()
    async def list_files(ctx: Context) -> str:
        token = await elicitd.require_token(ctx, provider="github", scopes=["repo"])
        ...

How a call unfolds:

* The subject is the *verified* user of the SDK's access token: ``claims["iss"]`` plus ``sub``.
  The token itself goes along on every call naming the subject (``ElicitdClient`` reads it from
  the SDK's request context), so an elicitd that requires subject proof checks it at the issuer.
* 2026-07-28: the client must declare URL elicitation on this very request, or the call fails
  with ``-32021`` and ``data.requiredCapabilities``. Round 1 creates (or reuses) the flow and
  answers elicitd's ready ``InputRequiredResult``; each retry resolves ``ctx.input_responses`` /
  ``ctx.request_state`` through elicitd, which blocks up to ``wait_seconds``. A call spends at
  most ``budget_seconds`` (hosts time tool calls out after ~60 s) and ``max_rounds`` rounds (the
  SDK client's default cap is 10) waiting; then the tool gets ``ElicitationPending``.
* 2025-11-25: push style. The helper sends ``elicitation/create`` (URL mode) mid-call, tells
  elicitd the client's answer and waits within the same budget; when the user is still busy it
  raises the SDK's ``UrlElicitationRequiredError`` (-32042), and ``notify_completed`` later sends
  ``notifications/elicitation/complete``. It is fed by elicitd's event stream: each MCP-server
  process runs one consumer (started with the first such session), so whichever replica holds a
  session tells it — or by a completion webhook route calling ``notify_completed``. With
  ``legacy="error"`` it raises -32042 at once instead of asking mid-call.

``requestState``: the value elicitd mints is AEAD-sealed and bound to the flow, this server
client, the subject and an expiry. The SDK's own ``RequestStateBoundary`` stays in place and seals
it once more, binding it to the tool name, the call's arguments and the principal — which elicitd
cannot see. Both layers are needed for consent and payments (a state for ``deploy(prod)`` must
not complete ``deploy(staging)``); the price is that replicas share the SDK keys, see
``docs/mcp.md``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal, ParamSpec, TypeVar, overload

from mcp import MCPError, UrlElicitationRequiredError
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import (
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    ClientCapabilities,
    ElicitationCapability,
    ElicitRequestURLParams,
    FormElicitationCapability,
    InputRequiredResult,
    MissingRequiredClientCapabilityErrorData,
    UrlElicitationCapability,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from elicitd_client.client import ElicitdClient
from elicitd_client.errors import (
    ElicitdError,
    ElicitdUnavailable,
    InvalidRequestState,
    RateLimited,
    ReauthorizationRequired,
)
from elicitd_client.forms import (
    Form,
    FormSchemaError,
    InputAccepted,
    InputCancelled,
    InputDeclined,
    InputResult,
    form_of,
)
from elicitd_client.outcomes import (
    Completed,
    Consent,
    ElicitationCancelled,
    ElicitationDeclined,
    ElicitationFailed,
    ElicitationOutcome,
    ElicitationPending,
    ElicitdRefused,
    InputRequired,
    InvalidInput,
    Payment,
    SubjectUnavailable,
)
from elicitd_client.types import CreatedFlow, Flow, Resolution, Subject, Token

logger = logging.getLogger("elicitd_client.mcp")

P = ParamSpec("P")
R = TypeVar("R")
M = TypeVar("M", bound=BaseModel)
_STATE_PREFIX = "elicitd1"
_KEY_PREFIX = "elicitd_"
_FORM_KEY_PREFIX = "elicitd_form_"
# This request's envelope as the helpers changed it so far: a form answered in this round must be
# in the state of an ``input_required`` that a later requirement of the same call raises.
_THIS_CALL: ContextVar[tuple[object, _Round] | None] = ContextVar("elicitd_this_call", default=None)


@dataclass(frozen=True, slots=True)
class _Need:
    """One requirement of a tool call; ``tag`` tells its request state apart from another
    requirement's in the same tool (a tool may need a token *and* consent)."""

    kind: str
    create: dict[str, Any]

    @property
    def tag(self) -> str:
        material = json.dumps([self.kind, self.create], sort_keys=True, default=str).encode()
        return hashlib.sha256(material).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class _Round:
    """Our envelope around elicitd's sealed states: when the call started, how many
    ``input_required`` answers the client has seen, and per requirement of the tool (by tag) its
    flow id and elicitd state — a tool needing two things keeps the first one's completed state
    while the second is asked. Only routing and budgets live here: the SDK boundary authenticates
    the envelope, and elicitd re-checks everything that matters inside its own sealed states."""

    started: float
    rounds: int
    states: dict[str, tuple[str, str]]

    def encode(self) -> str:
        document = {"t": int(self.started), "n": self.rounds, "s": {k: list(v) for k, v in self.states.items()}}
        raw = json.dumps(document, separators=(",", ":")).encode()
        return f"{_STATE_PREFIX}.{base64.urlsafe_b64encode(raw).decode().rstrip('=')}"

    @classmethod
    def decode(cls, value: str | None) -> _Round | None:
        if not value or not value.startswith(_STATE_PREFIX + "."):
            return None
        try:
            body = value[len(_STATE_PREFIX) + 1 :]
            document = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
            states = {str(k): (str(v[0]), str(v[1])) for k, v in document["s"].items()}
            return cls(started=float(document["t"]), rounds=int(document["n"]), states=states)
        except (ValueError, KeyError, TypeError, IndexError, AttributeError):
            return None


def verified_subject(ctx: Context[Any, Any]) -> Subject:
    """The user of this request as the SDK's verified access token names them."""
    token = get_access_token()
    issuer = (token.claims or {}).get("iss") if token is not None else None
    if token is None or not token.subject or not isinstance(issuer, str) or not issuer:
        raise SubjectUnavailable(
            "elicitd needs the verified user: configure the MCP server's token verifier to set "
            "AccessToken.subject and claims['iss']"
        )
    return Subject(iss=issuer, sub=token.subject)


def _url_capable(ctx: Context[Any, Any]) -> bool:
    caps = ctx.client_capabilities
    return bool(caps and caps.elicitation and caps.elicitation.url is not None)


def _form_capable(ctx: Context[Any, Any]) -> bool:
    """Form mode: ``elicitation.form``, or an ``elicitation`` that names no mode (2025-11-25's form)."""
    caps = ctx.client_capabilities
    elicitation = caps.elicitation if caps is not None else None
    return elicitation is not None and (elicitation.form is not None or elicitation.url is None)


def missing_form_capability() -> MCPError:
    data = MissingRequiredClientCapabilityErrorData(
        required_capabilities=ClientCapabilities(elicitation=ElicitationCapability(form=FormElicitationCapability()))
    )
    return MCPError(
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        "This tool needs a client that supports form elicitation",
        data.model_dump(by_alias=True, mode="json", exclude_none=True),
    )


def missing_url_capability() -> MCPError:
    data = MissingRequiredClientCapabilityErrorData(
        required_capabilities=ClientCapabilities(elicitation=ElicitationCapability(url=UrlElicitationCapability()))
    )
    return MCPError(
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        "This tool needs a client that supports URL elicitation",
        data.model_dump(by_alias=True, mode="json", exclude_none=True),
    )


class Elicitd:
    """The MCP-side helper. One per server process; safe to share between concurrent calls."""

    def __init__(
        self,
        client: ElicitdClient,
        *,
        wait_seconds: float = 15.0,
        budget_seconds: float = 50.0,
        max_rounds: int = 10,
        legacy: Literal["push", "error"] = "push",
        subject: Callable[[Context[Any, Any]], Subject] = verified_subject,
        events: bool = True,
    ) -> None:
        self.client = client
        self.wait_seconds = wait_seconds
        self.budget_seconds = budget_seconds
        self.max_rounds = max_rounds
        self.legacy = legacy
        self._subject = subject
        # 2025-11-25 sessions that were shown a flow's URL, for notifications/elicitation/complete.
        # ``ctx.session`` is a per-request proxy, so it is held strongly (its standalone channel
        # outlives the request) and dropped after ``notify_ttl_seconds``.
        self.notify_ttl_seconds = 3600.0
        self._sessions: dict[str, list[tuple[float, Any]]] = {}
        # One consumer of elicitd's event stream per process, for those notifications.
        self.events = events
        self.events_ready_seconds = 5.0
        self._events_task: asyncio.Task[None] | None = None
        self._events_ready: asyncio.Event | None = None

    # ---- wiring ------------------------------------------------------------------------------------
    def install(self, server: MCPServer[Any]) -> None:
        """Let every tool of ``server`` use the helpers without a decorator: a middleware, inside the
        SDK's request-state boundary, returns the ``InputRequiredResult`` a helper raised."""

        async def answer_input_required(ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
            try:
                return await call_next(ctx)
            except InputRequired as needed:
                return needed.result

        server.middleware.append(answer_input_required)

    def tool(self, fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R | InputRequiredResult]]:
        """Per-tool alternative to ``install``: put it under ``@mcp.tool()`` and annotate the tool's
        return as ``X | InputRequiredResult``."""

        @functools.wraps(fn)
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R | InputRequiredResult:
            try:
                return await fn(*args, **kwargs)
            except InputRequired as needed:
                return needed.result

        return wrapper

    # ---- the helpers -------------------------------------------------------------------------------
    async def require_token(
        self,
        ctx: Context[Any, Any],
        *,
        provider: str,
        scopes: Sequence[str] = (),
        message: str | None = None,
        account: str | None = None,
        kind: Literal["oauth_connect", "api_key"] = "oauth_connect",
    ) -> Token:
        """The user's access token for ``provider`` covering ``scopes``; connects first if needed.

        When the token endpoint answers ``reauthorization_required`` (the provider dropped the grant
        since it was last checked), the reconnect starts by itself: the same ``oauth_connect``
        flow again, which elicitd turns into a reconnect of that very connection (same id, same
        grants, same provider account), and the token is asked for once more after it."""
        need = _Need(
            kind,
            _drop_none({"provider": provider, "scopes": sorted(set(scopes)), "message": message, "account": account}),
        )
        await self._obtain(ctx, need)
        with _readable_errors(need):
            try:
                return await self.client.token(
                    provider, self._subject(ctx), scopes=sorted(set(scopes)), account=account
                )
            except ReauthorizationRequired:
                if kind != "oauth_connect":
                    raise
                logger.info("connection needs reauthorization; reconnecting", extra={"kind": kind})
        await self._obtain(ctx, need)
        with _readable_errors(need):
            return await self.client.token(provider, self._subject(ctx), scopes=sorted(set(scopes)), account=account)

    async def require_consent(
        self,
        ctx: Context[Any, Any],
        *,
        title: str,
        description: str,
        details: Mapping[str, str] | None = None,
        message: str | None = None,
    ) -> Consent:
        """The user's approval of exactly ``description``; returns the signed receipt."""
        params = _drop_none({"title": title, "description": description, "details": dict(details) if details else None})
        done = await self._obtain(ctx, _Need("consent", _drop_none({"params": params, "message": message})))
        return Consent(kind=done.kind, result=done.result, flow=done.flow)

    async def require_payment(
        self,
        ctx: Context[Any, Any],
        *,
        amount: int,
        currency: str,
        description: str,
        idempotency_key: str | None = None,
        message: str | None = None,
    ) -> Payment:
        """A completed payment of ``amount`` (minor units) in ``currency``."""
        params = _drop_none(
            {
                "amount": amount,
                "currency": currency.lower(),
                "description": description,
                "idempotency_key": idempotency_key,
            }
        )
        done = await self._obtain(ctx, _Need("payment", _drop_none({"params": params, "message": message})))
        return Payment(kind=done.kind, result=done.result, flow=done.flow)

    async def require_api_key(
        self, ctx: Context[Any, Any], *, provider: str, message: str | None = None, account: str | None = None
    ) -> Token:
        """The API key the user typed for ``provider`` on elicitd's page (URL mode), asked once
        and kept in elicitd's vault; ``Token.authorization`` is what the provider expects."""
        return await self.require_token(ctx, provider=provider, message=message, account=account, kind="api_key")

    @overload
    async def require_input(
        self, ctx: Context[Any, Any], source: type[M], *, message: str | None = ..., max_attempts: int = ...
    ) -> InputResult[M]: ...
    @overload
    async def require_input(
        self,
        ctx: Context[Any, Any],
        source: Form[Any] | Mapping[str, Any],
        *,
        message: str | None = ...,
        max_attempts: int = ...,
    ) -> InputResult[Any]: ...
    async def require_input(
        self,
        ctx: Context[Any, Any],
        source: Form[Any] | type[BaseModel] | Mapping[str, Any],
        *,
        message: str | None = None,
        max_attempts: int = 3,
    ) -> InputResult[Any]:
        """Ask the user to fill in a form (form mode) and return the checked answer.

        ``source`` is a Pydantic model, a plain ``requestedSchema`` or a ``forms.form(...)`` built
        at import (which refuses a schema outside the specification's subset, or a field that looks
        like a secret, when the tool is defined). An answer that fails the form's checks is asked
        again with the reasons in the message, up to ``max_attempts`` times, then ``InvalidInput``.
        On 2026-07-28 each ask is an ``input_required`` round; on 2025-11-25 an ``elicitation/create``
        sent mid-call. ``decline`` and ``cancel`` come back as ``InputDeclined`` / ``InputCancelled``."""
        try:
            asked = form_of(source, message)
        except FormSchemaError as exc:  # a schema built at call time: the reason, not a crash
            raise ToolError(str(exc)) from exc
        if not _form_capable(ctx):
            raise missing_form_capability()
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return self._form_round(ctx, asked, max_attempts)
        return await self._form_push(ctx, asked, max_attempts)

    async def require(self, ctx: Context[Any, Any], kind: str, **create: Any) -> Completed:
        """Any kind, with ``ElicitdClient.create_flow``'s keyword arguments (e.g. ``external`` + ``url``)."""
        return await self._obtain(ctx, _Need(kind, _drop_none(create)))

    # ---- forms -----------------------------------------------------------------------------------------
    def _round(self, ctx: Context[Any, Any]) -> _Round:
        """This call's envelope: as this request carried it, plus what earlier helpers of the same
        call changed (a form answered in this round)."""
        held = _THIS_CALL.get()
        if held is not None and held[0] == (ctx.request_id, ctx.request_state):
            return held[1]
        return _Round.decode(ctx.request_state) or _Round(started=time.time(), rounds=0, states={})

    def _form_round(self, ctx: Context[Any, Any], asked: Form[Any], max_attempts: int) -> InputResult[Any]:
        current = self._round(ctx)
        tag = "form." + asked.tag
        mine = current.states.get(tag)
        if mine is not None and mine[0] == "=":  # answered in an earlier round of this call
            return _form_outcome(asked, json.loads(mine[1]))
        attempt = int(mine[1]) if mine is not None else 0
        reasons: list[str] = []
        if attempt:
            response = (ctx.input_responses or {}).get(f"{_FORM_KEY_PREFIX}{asked.tag}_{attempt}")
            if response is not None:
                answer = _response_json(response)
                if answer.get("action") == "accept":
                    _, reasons = asked.read(answer.get("content"))
                if answer.get("action") in ("decline", "cancel") or not reasons:
                    settled = {"action": answer.get("action"), "content": answer.get("content")}
                    states = {**current.states, tag: ("=", json.dumps(settled))}
                    this_call = (ctx.request_id, ctx.request_state)
                    _THIS_CALL.set((this_call, _Round(current.started, current.rounds, states)))
                    return _form_outcome(asked, settled)
                if attempt >= max_attempts:
                    raise InvalidInput(
                        f"The answer did not fit the form after {attempt} tries: " + "; ".join(reasons) + ".", reasons
                    )
            else:
                attempt -= 1  # not answered: ask the same again
        number = attempt + 1
        logger.info("form round", extra={"attempt": number, "invalid": bool(reasons)})
        key = f"{_FORM_KEY_PREFIX}{asked.tag}_{number}"
        envelope = _Round(current.started, current.rounds + 1, {**current.states, tag: ("form", str(number))})
        request = {
            "method": "elicitation/create",
            "params": {"mode": "form", "message": asked.asking(reasons), "requestedSchema": asked.schema},
        }
        raise InputRequired(
            InputRequiredResult.model_validate(
                {"resultType": "input_required", "inputRequests": {key: request}, "requestState": envelope.encode()}
            )
        )

    async def _form_push(self, ctx: Context[Any, Any], asked: Form[Any], max_attempts: int) -> InputResult[Any]:
        reasons: list[str] = []
        for attempt in range(1, max_attempts + 1):
            logger.info("form round", extra={"attempt": attempt, "invalid": bool(reasons), "legacy": True})
            answer = await ctx.request_context.session.elicit_form(
                asked.asking(reasons), asked.schema, related_request_id=ctx.request_id
            )
            settled = {"action": answer.action, "content": answer.content}
            if answer.action != "accept":
                return _form_outcome(asked, settled)
            _, reasons = asked.read(answer.content)
            if not reasons:
                return _form_outcome(asked, settled)
        raise InvalidInput(
            f"The answer did not fit the form after {max_attempts} tries: " + "; ".join(reasons) + ".", reasons
        )

    # ---- one requirement ---------------------------------------------------------------------------
    async def _obtain(self, ctx: Context[Any, Any], need: _Need) -> Completed:
        subject = self._subject(ctx)
        if not _url_capable(ctx):
            raise missing_url_capability()
        with _readable_errors(need):
            if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
                return await self._modern(ctx, need, subject)
            return await self._legacy(ctx, need, subject)

    async def _create(self, need: _Need, subject: Subject) -> CreatedFlow:
        return await self.client.create_flow(subject, need.kind, **need.create)

    async def _modern(self, ctx: Context[Any, Any], need: _Need, subject: Subject) -> Completed:
        current = self._round(ctx)
        mine = current.states.get(need.tag)
        if mine is None:
            # Round 1 for this requirement (another requirement of the tool may be further along).
            return self._first_round(need, await self._create(need, subject), current)
        flow_id, state = mine
        remaining = self.budget_seconds - (time.time() - current.started)
        key = _KEY_PREFIX + flow_id
        responses = {k: _response_json(v) for k, v in (ctx.input_responses or {}).items() if k == key}
        try:
            resolution = await self.client.resolve(
                subject, state, responses, wait_seconds=max(0.0, min(self.wait_seconds, remaining))
            )
        except InvalidRequestState:
            logger.info("request state no longer valid; starting over", extra={"kind": need.kind})
            return self._first_round(need, await self._create(need, subject), current)
        self._check_flow(need, resolution.flow)
        logger.info(
            "elicitation round",
            extra={
                "kind": need.kind,
                "outcome": resolution.outcome,
                "state_only": resolution.state_only,
                "round": current.rounds + 1,
            },
        )
        if resolution.outcome == "input_required" and resolution.mcp is not None:
            elapsed = time.time() - current.started
            if current.rounds + 1 > self.max_rounds or elapsed >= self.budget_seconds:
                raise ElicitationPending(
                    "Still waiting for you to finish in the browser. Call the tool again once you are done.",
                    flow=resolution.flow,
                )
            raise self._input_required(need, resolution.flow.id, resolution.mcp, current)
        if resolution.outcome == "expired":
            return self._first_round(need, await self._create(need, subject), current)
        return self._finished(need, resolution)

    def _first_round(self, need: _Need, created: CreatedFlow, current: _Round) -> Completed:
        if created.completed:
            return Completed(kind=need.kind, result=created.result or {}, flow=created.flow)
        if created.mcp is None or current.rounds + 1 > self.max_rounds:
            raise ElicitationPending("Finish the step in your browser, then call the tool again.", flow=created.flow)
        raise self._input_required(need, created.flow.id, created.mcp, current)

    def _input_required(self, need: _Need, flow_id: str, mcp: dict[str, Any], current: _Round) -> InputRequired:
        result = InputRequiredResult.model_validate(mcp)
        states = {**current.states, need.tag: (flow_id, str(mcp["requestState"]))}
        envelope = _Round(started=current.started, rounds=current.rounds + 1, states=states)
        return InputRequired(result.model_copy(update={"request_state": envelope.encode()}))

    def _finished(self, need: _Need, resolution: Resolution) -> Completed:
        flow = resolution.flow
        if resolution.outcome == "completed":
            return Completed(kind=need.kind, result=resolution.result or {}, flow=flow)
        if resolution.outcome == "declined":
            raise ElicitationDeclined(_declined_text(need), flow=flow)
        if resolution.outcome == "cancelled":
            raise ElicitationCancelled(
                "The request was dismissed. Call the tool again to continue where you left off.", flow=flow
            )
        code = flow.error.code if flow.error is not None else resolution.outcome
        raise ElicitationFailed(f"The {_noun(need)} did not complete ({code}).", code=code, flow=flow)

    @staticmethod
    def _check_flow(need: _Need, flow: Flow) -> None:
        """Defence in depth: the flow a state resolved to must be the one this requirement asked for."""
        provider = need.create.get("provider")
        if flow.kind != need.kind or (provider is not None and flow.provider != provider):
            raise ElicitationFailed("The request state belongs to another request.", code="state_mismatch", flow=flow)

    # ---- 2025-11-25 ----------------------------------------------------------------------------------
    async def _legacy(self, ctx: Context[Any, Any], need: _Need, subject: Subject) -> Completed:
        created = await self._create(need, subject)
        if created.completed:
            return Completed(kind=need.kind, result=created.result or {}, flow=created.flow)
        elicitation = created.elicitation or {}
        flow_id = created.flow.id
        self._remember_session(flow_id, ctx.session)
        await self.start_events()
        params = ElicitRequestURLParams(
            message=str(elicitation.get("message", "")), url=created.flow.url, elicitation_id=flow_id
        )
        if self.legacy == "error" or created.request_state is None:
            raise UrlElicitationRequiredError([params])
        answer = await ctx.elicit_url(params.message, params.url, flow_id)
        started = time.time()
        state: str = created.request_state
        responses: dict[str, dict[str, Any]] | None = {_KEY_PREFIX + flow_id: {"action": answer.action}}
        while True:
            remaining = self.budget_seconds - (time.time() - started)
            resolution = await self.client.resolve(
                subject, state, responses, wait_seconds=max(0.0, min(self.wait_seconds, remaining))
            )
            responses = None
            logger.info(
                "elicitation round",
                extra={
                    "kind": need.kind,
                    "outcome": resolution.outcome,
                    "state_only": resolution.state_only,
                    "legacy": True,
                },
            )
            if resolution.outcome != "input_required" or resolution.mcp is None:
                return self._finished(need, resolution)
            if time.time() - started >= self.budget_seconds or not resolution.state_only:
                # The client gets -32042 and retries after notifications/elicitation/complete.
                raise UrlElicitationRequiredError([params])
            state = str(resolution.mcp["requestState"])

    def _remember_session(self, flow_id: str, session: Any) -> None:
        now = time.monotonic()
        for stale in [key for key, held in self._sessions.items() if held[-1][0] < now - self.notify_ttl_seconds]:
            del self._sessions[stale]
        held = self._sessions.setdefault(flow_id, [])
        # One notification per connection: several requests of one client share it.
        connection = getattr(session, "_connection", session)
        held[:] = [(t, s) for t, s in held if getattr(s, "_connection", s) is not connection]
        held.append((now, session))

    # ---- completion notifications (2025-11-25) ------------------------------------------------------
    async def start_events(self) -> None:
        """Start this process's consumer of elicitd's event stream (once; later calls return at
        once) and wait, up to ``events_ready_seconds``, until it is connected, so a completion
        after this call is seen. Called by the helpers before a 2025-11-25 session is shown a URL."""
        if not self.events:
            return
        if self._events_task is None or self._events_task.done():
            self._events_ready = asyncio.Event()
            self._events_task = asyncio.get_running_loop().create_task(
                self._consume_events(self._events_ready), name="elicitd-events"
            )
        if self._events_ready is not None and not self._events_ready.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._events_ready.wait()), self.events_ready_seconds)

    async def _consume_events(self, ready: asyncio.Event) -> None:
        stream = self.client.events(on_connected=lambda _position: ready.set(), restart_when_expired=True)
        try:
            async for event in stream:
                flow_id = event.data.get("flow_id")
                if event.type.startswith("flow.") and isinstance(flow_id, str):
                    await self.notify_completed(flow_id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # an elicitd without the stream, or a key it refuses: webhooks still work
            logger.warning("elicitd event stream stopped", extra={"error_type": type(exc).__name__})
        finally:
            ready.set()

    async def aclose(self) -> None:
        """Stop the event-stream consumer (on shutdown)."""
        task, self._events_task = self._events_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def notify_completed(self, flow_id: str) -> int:
        """Send ``notifications/elicitation/complete`` for ``flow_id`` to the 2025-11-25 sessions
        of this process that were shown it. The event-stream consumer calls it; a completion
        webhook route may too (a second call finds nobody left). Returns how many got it."""
        sent = 0
        for _, session in self._sessions.pop(flow_id, []):
            try:
                await session.send_elicit_complete(flow_id)
                sent += 1
            except Exception:  # a closed session must not stop the others
                logger.info("completion notification not delivered", extra={"flow_id": flow_id})
        return sent


@contextlib.contextmanager
def _readable_errors(need: _Need) -> Iterator[None]:
    """An error answer from elicitd becomes ``ElicitdRefused``, a ``ToolError``: the model reads why
    (with elicitd's code) instead of the SDK's bare "Error executing tool" for a crash."""
    try:
        yield
    except ElicitdError as exc:
        raise ElicitdRefused(_refused_text(need, exc), code=exc.code, status=exc.status) from exc


def _refused_text(need: _Need, exc: ElicitdError) -> str:
    if isinstance(exc, ElicitdUnavailable):
        return f"elicitd is not reachable now, so the {_noun(need)} cannot be asked for; try again soon [{exc.code}]."
    if isinstance(exc, RateLimited) and exc.retry_after is not None:
        return f"Too many requests for the {_noun(need)}; try again in {exc.retry_after} s [{exc.code}]."
    return f"Could not ask for the {_noun(need)}: {exc.detail.rstrip('.')} [{exc.code}]."


def _response_json(value: Any) -> dict[str, Any]:
    dumped = (
        value.model_dump(by_alias=True, mode="json", exclude_none=True) if hasattr(value, "model_dump") else dict(value)
    )
    return {key: dumped[key] for key in ("action", "content") if key in dumped}


def _form_outcome(asked: Form[Any], settled: Mapping[str, Any]) -> InputResult[Any]:
    if settled.get("action") == "decline":
        return InputDeclined()
    if settled.get("action") != "accept":
        return InputCancelled()
    data, reasons = asked.read(settled.get("content"))
    if reasons:  # checked when it arrived; only a changed form could fail now
        raise InvalidInput("The answer no longer fits the form: " + "; ".join(reasons) + ".", reasons)
    return InputAccepted(data)


def _drop_none(values: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None and value != []}


def _noun(need: _Need) -> str:
    return {
        "oauth_connect": f"connection to {need.create.get('provider')}",
        "api_key": "API key entry",
        "consent": "approval",
        "payment": "payment",
    }.get(need.kind, "step")


def _declined_text(need: _Need) -> str:
    return {
        "oauth_connect": f"The user declined to connect {need.create.get('provider')}.",
        "consent": "The user did not approve this action.",
        "payment": "The user declined the payment.",
    }.get(need.kind, "The user declined.")


__all__ = [
    "Completed",
    "Consent",
    "ElicitationCancelled",
    "ElicitationDeclined",
    "ElicitationFailed",
    "ElicitationOutcome",
    "ElicitationPending",
    "Elicitd",
    "ElicitdRefused",
    "InputAccepted",
    "InputCancelled",
    "InputDeclined",
    "InputRequired",
    "InputResult",
    "InvalidInput",
    "Payment",
    "SubjectUnavailable",
    "missing_form_capability",
    "missing_url_capability",
    "verified_subject",
]
