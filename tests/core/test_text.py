"""The one text rule (``service.text``) and every place a display string enters elicitd."""

from __future__ import annotations

import unicodedata

import pytest

from service.apikeys.providers import upsert_api_key_provider
from service.connections.providers import ProviderSpec, spec_values
from service.crypto.vault import Vault
from service.errors import ConfigurationError, InvalidRequest
from service.grants.groups import check_display_name
from service.identity.clients import create_server_client
from service.identity.issuers import IssuerConfig
from service.payments.kind import parse_params
from service.settings import KeyRing
from service.text import REFUSED_CATEGORIES, is_display_text, refused_character
from tests.support.apps import RunningApp

# One of each kind the review found getting through, and their relatives.
REFUSED = [
    "\x00",  # NUL
    "\r",
    "\x1b",  # ESC: terminal escapes in a CLI listing
    "\x7f",
    "\x85",  # C1 next line
    "\x9b",  # C1 CSI
    "\u00ad",  # soft hyphen (Cf)
    "\u061c",  # Arabic letter mark
    "\u180e",  # Mongolian vowel separator
    "\u200b",  # zero-width space
    "\u200c",
    "\u200d",
    "\u200e",  # left-to-right mark
    "\u200f",
    "\u202a",  # bidi embeddings and overrides
    "\u202e",
    "\u2028",  # line separator (Zl)
    "\u2029",  # paragraph separator (Zp)
    "\u2060",  # word joiner
    "\u2066",  # bidi isolates
    "\u2069",
    "\ufeff",  # byte-order mark
    "\ufff9",  # interlinear annotation
    "\U000e0001",  # language tag
    "\U000e0041",  # tag letter
]
ALLOWED = ["plain", "Ünïcödé ✓", "日本語", "עברית", "العربية", "emoji 👍🏽", "a\u00a0b (no-break space)", "tab-less"]


@pytest.mark.parametrize("char", REFUSED)
def test_refused_characters(char: str) -> None:
    assert unicodedata.category(char) in REFUSED_CATEGORIES
    assert refused_character(f"safe {char} text") == char
    assert refused_character(f"safe {char} text", multiline=True) == char


@pytest.mark.parametrize("value", ALLOWED)
def test_ordinary_text_in_any_script_passes(value: str) -> None:
    assert is_display_text(value)


def test_newline_and_tab_only_in_multi_line_text() -> None:
    assert not is_display_text("one\ntwo")
    assert not is_display_text("one\ttwo")
    assert is_display_text("one\ntwo\tthree", multiline=True)
    assert not is_display_text("one\r\ntwo", multiline=True)


# ---- where display strings come in ------------------------------------------------------------------
BAD = "Acme\u202e sso"
VAULT = Vault(KeyRing.parse(KeyRing.generate_entry("k1"), name="k"))


def test_provider_display_name_and_scope_words() -> None:
    with pytest.raises(ConfigurationError, match="display_name"):
        spec_values(
            ProviderSpec(
                name="acme", client_id="c", token_auth_method="none", issuer="https://a.example", display_name=BAD
            ),
            VAULT,
        )
    with pytest.raises(ConfigurationError, match="scope_descriptions"):
        spec_values(
            ProviderSpec(
                name="acme",
                client_id="c",
                token_auth_method="none",
                issuer="https://a.example",
                scope_descriptions={"repo": "Read\u2028and delete everything"},
            ),
            VAULT,
        )


def test_issuer_display_name() -> None:
    with pytest.raises(InvalidRequest, match="display_name"):
        IssuerConfig(issuer="https://id.example.com", client_id="c", display_name=BAD).validated()


def test_payment_description() -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse_params({"amount": 100, "currency": "usd", "description": "Coffee\u061c x100"})
    assert refused.value.problem_code == "invalid_params"


@pytest.mark.parametrize("char", REFUSED)
def test_trust_group_display_names_follow_the_rule_with_the_server_clients_code(char: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        check_display_name(f"Example{char} Corp")
    assert (refused.value.problem_code, refused.value.detail) == (
        "invalid_request",
        "`display_name` must be a single line of text without control, format or separator characters "
        f"(found U+{ord(char):04X}).",
    )
    assert check_display_name("  Exämple Corp 日本  ") == "Exämple Corp 日本"


async def test_server_client_and_api_key_provider_texts(elicitd: RunningApp) -> None:
    async with elicitd.state.sessions() as session:
        with pytest.raises(InvalidRequest, match="display_name"):
            await create_server_client(session, "spoofy", display_name=BAD)
        with pytest.raises(ConfigurationError, match="key_label"):
            await upsert_api_key_provider(session, "keyed", "Keyed", {"key_label": "API\u200bkey"})
        with pytest.raises(ConfigurationError, match=r"fields\.choices"):
            await upsert_api_key_provider(
                session, "keyed", "Keyed", {"fields": [{"name": "region", "label": "Region", "choices": ["eu\x85"]}]}
            )
        await session.rollback()
