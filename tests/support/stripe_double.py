"""A local stand-in for the parts of Stripe's HTTP API that elicitd calls, plus Stripe-style webhooks.

elicitd's real ``stripe`` client is pointed at this server (``ELICITD_STRIPE_API_BASE``), so the
request encoding, idempotency keys, authentication header and error mapping all go through the
official library exactly as in production — only the far end is local. It speaks:

* ``POST /v1/checkout/sessions`` (form-encoded, ``Idempotency-Key`` honoured: the same key returns
  the same session, the same key with other parameters is a 400 ``idempotency_error``),
* ``GET /v1/checkout/sessions/{id}`` and ``POST /v1/checkout/sessions/{id}/expire``,
* ``GET /checkout/{id}``: a hosted "checkout page" with a Pay button, and ``POST /checkout/{id}/pay``
  which marks the session paid and redirects to its ``success_url`` (as Checkout does).

Tests drive the rest from Python: ``pay``, ``expire``, ``event`` (an event with the session's current
snapshot), ``signature_header`` (computed exactly as Stripe signs: HMAC-SHA256 over
``"{t}.{body}"`` with the endpoint secret) and ``deliver`` (POST to elicitd's webhook).
"""

from __future__ import annotations

import hashlib
import hmac
import html
import http.server
import json
import secrets
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx

API_KEY = "sk_test_elicitd_double_" + "0" * 24
WEBHOOK_SECRET = "whsec_elicitd_double_" + "1" * 32


def parse_form(body: str) -> dict[str, Any]:
    """Decode Stripe's bracket encoding (``a[b][0][c]=v``) into nested dicts and lists."""
    root: dict[str, Any] = {}
    for key, value in parse_qsl(body, keep_blank_values=True):
        parts = key.replace("]", "").split("[")
        node: Any = root
        for here in parts[:-1]:
            node = node.setdefault(here, {})
        node[parts[-1]] = value
    decoded: dict[str, Any] = _lists(root)
    return decoded


def _lists(node: Any) -> Any:
    if isinstance(node, dict):
        converted = {k: _lists(v) for k, v in node.items()}
        if converted and all(k.isdigit() for k in converted):
            return [converted[k] for k in sorted(converted, key=int)]
        return converted
    return node


def _snapshot(session: dict[str, Any]) -> dict[str, Any]:
    """A deep copy through JSON, as a client would see it: the test never holds the double's own dicts."""
    copied: dict[str, Any] = json.loads(json.dumps(session))
    return copied


@dataclass
class DoubleState:
    sessions: dict[str, dict[str, Any]] = field(default_factory=dict)
    idempotency: dict[str, tuple[dict[str, Any], str]] = field(default_factory=dict)
    calls: Counter[str] = field(default_factory=Counter)
    requests: list[dict[str, Any]] = field(default_factory=list)


class StripeDouble:
    def __init__(self, *, api_key: str = API_KEY, webhook_secret: str = WEBHOOK_SECRET) -> None:
        self.api_key = api_key
        self.webhook_secret = webhook_secret
        self.state = DoubleState()
        self.lock = threading.Lock()
        self._server: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle ------------------------------------------------------------------------------
    def start(self) -> StripeDouble:
        double = self

        class Handler(_Handler):
            owner = double

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> StripeDouble:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    # ---- the test's side --------------------------------------------------------------------------
    def session(self, session_id: str) -> dict[str, Any]:
        with self.lock:
            return _snapshot(self.state.sessions[session_id])

    def only_session(self) -> dict[str, Any]:
        with self.lock:
            assert len(self.state.sessions) == 1, f"{len(self.state.sessions)} sessions"
            return _snapshot(next(iter(self.state.sessions.values())))

    def session_for(self, flow_ref: str) -> dict[str, Any]:
        with self.lock:
            found = [s for s in self.state.sessions.values() if s["client_reference_id"] == flow_ref]
        assert len(found) == 1, f"{len(found)} sessions for {flow_ref}"
        return _snapshot(found[0])

    def calls(self, name: str) -> int:
        with self.lock:
            return self.state.calls[name]

    def pay(self, session_id: str, *, payment_status: str = "paid") -> dict[str, Any]:
        """The customer pays: the session completes (``unpaid`` models a delayed method like SEPA)."""
        with self.lock:
            s = self.state.sessions[session_id]
            s["status"] = "complete"
            s["payment_status"] = payment_status
            s["payment_intent"] = s["payment_intent"] or "pi_test_" + secrets.token_hex(12)
            return _snapshot(s)

    def settle_async(self, session_id: str, *, succeeded: bool) -> dict[str, Any]:
        with self.lock:
            s = self.state.sessions[session_id]
            s["payment_status"] = "paid" if succeeded else "unpaid"
            return _snapshot(s)

    def expire(self, session_id: str) -> dict[str, Any]:
        with self.lock:
            s = self.state.sessions[session_id]
            s["status"] = "expired"
            return _snapshot(s)

    def event(self, event_type: str, session: dict[str, Any], *, event_id: str | None = None) -> bytes:
        """A Stripe event body (snapshot payload), serialized as Stripe sends it."""
        body = {
            "id": event_id or "evt_test_" + secrets.token_hex(12),
            "object": "event",
            "api_version": "2025-01-27.acacia",
            "created": int(time.time()),
            "livemode": False,
            "pending_webhooks": 1,
            "request": {"id": None, "idempotency_key": None},
            "type": event_type,
            "data": {"object": session},
        }
        return json.dumps(body, indent=2).encode()

    def signature_header(self, payload: bytes, *, timestamp: int | None = None, secret: str | None = None) -> str:
        t = int(time.time()) if timestamp is None else timestamp
        signed = f"{t}.".encode() + payload
        mac = hmac.new((secret or self.webhook_secret).encode(), signed, hashlib.sha256).hexdigest()
        return f"t={t},v1={mac}"

    async def deliver(
        self,
        elicitd_url: str,
        payload: bytes,
        *,
        timestamp: int | None = None,
        secret: str | None = None,
        header: str | None = None,
    ) -> httpx.Response:
        sig = header if header is not None else self.signature_header(payload, timestamp=timestamp, secret=secret)
        async with httpx.AsyncClient(timeout=30) as http:
            return await http.post(
                f"{elicitd_url}/webhooks/stripe",
                content=payload,
                headers={
                    "Stripe-Signature": sig,
                    "Content-Type": "application/json",
                    "User-Agent": "Stripe/1.0 (+https://stripe.com/docs/webhooks)",
                },
            )

    # ---- the API side -----------------------------------------------------------------------------
    def create(self, params: dict[str, Any], idempotency_key: str | None) -> tuple[int, dict[str, Any]]:
        with self.lock:
            self.state.calls["create"] += 1
            if idempotency_key is not None and idempotency_key in self.state.idempotency:
                earlier, session_id = self.state.idempotency[idempotency_key]
                if earlier != params:
                    return 400, _error(
                        "idempotency_error",
                        "Keys for idempotent requests can only be used with "
                        "the same parameters they were first used with.",
                    )
                return 200, self.state.sessions[session_id]
            problem = _check_create(params)
            if problem is not None:
                return 400, _error("invalid_request_error", problem)
            session_id = "cs_test_" + secrets.token_hex(16)
            item = params["line_items"][0]
            amount = int(item["price_data"]["unit_amount"]) * int(item.get("quantity", 1))
            session = {
                "id": session_id,
                "object": "checkout.session",
                "mode": params["mode"],
                "livemode": False,
                "url": f"{self.url}/checkout/{session_id}",
                "status": "open",
                "payment_status": "unpaid",
                "amount_total": amount,
                "currency": item["price_data"]["currency"],
                "payment_intent": None,
                "client_reference_id": params.get("client_reference_id"),
                "metadata": params.get("metadata", {}),
                "success_url": params["success_url"],
                "cancel_url": params.get("cancel_url"),
                "expires_at": int(params.get("expires_at") or time.time() + 86400),
                "created": int(time.time()),
            }
            self.state.sessions[session_id] = session
            if idempotency_key is not None:
                self.state.idempotency[idempotency_key] = (params, session_id)
            return 200, session


def _check_create(params: dict[str, Any]) -> str | None:
    if params.get("mode") != "payment":
        return "mode must be payment"
    if not params.get("success_url"):
        return "Missing required param: success_url."
    items = params.get("line_items")
    if not isinstance(items, list) or len(items) != 1:
        return "line_items must hold one item"
    expires = params.get("expires_at")
    now = time.time()
    if expires is not None and not (now + 30 * 60 - 5 <= int(expires) <= now + 24 * 3600 + 5):
        return "The `expires_at` timestamp must be between 30 minutes and 24 hours from Checkout Session creation."
    return None


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"error": {"type": kind, "message": message}}


class _Handler(http.server.BaseHTTPRequestHandler):
    owner: StripeDouble

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""

    def _send(
        self, status: int, body: Any, *, content_type: str = "application/json", headers: dict[str, str] | None = None
    ) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Request-Id", "req_" + secrets.token_hex(8))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _authorized(self) -> bool:
        if self.headers.get("Authorization") == f"Bearer {self.owner.api_key}":
            return True
        self._send(401, _error("invalid_request_error", "Invalid API Key provided."))
        return False

    def _record(self, body: str) -> None:
        with self.owner.lock:
            self.owner.state.requests.append(
                {
                    "method": self.command,
                    "path": self.path,
                    "body": body,
                    "idempotency_key": self.headers.get("Idempotency-Key"),
                }
            )

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        parts = path.strip("/").split("/")
        if parts[:3] == ["v1", "checkout", "sessions"] and len(parts) == 4:
            self._record("")
            if not self._authorized():
                return
            with self.owner.lock:
                self.owner.state.calls["retrieve"] += 1
                session = self.owner.state.sessions.get(parts[3])
            if session is None:
                self._send(404, _error("invalid_request_error", "No such checkout.session"))
            else:
                self._send(200, session)
            return
        if parts[0] == "checkout" and len(parts) == 2:
            with self.owner.lock:
                session = self.owner.state.sessions.get(parts[1])
            if session is None:
                self._send(404, b"no such checkout", content_type="text/plain")
                return
            page = (
                f"<!doctype html><title>Test checkout</title><h1>Test checkout</h1>"
                f"<p id='amount'>{session['amount_total']} {html.escape(session['currency'])}</p>"
                f"<p id='status'>{html.escape(session['status'])}</p>"
                f"<form method='post' action='/checkout/{session['id']}/pay'>"
                f"<button id='pay' type='submit'>Pay</button></form>"
            )
            self._send(200, page.encode(), content_type="text/html")
            return
        self._send(404, _error("invalid_request_error", "Unrecognized request URL"))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode() if length else ""
        path = urlsplit(self.path).path
        parts = path.strip("/").split("/")
        if parts == ["v1", "checkout", "sessions"]:
            self._record(body)
            if not self._authorized():
                return
            status, payload = self.owner.create(parse_form(body), self.headers.get("Idempotency-Key"))
            self._send(status, payload, headers={"Idempotency-Key": self.headers.get("Idempotency-Key") or ""})
            return
        if parts[:3] == ["v1", "checkout", "sessions"] and len(parts) == 5 and parts[4] == "expire":
            self._record(body)
            if not self._authorized():
                return
            with self.owner.lock:
                self.owner.state.calls["expire"] += 1
                session = self.owner.state.sessions.get(parts[3])
                if session is not None and session["status"] == "open":
                    session["status"] = "expired"
            if session is None:
                self._send(404, _error("invalid_request_error", "No such checkout.session"))
            elif session["status"] != "expired":
                self._send(
                    400,
                    _error("invalid_request_error", "Only Checkout Sessions with a status in ['open'] can be expired."),
                )
            else:
                self._send(200, session)
            return
        if parts[0] == "checkout" and len(parts) == 3 and parts[2] == "pay":
            with self.owner.lock:
                session = self.owner.state.sessions.get(parts[1])
            if session is None or session["status"] != "open":
                self._send(400, b"this checkout cannot be paid", content_type="text/plain")
                return
            self.owner.pay(session["id"])
            self._send(303, b"", content_type="text/plain", headers={"Location": session["success_url"]})
            return
        self._send(404, _error("invalid_request_error", "Unrecognized request URL"))
