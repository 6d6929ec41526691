"""RFC 8693 token exchange: the user's access token in, a provider's access token out.

``POST /oauth/token`` with ``grant_type=urn:ietf:params:oauth:grant-type:token-exchange`` lets an
MCP server use any OAuth library to get the token the ``/v1`` token endpoint would give, with the
user's own access token as the grant. The request is checked in this order, and nothing is read
from the connections before the subject is proven:

1. the client: a server client's API key, by HTTP Basic (RFC 6749 §2.3.1: ``client_id`` = the
   server client's name, password = the API key — what OAuth libraries send by default) or as
   ``Authorization: Bearer`` like the ``/v1`` API;
2. the request's shape: grant type, ``subject_token`` of type ``access_token``, no ``actor_token``
   (delegation is not offered), one target named by ``audience`` (the provider's name) or
   ``resource`` (``<public URL>/providers/<name>``);
3. the subject token, verified as the subject proof does (``SubjectProver.verify``) whatever the
   client's ``subject_proof`` policy: here the token *is* the grant;
4. then ``ConnectionService.token`` for the proven subject — the same answer, refresh and grant
   checks as ``GET /v1/connections/{provider}/token``, for a provider that is configured and
   enabled (read in the same statement as the grant; only when nothing is found is the provider
   looked up alone, to answer ``invalid_target`` rather than ``invalid_grant``).

Errors follow RFC 6749 §5.2 and RFC 8693 §2.2.2: a bad or unacceptable subject token is
``invalid_request``; an unknown or forbidden provider ``invalid_target``; scopes the connection
lacks ``invalid_scope``; no connection (or none this client was granted), or one the provider
revoked, ``invalid_grant`` with a description that says to start an ``oauth_connect`` flow, and
``elicitd_code`` (``not_connected``, ``reauthorization_required``) for programs.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Sequence
from typing import Any, ClassVar
from urllib.parse import parse_qsl, unquote_plus

from service.clock import Clock, SystemClock
from service.connections.errors import InsufficientScope, database_busy
from service.connections.schemas import TokenResponse
from service.connections.service import ConnectionService
from service.db.base import CLIENT_ID
from service.errors import ElicitdError, Forbidden, NotConnected, ReauthorizationRequired
from service.identity.keys import ApiKeyAuthenticator, AuthenticatedClient
from service.identity.subject_proof import SubjectProver, SubjectTokenInvalid

logger = logging.getLogger("elicitd.oauth")

TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
TOKEN_PATH = "/oauth/token"
PROVIDER_RESOURCE_PATH = "/providers/"
_SINGLE = ("grant_type", "subject_token", "subject_token_type", "requested_token_type", "scope", "client_id")
_MAX_FIELDS = 32


class OAuthError(ElicitdError):
    """An RFC 6749 §5.2 error: ``code`` is the registered ``error`` value; rendered as
    ``{"error", "error_description"}`` by the token endpoint, never as problem+json."""

    code: ClassVar[str] = "invalid_request"
    status: ClassVar[int] = 400
    title: ClassVar[str] = "Token request refused"

    def __init__(
        self,
        error: str,
        description: str,
        *,
        status: int = 400,
        headers: dict[str, str] | None = None,
        elicitd_code: str | None = None,
    ) -> None:
        super().__init__(description, headers=headers)
        self.error = error
        self.http_status = status
        self.elicitd_code = elicitd_code

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"error": self.error, "error_description": self.detail}
        if self.elicitd_code is not None:
            body["elicitd_code"] = self.elicitd_code
        return body


def _no_such_provider() -> OAuthError:
    return OAuthError("invalid_target", "No such provider is configured.")


def invalid_client(description: str) -> OAuthError:
    # RFC 6749 §5.2: 401 with the scheme the client used, or the one it should use.
    return OAuthError("invalid_client", description, status=401, headers={"WWW-Authenticate": 'Basic realm="elicitd"'})


def parse_form(body: bytes) -> dict[str, list[str]]:
    """``application/x-www-form-urlencoded`` into name → values, refusing what cannot be one."""
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, max_num_fields=_MAX_FIELDS)
    except (UnicodeDecodeError, ValueError):
        raise OAuthError("invalid_request", "The request body is not a valid form.") from None
    form: dict[str, list[str]] = {}
    for name, value in pairs:
        form.setdefault(name, []).append(value)
    for name in _SINGLE:
        if len(form.get(name, [])) > 1:
            # RFC 6749 §3.2: request parameters must not be included more than once.
            raise OAuthError("invalid_request", f"The parameter {name} appears more than once.")
    return form


def _one(form: dict[str, list[str]], name: str) -> str | None:
    values = form.get(name)
    return values[0] if values else None


class TokenExchange:
    def __init__(
        self,
        *,
        authenticator: ApiKeyAuthenticator,
        subjects: SubjectProver,
        connections: ConnectionService,
        public_url: str,
        clock: Clock | None = None,
    ) -> None:
        self._authenticator = authenticator
        self._subjects = subjects
        self._connections = connections
        self._public_url = public_url.rstrip("/")
        self._clock: Clock = clock or SystemClock()

    @property
    def issuer(self) -> str:
        return self._public_url

    @property
    def token_endpoint(self) -> str:
        return self._public_url + TOKEN_PATH

    def provider_resource(self, provider: str) -> str:
        """The RFC 8707 resource URI naming a provider in a token exchange."""
        return f"{self._public_url}{PROVIDER_RESOURCE_PATH}{provider}"

    # ---- the request -------------------------------------------------------------------------------
    async def exchange(self, authorization: str | None, form: dict[str, list[str]]) -> dict[str, Any]:
        client = await self.authenticate(authorization, _one(form, "client_id"), "client_secret" in form)
        grant_type = _one(form, "grant_type")
        if not grant_type:
            raise OAuthError("invalid_request", "grant_type is required.")
        if grant_type != TOKEN_EXCHANGE:
            raise OAuthError("unsupported_grant_type", f"This endpoint offers only {TOKEN_EXCHANGE}.")
        subject_token = _one(form, "subject_token")
        if not subject_token:
            raise OAuthError("invalid_request", "subject_token is required: the user's access token.")
        if _one(form, "subject_token_type") != ACCESS_TOKEN_TYPE:
            raise OAuthError("invalid_request", f"subject_token_type must be {ACCESS_TOKEN_TYPE}.")
        if "actor_token" in form or "actor_token_type" in form:
            raise OAuthError("invalid_request", "Delegation (actor_token) is not supported.")
        requested = _one(form, "requested_token_type")
        if requested is not None and requested != ACCESS_TOKEN_TYPE:
            raise OAuthError("invalid_request", f"requested_token_type can only be {ACCESS_TOKEN_TYPE}.")
        provider = self._target(client, form.get("audience", []), form.get("resource", []))
        scopes = (_one(form, "scope") or "").split()
        try:
            proven = await self._subjects.verify(client, subject_token, issuer=None)
        except SubjectTokenInvalid as exc:
            raise OAuthError("invalid_request", exc.detail) from None
        except Forbidden as exc:  # issuer_not_trusted: "unacceptable based on policy" (RFC 8693 §2.2.2)
            raise OAuthError("invalid_request", exc.detail) from None
        token = await self._token(client, provider, proven.iss, proven.sub, scopes)
        logger.info(
            "token exchanged",
            extra={"server_client": CLIENT_ID.format(client.id), "provider": provider, "outcome": "issued"},
        )
        return self._answer(token)

    async def _token(
        self, client: AuthenticatedClient, provider: str, iss: str, sub: str, scopes: list[str]
    ) -> TokenResponse:
        """``ConnectionService.token`` for the proven subject, its refusals as RFC 6749 errors."""
        try:
            # The provider's switch is read with the grant, in one statement; only when nothing is
            # found is it asked apart, to tell an unknown provider from a missing connection.
            token = await self._connections.token(
                client, provider, iss=iss, sub=sub, scopes=scopes, account=None, enabled_provider=True
            )
        except NotConnected:
            with database_busy():  # as the grant's read: a database briefly away is temporarily_unavailable
                enabled = await self._connections.tokens.provider_enabled(provider)
            if not enabled:
                raise _no_such_provider() from None
            raise OAuthError(
                "invalid_grant",
                f"The user has no connection to '{provider}' that this server client may use. Start one with "
                f'POST /v1/flows {{"kind": "oauth_connect", "provider": "{provider}"}} for this subject, '
                "send the user its URL, and exchange again once it is completed.",
                elicitd_code="not_connected",
            ) from None
        except ReauthorizationRequired:
            raise OAuthError(
                "invalid_grant",
                f"'{provider}' no longer accepts the user's connection. Reconnect it with "
                f'POST /v1/flows {{"kind": "oauth_connect", "provider": "{provider}"}} and exchange again.',
                elicitd_code="reauthorization_required",
            ) from None
        except InsufficientScope as exc:
            missing = " ".join(str(s) for s in exc.extra.get("missing", []))
            raise OAuthError(
                "invalid_scope",
                f"The connection was not granted: {missing}. An oauth_connect flow with these scopes asks the user.",
                elicitd_code="insufficient_scope",
            ) from None
        except Forbidden as exc:
            raise OAuthError("invalid_target", exc.detail) from None
        return token

    async def authenticate(
        self, authorization: str | None, body_client_id: str | None, body_secret: bool
    ) -> AuthenticatedClient:
        if body_secret:
            raise invalid_client("Authenticate with HTTP Basic (client_secret_basic), not in the request body.")
        header = (authorization or "").strip()
        scheme, _, credentials = header.partition(" ")
        client_id: str | None = None
        if scheme.lower() == "basic":
            try:
                decoded = base64.b64decode(credentials.strip(), validate=True).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                raise invalid_client("The Basic credentials are malformed.") from None
            name, colon, secret = decoded.partition(":")
            if not colon:
                raise invalid_client("The Basic credentials are malformed.")
            client_id, key = unquote_plus(name), unquote_plus(secret)
        elif scheme.lower() == "bearer":
            key = credentials.strip()
        else:
            raise invalid_client("Client authentication is required: HTTP Basic with the server client's API key.")
        try:
            client = await self._authenticator.authenticate(f"Bearer {key}")
        except ElicitdError:
            raise invalid_client("The client credentials are not valid.") from None
        names = {client.name, CLIENT_ID.format(client.id)}
        if client_id is not None and client_id not in names:
            raise invalid_client("The client credentials are not valid.")
        if body_client_id is not None and body_client_id not in names:
            raise OAuthError("invalid_request", "client_id differs from the authenticated client.")
        return client

    def _target(self, client: AuthenticatedClient, audiences: Sequence[str], resources: Sequence[str]) -> str:
        names = list(audiences)
        prefix = self._public_url + PROVIDER_RESOURCE_PATH
        for resource in resources:
            if not resource.startswith(prefix) or "/" in resource[len(prefix) :] or "#" in resource:
                raise OAuthError(
                    "invalid_target", f"A resource names a provider as {prefix}<name>; use audience=<name> otherwise."
                )
            names.append(resource[len(prefix) :])
        distinct = set(names)
        if not distinct:
            raise OAuthError("invalid_request", "Name the provider: audience=<name> or resource=<provider URI>.")
        if len(distinct) > 1:
            raise OAuthError("invalid_target", "One provider per token exchange.")
        provider = distinct.pop()
        if client.allowed_providers and provider not in client.allowed_providers:
            raise OAuthError("invalid_target", "This server client may not use that provider.")
        if not provider:
            raise _no_such_provider()
        return provider

    def _answer(self, token: TokenResponse) -> dict[str, Any]:
        answer: dict[str, Any] = {
            "access_token": token.access_token,
            "issued_token_type": ACCESS_TOKEN_TYPE,
            "token_type": "Bearer" if token.token_type.lower() == "bearer" else token.token_type,
            "scope": " ".join(token.scopes),
        }
        if token.expires_at is not None:
            answer["expires_in"] = max(0, int(token.expires_at.timestamp() - self._clock.time()))
        return answer
