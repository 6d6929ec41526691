"""``make bench PHASES=proof``: the path a new server client runs, with its users' tokens verified.

A new server client defaults to ``subject_proof = required``: every call that names a user carries
that user's access token (``Elicitd-Subject-Token``; the RFC 8693 exchange's ``subject_token``),
and elicitd verifies it before anything is read. The throughput phase measures a client exempt
from that; this phase measures the same endpoints for a client that must prove the subject, in the
same run and on the same servers:

* three kinds of token from a local issuer (``bench/issuer_factory.py``, discovered by URL as any
  registered issuer is): an RFC 9068 JWT signed ES256, one signed RS256 (both checked against the
  issuer's JWKS), and an opaque token checked by RFC 7662 introspection;
* one token per load-generator connection, as each MCP session forwards its own user's token, so
  the verification cache holds one entry a connection and a token is verified once, not once in all;
* each proven measurement between two of the exempt client's on the same endpoint (status, resolve,
  token, create), and the exchange between two of the read floor's, as the throughput phase
  brackets; ratios are the median over rounds;
* then, in a process of its own, what one verification costs: the first proven call with every
  cache cold (discovery, the JWKS, the first import of the JOSE library), a never-seen token with
  the key set warm (the signature check, by algorithm; the introspection round trip), and a token
  already verified (the cache).

The issuer counts what it was asked (discovery, JWKS fetches, introspections), which shows the
caches at work: one JWKS fetch a process, one introspection a distinct opaque token.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import statistics
import time
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import httpx

from bench.harness import DATA, Generator, Server, Target, floor_targets, measure_rounds
from service.settings import KeyRing

PROVEN_SUB = "proven-user"
AUDIENCE = "https://mcp.bench.example/mcp"
INTROSPECTION_CLIENT = "elicitd-introspection"
SUBJECT_TOKEN = "Elicitd-Subject-Token"
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
KINDS = ("es256", "rs256", "opaque")
ENDPOINTS = ("status", "resolve", "token", "create")
# One round: each proven measurement between two of the exempt client's on its endpoint, the
# exchange (always proven: its subject token is the grant) between two of the read floor's, and
# the bare-ASGI read between two of the floor's (the exchange's ratio over it, as for the others).
ROUND = (
    *(name for e in ENDPOINTS for name in (e, *(x for kind in KINDS for x in (f"{e}_{kind}", e)))),
    *("floor", *(x for kind in KINDS for x in (f"exchange_{kind}", "floor")), "asgi", "floor"),
)
BRACKETED = (
    *((f"{endpoint}_{kind}", endpoint) for endpoint in ENDPOINTS for kind in KINDS),
    *((f"exchange_{kind}", "floor") for kind in KINDS),
    ("asgi", "floor"),
)
TARGETS = {
    # Proven (a JWT, either algorithm) over exempt, for status, resolve and token.
    "proof_jwt_over_exempt_min": 0.9,
    # Proven by introspection (its cache warm) over exempt.
    "proof_introspection_over_exempt_min": 0.8,
}


@dataclass
class Signer:
    """The run's signing keys (the issuer serves their public halves) and its token mint."""

    keys: dict[str, Any]
    issuer: str = ""

    @classmethod
    def generate(cls) -> Signer:
        from joserfc.jwk import ECKey, RSAKey

        return cls(
            {
                "es256": ECKey.generate_key("P-256", {"kid": "bench-es256", "alg": "ES256", "use": "sig"}),
                "rs256": RSAKey.generate_key(2048, {"kid": "bench-rs256", "alg": "RS256", "use": "sig"}),
            }
        )

    def public_jwks(self) -> bytes:
        return json.dumps({"keys": [key.as_dict(private=False) for key in self.keys.values()]}).encode()

    def token(self, kind: str, sub: str = PROVEN_SUB) -> str:
        """A fresh access token for ``sub`` (a new ``jti`` each: never one the cache has seen)."""
        if kind == "opaque":
            return f"opq.{sub}.{secrets.token_urlsafe(24)}"
        from joserfc import jwt

        now = int(time.time())
        claims = {
            "iss": self.issuer,
            "sub": sub,
            "aud": AUDIENCE,
            "exp": now + 3600,
            "iat": now,
            "jti": secrets.token_urlsafe(12),
            "client_id": "bench-mcp-client",
            "scope": "mcp",
        }
        header = {"alg": kind.upper(), "kid": f"bench-{kind}", "typ": "at+jwt"}
        return jwt.encode(header, claims, self.keys[kind])


async def _register(database_url: str, keys: str, issuer_url: str, secret: str) -> tuple[str, uuid.UUID]:
    """The issuer (by URL: its endpoints are discovered) and a server client that must prove the
    subject, whose resource URI is the tokens' audience."""
    from sqlalchemy.ext.asyncio import create_async_engine

    from service.crypto.vault import Vault
    from service.db.engine import make_sessionmaker
    from service.identity.clients import create_server_client
    from service.identity.issuers import IssuerConfig, upsert_issuer
    from service.settings import normalize_database_url

    engine = create_async_engine(normalize_database_url(database_url))
    try:
        async with make_sessionmaker(engine)() as session:
            await upsert_issuer(
                session,
                Vault(KeyRing.parse(keys, name="ELICITD_KEYS")),
                IssuerConfig(
                    issuer=issuer_url,
                    client_id="elicitd-bench",
                    display_name="Bench ID",
                    introspection_client_id=INTROSPECTION_CLIENT,
                    introspection_client_secret=secret,
                ),
            )
            created = await create_server_client(
                session, "bench-proven", display_name="Benchmark (proven)", resource_uris=[AUDIENCE]
            )
            await session.commit()
            return created.api_key, created.client.id
    finally:
        await engine.dispose()


def _flow(http: httpx.Client, subject: dict[str, str], proof: dict[str, str]) -> dict[str, str]:
    """A completed ``external`` flow of ``subject``: its id, the resolve body of its retry, and a
    create body for the same subject whose ``{n}`` makes every create a new flow (the URL is part
    of what create-or-reuse compares)."""
    body = {"subject": subject, "kind": "external", "url": "https://mcp.bench.example/step", "context": {}}
    created = http.post("/v1/flows", json=body, headers=proof)
    assert created.status_code == 201, created.text
    flow_id = created.json()["flow"]["id"]
    done = http.post(f"/v1/flows/{flow_id}/complete", json={"result": {"ok": True}})
    assert done.status_code == 200, done.text
    resolve_body = {
        "subject": subject,
        "request_state": created.json()["mcp"]["requestState"],
        "input_responses": {f"elicitd_{flow_id}": {"action": "accept"}},
    }
    create = dict(body, url="https://mcp.bench.example/step?n={n}", context={"bench": "proof"})
    return {"flow_id": flow_id, "resolve_body": json.dumps(resolve_body), "create_body": json.dumps(create)}


def _check_paths(app: str, key: str, flow_id: str, resolve_body: str, token_path: str, signer: Signer) -> None:
    """Each proven path answers in full with a good token of every kind and refuses without one
    (the measured requests are the proven ones, not summaries or refusals)."""
    with httpx.Client(base_url=app, headers={"Authorization": f"Bearer {key}"}, timeout=30) as http:
        for kind in KINDS:
            proof = {SUBJECT_TOKEN: signer.token(kind)}
            status = http.get(f"/v1/flows/{flow_id}", headers=proof)
            assert status.status_code == 200, status.text
            assert status.json()["flow"]["subject"]["sub"] == PROVEN_SUB, status.text
            resolved = http.post(
                "/v1/flows/resolve", content=resolve_body, headers=proof | {"Content-Type": "application/json"}
            )
            assert resolved.status_code == 200, resolved.text
            assert resolved.json()["outcome"] == "completed", resolved.text
            token = http.get(token_path, headers=proof)
            assert token.status_code == 200, token.text
            assert token.json()["access_token"] == "gho_bench_access_token", token.text
            exchanged = http.post("/oauth/token", content=_exchange_form(signer.token(kind)), headers=_FORM)
            assert exchanged.status_code == 200, exchanged.text
            assert exchanged.json()["access_token"] == "gho_bench_access_token", exchanged.text
        refused = http.get(token_path)
        assert refused.status_code == 401, refused.text
        assert refused.json()["code"] == "subject_token_required", refused.text
        summary = http.get(f"/v1/flows/{flow_id}")
        assert summary.status_code == 200, summary.text
        assert "subject" not in summary.json()["flow"], summary.text


_FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def _exchange_form(token: str, provider: str = "benchhub") -> str:
    return urlencode(
        {
            "grant_type": TOKEN_EXCHANGE,
            "subject_token": token,
            "subject_token_type": ACCESS_TOKEN_TYPE,
            "audience": provider,
        },
        safe="{}",
    )


def _side(app: str, suffix: str, state: dict[str, Any], header: str, values: tuple[str, ...]) -> list[Target]:
    """One client's status, resolve, token and create, ``header`` carrying each connection's own
    value; named ``status{suffix}`` and so on."""
    auth = f"Authorization: Bearer {state['key']}"
    hs = (auth, f"{header}: {{t}}")
    js = (*hs, "Content-Type: application/json")
    return [
        Target(f"status{suffix}", f"{app}/v1/flows/{state['flow_id']}", headers=hs, variants=values),
        Target(f"resolve{suffix}", f"{app}/v1/flows/resolve", "POST", js, state["resolve_body"], variants=values),
        Target(f"token{suffix}", f"{app}{state['token_path']}", headers=hs, variants=values),
        Target(f"create{suffix}", f"{app}/v1/flows", "POST", js, state["create_body"], True, values),
    ]


def targets(
    app: str, exempt: dict[str, Any], proven: dict[str, Any], floor: list[Target], signer: Signer, connections: int
) -> list[Target]:
    """The exempt client's four endpoints and the proven client's, by token kind, and the exchange.

    Every target takes ``variants`` (so both sides pay the load generator the same): the proven
    ones a token a connection in ``Elicitd-Subject-Token`` (in the form, for the exchange), the
    exempt ones a session id in a header elicitd does not read."""
    sessions = tuple(f"s{n:04d}" for n in range(connections))
    out = [t for t in floor if t.name in ("floor", "asgi")]
    out += _side(app, "", exempt, "X-Bench-Session", sessions)
    form = (f"Authorization: Bearer {proven['key']}", "Content-Type: application/x-www-form-urlencoded")
    for kind in KINDS:
        tokens = tuple(signer.token(kind) for _ in range(connections))
        out += _side(app, f"_{kind}", proven, SUBJECT_TOKEN, tokens)
        out.append(
            Target(f"exchange_{kind}", f"{app}/oauth/token", "POST", form, _exchange_form("{t}"), variants=tokens)
        )
    return out


async def _timed(http: httpx.AsyncClient, path: str, headers: dict[str, str]) -> float:
    began = time.perf_counter()
    answer = await http.get(path, headers=headers)
    elapsed = (time.perf_counter() - began) * 1000
    assert answer.status_code == 200, answer.text
    return elapsed


async def verification_costs(app: str, key: str, flow_id: str, signer: Signer, samples: int = 50) -> dict[str, Any]:
    """In a process nobody has asked yet: the first proven call (every cache cold), then per kind
    the median of ``samples`` calls each with a never-seen token, and of calls with one token
    already verified; the exempt read of the same flow (no token) for what the call costs anyway."""
    path = f"/v1/flows/{flow_id}"
    async with httpx.AsyncClient(base_url=app, headers={"Authorization": f"Bearer {key}"}, timeout=30) as http:
        # The API key's cache and the pools are warm before anything is timed: only the proof is cold.
        for _ in range(20):
            await _timed(http, path, {})
        cold = await _timed(http, path, {SUBJECT_TOKEN: signer.token("es256")})
        summary = statistics.median([await _timed(http, path, {}) for _ in range(samples)])
        figures: dict[str, Any] = {"proof_cold_first_ms": round(cold, 2), "proof_unproven_read_ms": round(summary, 2)}
        for kind in KINDS:
            fresh = [await _timed(http, path, {SUBJECT_TOKEN: signer.token(kind)}) for _ in range(samples)]
            token = signer.token(kind)
            cached = [await _timed(http, path, {SUBJECT_TOKEN: token}) for _ in range(samples + 1)][1:]
            figures[f"proof_new_token_{kind}_ms"] = round(statistics.median(fresh), 2)
            figures[f"proof_cached_{kind}_ms"] = round(statistics.median(cached), 2)
    return figures


def proof_phase(
    args: argparse.Namespace,
    env: dict[str, str],
    database_url: str,
    keys: str,
    exempt_key: str,
    exempt_subject: dict[str, str],
    exempt_token_path: str,
    make_connection: Any,
) -> dict[str, Any]:
    """Every figure of the phase (see the module's docstring), with the issuer's counts.
    ``exempt_*`` are the run's exempt client, a subject of its and the token path of that
    subject's connection; ``make_connection`` plants the proven user's connection the same way."""
    signer = Signer.generate()
    jwks = DATA / "issuer-jwks.json"
    jwks.write_bytes(signer.public_jwks())
    secret = secrets.token_urlsafe(24)
    issuer_env = dict(
        env,
        ELICITD_BENCH_ISSUER_JWKS=str(jwks),
        ELICITD_BENCH_INTROSPECTION_CLIENT=INTROSPECTION_CLIENT,
        ELICITD_BENCH_INTROSPECTION_SECRET=secret,
        ELICITD_BENCH_ISSUER_AUDIENCE=AUDIENCE,
    )
    issuer = Server("issuer", "issuer_factory:create", issuer_env).start()
    signer.issuer = issuer.url
    servers = [issuer]
    try:
        key, client_id = asyncio.run(_register(database_url, keys, issuer.url, secret))
        connection_id = asyncio.run(make_connection(database_url, keys, client_id, iss=issuer.url, sub=PROVEN_SUB))
        floor = Server("floor-proof", "floor_factory:create", dict(env, ELICITD_BENCH_CLIENT_ID=str(client_id)))
        app = Server("elicitd-proof", "elicitd_factory:create", env)
        servers += [floor.start(), app.start()]
        token_path = "/v1/connections/benchhub/token?" + urlencode({"iss": issuer.url, "sub": PROVEN_SUB})
        subject = {"iss": issuer.url, "sub": PROVEN_SUB}
        with httpx.Client(base_url=app.url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as http:
            proven = _flow(http, subject, {SUBJECT_TOKEN: signer.token("es256")})
        with httpx.Client(base_url=app.url, headers={"Authorization": f"Bearer {exempt_key}"}, timeout=30) as http:
            exempt = _flow(http, exempt_subject, {})
            assert http.get(exempt_token_path).status_code == 200
        proven |= {"key": key, "token_path": token_path}
        exempt |= {"key": exempt_key, "token_path": exempt_token_path}
        _check_paths(app.url, key, proven["flow_id"], proven["resolve_body"], token_path, signer)
        raw_id = uuid.UUID(hex=exempt["flow_id"].removeprefix("fl_"))
        floor_list = floor_targets(floor.url, raw_id, exempt["create_body"])
        gen = Generator.choose(args.generator, args.connections)
        measured = targets(app.url, exempt, proven, floor_list, signer, gen.connections)
        for target in measured:
            gen.run(target, args.warmup)
        runs, ratios = measure_rounds(
            gen, measured, ROUND, BRACKETED, rounds=args.proof_rounds, seconds=args.duration, label="proof"
        )
        app.stop()
        # A process of its own for what one verification costs: nothing in it is warm yet.
        cold_app = Server("elicitd-proof-cold", "elicitd_factory:create", env).start()
        servers.append(cold_app)
        costs = asyncio.run(verification_costs(cold_app.url, key, proven["flow_id"], signer))
        asked = httpx.get(f"{issuer.url}/_stats").json()
    finally:
        for server in reversed(servers):
            server.stop()

    def ratio(name: str, field: str = "rps") -> float:
        return round(statistics.median(r[field] for r in ratios[name]), 3)

    figures: dict[str, Any] = {
        "proof_rounds": args.proof_rounds,
        "proof_connection_id": connection_id,
        "proof_tokens_per_kind": gen.connections,
    }
    for name, measurements in runs.items():
        figures[f"proof_{name}_rps"] = round(statistics.median(r["rps"] for r in measurements), 1)
        figures[f"proof_{name}_p99_ms"] = round(statistics.median(r["p99_ms"] for r in measurements), 2)
    for name, _ in BRACKETED:
        figures[f"proof_{name}_ratio"] = ratio(name)
        figures[f"proof_{name}_p99_ratio"] = ratio(name, "p99_ms")
    for kind in KINDS:
        figures[f"proof_exchange_{kind}_asgi_floor_ratio"] = round(ratio(f"exchange_{kind}") / ratio("asgi"), 3)
    figures |= costs
    figures["proof_issuer_asked"] = asked
    return figures


def proof_checks(results: dict[str, Any]) -> dict[str, bool]:
    """The phase's targets: each proven endpoint over its exempt twin."""
    checks: dict[str, bool] = {}
    for endpoint in ("status", "resolve", "token"):
        for kind in ("es256", "rs256"):
            ratio = results.get(f"proof_{endpoint}_{kind}_ratio", 0)
            checks[f"proof_{endpoint}_{kind}_ratio"] = ratio >= TARGETS["proof_jwt_over_exempt_min"]
        ratio = results.get(f"proof_{endpoint}_opaque_ratio", 0)
        checks[f"proof_{endpoint}_opaque_ratio"] = ratio >= TARGETS["proof_introspection_over_exempt_min"]
    return checks
