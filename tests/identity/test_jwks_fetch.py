"""An issuer's key set is fetched once however many sign-ins find the cache empty together."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from service.http import make_http_client
from service.identity import oidc
from service.identity.issuers import JWKS_REFRESH_MIN_SECONDS, IssuerDirectory, ResolvedIssuer
from service.services import build_services
from service.settings import Settings
from tests.support.clock import ManualClock
from tests.support.hostile import Answer, hostile

KEYS = {"keys": [{"kty": "EC", "crv": "P-256", "kid": "k1", "x": "x", "y": "y"}]}


async def test_concurrent_sign_ins_share_one_key_set_fetch(make_settings: Callable[..., Settings]) -> None:
    services = build_services(make_settings())
    http = make_http_client(5.0)
    try:
        with hostile({"/jwks": Answer.json(KEYS)}) as issuer_server:
            directory = IssuerDirectory(services.sessions, services.vault, http=http)
            issuer = _issuer(issuer_server.url)
            answers = await asyncio.gather(*(directory.jwks(issuer) for _ in range(20)))
            fetched = [path for path in issuer_server.requests if path == "/jwks"]
    finally:
        await http.aclose()
        await services.engine.dispose()
    assert answers == [KEYS] * 20
    assert fetched == ["/jwks"]


def _issuer(url: str) -> ResolvedIssuer:
    return ResolvedIssuer(
        id=uuid.uuid4(),
        issuer=url,
        display_name="Keys",
        client_id="c",
        client_secret=None,
        scopes=("openid",),
        authorization_endpoint=url + "/authorize",
        token_endpoint=url + "/token",
        jwks_uri=url + "/jwks",
        iss_parameter_supported=False,
        token_auth_method="none",
    )


def _signed(kid: str) -> tuple[dict[str, Any], str]:
    """A public JWKS holding one new ES256 key, and a token that key signed."""
    from joserfc import jwt
    from joserfc.jwk import ECKey

    key = ECKey.generate_key("P-256", {"kid": kid, "alg": "ES256"})
    token = jwt.encode({"alg": "ES256", "kid": kid}, {"sub": "alice"}, key)
    return {"keys": [key.as_dict(private=False)]}, token


async def test_a_key_set_is_parsed_once_and_never_outlives_a_refetch(
    make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The directory parses each fetched JWKS document once: the same document serves every
    verification, and one fetched again (the issuer rotated its keys) is parsed anew, so a token
    signed by a key the issuer dropped no longer verifies."""
    from joserfc.errors import JoseError
    from joserfc.jwk import KeySet

    parsed: list[object] = []
    real = KeySet.import_key_set

    def counting(value: Any, *args: Any, **kwargs: Any) -> KeySet:
        parsed.append(value)
        return real(value, *args, **kwargs)

    monkeypatch.setattr(KeySet, "import_key_set", counting)
    old_keys, old_token = _signed("old")
    new_keys, new_token = _signed("new")
    services = build_services(make_settings())
    http = make_http_client(5.0)
    try:
        with hostile({"/jwks": Answer.json(old_keys)}) as issuer_server:
            clock = ManualClock()
            directory = IssuerDirectory(services.sessions, services.vault, http=http, clock=clock)
            issuer = _issuer(issuer_server.url)
            for _ in range(3):
                assert oidc._decode(old_token, await directory.key_set(issuer)).claims == {"sub": "alice"}
            assert parsed == [old_keys]
            issuer_server.routes = {"/jwks": Answer.json(new_keys)}
            clock.advance(JWKS_REFRESH_MIN_SECONDS)  # past the refetch's rate limit
            rotated = await directory.key_set(issuer, refresh=True)
            assert oidc._decode(new_token, rotated).claims == {"sub": "alice"}
            with pytest.raises(JoseError):
                oidc._decode(old_token, rotated)
    finally:
        await http.aclose()
        await services.engine.dispose()
    assert parsed == [old_keys, new_keys]
