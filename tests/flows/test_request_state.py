"""requestState sealing: bound to flow, server client, subject and expiry, under a key per hour."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import msgspec
import pytest

from service.crypto.aead import Sealer
from service.errors import InvalidRequestState, RequestStateExpired
from service.flows.request_state import PERIOD_SECONDS, PURPOSE, RequestStateCodec
from service.flows.schemas import Subject
from service.settings import KeyRing
from tests.support.clock import ManualClock

RING = KeyRing.parse("new:" + "C" * 43 + ",old:" + "D" * 43, name="t")
ALICE = Subject(iss="https://id.example.com", sub="alice")
CLIENT = uuid.uuid4()


def mint(codec: RequestStateCodec, *, expires_at: int | None = None) -> str:
    return codec.mint(
        flow_id=uuid.UUID(int=7),
        server_client_id=CLIENT,
        subject=ALICE,
        expires_at=int(time.time()) + 60 if expires_at is None else expires_at,
        asked=True,
    )


def test_round_trip() -> None:
    codec = RequestStateCodec(RING)
    state = codec.verify(mint(codec), server_client_id=CLIENT, subject=ALICE)
    assert state.flow_id == uuid.UUID(int=7)
    assert state.subject == ALICE
    assert state.asked is True


def test_other_server_client_is_rejected() -> None:
    codec = RequestStateCodec(RING)
    with pytest.raises(InvalidRequestState):
        codec.verify(mint(codec), server_client_id=uuid.uuid4(), subject=ALICE)


def test_other_subject_is_rejected() -> None:
    codec = RequestStateCodec(RING)
    with pytest.raises(InvalidRequestState):
        codec.verify(mint(codec), server_client_id=CLIENT, subject=Subject(iss=ALICE.iss, sub="mallory"))
    with pytest.raises(InvalidRequestState):
        codec.verify(mint(codec), server_client_id=CLIENT, subject=Subject(iss="https://evil.example", sub="alice"))


def test_expired_is_rejected() -> None:
    codec = RequestStateCodec(RING)
    token = mint(codec, expires_at=int(time.time()) - 1)
    with pytest.raises(RequestStateExpired):
        codec.verify(token, server_client_id=CLIENT, subject=ALICE)


def with_period(token: str, change: Callable[[str], str]) -> str:
    version, kid, period, body = token.split(".")
    return ".".join((version, kid, change(period), body))


@pytest.mark.parametrize(
    "mangle",
    [
        lambda t: t[:-2] + ("AA" if t[-2:] != "AA" else "BB"),
        lambda t: t.replace("v2.", "v3.", 1),
        lambda t: t.replace("v2.", "v1.", 1),
        lambda t: "v2.nokey." + t.split(".", 2)[2],
        lambda t: with_period(t, lambda p: str(int(p) + 1)),  # another hour: another key
        lambda t: with_period(t, lambda p: str(int(p) - 1)),
        lambda t: with_period(t, lambda p: "0" + p),  # the same hour spelt otherwise
        lambda t: with_period(t, lambda p: "+" + p),
        lambda t: with_period(t, lambda p: ""),
        lambda t: with_period(t, lambda p: "9" * 11),
        lambda t: t.replace(".", "..", 1),
        lambda t: t[:20],
        lambda t: "",
        lambda t: "not-a-state",
        lambda t: "v2.new.1.!!!!",
        lambda t: "v2.new.1.AAAA",
    ],
)
def test_tampered_is_rejected(mangle: Callable[[str], str]) -> None:
    codec = RequestStateCodec(RING)
    with pytest.raises(InvalidRequestState):
        codec.verify(mangle(mint(codec)), server_client_id=CLIENT, subject=ALICE)


def test_old_key_still_opens_after_rotation() -> None:
    old_only = RequestStateCodec(KeyRing.parse("old:" + "D" * 43, name="t"))
    token = mint(old_only)
    assert token.startswith("v2.old.")
    rotated = RequestStateCodec(RING)
    assert rotated.verify(token, server_client_id=CLIENT, subject=ALICE).flow_id == uuid.UUID(int=7)
    assert mint(rotated).startswith("v2.new.")


def test_each_hour_seals_under_its_own_key_and_every_hour_still_opens() -> None:
    """The nonce budget is per hour: a state names the hour it was sealed in, a state of any past
    hour opens (until its own expiry), and the same bytes under another hour's name do not."""
    clock = ManualClock(wall=1_800_000_000.0)
    codec = RequestStateCodec(RING, clock=clock)
    expires_at = int(clock.time()) + 3 * PERIOD_SECONDS
    first = mint(codec, expires_at=expires_at)
    clock.advance(PERIOD_SECONDS)
    second = mint(codec, expires_at=expires_at)
    hours = [token.split(".")[2] for token in (first, second)]
    assert hours == [str(1_800_000_000 // PERIOD_SECONDS), str(1_800_000_000 // PERIOD_SECONDS + 1)]
    clock.advance(PERIOD_SECONDS)
    for token in (first, second):
        assert codec.verify(token, server_client_id=CLIENT, subject=ALICE).flow_id == uuid.UUID(int=7)
    moved = with_period(first, lambda p: hours[1])
    with pytest.raises(InvalidRequestState):
        codec.verify(moved, server_client_id=CLIENT, subject=ALICE)


def v1_state(ring: KeyRing, *, expires_at: int) -> str:
    """A state as elicitd sealed it before the hourly keys: AES-GCM under the purpose key."""
    payload = {"f": uuid.UUID(int=7).hex, "i": ALICE.iss, "s": ALICE.sub, "e": expires_at, "a": True}
    return Sealer(ring, PURPOSE).seal_token(msgspec.json.encode(payload), CLIENT.bytes)


def test_a_state_sealed_before_the_hourly_keys_opens_until_it_expires() -> None:
    """Flows in progress at the upgrade finish: their ``v1.`` states still open (new ones are never
    sealed that way), expire as before, and are refused when altered."""
    codec = RequestStateCodec(RING)
    old = v1_state(RING, expires_at=int(time.time()) + 60)
    assert old.startswith("v1.new.")
    state = codec.verify(old, server_client_id=CLIENT, subject=ALICE)
    assert (state.flow_id, state.subject, state.asked) == (uuid.UUID(int=7), ALICE, True)
    assert mint(codec).startswith("v2.new.")
    with pytest.raises(InvalidRequestState):
        codec.verify(old[:-2] + ("AA" if old[-2:] != "AA" else "BB"), server_client_id=CLIENT, subject=ALICE)
    with pytest.raises(InvalidRequestState):
        codec.verify(old, server_client_id=uuid.uuid4(), subject=ALICE)
    with pytest.raises(RequestStateExpired):
        codec.verify(v1_state(RING, expires_at=int(time.time()) - 1), server_client_id=CLIENT, subject=ALICE)


def test_every_refusal_says_the_same_thing() -> None:
    """Another client, another subject, another issuer or tampering: one message, so a caller
    cannot tell a state that is someone else's from a broken one."""
    codec = RequestStateCodec(RING)
    token = mint(codec)
    attempts: list[tuple[str, uuid.UUID, Subject]] = [
        (token, uuid.uuid4(), ALICE),
        (token, CLIENT, Subject(iss=ALICE.iss, sub="mallory")),
        (token, CLIENT, Subject(iss="https://evil.example", sub="alice")),
        (token[:-2] + ("AA" if token[-2:] != "AA" else "BB"), CLIENT, ALICE),
        ("not-a-state", CLIENT, ALICE),
    ]
    details = set()
    for candidate, client, subject in attempts:
        with pytest.raises(InvalidRequestState) as refused:
            codec.verify(candidate, server_client_id=client, subject=subject)
        details.add(refused.value.detail)
    assert details == {"The request state is not valid."}
