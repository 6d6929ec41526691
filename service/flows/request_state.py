"""``requestState``: the opaque string an MCP client echoes back on its retry.

It is attacker-controlled input (MCP.md), so it is sealed with AES-GCM and bound to the flow, the
server client (as associated data: a state minted for another client does not even decrypt), the
subject and an expiry. It carries no secret of its own; the flow's truth stays in PostgreSQL.

The sealed expiry is Unix seconds derived from the flow's ``expires_at`` (a database timestamp) and
may be checked by any replica, so it is compared with the clock's wall time (``time()``), never its
monotonic time, which has no fixed origin and differs from process to process.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import msgspec

from service.clock import Clock, SystemClock
from service.crypto.aead import Sealer, SealError
from service.errors import InvalidRequestState, RequestStateExpired
from service.flows.schemas import Subject
from service.settings import KeyRing

PURPOSE = "request-state"
# Every resolve opens a state and every create mints one: msgspec rather than ``json`` (the same
# compact text, a third of the time).
_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode
# One sentence for every refusal: naming the reason (another client, another subject) would tell a
# caller something about a state that is not theirs.
_NOT_VALID = "The request state is not valid."


@dataclass(frozen=True, slots=True)
class RequestState:
    flow_id: uuid.UUID
    subject: Subject
    expires_at: int
    # True when this round showed the user the URL; a retry that does not answer it asks again.
    asked: bool


class RequestStateCodec:
    def __init__(self, ring: KeyRing, *, clock: Clock | None = None) -> None:
        self._sealer = Sealer(ring, PURPOSE)
        self._clock: Clock = clock or SystemClock()

    def mint(
        self, *, flow_id: uuid.UUID, server_client_id: uuid.UUID, subject: Subject, expires_at: int, asked: bool
    ) -> str:
        payload = {"f": flow_id.hex, "i": subject.iss, "s": subject.sub, "e": expires_at, "a": asked}
        return self._sealer.seal_token(_encode(payload), server_client_id.bytes)

    def verify(self, token: str, *, server_client_id: uuid.UUID, subject: Subject) -> RequestState:
        """Open and check a state; raise ``InvalidRequestState`` or ``RequestStateExpired``.

        The messages are the same whatever failed (tampering, another client, another subject),
        so a caller learns nothing about states that are not theirs.
        """
        try:
            payload = _decode(self._sealer.open_token(token, server_client_id.bytes))
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
