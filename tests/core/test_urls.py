"""The one URL rule (``service.urls``): every caller refuses the same malformed URLs with a 4xx
or a configuration error, never a 500, and accepts the same well-formed ones."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from service.admin.clients import validate_webhook_url
from service.apikeys.providers import parse_config
from service.connections.providers import ProviderSpec, spec_values
from service.crypto.vault import Vault
from service.errors import ConfigurationError, InvalidRequest
from service.flows.kinds import check_external_url
from service.identity.issuers import check_issuer_url
from service.settings import KeyRing, Settings
from service.urls import MAX_URL_LENGTH, UrlRejected, check_url, url_problem

MALFORMED = [
    "https://[::1/x",  # an unclosed bracket: urlsplit raises
    "https://exa mple.com/x",  # a space in the host
    "https://example.com:99999/x",  # port out of range
    "https://example.com:0/x",
    "https://example.com:/x",
    "https://example.com:http/x",
    "https://%zz.example/x",  # an invalid escape
    "https://ex%41mple.com/x",  # an escape in the host
    "https://example.com/%zz",
    "https://app.example.com/x\r\nInjected: 1",  # CR/LF
    "https://app.example.com/x\n",
    "https://app.example.com/\x00",
    "https://app.example.com/\x85",  # C1 control
    "https://app.example.com/\u2028",
    "https://exämple.com/",  # IRI: send the punycode form
    "https://example.com\\@evil.example/",
    "https://user@example.com/",
    "https://user:pw@example.com/",
    "https://-bad.example/",
    "https://bad-.example/",
    "https://a..example/",
    "https://a_b.example/",
    "https://example.com./",
    "https://1.2.3.999/",
    "https://[fe80::1%25eth0]/",
    "https:///path-only",
    "https://",
    "ftp://example.com/",
    "javascript:alert(1)",
    "//example.com/x",
    "http://example.com/",  # plain http off loopback
    "https://" + "a" * MAX_URL_LENGTH + ".example/",
    "",
]

WELL_FORMED = [
    "https://example.com",
    "https://EXAMPLE.com/Path?q=1&r=%20",
    "https://api.example.com:8443/v1/oauth/token",
    "https://203.0.113.7/cb",
    "https://[2001:db8::1]:443/x",
    "http://127.0.0.1:8000/cb",
    "http://localhost/x",
    "http://[::1]:9000/",
]


@pytest.mark.parametrize("url", MALFORMED)
def test_malformed_urls_are_refused(url: str) -> None:
    assert url_problem(url) is not None
    with pytest.raises(UrlRejected):
        check_url(url)


@pytest.mark.parametrize("url", WELL_FORMED)
def test_well_formed_urls_pass(url: str) -> None:
    assert url_problem(url) is None
    assert check_url(url) == url


def test_fragment_and_query_only_where_allowed() -> None:
    assert url_problem("https://app.example.com/step#top") is not None
    assert url_problem("https://app.example.com/step#top", fragment=True) is None
    assert url_problem("https://id.example.com/?tenant=1", query=False) is not None


def test_the_reason_never_repeats_the_url() -> None:
    for url in MALFORMED:
        problem = url_problem(url)
        assert problem is not None
        assert "example" not in problem


# ---- every caller ---------------------------------------------------------------------------------
KEYS = KeyRing.generate_entry("k1")


def _settings(url: str) -> None:
    Settings.from_env({"ELICITD_DATABASE_URL": "postgresql://u@db/x", "ELICITD_PUBLIC_URL": url, "ELICITD_KEYS": KEYS})


def _provider_endpoint(url: str) -> None:
    spec = ProviderSpec(
        name="acme", client_id="c", token_auth_method="none", authorization_endpoint=url, token_endpoint=url
    )
    spec_values(spec, Vault(KeyRing.parse(KEYS, name="k")))


def _api_key_check(url: str) -> None:
    parse_config({"check": {"url": url}}, name="acme")


CALLERS: list[tuple[Callable[[str], object], type[Exception]]] = [
    (_settings, ConfigurationError),
    (validate_webhook_url, InvalidRequest),
    (check_external_url, InvalidRequest),
    (check_issuer_url, InvalidRequest),
    (_provider_endpoint, ConfigurationError),
    (_api_key_check, ConfigurationError),
]


@pytest.mark.parametrize(
    "url",
    [
        "https://[::1/x",
        "https://exa mple.com/x",
        "https://example.com:99999/x",
        "https://%zz.example/x",
        "https://app.example.com/x\r\nInjected: 1",
    ],
)
@pytest.mark.parametrize(("check", "error"), CALLERS, ids=lambda c: getattr(c, "__name__", ""))
def test_every_caller_refuses_malformed_urls(check: Callable[[str], object], error: type[Exception], url: str) -> None:
    with pytest.raises(error):
        check(url)
