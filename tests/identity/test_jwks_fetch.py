"""An issuer's key set is fetched once however many sign-ins find the cache empty together."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from service.http import make_http_client
from service.identity import oidc
from service.identity.issuers import IssuerDirectory, ResolvedIssuer
from service.services import build_services
from service.settings import Settings
from tests.support.hostile import Answer, hostile

KEYS = {"keys": [{"kty": "EC", "crv": "P-256", "kid": "k1", "x": "x", "y": "y"}]}


async def test_concurrent_sign_ins_share_one_key_set_fetch(make_settings: Callable[..., Settings]) -> None:
    services = build_services(make_settings())
    http = make_http_client(5.0)
    try:
        with hostile({"/jwks": Answer.json(KEYS)}) as issuer_server:
            directory = IssuerDirectory(services.sessions, services.vault, http=http)
            issuer = ResolvedIssuer(
                id=uuid.uuid4(),
                issuer=issuer_server.url,
                display_name="Keys",
                client_id="c",
                client_secret=None,
                scopes=("openid",),
                authorization_endpoint=issuer_server.url + "/authorize",
                token_endpoint=issuer_server.url + "/token",
                jwks_uri=issuer_server.url + "/jwks",
                iss_parameter_supported=False,
                token_auth_method="none",
            )
            answers = await asyncio.gather(*(directory.jwks(issuer) for _ in range(20)))
            fetched = [path for path in issuer_server.requests if path == "/jwks"]
    finally:
        await http.aclose()
        await services.engine.dispose()
    assert answers == [KEYS] * 20
    assert fetched == ["/jwks"]


def _signed(kid: str) -> tuple[dict[str, Any], str]:
    """A public JWKS holding one new ES256 key, and a token that key signed."""
    from joserfc import jwt
    from joserfc.jwk import ECKey

    key = ECKey.generate_key("P-256", {"kid": kid, "alg": "ES256"})
    token = jwt.encode({"alg": "ES256", "kid": kid}, {"sub": "alice"}, key)
    return {"keys": [key.as_dict(private=False)]}, token


def test_a_key_set_is_parsed_once_and_never_outlives_a_refetch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The parsed keys are kept by the fetched document: the same document is parsed once, and a
    document fetched again (the issuer rotated its keys) is parsed anew, so a token signed by a
    key the issuer dropped no longer verifies."""
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
    for _ in range(3):
        assert oidc._decode(old_token, old_keys).claims == {"sub": "alice"}
    assert parsed == [old_keys]
    assert oidc._decode(new_token, new_keys).claims == {"sub": "alice"}
    with pytest.raises(JoseError):
        oidc._decode(old_token, new_keys)
    # The same keys fetched again are a new document: parsed again, not taken from the old one.
    again = {"keys": [dict(k) for k in new_keys["keys"]]}
    assert oidc._decode(new_token, again).claims == {"sub": "alice"}
    assert parsed == [old_keys, new_keys, again]
