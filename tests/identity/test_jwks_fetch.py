"""An issuer's key set is fetched once however many sign-ins find the cache empty together."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

from service.http import make_http_client
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
