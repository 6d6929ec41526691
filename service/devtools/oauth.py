"""What Dev ID and Demo Files share: registered clients, the authorization request, client
authentication, PKCE, codes, and the shapes of OAuth answers.

The checks are the ones a real authorization server makes, because elicitd must meet them: an
unknown client or redirect URI gets an error page and never a redirect (RFC 6749 §4.1.2.1), PKCE
S256 is required, a code is single-use, bound to its client, redirect URI and verifier, and lives
one minute, and every redirect back carries ``iss`` (RFC 9207).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import unquote, urlencode, urlsplit

from litestar import Request, Response
from litestar.response import Redirect

from service.devtools.keys import DevSecrets
from service.devtools.pages import problem_page, render

CODE_TTL_SECONDS = 60.0
# A person picks a name and clicks; ten minutes is plenty, and stale requests are dropped.
PENDING_TTL_SECONDS = 600.0
NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}
_USER_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
_PKCE_VERIFIER = re.compile(r"^[A-Za-z0-9._~-]{43,128}$")
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class RegisteredClient:
    client_id: str
    name: str
    secret: str | None = field(repr=False)
    redirect_uris: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class AuthorizationRequest:
    """A checked authorization request, waiting for the person on the page."""

    client: RegisteredClient
    redirect_uri: str
    state: str | None
    scopes: tuple[str, ...]
    code_challenge: str
    nonce: str | None = None
    login_hint: str | None = None


@dataclass(frozen=True, slots=True)
class Grant:
    """What a code stands for."""

    client_id: str
    redirect_uri: str
    code_challenge: str
    user: str
    scopes: tuple[str, ...]
    nonce: str | None
    auth_time: int


class PageError(Exception):
    """A request that cannot be sent back to the client: shown on a page, never redirected."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class RedirectError(Exception):
    """An error the client is told about through its (already checked) redirect URI."""

    def __init__(self, request: AuthorizationRequest, error: str, description: str) -> None:
        super().__init__(error)
        self.request = request
        self.error = error
        self.description = description


def normalize_user(value: str | None) -> str | None:
    """A user name as typed: trimmed and lowercased; None when it is not 1-64 of ``a-z0-9._-``."""
    name = (value or "").strip().lower()
    return name if _USER_NAME.match(name) else None


def parse_authorization_request(
    params: Mapping[str, str],
    clients: Mapping[str, RegisteredClient],
    *,
    allowed_scopes: tuple[str, ...],
    default_scopes: tuple[str, ...],
) -> AuthorizationRequest:
    """Check an authorization request in the order RFC 6749 asks: client and redirect URI first
    (errors on a page), then everything else (errors sent back to the client)."""
    client = clients.get(params.get("client_id", ""))
    if client is None:
        raise PageError("This application is not registered here (unknown client_id).")
    redirect_uri = params.get("redirect_uri", "")
    if redirect_uri not in client.redirect_uris:
        raise PageError("The application asked to be sent back to an address it did not register (redirect_uri).")
    scopes = tuple(params.get("scope", "").split()) or default_scopes
    request = AuthorizationRequest(
        client=client,
        redirect_uri=redirect_uri,
        state=params.get("state"),
        scopes=scopes,
        code_challenge=params.get("code_challenge", ""),
        nonce=params.get("nonce"),
        login_hint=normalize_user(params.get("login_hint")),
    )
    if params.get("response_type") != "code":
        raise RedirectError(request, "unsupported_response_type", "Only response_type=code is supported.")
    if params.get("code_challenge_method") != "S256" or not re.fullmatch(r"[A-Za-z0-9_-]{43}", request.code_challenge):
        raise RedirectError(request, "invalid_request", "PKCE with code_challenge_method=S256 is required.")
    unknown = [scope for scope in scopes if scope not in allowed_scopes]
    if unknown:
        raise RedirectError(request, "invalid_scope", f"Unknown scope: {' '.join(unknown)}.")
    if params.get("prompt") == "none":
        raise RedirectError(request, "login_required", "Signing in needs the page.")
    return request


def redirect_back(request: AuthorizationRequest, issuer: str, **values: str) -> Response[Any]:
    """303 to the client's redirect URI with ``values``, its ``state`` and our ``iss`` (RFC 9207)."""
    query = dict(values)
    if request.state is not None:
        query["state"] = request.state
    query["iss"] = issuer
    separator = "&" if urlsplit(request.redirect_uri).query else "?"
    return Redirect(request.redirect_uri + separator + urlencode(query), status_code=303, headers=NO_STORE)


def pkce_matches(verifier: str, challenge: str) -> bool:
    if not _PKCE_VERIFIER.match(verifier):
        return False
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    computed = base64.urlsafe_b64encode(digest).decode().rstrip("=")
    return hmac.compare_digest(computed, challenge)


def authenticate_client(
    request: Request[Any, Any, Any], form: Mapping[str, str], clients: Mapping[str, RegisteredClient]
) -> RegisteredClient | None:
    """``client_secret_basic`` or ``client_secret_post`` (``none`` for a client without a secret)."""
    client_id, secret = form.get("client_id"), form.get("client_secret")
    header = request.headers.get("authorization", "")
    if header[:6].lower() == "basic ":
        try:
            raw = base64.b64decode(header[6:], validate=True).decode()
        except (ValueError, UnicodeDecodeError):
            return None
        user, _, password = raw.partition(":")
        client_id, secret = unquote(user), unquote(password)
    client = clients.get(client_id or "")
    if client is None:
        return None
    if client.secret is None:
        return client
    if secret is None or not hmac.compare_digest(secret.encode(), client.secret.encode()):
        return None
    return client


def invalid_client() -> Response[Any]:
    return token_error("invalid_client", "Client authentication failed.", 401)


def token_error(error: str, description: str, status: int = 400) -> Response[Any]:
    headers = dict(NO_STORE)
    if error == "invalid_client":
        headers["WWW-Authenticate"] = 'Basic realm="token"'
    return Response({"error": error, "error_description": description}, status_code=status, headers=headers)


def bearer_error(description: str) -> Response[Any]:
    return Response(
        {"error": "invalid_token", "error_description": description},
        status_code=401,
        headers={"WWW-Authenticate": 'Bearer error="invalid_token"', **NO_STORE},
    )


def bearer_token(request: Request[Any, Any, Any]) -> str | None:
    header = request.headers.get("authorization", "")
    return header[7:].strip() or None if header[:7].lower() == "bearer " else None


class Expiring(Generic[V]):
    """A small in-memory map whose entries vanish after ``ttl`` seconds; ``pop`` makes single use."""

    def __init__(self, ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl = ttl
        self._clock = clock
        self._items: dict[str, tuple[float, V]] = {}

    def put(self, value: V) -> str:
        now = self._clock()
        self._items = {k: v for k, v in self._items.items() if v[0] > now}
        key = secrets.token_urlsafe(24)
        self._items[key] = (now + self._ttl, value)
        return key

    def get(self, key: str) -> V | None:
        item = self._items.get(key)
        return item[1] if item is not None and item[0] > self._clock() else None

    def pop(self, key: str) -> V | None:
        item = self._items.pop(key, None)
        return item[1] if item is not None and item[0] > self._clock() else None


class AuthorizationServer:
    """What Dev ID and Demo Files both keep and do: their issuer URL, keys and registered clients,
    the requests waiting for the person on a page, and the codes not yet traded for tokens."""

    look: dict[str, str]  # the pages' colours and names (``service.devtools.pages``)

    def __init__(self, issuer: str, keys: DevSecrets, clients: Mapping[str, RegisteredClient]) -> None:
        self.issuer = issuer
        self.keys = keys
        self.clients = clients
        self.pending: Expiring[AuthorizationRequest] = Expiring(PENDING_TTL_SECONDS)
        self.codes: Expiring[Grant] = Expiring(CODE_TTL_SECONDS)

    def check_authorization(
        self, request: Request[Any, Any, Any], *, allowed_scopes: tuple[str, ...], default_scopes: tuple[str, ...]
    ) -> AuthorizationRequest:
        """The checked request of a GET to ``/authorize`` (see :func:`parse_authorization_request`)."""
        params = {key: str(value) for key, value in request.query_params.items()}
        return parse_authorization_request(
            params, self.clients, allowed_scopes=allowed_scopes, default_scopes=default_scopes
        )

    def start(
        self, request: Request[Any, Any, Any], *, allowed_scopes: tuple[str, ...], default_scopes: tuple[str, ...]
    ) -> AuthorizationRequest | Response[Any]:
        """A GET to ``/authorize``: its checked request, or the answer to one that fails a check
        (an error page when it cannot be sent back, the error sent back when it can)."""
        try:
            return self.check_authorization(request, allowed_scopes=allowed_scopes, default_scopes=default_scopes)
        except PageError as exc:
            return problem_page(self.look, exc.message)
        except RedirectError as exc:
            return self.refuse(exc)

    async def answer(
        self, request: Request[Any, Any, Any], *, expired: str
    ) -> tuple[Mapping[str, Any], str, AuthorizationRequest] | Response[Any]:
        """The person's POST from the page: its form, the id of the request waiting and that
        request; or the page saying ``expired`` when nothing waits under that id any more."""
        form = await request.form()
        request_id = str(form.get("request", ""))
        waiting = self.pending.get(request_id)
        if waiting is None:
            return problem_page(self.look, expired)
        return form, request_id, waiting

    def decline(self, request_id: str, request: AuthorizationRequest, description: str) -> Response[Any]:
        """The person said no (or cancelled): the request is dropped and ``access_denied`` sent back."""
        self.pending.pop(request_id)
        return self.send_back(request, error="access_denied", error_description=description)

    def page(
        self,
        template: str,
        request_id: str,
        request: AuthorizationRequest,
        *,
        problem: str | None = None,
        **context: Any,
    ) -> Response[str]:
        """The page a waiting request shows the person (sign-in, consent); 400 with its problem."""
        return render(
            template,
            self.look,
            status=200 if problem is None else 400,
            request_id=request_id,
            client_name=request.client.name,
            problem=problem,
            return_host=urlsplit(request.redirect_uri).netloc,
            **context,
        )

    def send_back(self, request: AuthorizationRequest, **values: str) -> Response[Any]:
        return redirect_back(request, self.issuer, **values)

    def refuse(self, error: RedirectError) -> Response[Any]:
        return self.send_back(error.request, error=error.error, error_description=error.description)

    def issue_code(self, request: AuthorizationRequest, user: str) -> Response[Any]:
        """The person said yes on the page: a code for ``user``, sent back to the client."""
        grant = Grant(
            client_id=request.client.client_id,
            redirect_uri=request.redirect_uri,
            code_challenge=request.code_challenge,
            user=user,
            scopes=request.scopes,
            nonce=request.nonce,
            auth_time=int(time.time()),
        )
        return self.send_back(request, code=self.codes.put(grant))

    async def client_request(self, request: Request[Any, Any, Any]) -> tuple[dict[str, str], RegisteredClient | None]:
        """The form of a token or revocation request, and the client it authenticates (None: answer
        :func:`invalid_client`)."""
        form = {key: str(value) for key, value in (await request.form()).items()}
        return form, authenticate_client(request, form, self.clients)

    def redeem_code(self, client: RegisteredClient, form: Mapping[str, str]) -> Grant | None:
        """The grant of the form's code when it was issued to ``client`` for the form's redirect URI
        and the verifier matches its challenge. The code is used up whatever the outcome."""
        grant = self.codes.pop(form.get("code", ""))
        if (
            grant is None
            or grant.client_id != client.client_id
            or grant.redirect_uri != form.get("redirect_uri")
            or not pkce_matches(form.get("code_verifier", ""), grant.code_challenge)
        ):
            return None
        return grant
