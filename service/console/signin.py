"""Operators sign in to the console at the issuer marked for operator sign-in.

The OIDC steps are the end users' (``service.identity``): the same issuer directory, the same
single-use login attempts bound to a pre-sign-in cookie, PKCE and nonce, the same ID-token checks.
What differs is what a sign-in yields: the role the ID token's claim grants
(``service.operators.roles``; no role, no session), in a console session of its own
(``service.console.auth``), returning only to a console page.

Re-authentication: a sign-in started ``fresh`` asks the issuer for ``max_age`` (and
``prompt=login``), and its ID token's ``auth_time`` must then be that recent; it becomes the
session's ``authenticated_at``, which an admin-role change needs recent. As with the end users'
callback, the attempt is consumed before the issuer is called, and no connection is held while
it is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.admin.tokens import Role
from service.clock import Clock, SystemClock
from service.console import auth
from service.crypto.vault import Vault
from service.db.unit import unit_of_work
from service.errors import Forbidden, ServiceUnavailable
from service.i18n import N_
from service.identity import sessions as store
from service.identity.issuers import IssuerDirectory, ResolvedIssuer
from service.identity.oidc import LoginFailed, exchange_code, verify_id_token
from service.operators.roles import role_for
from service.operators.store import MarkedIssuer, marked_issuer
from service.settings import Settings
from service.signin.csrf import CsrfFailed, check_csrf
from service.signin.service import TOKEN, LoginStateInvalid, check_answer_issuer, start_attempt
from service.signin.throttle import LoginThrottle

CALLBACK_PATH = "/console/auth/callback"
HOME = "/console/"
# Where a sign-in may return to: a console page of this origin (path and an optional plain query).
_RETURN_TO = re.compile(r"^/console/[A-Za-z0-9_\-./~%]*(\?[A-Za-z0-9_\-.~%=&+]*)?$")
# A ``fresh`` attempt is stored with this mark before its return address (an attempt row keeps one
# text; the mark never leaves this module, and a plain address cannot start with it).
_FRESH = "fresh:"
AUTH_TIME_LEEWAY_SECONDS = 60


class OperatorSignInUnavailable(ServiceUnavailable):
    code = "operator_signin_unavailable"
    title = N_("Console sign-in is not set up")

    def __init__(self) -> None:
        super().__init__(
            N_(
                "No sign-in service is marked for operator sign-in, so nobody can sign in to the console. "
                "An administrator marks one with `elicitd operators signin` or the config file."
            )
        )


class NoConsoleRole(Forbidden):
    code = "no_console_role"
    title = N_("No access to the console")

    def __init__(self) -> None:
        super().__init__(
            N_(
                "You signed in, but your account has no console role (viewer, operator or admin). "
                "Ask an administrator to add you to the group that grants one."
            )
        )


class NotRecentEnough(LoginFailed):
    code = "reauthentication_not_recent"
    title = N_("The sign-in was not recent enough")


def safe_return_to(value: str | None) -> str:
    """``value`` when it is a console page of this origin; the console's home otherwise."""
    if value is not None and _RETURN_TO.fullmatch(value) and "//" not in value and "/../" not in value:
        return value
    return HOME


@dataclass(frozen=True, slots=True)
class ConsoleLogin:
    url: str
    binding: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class ConsoleSignedIn:
    return_to: str
    session_token: str = field(repr=False)
    lifetime: int
    role: Role


class ConsoleSignIn:
    """Sign-in, the session check and sign-out of the operator console."""

    def __init__(
        self,
        *,
        settings: Settings,
        sessions: async_sessionmaker[AsyncSession],
        vault: Vault,
        issuers: IssuerDirectory,
        http: httpx.AsyncClient,
        clock: Clock | None = None,
        throttle: LoginThrottle | None = None,
    ) -> None:
        self.settings = settings
        self._sessions = sessions
        self._vault = vault
        self.issuers = issuers
        self._http = http
        self.clock: Clock = clock or SystemClock()
        self.throttle = throttle or LoginThrottle(clock=self.clock)

    @property
    def redirect_uri(self) -> str:
        """The console's own redirect URI, registered at the operator issuer besides end users' one."""
        return self.settings.public_url + CALLBACK_PATH

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.clock.time(), UTC)

    async def marked(self) -> tuple[MarkedIssuer, ResolvedIssuer]:
        """The issuer operators sign in at, resolved; ``OperatorSignInUnavailable`` when none is."""
        async with self._sessions() as session:
            marked = await marked_issuer(session)
        resolved = None if marked is None else await self.issuers.resolve_id(marked.issuer_id)
        if marked is None or resolved is None:
            raise OperatorSignInUnavailable
        return marked, resolved

    async def begin(self, return_to: str | None, *, binding: str | None, address: str, fresh: bool) -> ConsoleLogin:
        """Where to send the browser to sign in (again, with ``max_age``, when ``fresh``)."""
        _marked, issuer = await self.marked()
        path = safe_return_to(return_to)
        self.throttle.admit(address)
        if binding is None or not TOKEN.fullmatch(binding):
            binding = store.new_token()
        url = await start_attempt(
            self._sessions,
            self._vault,
            issuer,
            binding=binding,
            return_to=(_FRESH + path) if fresh else path,
            redirect_uri=self.redirect_uri,
            prompt="login" if fresh else None,
            max_age=self.settings.console_reauth_seconds if fresh else None,
        )
        return ConsoleLogin(url=url, binding=binding)

    async def complete(
        self, *, state: str | None, binding: str | None, answer: Mapping[str, str], replacing: str | None
    ) -> ConsoleSignedIn:
        """The callback. Raises ``LoginFailed`` (and its kinds) or ``NoConsoleRole``."""
        if not state or not binding or not TOKEN.fullmatch(binding):
            raise LoginStateInvalid(N_("This sign-in was not started in this browser, or it took too long."))
        async with unit_of_work(self._sessions) as session:
            attempt = await store.consume_login_attempt(session, self._vault, state=state, browser_binding=binding)
        if attempt is None:
            raise LoginStateInvalid(
                N_("This sign-in was already used, has expired, or was started in another browser.")
            )
        marked, issuer = await self.marked()
        if attempt.issuer_id != marked.issuer_id:
            raise LoginFailed(N_("This sign-in service is no longer the one for operators."))
        check_answer_issuer(issuer, answer)
        if answer.get("error") is not None or not answer.get("code"):
            raise LoginFailed(N_("The sign-in was cancelled or refused."))
        tokens = await exchange_code(
            self._http,
            issuer,
            code=answer["code"],
            redirect_uri=self.redirect_uri,
            code_verifier=attempt.code_verifier,
        )
        verified = await verify_id_token(self.issuers, issuer, tokens.get("id_token"), nonce=attempt.nonce)
        fresh = attempt.return_to.startswith(_FRESH)
        return_to = safe_return_to(attempt.return_to.removeprefix(_FRESH))
        authenticated_at = self._auth_time(verified.claims.get("auth_time"))
        if fresh and not self._recent(authenticated_at):
            raise NotRecentEnough(N_("The sign-in service did not confirm a recent sign-in. Please try again."))
        role = role_for(verified.claims, marked.signin)
        if role is None:
            raise NoConsoleRole
        lifetime = self.settings.console_session_seconds
        async with unit_of_work(self._sessions) as session:
            if replacing is not None:
                await auth.delete_session(session, replacing)
            token = await auth.create_session(
                session,
                issuer_id=marked.issuer_id,
                iss=verified.iss,
                sub=verified.sub,
                display_name=_display_name(verified.claims, verified.sub),
                role=role,
                authenticated_at=authenticated_at,
                lifetime=lifetime,
            )
            await auth.purge_expired(session, batch=100)
        return ConsoleSignedIn(return_to=return_to, session_token=token, lifetime=lifetime, role=role)

    def _auth_time(self, value: object) -> datetime | None:
        """``auth_time`` as a time, when it is a number not in the future (beyond the leeway)."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        if value > self.clock.time() + AUTH_TIME_LEEWAY_SECONDS:
            return None
        return datetime.fromtimestamp(value, UTC)

    def _recent(self, at: datetime | None) -> bool:
        return at is not None and (self.now() - at).total_seconds() <= (
            self.settings.console_reauth_seconds + AUTH_TIME_LEEWAY_SECONDS
        )

    async def current(self, token: str | None) -> auth.Operator | None:
        """The operator of this cookie value, or None (no session, ended, idle too long)."""
        if token is None or not TOKEN.fullmatch(token):
            return None
        async with unit_of_work(self._sessions) as session:
            return await auth.touch_session(session, token, idle_seconds=self.settings.console_idle_seconds)

    async def sign_out(self, token: str | None, *, submitted_csrf: str | None, cross_site: bool) -> None:
        """End this cookie's session, from its own form only (its CSRF token, no other site)."""
        if token is None or cross_site or not TOKEN.fullmatch(token):
            raise CsrfFailed
        async with unit_of_work(self._sessions) as session:
            operator = await auth.touch_session(session, token, idle_seconds=self.settings.console_idle_seconds)
            if operator is None:
                raise CsrfFailed
            check_csrf(operator.csrf_token, submitted_csrf, cross_site=cross_site)
            await auth.delete_session(session, token)


def _display_name(claims: Mapping[str, object], sub: str) -> str:
    """The name the console shows: ``name``, else ``preferred_username``, else the subject."""
    for key in ("name", "preferred_username"):
        value = claims.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()[:200]
    return sub
