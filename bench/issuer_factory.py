"""The user's issuer as the proof phase serves it: ``bench/serve.py issuer_factory:create``.

A bare ASGI app (no framework, so the issuer's own cost stays out of elicitd's figures) that
answers what elicitd asks an issuer while it proves a subject:

* ``GET /.well-known/openid-configuration``: the metadata, with ``jwks_uri`` and
  ``introspection_endpoint`` (elicitd discovers them, as for any issuer registered by URL alone);
* ``GET /jwks``: the public keys in ``ELICITD_BENCH_ISSUER_JWKS`` (a file the run wrote: one ES256
  and one RS256 key, whose private halves only the run holds, to sign its access tokens);
* ``POST /introspect``: RFC 7662 for the run's opaque tokens, ``opq.<sub>.<random>``, behind HTTP
  Basic with ``ELICITD_BENCH_INTROSPECTION_CLIENT`` / ``…_SECRET``; any other token is inactive;
* ``GET /_stats``: how many times each was asked, which shows the phase's caches at work (one
  JWKS fetch a process, one introspection a token) rather than assumes it.
"""

from __future__ import annotations

import base64
import hmac
import json
import os
import time
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

AUDIENCE_ENV = "ELICITD_BENCH_ISSUER_AUDIENCE"


def create() -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    issuer = os.environ["ELICITD_PUBLIC_URL"]
    jwks = Path(os.environ["ELICITD_BENCH_ISSUER_JWKS"]).read_bytes()
    client = os.environ["ELICITD_BENCH_INTROSPECTION_CLIENT"]
    secret = os.environ["ELICITD_BENCH_INTROSPECTION_SECRET"]
    audience = os.environ[AUDIENCE_ENV]
    expected = "Basic " + base64.b64encode(f"{client}:{secret}".encode()).decode()
    metadata = json.dumps(
        {
            "issuer": issuer,
            "authorization_endpoint": f"{issuer}/authorize",
            "token_endpoint": f"{issuer}/token",
            "jwks_uri": f"{issuer}/jwks",
            "introspection_endpoint": f"{issuer}/introspect",
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["ES256", "RS256"],
        }
    ).encode()
    asked = {"discovery": 0, "jwks": 0, "introspect": 0, "introspect_refused": 0}

    def introspection(form: bytes, authorization: str) -> tuple[int, bytes]:
        if not hmac.compare_digest(authorization, expected):
            asked["introspect_refused"] += 1
            return 401, b'{"error":"invalid_client"}'
        asked["introspect"] += 1
        token = parse_qs(form.decode()).get("token", [""])[0]
        kind, _, rest = token.partition(".")
        sub, _, nonce = rest.partition(".")
        if kind != "opq" or not sub or not nonce:
            return 200, b'{"active":false}'
        now = int(time.time())
        answer = {"active": True, "iss": issuer, "sub": sub, "aud": audience, "exp": now + 3600, "iat": now}
        return 200, json.dumps(answer).encode()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        path, method = scope["path"], scope["method"]
        status, body = 404, b'{"error":"not_found"}'
        if method == "GET" and path == "/healthz":
            status, body = 200, b'{"status":"ok"}'
        elif method == "GET" and path == "/.well-known/openid-configuration":
            asked["discovery"] += 1
            status, body = 200, metadata
        elif method == "GET" and path == "/jwks":
            asked["jwks"] += 1
            status, body = 200, jwks
        elif method == "GET" and path == "/_stats":
            status, body = 200, json.dumps(asked).encode()
        elif method == "POST" and path == "/introspect":
            form = b""
            while True:
                message = await receive()
                form += message.get("body", b"")
                if not message.get("more_body"):
                    break
            headers = dict(scope["headers"])
            status, body = introspection(form, headers.get(b"authorization", b"").decode())
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})

    return app
