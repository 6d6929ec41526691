"""The OIDC relying party: authorization request, code exchange, ID token validation.

Only the authorization code flow with PKCE S256 and a nonce is used. The ID token is verified
against the issuer's JWKS with an asymmetric algorithm only (never ``none`` or an HMAC keyed by
the client secret), then ``iss``, ``aud`` (and ``azp`` when several audiences), ``exp``, ``iat``
and ``nonce`` are checked. Nothing from the provider's error bodies reaches a page or a log.

Authlib supplies the protocol pieces (the authorization URL, the token request body, client
authentication); the token request is the one ``service.oauth_client`` makes to providers too,
on the process's one shared HTTP client. Authlib's own HTTP integration builds a client, and with
it a TLS context, per call: about 50 ms of CPU that every request parked on the event loop waited
for, once to make a URL and once per exchange.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

from service.errors import ElicitdError
from service.i18n import N_
from service.identity.issuers import IssuerDirectory, ResolvedIssuer
from service.oauth_client import ProviderError, token_request

# Authlib and joserfc are imported by the calls that use them (a sign-in, a subject token): an
# idle process never loads them (~3.4 MB of RSS together).
if TYPE_CHECKING:
    from joserfc import jwt

logger = logging.getLogger("elicitd.identity")

# Asymmetric signatures only: an HS256 ID token would be "signed" with our own client secret.
ID_TOKEN_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
CLOCK_LEEWAY_SECONDS = 60
MAX_ID_TOKEN_AGE_SECONDS = 600


class LoginFailed(ElicitdError):
    """The sign-in did not complete; ``detail`` is a fixed sentence, never provider text."""

    code = "login_failed"
    status = 400
    title = N_("Sign-in failed")


class InvalidIdToken(LoginFailed):
    code = "invalid_id_token"


@dataclass(frozen=True, slots=True)
class VerifiedLogin:
    iss: str
    sub: str
    # Every claim of the verified ID token (the console reads its role claim, name and auth_time).
    claims: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)


def authorization_url(
    issuer: ResolvedIssuer,
    *,
    redirect_uri: str,
    state: str,
    nonce: str,
    code_verifier: str,
    prompt: str | None = None,
    max_age: int | None = None,
) -> str:
    """The issuer's authorization endpoint with an RFC 6749 §4.1.1 request, PKCE S256 and a nonce
    (and OIDC's ``max_age`` when a sign-in must be that recent)."""
    from authlib.oauth2.rfc6749.parameters import prepare_grant_uri
    from authlib.oauth2.rfc7636 import create_s256_code_challenge

    url = prepare_grant_uri(
        issuer.authorization_endpoint,
        client_id=issuer.client_id,
        response_type="code",
        redirect_uri=redirect_uri,
        scope=" ".join(issuer.scopes),
        state=state,
        nonce=nonce,
        prompt=prompt or None,
        max_age=None if max_age is None else str(max_age),
        code_challenge=create_s256_code_challenge(code_verifier),
        code_challenge_method="S256",
    )
    return str(url)


async def exchange_code(
    http: httpx.AsyncClient, issuer: ResolvedIssuer, *, code: str, redirect_uri: str, code_verifier: str
) -> dict[str, Any]:
    """Trade the code for tokens at the issuer's token endpoint (RFC 6749 §4.1.3, RFC 7636 §4.5),
    through the same token call as a connection's provider (``service.oauth_client``)."""
    from authlib.oauth2.auth import ClientAuth
    from authlib.oauth2.rfc6749.parameters import prepare_token_request

    body = prepare_token_request(
        "authorization_code", code=code, redirect_uri=redirect_uri, code_verifier=code_verifier
    )
    client = ClientAuth(issuer.client_id, issuer.client_secret, issuer.token_auth_method)
    try:
        return await token_request(http, issuer.token_endpoint, client, body, log={"issuer": issuer.issuer})
    except ProviderError as failed:
        if failed.error == "provider_unreachable" or failed.error.startswith("http_"):
            raise LoginFailed(N_("The sign-in service could not be reached. Please try again.")) from None
        # ``error`` is a registered OAuth error code; the description is provider text: dropped.
        logger.warning("issuer token exchange refused", extra={"code": failed.error, "issuer": issuer.issuer})
        raise LoginFailed(N_("The sign-in service did not accept the sign-in. Please try again.")) from None


async def verify_id_token(
    directory: IssuerDirectory, issuer: ResolvedIssuer, id_token: object, *, nonce: str
) -> VerifiedLogin:
    from joserfc import jwt
    from joserfc.errors import JoseError

    if not isinstance(id_token, str) or not id_token:
        raise InvalidIdToken("The sign-in service sent no identity token.")
    try:
        decoded = await decode_signed(directory, issuer, id_token)
    except (JoseError, ValueError):
        raise InvalidIdToken("The identity token's signature could not be verified.") from None
    claims = decoded.claims
    # The directory's clock: the same "now" for ``exp``, ``iat`` and the age limit below.
    now = int(directory.clock.time())
    registry = jwt.JWTClaimsRegistry(
        now=now,
        leeway=CLOCK_LEEWAY_SECONDS,
        iss={"essential": True, "value": issuer.issuer},
        aud={"essential": True, "value": issuer.client_id},
        sub={"essential": True},
        exp={"essential": True},
        iat={"essential": True},
    )
    try:
        registry.validate(claims)
    except (JoseError, ValueError):
        raise InvalidIdToken("The identity token is not for this service, or it has expired.") from None
    audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
    if len(audiences) > 1 and claims.get("azp") != issuer.client_id:
        raise InvalidIdToken("The identity token is not for this service, or it has expired.")
    issued_at = claims["iat"]
    if not isinstance(issued_at, int | float) or issued_at < now - MAX_ID_TOKEN_AGE_SECONDS:
        raise InvalidIdToken("The identity token is too old.")
    got_nonce = claims.get("nonce")
    if not isinstance(got_nonce, str) or not hmac.compare_digest(got_nonce.encode(), nonce.encode()):
        raise InvalidIdToken("The identity token does not belong to this sign-in.")
    sub = claims["sub"]
    if not isinstance(sub, str) or not sub or len(sub) > 255:
        raise InvalidIdToken("The identity token names no valid user.")
    return VerifiedLogin(iss=issuer.issuer, sub=sub, claims=dict(claims))


async def decode_signed(directory: IssuerDirectory, issuer: ResolvedIssuer, token: str) -> jwt.Token:
    """``token`` with its signature checked against the issuer's keys (ID tokens and subject
    tokens alike); ``JoseError`` or ``ValueError`` when they do not verify it. A failure may mean
    the issuer rotated its keys: they are refetched once (rate-limited in the directory)."""
    from joserfc.errors import JoseError

    try:
        return _decode(token, await directory.key_set(issuer))
    except (JoseError, ValueError):
        return _decode(token, await directory.key_set(issuer, refresh=True))


_ALGORITHMS = list(ID_TOKEN_ALGORITHMS)


def _decode(token: str, keys: Any) -> jwt.Token:
    from joserfc import jwt

    return jwt.decode(token, keys, algorithms=_ALGORITHMS)
