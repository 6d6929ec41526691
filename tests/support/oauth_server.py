"""Run the test OAuth 2 / OIDC server (``tests/support/oauth-server/server.js``) from pytest.

The server is a real process on a real port so elicitd's outbound HTTP client, redirects and
browser cookies are exercised exactly as against a production provider. This module starts it,
waits for its readiness line, and wraps its ``/__control`` API in typed methods so tests read as
statements about the provider ("refresh was called once") rather than as HTTP plumbing.

Usage from a conftest::

    from tests.support.oauth_server import oauth_server, oauth_server_factory  # noqa: F401 (fixtures)
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import secrets
import shutil
import subprocess
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

import httpx
import pytest

SERVER_DIR = Path(__file__).resolve().parent / "oauth-server"
READY_PATTERN = re.compile(r"^READY (?P<url>http://\S+)$")
MIN_NODE_MAJOR = 20

FixtureScope = Literal["session", "package", "module", "class", "function"]


class OAuthServerError(RuntimeError):
    """The test OAuth server could not be installed, started or controlled."""


class NodeNotFoundError(OAuthServerError):
    """Node.js is missing; the end-to-end tests need it and must not be skipped silently."""


@dataclass(frozen=True, slots=True)
class IssuedToken:
    """One access or refresh token as the server sees it (``status`` is computed on read)."""

    token: str
    kind: Literal["access", "refresh"]
    sub: str
    client_id: str
    scope: str
    family: str
    grant_type: str
    status: Literal["active", "used", "revoked", "expired"]
    issued_at: float
    expires_at: float | None
    used_at: float | None
    revoked_at: float | None
    replaced_by: str | None
    # What the token is for (minted for an MCP server's user; None for the provider's own tokens).
    audience: str | list[str] | None = None


@dataclass(frozen=True, slots=True)
class TokenRequest:
    """One call to the token endpoint, in the order the server finished processing them."""

    grant_type: str
    client_id: str | None
    auth_method: str | None
    outcome: Literal["ok", "error"]
    error: str | None
    started_at: float
    finished_at: float | None
    # The request's Host header: which of the server's names it was sent to.
    host: str | None = None


@dataclass(frozen=True, slots=True)
class Revocation:
    """One call to the RFC 7009 revocation endpoint."""

    token: str
    token_type_hint: str | None
    client_id: str
    auth_method: str
    known: bool
    kind: Literal["access", "refresh"] | None
    revoked_count: int
    at: float


@dataclass(frozen=True, slots=True)
class ServerStats:
    """Call counters; ``token_calls`` is keyed by grant type."""

    token_calls: dict[str, int]
    authorize_calls: int
    login_submissions: int
    revocation_calls: int
    introspection_calls: int
    userinfo_calls: int
    api_calls: dict[str, int]


@dataclass(frozen=True, slots=True)
class PkcePair:
    """An RFC 7636 verifier and its S256 challenge."""

    verifier: str
    challenge: str


def pkce_pair() -> PkcePair:
    """Make a fresh PKCE pair, for tests that act as the OAuth client themselves."""
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return PkcePair(verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii"))


def find_node() -> str:
    """Return the ``node`` executable, or fail loudly: a missing runtime is a setup error."""
    node = shutil.which("node")
    if node is None:
        raise NodeNotFoundError(
            "Node.js is not on PATH. The end-to-end tests run a real OAuth server "
            f"(tests/support/oauth-server) and need Node.js {MIN_NODE_MAJOR}+ with npm: "
            "install it (e.g. `apt-get install nodejs npm`) and run the tests again."
        )
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True, timeout=30)
    match = re.match(r"v(\d+)\.", version.stdout.strip())
    if match is None or int(match.group(1)) < MIN_NODE_MAJOR:
        raise NodeNotFoundError(
            f"{node} is Node.js {version.stdout.strip()}; the test OAuth server needs Node.js {MIN_NODE_MAJOR}+."
        )
    return node


def ensure_node_modules(server_dir: Path = SERVER_DIR) -> None:
    """Run ``npm ci`` when the lockfile names packages that are not installed yet.

    The server currently needs only Node's standard library, so this is normally a no-op; it is
    kept so that adding a dependency later needs no change on any developer machine or in CI.
    """
    lock = json.loads((server_dir / "package-lock.json").read_text(encoding="utf-8"))
    dependencies = [name for name in lock.get("packages", {}) if name]
    if not dependencies or (server_dir / "node_modules").is_dir():
        return
    npm = shutil.which("npm")
    if npm is None:
        raise NodeNotFoundError(
            f"npm is not on PATH; install Node.js {MIN_NODE_MAJOR}+ with npm to set up the test OAuth server."
        )
    result = subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund"],
        cwd=server_dir,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if result.returncode != 0:
        raise OAuthServerError(f"npm ci failed in {server_dir}:\n{result.stdout}\n{result.stderr}")


class OAuthServer:
    """One running instance of the test OAuth server.

    Each instance has its own signing key, port and issuer URL, so a test that needs two issuers
    (or an issuer distinct from the API provider) simply starts two.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        server_dir: Path = SERVER_DIR,
        startup_timeout: float = 30.0,
    ) -> None:
        self._host = host
        self._server_dir = server_dir
        self._startup_timeout = startup_timeout
        self._process: subprocess.Popen[str] | None = None
        self._base_url: str | None = None
        self._client: httpx.Client | None = None
        self._output: deque[str] = deque(maxlen=500)
        self._reader: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> Self:
        """Start the process on a port the OS picks and wait for its ``READY`` line.

        Port 0 avoids the classic race of probing a free port and losing it before binding.
        """
        if self._process is not None:
            raise OAuthServerError("the OAuth server is already running")
        node = find_node()
        ensure_node_modules(self._server_dir)
        env = {**os.environ, "OAUTH_SERVER_EXIT_ON_STDIN_CLOSE": "1"}
        self._process = subprocess.Popen(
            [node, str(self._server_dir / "server.js"), "0", self._host],
            cwd=self._server_dir,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        ready = threading.Event()
        found: list[str] = []
        self._reader = threading.Thread(
            target=self._drain_output, args=(ready, found), name="oauth-server-output", daemon=True
        )
        self._reader.start()
        if not ready.wait(self._startup_timeout) or not found:
            output = self.output()
            self.stop()
            raise OAuthServerError(f"the OAuth server did not become ready; its output:\n{output}")
        self._base_url = found[0]
        self._client = httpx.Client(base_url=self._base_url, timeout=10.0)
        return self

    def _drain_output(self, ready: threading.Event, found: list[str]) -> None:
        """Read the child's output until it exits, so a full pipe can never block it."""
        process = self._process
        assert process is not None
        assert process.stdout is not None
        for line in process.stdout:
            self._output.append(line.rstrip("\n"))
            match = READY_PATTERN.match(line.strip())
            if match and not ready.is_set():
                found.append(match.group("url"))
                ready.set()
        ready.set()

    def stop(self) -> None:
        """Stop the process (SIGTERM, then SIGKILL after 5 s); safe to call twice."""
        if self._client is not None:
            self._client.close()
            self._client = None
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        if process.stdin is not None:
            process.stdin.close()
        if self._reader is not None:
            self._reader.join(timeout=5)
            self._reader = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def output(self) -> str:
        """The last lines the process printed (for failure messages)."""
        return "\n".join(self._output)

    # -- addresses ------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT`` without a trailing slash."""
        if self._base_url is None:
            raise OAuthServerError("the OAuth server is not running")
        return self._base_url

    @property
    def issuer(self) -> str:
        """The OIDC issuer identifier; equal to :attr:`base_url`, exactly as in the ID token."""
        return self.base_url

    def url(self, path: str) -> str:
        """An absolute URL on this server, e.g. ``url("/api/me")``."""
        return f"{self.base_url}/{path.lstrip('/')}"

    @property
    def discovery_url(self) -> str:
        return self.url("/.well-known/openid-configuration")

    @property
    def authorization_endpoint(self) -> str:
        return self.url("/authorize")

    @property
    def token_endpoint(self) -> str:
        return self.url("/token")

    @property
    def revocation_endpoint(self) -> str:
        return self.url("/revoke")

    @property
    def introspection_endpoint(self) -> str:
        return self.url("/introspect")

    @property
    def userinfo_endpoint(self) -> str:
        return self.url("/userinfo")

    @property
    def jwks_uri(self) -> str:
        return self.url("/jwks")

    @staticmethod
    def account_id(username: str) -> str:
        """The provider account id that ``/api/me`` reports for ``username``."""
        return f"acct-{username}"

    # -- plain HTTP -----------------------------------------------------------------------------

    @property
    def http(self) -> httpx.Client:
        """A client bound to :attr:`base_url`, for requests the typed methods do not cover."""
        if self._client is None:
            raise OAuthServerError("the OAuth server is not running")
        return self._client

    def _control(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        response = self.http.request(method, f"/__control{path}", json=body)
        if response.status_code != 200:
            raise OAuthServerError(f"{method} /__control{path} -> {response.status_code}: {response.text}")
        return response.json()

    def discovery(self) -> dict[str, Any]:
        response = self.http.get("/.well-known/openid-configuration")
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    def jwks(self) -> dict[str, Any]:
        response = self.http.get("/jwks")
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    def authorize_url(
        self,
        *,
        client_id: str,
        redirect_uri: str,
        code_challenge: str,
        scope: str = "openid",
        state: str | None = None,
        nonce: str | None = None,
        login_hint: str | None = None,
    ) -> str:
        """Build an authorization request URL (S256 PKCE), as an OAuth client would."""
        params = {
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": redirect_uri,
            "scope": scope,
            "code_challenge": code_challenge,
            "code_challenge_method": "S256",
        }
        extra = {"state": state, "nonce": nonce, "login_hint": login_hint}
        params.update({key: value for key, value in extra.items() if value is not None})
        return str(httpx.URL(self.authorization_endpoint, params=params))

    def login_without_browser(self, authorize_url: str, username: str, *, deny: bool = False) -> httpx.URL:
        """Submit the login form over plain HTTP and return the redirect back to the client.

        For tests about token handling that do not need to prove anything about the browser;
        the browser tests use :func:`tests.support.browser.login_at_issuer` instead.
        """
        page = self.http.get(authorize_url)
        if page.status_code != 200:
            raise OAuthServerError(f"authorize answered {page.status_code}: {page.headers.get('location')}")
        match = re.search(r'name="request_id" value="([^"]+)"', page.text)
        if match is None:
            raise OAuthServerError("the authorize response is not the login page")
        form = {"request_id": match.group(1), "username": username, "action": "deny" if deny else "approve"}
        response = self.http.post("/login", data=form)
        if response.status_code != 303:
            raise OAuthServerError(f"login answered {response.status_code}: {response.text}")
        return httpx.URL(response.headers["location"])

    # -- control API ----------------------------------------------------------------------------

    def stats(self) -> ServerStats:
        return ServerStats(**self._control("GET", "/stats"))

    def token_call_counts(self) -> dict[str, int]:
        """Token endpoint calls by grant type since the last reset."""
        return self.stats().token_calls

    def token_calls(self, grant_type: str) -> int:
        """Token endpoint calls for one grant type, e.g. ``token_calls("refresh_token")``."""
        return self.stats().token_calls.get(grant_type, 0)

    def reset_stats(self) -> None:
        """Zero the counters and clear the token-request and revocation logs."""
        self._control("POST", "/reset-stats")

    def reset(self) -> None:
        """Forget every client, code, token, plant, forced failure and setting (keeps the key)."""
        self._control("POST", "/reset")

    def tokens(
        self,
        *,
        kind: Literal["access", "refresh"] | None = None,
        sub: str | None = None,
        status: Literal["active", "used", "revoked", "expired"] | None = None,
    ) -> list[IssuedToken]:
        filters = {"kind": kind, "sub": sub, "status": status}
        query = str(httpx.QueryParams({k: v for k, v in filters.items() if v is not None}))
        return [IssuedToken(**item) for item in self._control("GET", f"/tokens?{query}")]

    def token(self, value: str) -> IssuedToken:
        """The record of one issued token; fails when the server never issued it."""
        for token in self.tokens():
            if token.token == value:
                return token
        raise OAuthServerError("the OAuth server never issued that token")

    def token_requests(self) -> list[TokenRequest]:
        return [TokenRequest(**item) for item in self._control("GET", "/token-requests")]

    def revocations(self) -> list[Revocation]:
        return [Revocation(**item) for item in self._control("GET", "/revocations")]

    def config(self) -> dict[str, Any]:
        result: dict[str, Any] = self._control("GET", "/config")
        return result

    def configure(self, **settings: Any) -> dict[str, Any]:
        """Change settings (see README); unknown keys or wrong types are rejected by the server."""
        result: dict[str, Any] = self._control("POST", "/config", settings)
        return result

    def set_access_token_ttl(self, seconds: int) -> None:
        self.configure(access_token_ttl=seconds)

    def set_token_delay(self, seconds: float) -> None:
        """Hold every token endpoint call this long before it reads any state (0 turns it off)."""
        self.configure(token_delay_ms=round(seconds * 1000))

    def fail_next_refresh(self, error: str = "invalid_grant", *, status: int | None = None, count: int = 1) -> None:
        """Make the next ``count`` refresh grants fail; ``invalid_grant`` also revokes the grant."""
        body: dict[str, Any] = {"error": error, "count": count}
        if status is not None:
            body["status"] = status
        self._control("POST", "/fail-next-refresh", body)

    def fail_next_api(self, status: int = 500, *, count: int = 1, retry_after: int | None = None) -> None:
        """Make the next ``count`` resource API calls (``/userinfo``, ``/api/me``, ``/api/files``)
        answer ``status`` (with ``Retry-After`` when given), whatever their token."""
        body: dict[str, Any] = {"status": status, "count": count}
        if retry_after is not None:
            body["retry_after"] = retry_after
        self._control("POST", "/fail-next-api", body)

    def fail_next_authorize(
        self, error: str = "server_error", *, description: str | None = None, count: int = 1
    ) -> None:
        """Make the next ``count`` valid authorization requests redirect back with ``error``."""
        body: dict[str, Any] = {"error": error, "count": count}
        if description is not None:
            body["error_description"] = description
        self._control("POST", "/fail-next-authorize", body)

    def plant(
        self,
        *,
        access_token: str | None = None,
        refresh_token: str | None = None,
        code: str | None = None,
    ) -> None:
        """Queue exact values for the next issued token/code, e.g. marker strings for leak tests."""
        values = {"access_token": access_token, "refresh_token": refresh_token, "code": code}
        self._control("POST", "/plant", {k: v for k, v in values.items() if v is not None})

    def register_client(
        self,
        client_id: str,
        client_secret: str | None = None,
        redirect_uris: list[str] | tuple[str, ...] = (),
    ) -> None:
        """Register a client: its secret is then required and redirect URIs match exactly."""
        body = {"client_id": client_id, "client_secret": client_secret, "redirect_uris": list(redirect_uris)}
        self._control("POST", "/clients", body)

    def expire_access_tokens(self, *, token: str | None = None, sub: str | None = None) -> int:
        """Expire one token, or every active access token (of ``sub``); returns how many."""
        result = self._control("POST", "/expire", {"token": token, "sub": sub})
        return int(result["expired"])

    def revoke_grant(self, token: str) -> int:
        """Revoke the whole grant ``token`` belongs to, as a user disconnecting at the provider."""
        return int(self._control("POST", "/revoke", {"token": token})["revoked"])

    def mint(
        self,
        sub: str,
        *,
        client_id: str = "test-client",
        scope: str = "openid",
        nonce: str | None = None,
        audience: str | list[str] | None = None,
        resource: str | None = None,
        format: Literal["opaque", "jwt"] = "opaque",
        ttl: int | None = None,
        iss: str | None = None,
        typ: str | None = "at+jwt",
        expires: bool = True,
        claims: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Issue tokens directly (not counted as a token call), e.g. a signed ID token for ``sub``.

        For an MCP server's user: ``audience`` (and ``resource``) name what the access token is for,
        ``format="jwt"`` makes it an RFC 9068 JWT (else opaque, for RFC 7662 introspection at
        ``/introspect``), ``ttl`` overrides its lifetime (negative: already expired), and ``iss``
        puts another issuer's URL in the JWT while this server signs it (a forgery). ``typ`` is the
        JWT header's ``typ`` (None leaves it out), and ``expires=False`` makes a token with no
        ``exp`` at all, in the JWT or the introspection answer. ``claims`` adds claims to a JWT access
        token (an operator's ``groups``, say); the registered ones (``iss``, ``sub``, ``aud`` …) win."""
        body: dict[str, Any] = {"sub": sub, "client_id": client_id, "scope": scope, "nonce": nonce, "format": format}
        body.update(typ=typ, expires=expires)
        optional = {"audience": audience, "resource": resource, "ttl": ttl, "iss": iss, "claims": claims}
        body.update({key: value for key, value in optional.items() if value is not None})
        result: dict[str, Any] = self._control("POST", "/mint", body)
        return result


def make_oauth_server_fixture(
    *, scope: FixtureScope = "session", host: str = "127.0.0.1"
) -> Callable[[], Iterator[OAuthServer]]:
    """Build a fixture that runs one :class:`OAuthServer` for ``scope``.

    A shared server keeps state between tests; tests that care call ``reset()`` first, which is
    far cheaper than a new process.
    """

    @pytest.fixture(scope=scope)
    def _fixture() -> Iterator[OAuthServer]:
        with OAuthServer(host=host) as server:
            yield server

    return _fixture


oauth_server = make_oauth_server_fixture(scope="session")


class OAuthServerFactory:
    """Starts extra servers on demand (a second issuer, a second provider) and stops them all."""

    def __init__(self) -> None:
        self._servers: list[OAuthServer] = []

    def __call__(self, *, host: str = "127.0.0.1") -> OAuthServer:
        server = OAuthServer(host=host).start()
        self._servers.append(server)
        return server

    def stop_all(self) -> None:
        for server in reversed(self._servers):
            server.stop()
        self._servers.clear()


@pytest.fixture
def oauth_server_factory() -> Iterator[OAuthServerFactory]:
    factory = OAuthServerFactory()
    try:
        yield factory
    finally:
        factory.stop_all()
