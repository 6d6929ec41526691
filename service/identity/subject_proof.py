"""Proof of the subject: the user's own access token, verified at the user's issuer (DESIGN §10).

Without it the subject of a call is only what the server client says, so one leaked API key reads
every token of every user. A server client whose ``subject_proof`` is ``required`` forwards its
user's MCP access token in ``Elicitd-Subject-Token`` on every call that names a subject (create,
resolve, token, revoke; the token exchange carries it as ``subject_token``). elicitd then checks,
before anything is read or written:

* a **JWT** by its signature against the issuer's JWKS (discovered, cached by ``IssuerDirectory``;
  asymmetric algorithms only), its header's ``typ`` = ``at+jwt`` (RFC 9068 §4: an ID token or any
  other JWT the issuer signs is not an access token, however alike its claims), ``iss`` = the
  registered issuer, ``sub``, ``exp`` and ``nbf`` with ``LEEWAY_SECONDS``;
* an **opaque token** by RFC 7662 introspection at the issuer, with the credentials configured on
  the issuer row (``active``, ``iss`` when given, ``sub``, and an ``exp``: RFC 7662 makes it
  optional, but without one a token revoked at the issuer would be taken for the cache's minute
  after every introspection, for ever);
* for both, an ``aud`` or ``resource`` (RFC 8707 / RFC 9068) equal to one of the server client's
  registered ``resource_uris``: a token minted for another MCP server proves nothing to this one;
* and that its ``iss`` + ``sub`` are the subject the call names.

A verified token's facts (issuer, subject, audiences, expiry — never the token) are cached in
process by the SHA-256 of the token until the earlier of its ``exp`` and ``CACHE_SECONDS``, so a
tool that calls elicitd three times costs the issuer one introspection; a token revoked at the
issuer is refused again within that minute. What depends on the calling client (its resource URIs
and trusted issuers) is checked on every call, cached or not. Refusals are never cached: a wrong
token costs its sender a JWKS lookup (rate-limited by the directory) or one introspection.

The token never reaches a log line, an error body, an event or the database: refusals name a
reason from a fixed set.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import quote, urlsplit

import httpx
from litestar.params import Parameter
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.clock import Clock, SystemClock
from service.db.base import CLIENT_ID
from service.errors import ElicitdError, InvalidRequest
from service.flows.kinds import check_issuer_trusted
from service.http import read_json
from service.identity.issuers import HTTP_TIMEOUT_SECONDS, IssuerDirectory, IssuerUnavailable, ResolvedIssuer
from service.identity.keys import AuthenticatedClient
from service.identity.models import SUBJECT_PROOF_POLICIES, SUBJECT_PROOF_REQUIRED, Issuer
from service.identity.oidc import decode_signed

logger = logging.getLogger("elicitd.identity")

SUBJECT_TOKEN_HEADER = "Elicitd-Subject-Token"
CACHE_SECONDS = 60.0
LEEWAY_SECONDS = 30
# Access tokens are a few hundred bytes to a few kilobytes; anything longer is not one.
MAX_TOKEN_LENGTH = 8192
MAX_RESOURCE_URIS = 20
# RFC 9068 §2.1 / §4: an access token's JWT header says ``typ: at+jwt``; media types compare
# without case, and RFC 7515 §4.1.9 lets ``application/`` be written or left out.
ACCESS_TOKEN_TYPES = frozenset({"at+jwt", "application/at+jwt"})
_CACHE_LIMIT = 10_000
_INTROSPECTION_HEADERS = {
    "Accept": "application/json",
    "Content-Type": "application/x-www-form-urlencoded;charset=UTF-8",
}


# The header as a handler parameter of every API call that names a subject.
SubjectTokenHeader = Annotated[
    str | None,
    Parameter(
        header=SUBJECT_TOKEN_HEADER,
        default=None,
        required=False,
        description="The user's own MCP access token, when this server client must prove the subject.",
    ),
]


class SubjectTokenRequired(ElicitdError):
    """The server client must prove the subject and sent no token."""

    code = "subject_token_required"
    status = 401
    title = "Subject token required"

    def __init__(self) -> None:
        super().__init__(
            f"This server client must forward the user's access token in {SUBJECT_TOKEN_HEADER}.",
            headers={"WWW-Authenticate": f'{SUBJECT_TOKEN_HEADER} realm="elicitd"'},
        )


class SubjectTokenInvalid(ElicitdError):
    """The forwarded token does not prove the subject; ``detail`` is one of a fixed set of reasons."""

    code = "subject_token_invalid"
    status = 403
    title = "Subject token not accepted"


# The reasons a token is refused: fixed sentences, never anything the token or the issuer said.
_REASONS = {
    "malformed": "The subject token is not a token elicitd can read.",
    "unknown_issuer": "The subject token's issuer is not one elicitd trusts.",
    "other_issuer": "The subject token was issued by another issuer than the subject's.",
    "signature": "The subject token's signature could not be verified.",
    "token_type": "The subject token is not an access token (its JWT header must say typ: at+jwt, RFC 9068).",
    "expired": "The subject token has expired or is not valid yet.",
    "claims": "The subject token lacks a required claim (iss, sub, exp).",
    "inactive": "The issuer reports the subject token as not active.",
    "no_introspection": "The subject token is opaque and its issuer has no introspection configured.",
    "ambiguous_issuer": "The subject token is opaque and elicitd cannot tell which issuer to ask.",
    "audience": "The subject token is not for this server client (no aud or resource names its resource URIs).",
    "other_subject": "The subject token belongs to another user than the one the request names.",
}


def refused(reason: str) -> SubjectTokenInvalid:
    return SubjectTokenInvalid(_REASONS[reason], extra={"reason": reason})


def check_policy(value: str) -> str:
    if value not in SUBJECT_PROOF_POLICIES:
        raise InvalidRequest("subject_proof must be 'required' or 'none'.")
    return value


def check_resource_uris(values: Iterable[str]) -> list[str]:
    """RFC 8707 §2: absolute URIs without a fragment; compared as exact strings."""
    uris = sorted(set(values))
    if len(uris) > MAX_RESOURCE_URIS:
        raise InvalidRequest(f"At most {MAX_RESOURCE_URIS} resource URIs.")
    for uri in uris:
        parts = urlsplit(uri)
        if not parts.scheme or not (parts.netloc or parts.path) or parts.fragment or len(uri) > 2000:
            raise InvalidRequest("A resource URI must be an absolute URI without a fragment (RFC 8707).")
        if any(c.isspace() for c in uri):
            raise InvalidRequest("A resource URI must not contain whitespace.")
    return uris


@dataclass(frozen=True, slots=True)
class ProvenSubject:
    """What a verified subject token says; holds no token."""

    iss: str
    sub: str
    audiences: frozenset[str]
    expires_at: float | None


def token_digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def _strings(value: Any) -> set[str]:
    if isinstance(value, str):
        return {value}
    if isinstance(value, list):
        return {item for item in value if isinstance(item, str)}
    return set()


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _past(exp: Any, now: float) -> bool:
    return _number(exp) and float(exp) < now - LEEWAY_SECONDS


def _future(nbf: Any, now: float) -> bool:
    return _number(nbf) and float(nbf) > now + LEEWAY_SECONDS


def _unverified_claims(token: str) -> dict[str, Any] | None:
    """The claims of a compact JWS, unverified (only to pick the issuer); None when not a JWT."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        header = json.loads(base64.urlsafe_b64decode(parts[0] + "=" * (-len(parts[0]) % 4)))
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(header, dict) or "alg" not in header or not isinstance(claims, dict):
        return None
    return claims


async def verified_access_jwt(
    issuers: IssuerDirectory, token: str, *, issuer: str, now: float
) -> tuple[ResolvedIssuer, dict[str, Any]]:
    """The issuer and claims of an RFC 9068 JWT access token that ``issuer`` signed: the checks a
    subject token's JWT passes (signature, ``typ``, ``iss``, ``sub``, ``exp``, ``nbf``), for the
    other bearer tokens elicitd accepts from an issuer (the admin MCP server's operators). Its
    audience is the caller's to check. Refusals are ``SubjectTokenInvalid`` with a fixed reason."""
    token = token.strip()
    unverified = _unverified_claims(token) if token and len(token) <= MAX_TOKEN_LENGTH and token.isascii() else None
    if unverified is None:
        raise refused("malformed")
    return await _checked_jwt(issuers, token, unverified, issuer, int(now))


async def _checked_jwt(
    issuers: IssuerDirectory, token: str, unverified: dict[str, Any], issuer: str | None, now: int
) -> tuple[ResolvedIssuer, dict[str, Any]]:
    # joserfc is loaded by the first subject token, not by every process (see service.identity.oidc).
    from joserfc import jwt
    from joserfc.errors import ExpiredTokenError, JoseError

    claimed = unverified.get("iss")
    if not isinstance(claimed, str) or not claimed:
        raise refused("claims")
    if issuer is not None and claimed != issuer:
        raise refused("other_issuer")
    resolved = await issuers.resolve(claimed)
    if resolved is None:
        raise refused("unknown_issuer")
    try:
        decoded = await decode_signed(issuers, resolved, token)
    except (JoseError, ValueError):
        raise refused("signature") from None
    typ = decoded.header.get("typ")
    if not isinstance(typ, str) or typ.lower() not in ACCESS_TOKEN_TYPES:
        raise refused("token_type")
    claims = decoded.claims
    # Time first: the registry reports a future ``nbf`` as it reports a malformed ``aud``.
    if _past(claims.get("exp"), now) or _future(claims.get("nbf"), now):
        raise refused("expired")
    registry = jwt.JWTClaimsRegistry(
        now=now,
        leeway=LEEWAY_SECONDS,
        iss={"essential": True, "value": resolved.issuer},
        sub={"essential": True},
        exp={"essential": True},
    )
    try:
        registry.validate(claims)
    except ExpiredTokenError:
        raise refused("expired") from None
    except (JoseError, ValueError):
        raise refused("claims") from None
    return resolved, claims


class SubjectProver:
    """Verifies subject tokens for the API (``prove``) and the token exchange (``verify``)."""

    def __init__(
        self,
        issuers: IssuerDirectory,
        sessions: async_sessionmaker[AsyncSession],
        *,
        http: httpx.AsyncClient,
        clock: Clock | None = None,
        cache_seconds: float = CACHE_SECONDS,
    ) -> None:
        self._issuers = issuers
        self._sessions = sessions
        self._http = http
        self._clock: Clock = clock or SystemClock()
        self._cache_seconds = cache_seconds
        self._cache: dict[bytes, tuple[float, ProvenSubject]] = {}

    async def prove(self, client: AuthenticatedClient, *, iss: str, sub: str, token: str | None) -> None:
        """Refuse the call unless ``token`` proves that the subject it names is the user calling.

        A client whose policy is ``none`` is not asked (the header, if any, is ignored)."""
        if client.subject_proof != SUBJECT_PROOF_REQUIRED:
            return
        if not token:
            self._refusal(client, "missing")
            raise SubjectTokenRequired()
        proven = await self.verify(client, token, issuer=iss)
        if not hmac.compare_digest(proven.sub.encode(), sub.encode()):
            self._refusal(client, "other_subject")
            raise refused("other_subject")

    async def verify(self, client: AuthenticatedClient, token: str, *, issuer: str | None) -> ProvenSubject:
        """The facts of a valid subject token for ``client``; ``issuer`` is the one the call names
        (None for the token exchange: a JWT's own ``iss``, or the one issuer that introspects)."""
        try:
            if issuer is not None:
                check_issuer_trusted(client, issuer)
            proven = await self._facts(client, token.strip(), issuer)
            if issuer is not None and proven.iss != issuer:
                raise refused("other_issuer")
            check_issuer_trusted(client, proven.iss)
            if not proven.audiences & set(client.resource_uris):
                raise refused("audience")
        except SubjectTokenInvalid as exc:
            self._refusal(client, str(exc.extra.get("reason")))
            raise
        return proven

    def forget(self) -> None:
        self._cache.clear()

    @staticmethod
    def _refusal(client: AuthenticatedClient, reason: str) -> None:
        logger.info("subject token refused", extra={"server_client": CLIENT_ID.format(client.id), "reason": reason})

    async def _facts(self, client: AuthenticatedClient, token: str, issuer: str | None) -> ProvenSubject:
        if not token or len(token) > MAX_TOKEN_LENGTH or not token.isascii():
            raise refused("malformed")
        digest = token_digest(token)
        cached = self._cache.get(digest)
        if cached is not None and cached[0] > self._clock.monotonic():
            return cached[1]
        self._cache.pop(digest, None)
        claims = _unverified_claims(token)
        if claims is not None:
            proven = await self._verify_jwt(token, claims, issuer)
        else:
            proven = await self._introspect(client, token, issuer)
        self._remember(digest, proven)
        return proven

    def _remember(self, digest: bytes, proven: ProvenSubject) -> None:
        ttl = self._cache_seconds
        if proven.expires_at is not None:
            ttl = min(ttl, proven.expires_at - self._clock.time())
        if ttl <= 0:
            return
        if len(self._cache) >= _CACHE_LIMIT:
            # The oldest entry goes (a dict keeps insertion order), not the whole cache: past the
            # limit, clearing made every live token cost a verification again at once.
            del self._cache[next(iter(self._cache))]
        self._cache[digest] = (self._clock.monotonic() + ttl, proven)

    # ---- JWTs ------------------------------------------------------------------------------------
    async def _verify_jwt(self, token: str, unverified: dict[str, Any], issuer: str | None) -> ProvenSubject:
        resolved, claims = await _checked_jwt(self._issuers, token, unverified, issuer, int(self._clock.time()))
        return self._proven(resolved, claims)

    @staticmethod
    def _proven(resolved: ResolvedIssuer, claims: dict[str, Any]) -> ProvenSubject:
        sub = claims.get("sub")
        if not isinstance(sub, str) or not sub or len(sub) > 255:
            raise refused("claims")
        exp: Any = claims.get("exp")
        return ProvenSubject(
            iss=resolved.issuer,
            sub=sub,
            audiences=frozenset(_strings(claims.get("aud")) | _strings(claims.get("resource"))),
            expires_at=float(exp) if _number(exp) else None,
        )

    # ---- opaque tokens (RFC 7662) ----------------------------------------------------------------
    async def _introspect(self, client: AuthenticatedClient, token: str, issuer: str | None) -> ProvenSubject:
        resolved = await self._introspecting_issuer(client, issuer)
        if resolved.introspection_endpoint is None or resolved.introspection_client_id is None:
            raise refused("no_introspection")
        from authlib.oauth2.auth import ClientAuth

        secret = resolved.introspection_client_secret
        auth = ClientAuth(
            resolved.introspection_client_id, secret, "client_secret_basic" if secret is not None else "none"
        )
        body = f"token={quote(token, safe='')}&token_type_hint=access_token"
        url, headers, body = auth.prepare("POST", resolved.introspection_endpoint, dict(_INTROSPECTION_HEADERS), body)
        try:
            response = await self._http.post(url, content=body.encode(), headers=headers, timeout=HTTP_TIMEOUT_SECONDS)
            answer: Any = read_json(response) if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError) as exc:
            raise IssuerUnavailable("The issuer's introspection endpoint could not be reached.") from exc
        if not isinstance(answer, dict) or not isinstance(answer.get("active"), bool):
            logger.warning("introspection failed", extra={"issuer": resolved.issuer, "status": response.status_code})
            raise IssuerUnavailable("The issuer's introspection endpoint gave no usable answer.")
        if answer["active"] is not True:
            raise refused("inactive")
        if "iss" in answer and answer["iss"] != resolved.issuer:
            raise refused("other_issuer")
        if not _number(answer.get("exp")):
            raise refused("claims")
        now = self._clock.time()
        if _past(answer.get("exp"), now) or _future(answer.get("nbf"), now):
            raise refused("expired")
        return self._proven(resolved, answer)

    async def _introspecting_issuer(self, client: AuthenticatedClient, issuer: str | None) -> ResolvedIssuer:
        """The issuer to ask about an opaque token. The call names it (API); for the token
        exchange it must be the only introspecting issuer this client trusts: elicitd never shows a
        user's token to an issuer that may not have made it."""
        if issuer is None:
            async with self._sessions() as session:
                stmt = select(Issuer.issuer).where(
                    Issuer.enabled.is_(True), Issuer.introspection_client_id.is_not(None)
                )
                if client.trusted_issuers:
                    stmt = stmt.where(Issuer.issuer.in_(client.trusted_issuers))
                candidates = list((await session.execute(stmt.limit(2))).scalars())
            if len(candidates) != 1:
                raise refused("ambiguous_issuer" if candidates else "no_introspection")
            issuer = candidates[0]
        resolved = await self._issuers.resolve(issuer)
        if resolved is None:
            raise refused("unknown_issuer")
        return resolved
