"""The OpenAPI document as the server answers, not as the framework guesses.

Litestar derives the document from route signatures, which leaves it saying less than the truth:
its default 400 is a ``{status_code, detail, extra}`` body the server never sends (every error is
RFC 9457 problem+json, or an HTML page on the browser routes), most statuses a route can answer
(401, 403, 404, 409, 413, 415, 429, 502, 503) are missing, input objects look open although the
server refuses unknown fields, and ``mcp`` is an untyped object. ``describe`` rewrites the generated
document once, by rules that follow the server's own (``service.errors``, ``service.limits``, the
routers' guards), so a new route is described correctly without listing it here:

* every error answer is ``application/problem+json`` with the ``Problem`` schema, or ``text/html``
  on a browser route (``service.problems.is_browser_path``), never Litestar's validation shape;
* each operation lists the error statuses its kind of route can answer (see ``_statuses``);
* a struct declared with ``forbid_unknown_fields`` has ``additionalProperties: false``;
* ``mcp`` and ``legacy`` are the MCP result types of ``service.flows.schemas``;
* the main request and response bodies carry real examples, the ones ``docs/api.md`` shows.

The conformance test (``tests/core/test_conformance.py``) runs schemathesis over every operation
of a live instance and fails on any server error or any answer the document does not describe.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec
from litestar import Request
from litestar.openapi.plugins import JsonRenderPlugin
from litestar.serialization import encode_json

from service.flows import schemas as flow_schemas
from service.problems import is_browser_path

# The application installs it from here (``service.app``); it lives with the responses it amends.
from service.responses import AllowHeaderMiddleware as AllowHeaderMiddleware  # noqa: PLC0414 - re-exported

PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}
_METHODS = ("get", "put", "post", "patch", "delete")
_MUTATING = frozenset({"put", "post", "patch", "delete"})

_TEXT = {
    400: "Invalid request, parameters or body (`invalid_request`, `json_too_deep`, …)",
    401: "Missing or invalid credentials (`unauthenticated`)",
    403: "Not allowed (`forbidden`, `provider_not_allowed`, `issuer_not_trusted`, `csrf_failed`, …)",
    404: "No such resource, or not this caller's (`not_found`, `flow_not_found`, …)",
    409: "The resource is not in a state that allows this (`flow_not_pending`, `conflict`, …)",
    413: "The request body exceeds `ELICITD_MAX_BODY_BYTES` (`payload_too_large`)",
    415: "The body is not JSON (`unsupported_media_type`)",
    429: "Over a rate limit or quota (`rate_limited`, with `Retry-After`)",
    502: "A provider, issuer or payment provider failed (`upstream_error` and its kin)",
    503: "Temporarily unavailable (`unavailable`, with `Retry-After`)",
}
# Routes that call a provider, an issuer or Stripe while answering (502 when that call fails).
_UPSTREAM = (
    "/v1/connections/",
    "/oauth/",
    "/admin/v1/providers/",
    "/admin/v1/issuers/test-discovery",
    "/admin/v1/connections/",
    "/admin/v1/payments/",
    "/webhooks/",
)
# Routes that touch neither the database nor anything else that can be away.
_NEVER_UNAVAILABLE = frozenset({"/healthz", "/metrics", "/.well-known/jwks.json"})

# Real examples (the ones docs/api.md shows) for what the routes do not already carry one for.
EXAMPLES: dict[str, Any] = {
    "Problem": {
        "type": "https://elicitd.dev/problems/flow_not_pending",
        "title": "Flow is no longer pending",
        "status": 409,
        "code": "flow_not_pending",
        "detail": "The flow is completed; it cannot change again.",
    },
    "CompleteRequest": {"result": {"order_id": "A-1042", "approved_by": "u-123"}},
    "FailRequest": {"code": "card_declined", "message": "The card was declined."},
    "InputRequiredResult": {
        "resultType": "input_required",
        "inputRequests": {
            "elicitd_fl_0190f4c2a1b27c3d8e9f00112233aabb": {
                "method": "elicitation/create",
                "params": {
                    "mode": "url",
                    "message": "Connect your GitHub account to continue.",
                    "url": "https://elicitd.example.com/f/fl_0190f4c2a1b27c3d8e9f00112233aabb",
                },
            }
        },
        "requestState": "v2.k1.498611.bWluZWQgYnkgZWxpY2l0ZDsgb3BhcXVlIHRvIHRoZSBjYWxsZXI",
    },
}


def _operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in document.get("paths", {}).items():
        for method in _METHODS:
            if method in item:
                yield path, method, item[method]


def _error(status: int, browser: bool, description: str | None = None) -> dict[str, Any]:
    text = description or _TEXT.get(status, "Error")
    if browser:
        return {"description": text + " — an HTML page", "content": {"text/html": {"schema": {"type": "string"}}}}
    return {"description": text, "content": {"application/problem+json": {"schema": dict(PROBLEM_REF)}}}


def _statuses(path: str, method: str, operation: dict[str, Any]) -> set[int]:
    """The error statuses an operation can answer, by the rules the server follows."""
    found: set[int] = set()
    has_body = "requestBody" in operation
    if operation.get("parameters") or has_body or "{" in path or path.startswith("/webhooks/"):
        found.add(400)  # parameters, a body, an id in the path, or a raw body checked by hand
    if operation.get("security"):
        found |= {401, 403}  # no valid credentials; a client or token not allowed this
    if "{" in path or path.startswith("/admin/"):
        found.add(404)  # an id in the path, or (admin) a filter or body naming something unknown
    if method in _MUTATING and (path.startswith(("/v1/", "/admin/")) or is_browser_path(path)):
        found.add(409)  # the thing changed is no longer in a state that allows it
    if has_body:
        found.add(413)
        if "application/json" in operation["requestBody"].get("content", {}):
            found.add(415)
    if path.startswith("/v1/"):
        found.add(429)
    if is_browser_path(path):
        # Every page checks the flow, the session and its form: invalid links, other accounts and
        # expired forms, the sign-in throttle, and the issuer it may have to ask.
        found |= {400, 403, 404, 429, 502}
        if method == "post" and path.startswith("/me"):
            found.add(401)  # the session ended before the form was sent
    if path.startswith(_UPSTREAM):
        found.add(502)
    if path not in _NEVER_UNAVAILABLE and not path.startswith("/schema"):
        found.add(503)
    return found


def _fix_responses(path: str, method: str, operation: dict[str, Any]) -> None:
    browser = is_browser_path(path)
    responses: dict[str, Any] = operation.setdefault("responses", {})
    if path.startswith("/oauth/"):
        # RFC 6749 §5.2: an OAuth endpoint answers errors as its clients expect, not as problem+json.
        for status in (400, 401):
            responses.setdefault(str(status), dict(_OAUTH_ERROR))
    for code, response in list(responses.items()):
        status = int(code)
        if response is _OAUTH_ERROR or "OAuthError" in str(response.get("content", "")):
            continue
        if status >= 400:
            declared = response.get("content", {})
            if "application/problem+json" not in declared or browser:
                # Litestar's own 400 ("Validation Exception"), or an error documented as plain JSON.
                responses[code] = _error(status, browser)
        elif 300 <= status < 400:
            responses[code] = {
                "description": response.get("description") or "Redirect",
                "headers": {"Location": {"schema": {"type": "string"}, "description": "Where to go next"}},
            }
        elif (browser or "browser" in operation.get("tags", ())) and "application/json" in response.get("content", {}):
            response["content"] = {"text/html": {"schema": {"type": "string"}}}
    for parameter in operation.get("parameters", ()):
        schema = parameter.get("schema", {})
        if parameter.get("in") == "query" and _is_date_time(schema):
            # A timestamp may also be given as Unix seconds (msgspec reads both).
            options: list[dict[str, Any]] = [{"type": "string", "format": "date-time"}, {"type": "number"}]
            if "null" in str(schema):
                options.append({"type": "null"})
            parameter["schema"] = {"anyOf": options}
    for status in sorted(_statuses(path, method, operation)):
        responses.setdefault(str(status), _error(status, browser))


_OAUTH_ERROR: dict[str, Any] = {
    "description": "An OAuth error (RFC 6749 §5.2)",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/OAuthError"}}},
}
_OAUTH_ERROR_SCHEMA = {
    "type": "object",
    "properties": {"error": {"type": "string"}, "error_description": {"type": "string"}},
    "required": ["error"],
}


def _is_date_time(schema: dict[str, Any]) -> bool:
    options = schema.get("oneOf") or schema.get("anyOf") or [schema]
    return any(isinstance(o, dict) and o.get("format") == "date-time" for o in options)


def _closed_structs() -> dict[str, bool]:
    """Struct name → whether every struct of that name refuses unknown fields."""
    closed: dict[str, bool] = {}
    pending = list(msgspec.Struct.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if not cls.__module__.startswith("service."):
            continue
        forbids = bool(cls.__struct_config__.forbid_unknown_fields)
        closed[cls.__name__] = closed.get(cls.__name__, True) and forbids
    return closed


def _mcp_components() -> dict[str, Any]:
    _, components = msgspec.json.schema_components(
        [flow_schemas.InputRequiredResult, flow_schemas.LegacyUrlElicitationRequired],
        ref_template="#/components/schemas/{name}",
    )
    return components


def describe(generated: dict[str, Any]) -> dict[str, Any]:
    """A corrected copy of Litestar's document (the input is left as it is)."""
    document: dict[str, Any] = msgspec.json.decode(encode_json(generated))
    for path, method, operation in _operations(document):
        _fix_responses(path, method, operation)
    schemas: dict[str, Any] = document.setdefault("components", {}).setdefault("schemas", {})
    for name, closed in _closed_structs().items():
        if closed and isinstance(schemas.get(name), dict) and "properties" in schemas[name]:
            schemas[name]["additionalProperties"] = False
    schemas.update(_mcp_components())
    schemas["OAuthError"] = _OAUTH_ERROR_SCHEMA
    for holder, field, ref in (
        ("CreateFlowResponse", "mcp", "InputRequiredResult"),
        ("CreateFlowResponse", "legacy", "LegacyUrlElicitationRequired"),
        ("ResolveResponse", "mcp", "InputRequiredResult"),
    ):
        properties = schemas.get(holder, {}).get("properties")
        if isinstance(properties, dict) and field in properties:
            properties[field] = {"$ref": f"#/components/schemas/{ref}"}
    for name, example in EXAMPLES.items():
        if name in schemas:
            schemas[name]["examples"] = [example]
            for field in schemas[name].get("properties", {}).values():
                field.pop("examples", None)  # the framework's random strings, if any
    return document


class DescribedRender:
    """For an ``OpenAPIRenderPlugin``: render ``describe``'s document, built once per process."""

    _described: tuple[object, bytes] | None = None

    def render_json(self, request: Request[Any, Any, Any], openapi_schema: dict[str, Any]) -> bytes:
        cached = self._described
        if cached is None or cached[0] is not openapi_schema:
            cached = (openapi_schema, encode_json(describe(openapi_schema)))
            self._described = cached
        return cached[1]


class DescribedJsonRenderPlugin(DescribedRender, JsonRenderPlugin):
    """``/schema/openapi.json``: the described document."""
