"""``POST /oauth/token`` (RFC 8693 token exchange) and its RFC 8414 metadata.

Answers are RFC 6749 §5 JSON, not problem+json: the callers are OAuth libraries. Every answer,
token or error, carries ``Cache-Control: no-store`` and ``Pragma: no-cache`` (RFC 6749 §5.1).
"""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, get, post

from service.errors import ElicitdError
from service.oauth.deps import ExchangeDeps
from service.oauth.exchange import TOKEN_EXCHANGE, TOKEN_PATH, OAuthError, parse_form

_NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}
_FORM = "application/x-www-form-urlencoded"


def _oauth_error(request: Request[Any, Any, Any], exc: OAuthError) -> Response[Any]:
    return Response(exc.body(), status_code=exc.http_status, headers={**_NO_STORE, **exc.headers})


@post(
    TOKEN_PATH,
    operation_id="exchangeToken",
    tags=["oauth"],
    status_code=200,
    summary="RFC 8693 token exchange: the user's access token in, the provider's access token out",
    description="Form parameters: `grant_type=urn:ietf:params:oauth:grant-type:token-exchange`, "
    "`subject_token` (the user's MCP access token), "
    "`subject_token_type=urn:ietf:params:oauth:token-type:access_token`, `audience` (the provider's "
    "name) or `resource` (`<public URL>/providers/<name>`), optional `scope`. The server client "
    "authenticates with HTTP Basic (`client_id` = its name, password = its API key) or "
    "`Authorization: Bearer <API key>`. Errors are RFC 6749 §5.2 JSON.",
    exception_handlers={OAuthError: _oauth_error},
)
async def exchange_token(request: Request[Any, Any, Any], services: ExchangeDeps) -> Response[dict[str, Any]]:
    media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media_type != _FORM:
        raise OAuthError("invalid_request", f"The request body must be {_FORM}.")
    form = parse_form(await request.body())
    try:
        answer = await services.exchange.exchange(request.headers.get("authorization"), form)
    except OAuthError:
        raise
    except ElicitdError as exc:
        if exc.status in (502, 503, 504):
            # An issuer, a provider or the database briefly away: the client may try again.
            raise OAuthError("temporarily_unavailable", exc.detail, status=exc.status, headers=exc.headers) from None
        if exc.status >= 500:
            raise
        raise OAuthError("invalid_request", exc.detail, status=exc.status, headers=exc.headers) from None
    return Response(answer, headers=_NO_STORE)


@get(
    "/.well-known/oauth-authorization-server",
    operation_id="authorizationServerMetadata",
    tags=["oauth"],
    summary="RFC 8414 metadata: where the token exchange is and what it accepts",
)
async def authorization_server_metadata(services: ExchangeDeps) -> dict[str, Any]:
    exchange = services.exchange
    return {
        "issuer": exchange.issuer,
        "token_endpoint": exchange.token_endpoint,
        "grant_types_supported": [TOKEN_EXCHANGE],
        "token_endpoint_auth_methods_supported": ["client_secret_basic"],
        # No authorization endpoint: elicitd issues tokens only by exchange (RFC 8414 §2 requires the list).
        "response_types_supported": [],
    }


OAUTH_ROUTES: list[Any] = [exchange_token, authorization_server_metadata]
