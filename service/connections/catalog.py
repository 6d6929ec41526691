"""Well-known providers, so an operator needs only a client id and secret.

Each entry holds what a provider's documentation says and what rarely changes: endpoints (or the
issuer to discover them from), how the account is identified, how scopes are joined, and plain
words for common scopes (shown on the connect page; people approve words, not scope strings).
Anything here can be overridden per provider in the database, the config file or the CLI.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from service.i18n import N_, _, current


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    key: str
    display_name: str
    issuer: str | None = None
    authorization_endpoint: str | None = None
    token_endpoint: str | None = None
    revocation_endpoint: str | None = None
    account_endpoint: str | None = None
    # A dotted path into the account endpoint's JSON (or, without an endpoint, the token response).
    account_id_field: str = "id"
    account_login_field: str | None = None
    token_auth_method: str = "client_secret_basic"
    default_scopes: tuple[str, ...] = ()
    scope_separator: str = " "
    scope_descriptions: dict[str, str] = field(default_factory=dict)
    authorize_params: dict[str, Any] = field(default_factory=dict)
    needs_issuer: bool = False
    # Whether the provider issues a second, separate token set for the same app and user (so a
    # server can be connected with just the scopes it asked while another holds more). Where it
    # cannot, the grant page does not offer "Connect separately" (DESIGN §10).
    second_token_set: bool = True


CATALOG: dict[str, CatalogEntry] = {
    "github": CatalogEntry(
        key="github",
        display_name="GitHub",
        authorization_endpoint="https://github.com/login/oauth/authorize",
        token_endpoint="https://github.com/login/oauth/access_token",
        account_endpoint="https://api.github.com/user",
        account_id_field="id",
        account_login_field="login",
        token_auth_method="client_secret_post",
        default_scopes=("read:user",),
        scope_descriptions={
            "repo": N_("Read and write your code, issues and pull requests, including private repositories"),
            "public_repo": N_("Read and write your public repositories"),
            "read:user": N_("See your GitHub profile"),
            "user:email": N_("See your email addresses"),
            "read:org": N_("See your organizations and teams"),
            "gist": N_("Create and edit your gists"),
            "workflow": N_("Change your GitHub Actions workflows"),
        },
    ),
    "google": CatalogEntry(
        key="google",
        display_name="Google",
        issuer="https://accounts.google.com",
        revocation_endpoint="https://oauth2.googleapis.com/revoke",
        account_endpoint="https://openidconnect.googleapis.com/v1/userinfo",
        account_id_field="sub",
        account_login_field="email",
        default_scopes=("openid", "email"),
        # No ``include_granted_scopes``: a token set carries only what its own request asked for.
        authorize_params={"access_type": "offline", "prompt": "consent"},
        scope_descriptions={
            "openid": N_("Confirm who you are"),
            "email": N_("See your email address"),
            "profile": N_("See your name and profile picture"),
            "https://www.googleapis.com/auth/drive.readonly": N_("See and download your Google Drive files"),
            "https://www.googleapis.com/auth/drive.file": N_("Work with the Drive files you open with it"),
            "https://www.googleapis.com/auth/gmail.readonly": N_("Read your Gmail messages"),
            "https://www.googleapis.com/auth/calendar.readonly": N_("See your calendars and events"),
            "https://www.googleapis.com/auth/calendar.events": N_("See and change your calendar events"),
        },
    ),
    "slack": CatalogEntry(
        key="slack",
        display_name="Slack",
        authorization_endpoint="https://slack.com/oauth/v2/authorize",
        token_endpoint="https://slack.com/api/oauth.v2.access",
        account_id_field="authed_user.id",
        account_login_field="team.name",
        token_auth_method="client_secret_post",
        scope_separator=",",
        default_scopes=("users:read",),
        scope_descriptions={
            "channels:read": N_("See the public channels in your workspace"),
            "channels:history": N_("Read messages in public channels"),
            "chat:write": N_("Send messages as the app"),
            "users:read": N_("See people in your workspace"),
            "search:read": N_("Search your workspace's messages and files"),
        },
    ),
    "microsoft": CatalogEntry(
        key="microsoft",
        display_name="Microsoft",
        authorization_endpoint="https://login.microsoftonline.com/common/oauth2/v2.0/authorize",
        token_endpoint="https://login.microsoftonline.com/common/oauth2/v2.0/token",
        account_endpoint="https://graph.microsoft.com/v1.0/me",
        account_id_field="id",
        account_login_field="userPrincipalName",
        token_auth_method="client_secret_post",
        default_scopes=("offline_access", "User.Read"),
        scope_descriptions={
            "offline_access": N_("Keep access while you are not using it"),
            "User.Read": N_("See your profile"),
            "Mail.Read": N_("Read your email"),
            "Calendars.Read": N_("See your calendars"),
            "Files.Read": N_("See your OneDrive files"),
            "Files.ReadWrite": N_("See and change your OneDrive files"),
        },
    ),
    "atlassian": CatalogEntry(
        key="atlassian",
        display_name="Atlassian (Jira, Confluence)",
        authorization_endpoint="https://auth.atlassian.com/authorize",
        token_endpoint="https://auth.atlassian.com/oauth/token",
        account_endpoint="https://api.atlassian.com/me",
        account_id_field="account_id",
        account_login_field="email",
        token_auth_method="client_secret_post",
        default_scopes=("read:me", "offline_access"),
        authorize_params={"audience": "api.atlassian.com", "prompt": "consent"},
        scope_descriptions={
            "read:me": N_("See your profile"),
            "offline_access": N_("Keep access while you are not using it"),
            "read:jira-work": N_("See Jira issues and projects"),
            "write:jira-work": N_("Create and change Jira issues"),
            "read:confluence-content.all": N_("Read Confluence pages"),
        },
    ),
    "notion": CatalogEntry(
        key="notion",
        display_name="Notion",
        authorization_endpoint="https://api.notion.com/v1/oauth/authorize",
        token_endpoint="https://api.notion.com/v1/oauth/token",
        account_id_field="owner.user.id",
        account_login_field="workspace_name",
        authorize_params={"owner": "user"},
        scope_descriptions={},
        # One integration token per workspace: authorizing again yields that same access.
        second_token_set=False,
    ),
    "linear": CatalogEntry(
        key="linear",
        display_name="Linear",
        authorization_endpoint="https://linear.app/oauth/authorize",
        token_endpoint="https://api.linear.app/oauth/token",
        revocation_endpoint="https://api.linear.app/oauth/revoke",
        token_auth_method="client_secret_post",
        scope_separator=",",
        default_scopes=("read",),
        scope_descriptions={
            "read": N_("See your issues, projects and teams"),
            "write": N_("Create and change issues and comments"),
            "issues:create": N_("Create issues"),
        },
    ),
    "oidc": CatalogEntry(
        key="oidc",
        display_name="OpenID Connect provider",
        account_id_field="sub",
        account_login_field="preferred_username",
        default_scopes=("openid",),
        needs_issuer=True,
        scope_descriptions={
            "openid": N_("Confirm who you are"),
            "email": N_("See your email address"),
            "profile": N_("See your name and profile"),
            "offline_access": N_("Keep access while you are not using it"),
        },
    ),
    "oauth2": CatalogEntry(
        key="oauth2",
        display_name="OAuth 2 provider",
        scope_descriptions={"offline_access": N_("Keep access while you are not using it")},
    ),
}


def describe_scope(scope: str, descriptions: dict[str, Any]) -> str:
    """Plain words for a scope in the page's language: the built-in catalog's words through the
    translation catalogue, an operator's words as written, or their own per-language words
    (``{"en": "…", "th": "…"}``: the page's tag, its primary language, English, then the first given);
    unknown scopes are shown as they are, never hidden."""
    text = descriptions.get(scope)
    if isinstance(text, dict):
        tag = current().tag
        text = text.get(tag) or text.get(tag.split("-")[0]) or text.get("en") or next(iter(text.values()), None)
        return str(text) if text else _("Permission “%(scope)s”", scope=scope)
    return _(str(text)) if text else _("Permission “%(scope)s”", scope=scope)


def dig(document: Any, path: str) -> Any:
    """Follow a dotted path (``owner.user.id``) through nested JSON objects; None when absent."""
    current = document
    for part in path.split("."):
        if not isinstance(current, dict):
            return None
        current = current.get(part)
    return current
