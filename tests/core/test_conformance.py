"""The OpenAPI document tells the truth: schemathesis over every operation of a live instance.

The instance runs in a thread with its own event loop (schemathesis is a separate process that
blocks on its requests), with Stripe's local double, a signing key and short waits, so every kind
and every route can answer. The run covers every operation in the document — examples, coverage
and fuzzing phases, a bounded number of examples each — and fails on any server error (5xx) and
any answer the document does not describe: an undocumented status, content type or header, a body
that does not match its schema, or a request that breaks the schema and is accepted anyway.
Whether valid-looking data is accepted (``positive_data_acceptance``) is not checked: the server's
rules (https URLs, registered issuers, the text rule) are stricter than any schema can say.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from service.admin.tokens import Role, create_token, parse_lifetime
from service.settings import Settings
from tests.support import backends
from tests.support.apps import new_server_client, running_app
from tests.support.stripe_double import API_KEY, WEBHOOK_SECRET, StripeDouble

pytestmark = pytest.mark.slow

MAX_EXAMPLES = 5
SEED = 20261130


@dataclass(frozen=True)
class Live:
    url: str
    api_key: str
    admin_token: str


@pytest.fixture(scope="module")
def live(make_settings: Callable[..., Settings], backend: backends.Backends) -> Iterator[Live]:
    """An instance on its own thread and event loop, with a server client and an admin token, on a
    database of its own: rows other tests left behind (connections to providers that are gone,
    payments at a double that stopped) are not this run's to find."""
    started = threading.Event()
    found: list[Live | BaseException] = []
    stop = threading.Event()

    with StripeDouble() as double:
        settings = make_settings(
            stripe_secret_key=API_KEY,
            stripe_webhook_secret=WEBHOOK_SECRET,
            stripe_api_base=double.url,
            max_wait_seconds=1,
            outbound_timeout_seconds=2.0,
            redis_channel=f"elicitd:conformance:{uuid.uuid4().hex[:8]}",
        )

        async def serve() -> None:
            try:
                async with (
                    backends.migrated_database(backend.server_url) as database,
                    running_app(settings.with_(database_url=database)) as app,
                ):
                    client = await new_server_client(app)
                    async with app.state.sessions() as session:
                        token = await create_token(
                            session, name="conformance", role=Role.ADMIN, lifetime=parse_lifetime("1h")
                        )
                        await session.commit()
                    found.append(Live(url=app.url, api_key=client.api_key, admin_token=token.secret))
                    started.set()
                    while not stop.is_set():
                        await asyncio.sleep(0.1)
            except BaseException as exc:  # the test thread must hear about a failed start
                found.append(exc)
                started.set()
                raise

        thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
        thread.start()
        assert started.wait(60), "the instance did not start"
        first = found[0]
        if isinstance(first, BaseException):
            raise first
        try:
            yield first
        finally:
            stop.set()
            thread.join(30)


def config(live: Live, path: Path) -> Path:
    """Credentials per security scheme: the API key on /v1, the admin token on /admin."""
    path.write_text(
        "request-timeout = 20\n"
        "[[operations]]\n"
        'include-path-regex = "^/v1/"\n'
        f'headers = {{ Authorization = "Bearer {live.api_key}" }}\n'
        "[[operations]]\n"
        'include-path-regex = "^/admin/"\n'
        f'headers = {{ Authorization = "Bearer {live.admin_token}" }}\n'
    )
    return path


def test_the_described_document_is_valid_openapi(live: Live) -> None:
    from schemathesis.openapi import from_dict

    document = httpx.get(f"{live.url}/schema/openapi.json").json()
    from_dict(document)  # raises on a document that is not valid OpenAPI
    problem = {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}
    create = document["paths"]["/v1/flows"]["post"]["responses"]
    assert {"400", "401", "403", "413", "415", "429", "503"} <= set(create)
    assert create["415"]["content"] == problem
    schemas = document["components"]["schemas"]
    assert schemas["CreateFlowRequest"]["additionalProperties"] is False
    assert schemas["Subject"]["additionalProperties"] is False
    assert "additionalProperties" not in schemas["CreateFlowResponse"]
    assert schemas["CreateFlowResponse"]["properties"]["mcp"] == {"$ref": "#/components/schemas/InputRequiredResult"}
    assert schemas["InputRequiredResult"]["required"] == ["resultType", "requestState"]
    assert schemas["CreateFlowRequest"]["examples"][0]["kind"] == "oauth_connect"
    page = document["paths"]["/f/{flow_ref}"]["get"]["responses"]
    assert page["200"]["content"] == {"text/html": {"schema": {"type": "string"}}}
    assert page["404"]["content"] == {"text/html": {"schema": {"type": "string"}}}
    text = json.dumps(document)
    assert "Validation Exception" not in text and '"status_code"' not in text


def test_examples_in_the_document_are_what_the_server_accepts(live: Live) -> None:
    """The create example is sent as is (with an issuer and provider this instance knows)."""
    document = httpx.get(f"{live.url}/schema/openapi.json").json()
    example = dict(document["components"]["schemas"]["CreateFlowRequest"]["examples"][0])
    example.update(kind="external", url="https://app.example.com/step", provider=None, scopes=[])
    del example["provider"]
    answer = httpx.post(
        f"{live.url}/v1/flows", json=example, headers={"Authorization": f"Bearer {live.api_key}"}, timeout=30
    )
    assert answer.status_code == 201, answer.text
    assert set(answer.json()["mcp"]) == {"resultType", "inputRequests", "requestState"}


def test_schemathesis_finds_no_server_error_and_no_contradiction(live: Live, tmp_path: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "--config-file",
        str(config(live, tmp_path / "schemathesis.toml")),
        "run",
        f"{live.url}/schema/openapi.json",
        "--checks",
        "all",
        "--exclude-checks",
        "positive_data_acceptance",
        "--phases",
        "examples,coverage,fuzzing",
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        str(SEED),
        # One worker: hypothesis reads lambda sources with ``ast`` and CPython 3.11's parser is not
        # safe across threads ("AST constructor recursion depth mismatch").
        "--workers",
        "1",
        "--no-color",
    ]
    # In the test's own directory: schemathesis keeps a cache (.schemathesis/) where it runs.
    run = subprocess.run(command, capture_output=True, text=True, timeout=1200, check=False, cwd=tmp_path)
    output = run.stdout + run.stderr
    operations = len(
        [
            method
            for item in httpx.get(f"{live.url}/schema/openapi.json").json()["paths"].values()
            for method in item
            if method in {"get", "put", "post", "patch", "delete"}
        ]
    )
    tested = re.search(r"Tested: (\d+)", output)
    cases = re.search(r"(\d+) generated", output)
    print(f"\nconformance: {tested and tested.group(1)} of {operations} operations, {cases and cases.group(1)} cases")
    (Path(__file__).parents[1] / "artifacts").mkdir(exist_ok=True)
    (Path(__file__).parents[1] / "artifacts" / "conformance.txt").write_text(output)
    failures = output.find("FAILURES")
    assert run.returncode == 0, output[failures - 100 if failures >= 0 else -20000 :][:20000]
    assert tested is not None and int(tested.group(1)) == operations
    assert "Server error" not in output
