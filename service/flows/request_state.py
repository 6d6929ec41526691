"""``requestState``: the opaque string an MCP client echoes back on its retry.

It is attacker-controlled input (MCP.md), so it is sealed with AES-256-GCM and bound to the flow,
the server client (as associated data: a state minted for another client does not even decrypt),
the subject and an expiry. It carries no secret of its own; the flow's truth stays in PostgreSQL.

**Why a key per hour.** Every create and every resolve that asks again mints a state, with a random
96-bit nonce. Under one key, random nonces are safe for 2^32 seals (NIST SP 800-38D §8.3: the chance
that two of q nonces collide is below q²/2^97, and a collision gives away the GCM authentication
key); at the hot path's 10^3 states a second that budget is spent in ~50 days. So each state is
sealed under a sub-key derived with HKDF-SHA256 from the ring key and the hour it was minted in
(``PERIOD_SECONDS``), and the hour is written in the token: ``v2.<key id>.<hour>.<base64url>``.
A period key seals at most 3,600 times the mint rate, below 2^32 up to 1.19e6 states a second
across all replicas; at 10^3/s that is 3.6e6 seals an hour, a collision chance below 2^-53
per hour and below 10^-11 in ten years of hours. The budget renews every hour, so it never runs
out. The hour is authenticated by the key it selects: a token whose hour is changed does not
open. Period keys are derived once and kept (``_period_key``; ~5 µs each).

States sealed before (``v1.<key id>.<base64url>``, one AES-GCM key for all of them) still open
until their own expiry, at most ``ELICITD_MAX_TTL_SECONDS`` + ``ELICITD_REQUEST_STATE_GRACE_SECONDS``
after the upgrade, so flows in progress finish; opening one seals nothing, so it spends no nonce.
Nothing is sealed in that form any more.

The sealed expiry is Unix seconds derived from the flow's ``expires_at`` (a database timestamp) and
may be checked by any replica, so it is compared with the clock's wall time (``time()``), never its
monotonic time, which has no fixed origin and differs from process to process. The hour comes from
the same wall time; replicas whose clocks disagree only pick different hours, which every replica
can open.
"""

from __future__ import annotations

import base64
import os
import uuid
from dataclasses import dataclass
from functools import lru_cache

import msgspec
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from service.clock import Clock, SystemClock
from service.crypto.aead import Sealer, SealError
from service.errors import InvalidRequestState, RequestStateExpired
from service.flows.schemas import Subject
from service.settings import KeyRing

PURPOSE = "request-state"
PERIOD_SECONDS = 3600
_NONCE = 12
# An hour as decimal digits: enough for any wall clock, short enough to refuse nonsense unparsed.
_MAX_PERIOD_DIGITS = 10
_MAX_TOKEN = 4096
# Every resolve opens a state and every create mints one: msgspec rather than ``json`` (the same
# compact text, a third of the time).
_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode
# One sentence for every refusal: naming the reason (another client, another subject) would tell a
# caller something about a state that is not theirs.
_NOT_VALID = "The request state is not valid."


@lru_cache(maxsize=1024)
def _period_key(key: bytes, period: int) -> AESGCM:
    """The sub-key sealing the states of one hour under one ring key. A token may name any hour,
    but another hour only derives a key that does not open it (a miss costs ~5 µs); the cache
    bounds the memory."""
    info = b"elicitd/request-state/period/%d" % period
    return AESGCM(HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(key))


def _canonical_period(period: str) -> bool:
    return (
        0 < len(period) <= _MAX_PERIOD_DIGITS
        and period.isascii()
        and period.isdigit()
        and (period == "0" or period[0] != "0")
    )


@dataclass(frozen=True, slots=True)
class RequestState:
    flow_id: uuid.UUID
    subject: Subject
    expires_at: int
    # True when this round showed the user the URL; a retry that does not answer it asks again.
    asked: bool


class RequestStateCodec:
    def __init__(self, ring: KeyRing, *, clock: Clock | None = None) -> None:
        self._ring = ring
        # Opens the states sealed before the period keys (``v1.``), until they have all expired.
        self._v1 = Sealer(ring, PURPOSE)
        self._clock: Clock = clock or SystemClock()

    def mint(
        self, *, flow_id: uuid.UUID, server_client_id: uuid.UUID, subject: Subject, expires_at: int, asked: bool
    ) -> str:
        payload = {"f": flow_id.hex, "i": subject.iss, "s": subject.sub, "e": expires_at, "a": asked}
        kid, key = self._ring.current
        period = int(self._clock.time()) // PERIOD_SECONDS
        nonce = os.urandom(_NONCE)
        sealed = nonce + _period_key(key, period).encrypt(nonce, _encode(payload), server_client_id.bytes)
        return f"v2.{kid}.{period}.{base64.urlsafe_b64encode(sealed).decode().rstrip('=')}"

    def _open(self, token: str, associated: bytes) -> bytes:
        if token.startswith("v1."):
            return self._v1.open_token(token, associated)
        parts = token.split(".")
        if len(parts) != 4 or parts[0] != "v2" or len(token) > _MAX_TOKEN:
            raise SealError("malformed")
        _, kid, period, body = parts
        key = self._ring.get(kid)
        # One spelling per hour (no sign, no leading zero): an altered token never opens.
        if key is None or not _canonical_period(period):
            raise SealError("unknown key or malformed period")
        try:
            sealed = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        except ValueError as exc:
            raise SealError("malformed") from exc
        if len(sealed) <= _NONCE:
            raise SealError("truncated")
        try:
            return _period_key(key, int(period)).decrypt(sealed[:_NONCE], sealed[_NONCE:], associated)
        except InvalidTag as exc:
            raise SealError("authentication failed") from exc

    def verify(self, token: str, *, server_client_id: uuid.UUID, subject: Subject) -> RequestState:
        """Open and check a state; raise ``InvalidRequestState`` or ``RequestStateExpired``.

        The messages are the same whatever failed (tampering, another client, another subject),
        so a caller learns nothing about states that are not theirs.
        """
        try:
            payload = _decode(self._open(token, server_client_id.bytes))
            state = RequestState(
                flow_id=uuid.UUID(hex=payload["f"]),
                subject=Subject(iss=payload["i"], sub=payload["s"]),
                expires_at=int(payload["e"]),
                asked=bool(payload["a"]),
            )
        except (SealError, msgspec.DecodeError, ValueError, KeyError, TypeError) as exc:
            raise InvalidRequestState(_NOT_VALID) from exc
        if state.subject != subject:
            raise InvalidRequestState(_NOT_VALID)
        if state.expires_at < self._clock.time():
            raise RequestStateExpired("The request state has expired; start a new flow.")
        return state
