"""Settings are validated at startup with messages that name the variable."""

from __future__ import annotations

import pytest

from service.errors import ConfigurationError
from service.settings import KeyRing, Settings

KEYS = KeyRing.generate_entry("k1")
BASE = {
    "ELICITD_DATABASE_URL": "postgresql://u@db/elicitd",
    "ELICITD_PUBLIC_URL": "https://elicitd.example.com",
    "ELICITD_KEYS": KEYS,
}


def test_minimal_production_settings() -> None:
    settings = Settings.from_env(BASE)
    assert settings.database_url == "postgresql+asyncpg://u@db/elicitd"
    assert settings.redis_url is None
    assert settings.secure_cookies is True
    assert settings.public_origin == "https://elicitd.example.com"
    assert settings.keys.current[0] == "k1"
    assert settings.dev_mode is False


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"ELICITD_DATABASE_URL": None}, "ELICITD_DATABASE_URL is required"),
        ({"ELICITD_DATABASE_URL": "mysql://x/y"}, "must be a postgresql:// URL"),
        ({"ELICITD_PUBLIC_URL": None}, "ELICITD_PUBLIC_URL is required"),
        ({"ELICITD_PUBLIC_URL": "http://elicitd.example.com"}, "must be https://"),
        ({"ELICITD_KEYS": None}, "ELICITD_KEYS is required"),
        ({"ELICITD_KEYS": "k1:c2hvcnQ"}, "must decode to 32 bytes"),
        ({"ELICITD_KEYS": "k1:not*base64"}, "not valid base64"),
        ({"ELICITD_KEYS": "nocolon"}, "keyid:base64key"),
        ({"ELICITD_KEYS": KEYS + "," + KEYS}, "appears twice"),
        ({"ELICITD_DEFAULT_TTL_SECONDS": "abc"}, "ELICITD_DEFAULT_TTL_SECONDS must be an integer"),
        ({"ELICITD_DEFAULT_TTL_SECONDS": "-5"}, "ELICITD_DEFAULT_TTL_SECONDS must be positive"),
        ({"ELICITD_POLL_INTERVAL_SECONDS": "-1"}, "must not be negative"),
        ({"ELICITD_DEV": "maybe"}, "ELICITD_DEV must be true or false"),
        ({"ELICITD_DEFAULT_TTL_SECONDS": "999", "ELICITD_MAX_TTL_SECONDS": "100"}, "must not exceed"),
    ],
)
def test_invalid_settings_name_the_variable(change: dict[str, str | None], message: str) -> None:
    env = {**BASE, **{k: v for k, v in change.items() if v is not None}}
    for key, value in change.items():
        if value is None:
            env.pop(key)
    with pytest.raises(ConfigurationError) as info:
        Settings.from_env(env)
    assert message in info.value.detail


def test_http_public_url_allowed_on_loopback_and_in_dev() -> None:
    assert Settings.from_env({**BASE, "ELICITD_PUBLIC_URL": "http://127.0.0.1:8000"}).secure_cookies is False
    dev = Settings.from_env({k: v for k, v in BASE.items() if k != "ELICITD_PUBLIC_URL"} | {"ELICITD_DEV": "1"})
    assert dev.public_url == "http://127.0.0.1:8000"


def test_key_ring_order_and_lookup() -> None:
    ring = KeyRing.parse("new:" + "A" * 43 + ", old:" + "B" * 43, name="x")
    assert ring.current[0] == "new"
    assert ring.get("old") is not None
    assert ring.get("missing") is None
