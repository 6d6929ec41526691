"""One loopback rule, decided on the parsed host, and every URL check that allows http uses it."""

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
from service.loopback import is_loopback_host, is_loopback_url
from service.settings import KeyRing, Settings
from service.urls import is_https_or_loopback_http

LOOPBACK = [
    "http://127.0.0.1/",
    "http://127.0.0.1:8000/cb",
    "http://127.42.0.7/",
    "http://127.255.255.254:1/",
    "http://localhost/",
    "http://LOCALHOST:9000/",
    "http://[::1]/",
    "http://[::1]:8080/x?y=1",
]

# Each of these reaches (or may reach) another machine, whatever its text starts with.
NOT_LOOPBACK = [
    "http://127.0.0.1.evil.example/",
    "http://localhost@evil.example/",
    "http://127.0.0.1@evil.example/",
    "http://127.0.0.1:80@evil.example/",
    "http://localhost.evil.example/",
    "http://evil.example/127.0.0.1",
    "http://evil.example/?next=http://localhost/",
    "http://evil.example#@localhost/",
    "http://localhost:8000\\@evil.example/",
    "http://evil.example\\@127.0.0.1/",
    "http://user:pw@127.0.0.1/",
    "http://localhost./",
    "http://127.1/",
    "http://2130706433/",
    "http://0.0.0.0/",
    "http://[::ffff:127.0.0.1]/",
    "http://[::2]/",
    "http://128.0.0.1/",
    "http://10.0.0.1/",
    "http://[::1/",
    "http://127.0.0.1:port/",
    "http://127.0.0.1\t.evil.example/",
    "http:///127.0.0.1/",
    "",
]


@pytest.mark.parametrize("url", LOOPBACK)
def test_loopback_urls(url: str) -> None:
    assert is_loopback_url(url) is True
    assert is_https_or_loopback_http(url) is True


@pytest.mark.parametrize("url", NOT_LOOPBACK)
def test_lookalikes_are_not_loopback(url: str) -> None:
    assert is_loopback_url(url) is False
    assert is_https_or_loopback_http(url) is False


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("localhost", True),
        ("127.0.0.1", True),
        ("127.9.9.9", True),
        ("::1", True),
        ("localhost.", False),
        ("localhost.evil.example", False),
        ("127.0.0.1.evil.example", False),
        ("126.255.255.255", False),
        ("::", False),
        ("", False),
    ],
)
def test_loopback_hosts(host: str, expected: bool) -> None:
    assert is_loopback_host(host) is expected


def test_https_is_allowed_anywhere_and_other_schemes_nowhere() -> None:
    assert is_https_or_loopback_http("https://evil.example/") is True
    assert is_https_or_loopback_http("HTTPS://api.example.com/") is True
    assert is_https_or_loopback_http("ftp://127.0.0.1/") is False
    assert is_https_or_loopback_http("ws://localhost/") is False


# ---- every caller ---------------------------------------------------------------------------------
ATTACKS = ["http://127.0.0.1.evil.example/", "http://localhost@evil.example/"]
KEYS = KeyRing.generate_entry("k1")


def _settings(url: str) -> None:
    Settings.from_env({"ELICITD_DATABASE_URL": "postgresql://u@db/x", "ELICITD_PUBLIC_URL": url, "ELICITD_KEYS": KEYS})


def _provider(url: str) -> None:
    spec = ProviderSpec(name="acme", client_id="c", token_auth_method="none", issuer=url)
    spec_values(spec, Vault(KeyRing.parse(KEYS, name="k")))


def _api_key_check(url: str) -> None:
    parse_config({"check": {"url": url}}, name="acme")


CALLERS: list[tuple[Callable[[str], object], type[Exception]]] = [
    (_settings, ConfigurationError),
    (validate_webhook_url, InvalidRequest),
    (check_external_url, InvalidRequest),
    (check_issuer_url, InvalidRequest),
    (_provider, ConfigurationError),
    (_api_key_check, ConfigurationError),
]


@pytest.mark.parametrize("url", ATTACKS)
@pytest.mark.parametrize(("check", "error"), CALLERS, ids=lambda c: getattr(c, "__name__", ""))
def test_every_check_refuses_http_to_a_lookalike(
    check: Callable[[str], object], error: type[Exception], url: str
) -> None:
    with pytest.raises(error):
        check(url)


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000", "http://localhost:8000", "http://[::1]:8000"])
@pytest.mark.parametrize(("check", "error"), CALLERS, ids=lambda c: getattr(c, "__name__", ""))
def test_every_check_allows_http_on_loopback(check: Callable[[str], object], error: type[Exception], url: str) -> None:
    del error
    check(url)
