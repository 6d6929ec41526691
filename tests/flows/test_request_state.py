"""requestState sealing: bound to flow, server client, subject and expiry."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest

from service.errors import InvalidRequestState, RequestStateExpired
from service.flows.request_state import RequestStateCodec
from service.flows.schemas import Subject
from service.settings import KeyRing

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


@pytest.mark.parametrize(
    "mangle",
    [
        lambda t: t[:-2] + ("AA" if t[-2:] != "AA" else "BB"),
        lambda t: t.replace("v1.", "v2.", 1),
        lambda t: "v1.nokey." + t.split(".", 2)[2],
        lambda t: t[:20],
        lambda t: "",
        lambda t: "not-a-state",
        lambda t: "v1.new.!!!!",
    ],
)
def test_tampered_is_rejected(mangle: Callable[[str], str]) -> None:
    codec = RequestStateCodec(RING)
    with pytest.raises(InvalidRequestState):
        codec.verify(mangle(mint(codec)), server_client_id=CLIENT, subject=ALICE)


def test_old_key_still_opens_after_rotation() -> None:
    old_only = RequestStateCodec(KeyRing.parse("old:" + "D" * 43, name="t"))
    token = mint(old_only)
    assert token.startswith("v1.old.")
    rotated = RequestStateCodec(RING)
    assert rotated.verify(token, server_client_id=CLIENT, subject=ALICE).flow_id == uuid.UUID(int=7)
    assert mint(rotated).startswith("v1.new.")


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
