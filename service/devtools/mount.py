"""Serve Dev ID and Demo Files under ``/dev/`` of the dev instance's own origin, and register them.

Why the same origin rather than a port of their own: nothing more to choose, find free or
collide (``elicitd dev --port`` moves them along, and a test instance on a random port gets its
own), and no second server to start and stop with the process. They are still separate services
in every way that matters: elicitd reaches them only over HTTP (discovery, JWKS, token, account
and files endpoints), they sit outside elicitd's routing, middleware and OpenAPI document, and
their cookie is scoped to ``/dev``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from litestar import Litestar
from litestar.enums import ScopeType
from litestar.types import ASGIApp, Receive, Scope, Send
from sqlalchemy import text

from service.admin.tokens import Role
from service.connections.providers import ProviderSpec, upsert_provider
from service.crypto.vault import Vault
from service.db.engine import make_engine, make_sessionmaker
from service.db.unit import unit_of_work
from service.devtools.about import about_routes
from service.devtools.files import FILES_PATH, SCOPE_WORDS, DemoFiles, files_routes
from service.devtools.issuer import ID_PATH, DevIssuer, issuer_routes
from service.devtools.keys import DevSecrets
from service.devtools.oauth import RegisteredClient
from service.hosts import HostCheck, allowed_names
from service.identity.issuers import IssuerConfig, upsert_issuer
from service.loopback import is_loopback_host
from service.operators.store import mark_issuer
from service.settings import Settings

PROVIDER_NAME = "demo-files"
CLIENT_ID = "elicitd"
# Under ``make run`` the Dev ID user name is the console role: sign in as "admin" to administer.
DEV_OPERATOR_ROLES = {
    Role.VIEWER: frozenset({"viewer"}),
    Role.OPERATOR: frozenset({"operator"}),
    Role.ADMIN: frozenset({"admin"}),
}
DEV_SERVER_CLIENT = "dev"
# Requests for these paths go to the dev tools; everything else (and the lifespan) to elicitd.
_PREFIXES = (f"{ID_PATH}/", f"{FILES_PATH}/", f"/.well-known/oauth-authorization-server{FILES_PATH}")
# The pages at the addresses the banner prints (and the root): what is there, not a JSON 404.
_PAGES = frozenset({"/", ID_PATH, FILES_PATH})


def refusal(settings: Settings, *, host: str, embedded: bool) -> str | None:
    """Why the dev tools must not run here, or None. They hand out identities to anyone who asks,
    so they run only where nothing real can be reached: dev mode, the embedded PostgreSQL and
    Redis, and loopback for both the listening address and the public URL."""
    if not settings.dev_mode:
        return "ELICITD_DEV is off"
    if not embedded:
        return "this instance uses a configured database or Redis, not the embedded ones"
    if not is_loopback_host(host):
        return f"this instance listens on {host}, not on loopback"
    if not is_loopback_host(urlsplit(settings.public_url).hostname or ""):
        return "ELICITD_PUBLIC_URL is not a loopback address"
    return None


@dataclass(frozen=True, slots=True)
class DevTools:
    """Dev ID and Demo Files for one dev instance at ``base`` (its public URL)."""

    base: str
    issuer: DevIssuer
    files: DemoFiles
    app: Litestar
    # Host names answered besides the base's and loopback (``ELICITD_ALLOWED_HOSTS``).
    allowed_hosts: tuple[str, ...] = ()

    @classmethod
    def build(cls, base: str, keys: DevSecrets, *, allowed_hosts: tuple[str, ...] = ()) -> DevTools:
        id_client = RegisteredClient(
            client_id=CLIENT_ID,
            name="elicitd (this development instance)",
            secret=keys.id_client_secret,
            # The console signs operators in at Dev ID too (its own callback).
            redirect_uris=(f"{base}/auth/callback", f"{base}/console/auth/callback"),
        )
        files_client = RegisteredClient(
            client_id=CLIENT_ID,
            name="elicitd (dev)",
            secret=keys.files_client_secret,
            redirect_uris=(f"{base}/connect/callback",),
        )
        issuer = DevIssuer(base + ID_PATH, keys, {CLIENT_ID: id_client})
        files = DemoFiles(base + FILES_PATH, keys, {CLIENT_ID: files_client})
        app = Litestar(
            route_handlers=[*issuer_routes(issuer), *files_routes(files), *about_routes(base, PROVIDER_NAME)],
            openapi_config=None,
            # elicitd configured logging already (its formatter, its fields); Litestar's default
            # config would replace the root handler and print every later line without fields.
            logging_config=None,
        )
        return cls(base=base, issuer=issuer, files=files, app=app, allowed_hosts=allowed_hosts)

    def wrap(self, app: ASGIApp) -> ASGIApp:
        """``app`` with the dev tools in front of their paths. They check ``Host`` as elicitd does
        (``service.hosts``): a rebinding page would otherwise mint any user's token here."""
        tools = HostCheck(self.app, allowed_names(self.base, self.allowed_hosts))

        async def dispatch(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == ScopeType.HTTP and (scope["path"].startswith(_PREFIXES) or scope["path"] in _PAGES):
                await tools(scope, receive, send)
            else:
                await app(scope, receive, send)

        return dispatch

    async def register(self, settings: Settings) -> None:
        """Dev ID as a trusted issuer, Demo Files as a provider, and the ``dev`` server client
        allowed both (a client with no list already may use every issuer and provider)."""
        engine = make_engine(settings)
        vault = Vault(settings.keys)
        keys = self.issuer.keys
        try:
            async with unit_of_work(make_sessionmaker(engine)) as session:
                await upsert_issuer(
                    session,
                    vault,
                    IssuerConfig(
                        issuer=self.issuer.issuer,
                        client_id=CLIENT_ID,
                        client_secret=keys.id_client_secret,
                        display_name="Dev ID",
                    ),
                )
                # The console's operators sign in at Dev ID too: the user name is the role.
                await mark_issuer(
                    session, self.issuer.issuer, role_claim="preferred_username", roles=DEV_OPERATOR_ROLES
                )
                await upsert_provider(
                    session,
                    ProviderSpec(
                        name=PROVIDER_NAME,
                        catalog="oauth2",
                        display_name="Demo Files",
                        issuer=self.files.issuer,
                        client_id=CLIENT_ID,
                        client_secret=keys.files_client_secret,
                        account_endpoint=f"{self.files.issuer}/api/me",
                        account_id_field="id",
                        account_login_field="login",
                        default_scopes=("files:read",),
                        scope_descriptions=dict(SCOPE_WORDS),
                    ),
                    vault,
                )
                for column, value in (("trusted_issuers", self.issuer.issuer), ("allowed_providers", PROVIDER_NAME)):
                    await session.execute(
                        text(
                            f"UPDATE server_clients SET {column} = array_append({column}, CAST(:value AS text)) "
                            f"WHERE name = :name AND cardinality({column}) > 0 AND NOT (:value = ANY({column}))"
                        ),
                        {"value": value, "name": DEV_SERVER_CLIENT},
                    )
        finally:
            await engine.dispose()

    def banner(self, api_key: str) -> str:
        base, iss = self.base, self.issuer.issuer
        return f"""Try connecting an account: Dev ID (sign-in) and Demo Files (a provider), served by this instance
  make demo             in a second terminal: an MCP host calls a tool that needs Demo Files
  Dev ID:               {iss}  (pick or type any user name; no passwords)
  Console:              {base}/console/  (sign in at Dev ID as admin, operator or viewer)
  Demo Files:           {self.files.issuer}  (provider "{PROVIDER_NAME}", scope files:read)
  Or by hand: create a connect flow for alice, open its "url", sign in as alice, Continue, Allow:
    curl -s -X POST {base}/v1/flows \\
      -H 'Authorization: Bearer {api_key}' -H 'Content-Type: application/json' \\
      -d '{{"subject": {{"iss": "{iss}", "sub": "alice"}}, "kind": "oauth_connect", "provider": "{PROVIDER_NAME}"}}'
  then alice's Demo Files token:
    curl -s '{base}/v1/connections/{PROVIDER_NAME}/token?iss={iss}&sub=alice' -H 'Authorization: Bearer {api_key}'
"""


@dataclass(frozen=True, slots=True)
class DevToolsOff:
    """What ``prepare_dev_tools`` gives when the dev tools must not run: the app unchanged."""

    reason: str

    def wrap(self, app: ASGIApp) -> ASGIApp:
        return app

    def banner(self, api_key: str) -> str:
        return f"Dev ID and Demo Files are off: {self.reason}.\n"


def prepare_dev_tools(settings: Settings, *, data_dir: Path, host: str, embedded: bool) -> DevTools | DevToolsOff:
    """Build and register the dev tools when :func:`refusal` allows it (``elicitd dev`` only)."""
    import asyncio

    reason = refusal(settings, host=host, embedded=embedded)
    if reason is not None:
        return DevToolsOff(reason)
    tools = DevTools.build(
        settings.public_url, DevSecrets.load_or_create(data_dir), allowed_hosts=settings.allowed_hosts
    )
    asyncio.run(tools.register(settings))
    return tools
