"""Every person-facing template rendered as elicitd renders it, in one language, with the values a
real flow gives it: the page sweep (axe, 320 px, lang/dir) opens each of these in Chromium.

The values are the hard cases on purpose: a long provider domain in punycode, an account id with
punctuation at its ends, an Arabic server name, group member lists and every optional block.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from service import i18n
from service.apikeys.catalog import definition_from_entry
from service.apikeys.providers import parse_config
from service.connections.catalog import describe_scope, load_catalog
from service.connections.status_words import status_label, status_reason
from service.domains import display_url_host
from service.i18n import Language, _
from service.templating import LazyJinjaEngine

TEMPLATES = Path(__file__).resolve().parents[2] / "service" / "templates"
STYLESHEET = Path(__file__).resolve().parents[2] / "service" / "static" / "elicitd.css"
DOMAIN = "https://elicitd.example.com"
FLOW = "fl_0123456789abcdef0123456789abcdef"
CLIENT = "Acme Files Assistant"
RTL_CLIENT = "مساعد الملفات"
PROVIDER = "Acme Drive"
PROVIDER_HOST = display_url_host("https://xn--80ak6aa92e.com/oauth/authorize")  # a Cyrillic lookalike
ACCOUNT = "alice@example.com"
# Plain words from the built-in catalog (translated) and one an operator wrote (shown as written).
DESCRIPTIONS = {"files:read": "See and download your Google Drive files", "files:write": "Change and delete files"}
ZENDESK = {"read": "See your tickets, users and help center"}  # the built-in entry's words


def _scopes(*names: str) -> list[dict[str, str]]:
    return [{"name": name, "words": describe_scope(name, DESCRIPTIONS)} for name in names]


_ENGINE = LazyJinjaEngine(TEMPLATES, page_globals={"domain": DOMAIN})
_MOMENT = datetime(2026, 3, 4, 5, 6, tzinfo=UTC)  # the one fixed moment the /me sample shows


def _api_key_provider() -> SimpleNamespace:
    fields = [
        SimpleNamespace(name="region", label="Region", required=True, choices=["eu", "us"], max_length=8, help=None),
        SimpleNamespace(
            name="team", label="Team id", required=False, choices=None, max_length=40, help="On your team page."
        ),
    ]
    config = SimpleNamespace(
        key_label="API key", help="Keys start with ak_.", help_url="https://acme.example/keys", fields=fields
    )
    return SimpleNamespace(display_name=PROVIDER, config=config)


def _catalog_api_key_provider() -> SimpleNamespace:
    """An API-key form as the catalog makes it (Twilio's entry): its labels reach the page through
    the catalogues, so in Arabic they are Arabic."""
    entry = load_catalog()["twilio"]
    return SimpleNamespace(
        display_name=entry.display_name, config=parse_config(definition_from_entry(entry), name="twilio")
    )


def _connect_base() -> dict[str, Any]:
    """The connect page of a provider reached at an address of the account's own (Zendesk's
    subdomain), for its parameter step."""
    return {
        "flow_id": FLOW,
        "client": CLIENT,
        "scopes": [{"name": "read", "words": describe_scope("read", ZENDESK)}],
        "message": _("Connect your %(provider)s account to continue.", provider="Zendesk"),
        "signed_in_as": "alice",
        "reconnect": False,
        "csrf_token": "t",
        "continue_action": f"/connect/{FLOW}/continue",
        "decline_action": f"/connect/{FLOW}/decline",
        "kept_scopes": [],
        "party": CLIENT,
        "group": None,
        "members": [],
    }


def contexts() -> dict[str, tuple[str, Callable[[], dict[str, Any]]]]:
    """Page name → (template, its context); built inside ``i18n.speaking`` so Python-side words
    (headings, errors) are in the page's language too."""
    provider = _api_key_provider()
    twilio = _catalog_api_key_provider()
    grant_base: dict[str, Any] = {
        "flow_id": FLOW,
        "client": CLIENT,
        "provider": PROVIDER,
        "account": ACCOUNT,
        "key_label": None,
        "scopes": _scopes("files:read"),
        "message": "Needed to summarise your week.",
        "signed_in_as": "alice",
        "csrf_token": "t",
        "action": f"/f/{FLOW}/grant",
        "me_link": "/me?iss=https%3A%2F%2Fid.example.com",
        "party": CLIENT,
        "group": None,
        "members": [],
        "wider": False,
    }
    return {
        "connect": (
            "connect.html",
            lambda: {
                "flow_id": FLOW,
                "client": CLIENT,
                "provider": PROVIDER,
                "provider_host": PROVIDER_HOST,
                "scopes": _scopes("files:read", "files:write", "profile"),
                "message": _("Connect your %(provider)s account to continue.", provider=PROVIDER),
                "signed_in_as": "alice",
                "reconnect": False,
                "csrf_token": "t",
                "continue_action": f"/connect/{FLOW}/continue",
                "decline_action": f"/connect/{FLOW}/decline",
                "kept_scopes": _scopes("calendar"),
                "party": i18n.ngettext(
                    "%(client)s and %(num)s other service of %(group)s",
                    "%(client)s and %(num)s other services of %(group)s",
                    2,
                    client=i18n.isolate(CLIENT),
                    group=i18n.isolate("Example Corp"),
                ),
                "group": "Example Corp",
                "members": [CLIENT, "Acme Calendar", RTL_CLIENT],
            },
        ),
        "connect_parameters": (
            "connect.html",
            lambda: {
                **_connect_base(),
                "provider": "Zendesk",
                "provider_host": None,
                "parameter_fields": [
                    {
                        "name": "subdomain",
                        "label": _(load_catalog()["zendesk"].parameters["subdomain"].title),
                        "example": "acme",
                        "value": "acme.zendesk.com/x",
                        "error": _("This is not in the expected form: use only what the example shows."),
                    }
                ],
                "parameter_prefix": "param_",
                "parameter_problem": True,
            },
        ),
        "connect_parameters_check": (
            "connect.html",
            lambda: {
                **_connect_base(),
                "provider": "Zendesk",
                "provider_host": "acme.zendesk.com",
                "parameter_values": {"subdomain": "acme"},
                "parameter_prefix": "param_",
                "change_link": f"/f/{FLOW}",
            },
        ),
        "connect_done": (
            "connect_done.html",
            lambda: {
                "heading": _("Connected"),
                "outcome": "completed",
                "client": CLIENT,
                "provider": PROVIDER,
                "account_login": "alice",
                "flow_id": FLOW,
            },
        ),
        "connect_problem": (
            "connect_problem.html",
            lambda: {
                "heading": _("You signed in to %(provider)s as another account", provider=i18n.isolate(PROVIDER)),
                "text": _("Go back to your assistant and open its link again to start over."),
                "flow_id": FLOW,
            },
        ),
        "grant": ("grant.html", lambda: dict(grant_base)),
        "grant_wider": (
            "grant.html",
            lambda: {
                **grant_base,
                "wider": True,
                "held_scopes": _scopes("files:read", "files:write"),
                "extra_scopes": _scopes("files:write"),
                "holders": ["Other Server"],
                "can_separate": True,
                "separate_action": f"/connect/{FLOW}/continue",
                "group": "Example Corp",
                "members": [CLIENT, "Acme Calendar"],
            },
        ),
        "grant_done": (
            "grant_done.html",
            lambda: {
                "heading": _("Allowed"),
                "outcome": "completed",
                "client": CLIENT,
                "party": CLIENT,
                "me_link": "/me?iss=x",
                "flow_id": FLOW,
            },
        ),
        "api_key": (
            "api_key.html",
            lambda: {
                "flow_id": FLOW,
                "client": CLIENT,
                "provider": provider,
                "config": provider.config,
                "csrf_token": "t",
                "action": f"/f/{FLOW}/api-key",
                "error": SimpleNamespace(message=_("Enter your %(label)s.", label="API key"), field="secret"),
                "values": {"region": "eu"},
            },
        ),
        "api_key_catalog": (
            "api_key.html",
            lambda: {
                "flow_id": FLOW,
                "client": CLIENT,
                "provider": twilio,
                "config": twilio.config,
                "csrf_token": "t",
                "action": f"/f/{FLOW}/api-key",
                "error": None,
                "values": {},
            },
        ),
        "api_key_done": ("api_key_done.html", lambda: {"flow_id": FLOW, "client": CLIENT, "provider": provider}),
        "consent": (
            "consent.html",
            lambda: {
                "flow_id": FLOW,
                "client": CLIENT,
                "view": SimpleNamespace(
                    title="Book flight LH 123",
                    description="Book one seat on LH 123 from Berlin to Lisbon.\nRefundable within 24 hours.",
                    details=[("Flight", "LH 123, BER → LIS"), ("Price", "189.00 EUR")],
                    digest="0" * 64,
                ),
                "csrf_token": "t",
                "action": f"/consent/{FLOW}/decide",
            },
        ),
        "consent_done": (
            "consent_done.html",
            lambda: {"flow_id": FLOW, "client": CLIENT, "approved": True, "heading": _("Approved")},
        ),
        "payment": (
            "payment.html",
            lambda: {
                "flow_id": FLOW,
                "client": CLIENT,
                "amount": i18n.format_money(123400, "thb", minor_digits=2),
                "description": "Pro plan, one month",
                "csrf_token": "t",
                "processing": False,
                "checkout_action": f"/pay/{FLOW}/checkout",
                "decline_action": f"/pay/{FLOW}/decline",
            },
        ),
        "payment_done": (
            "payment_done.html",
            lambda: {"flow_id": FLOW, "client": CLIENT, "amount": i18n.format_money(123400, "eur", minor_digits=2)},
        ),
        "me": (
            "me.html",
            lambda: {
                "signed_in_as": "alice",
                "issuer": "Test ID",
                "csrf_token": "t",
                "back": "/me?iss=x",
                "connections": [
                    {
                        "id": "cn_1",
                        "provider": PROVIDER,
                        "account": "alice",
                        "scopes": _scopes("files:read", "files:write", "profile"),
                        "status": "needs_reauthorization",
                        "health": "needs_reauthorization",
                        "health_label": status_label("needs_reauthorization"),
                        "health_reason": status_reason(
                            "needs_reauthorization", "invalid_grant", i18n.isolate(PROVIDER)
                        ),
                        "reconnect": True,
                        "is_api_key": False,
                        "connected": i18n.format_when(_MOMENT),
                        "last_used": None,
                        "grants": [
                            {
                                "id": "gr_1",
                                "grantee": "Example Corp",
                                "members": [CLIENT, "Acme Calendar"],
                                "is_group": True,
                                "scopes": _scopes("files:read"),
                                "since": i18n.format_when(_MOMENT),
                                "last_used": i18n.format_when(_MOMENT),
                            },
                            {
                                "id": "gr_2",
                                "grantee": RTL_CLIENT,
                                "members": [],
                                "is_group": False,
                                "scopes": [],
                                "since": i18n.format_when(_MOMENT),
                                "last_used": None,
                            },
                        ],
                    }
                ],
            },
        ),
        "me_signin": (
            "me_signin.html",
            lambda: {
                "issuers": [{"name": "Test ID", "link": "/me?iss=x"}, {"name": "Example SSO", "link": "/me?iss=y"}]
            },
        ),
        "flow_status": (
            "flow_status.html",
            lambda: {
                "heading": _("Continue on the service's own page"),
                "text": _("This step happens on a page run by the service that asked."),
                "link": "https://forms.example/step",
                "link_host": "forms.example",
                "flow_id": FLOW,
            },
        ),
        "refused": (
            "refused.html",
            lambda: {
                "issuer_name": "Test ID",
                "signed_in_as": "mallory",
                "csrf_token": "t",
                "return_to": f"/f/{FLOW}",
                "flow_id": FLOW,
            },
        ),
        "signin_problem": (
            "signin_problem.html",
            lambda: {
                "heading": _("Sign-in was not completed"),
                "text": _("The sign-in was cancelled or refused, so nothing was shared."),
                "link": f"/f/{FLOW}",
                "link_text": _("Try again"),
            },
        ),
        "error": (
            "error.html",
            lambda: {
                "title": _("This form has expired"),
                "detail": _("The form could not be verified. Reload the page and try again."),
                "status": 403,
            },
        ),
    }


def render(language: Language, name: str) -> str:
    with i18n.speaking(language):
        template, build = contexts()[name]
        return _ENGINE.get_template(template).render(**build())
