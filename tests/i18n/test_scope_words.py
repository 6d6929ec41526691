"""Plain words for scopes in the page's language: the built-in catalog's through the catalogues,
an operator's per-language words by tag, primary language, then English; every one of them held
to the text rule."""

from __future__ import annotations

from typing import Any

import pytest

from service import i18n
from service.connections.catalog import describe_scope
from service.connections.providers import ProviderSpec, spec_values
from service.crypto.vault import Vault
from service.errors import ConfigurationError
from service.i18n import BY_TAG
from tests.conftest import TEST_KEYS

OPERATOR = {"files:read": {"en": "Read your files", "th": "อ่านไฟล์ของคุณ", "pt": "Ler seus arquivos"}}


def _words(tag: str, scope: str, descriptions: dict[str, Any]) -> str:
    with i18n.speaking(BY_TAG[tag.lower()]):
        return describe_scope(scope, descriptions)


def test_built_in_words_are_translated_and_unknown_scopes_named() -> None:
    github = {"read:user": "See your GitHub profile"}
    assert _words("ja", "read:user", github) == "GitHub のプロフィールを見る"
    assert _words("en", "read:user", github) == "See your GitHub profile"
    assert _words("de", "admin:org", github) == "Berechtigung „admin:org“"
    assert _words("ar", "x", {"x": "Words only this operator wrote"}) == "Words only this operator wrote"


def test_an_operators_words_per_language() -> None:
    assert _words("th", "files:read", OPERATOR) == "อ่านไฟล์ของคุณ"
    assert _words("pt-BR", "files:read", OPERATOR) == "Ler seus arquivos"  # primary language
    assert _words("de", "files:read", OPERATOR) == "Read your files"  # English next
    assert _words("de", "files:read", {"files:read": {"fr": "Lire vos fichiers"}}) == "Lire vos fichiers"


def test_per_language_words_follow_the_text_rule() -> None:
    vault = Vault(TEST_KEYS)
    spec = ProviderSpec(
        name="acme-words",
        client_id="c",
        authorization_endpoint="https://acme.example/authorize",
        token_endpoint="https://acme.example/token",
        scope_descriptions={"files:read": {"en": "Read", "ar": "اقرأ\u202e ملفاتك"}},
    )
    with pytest.raises(ConfigurationError, match="U\\+202E"):
        spec_values(spec, vault)
