"""Where a webhook POST may go is decided when it is sent: the worker resolves the host itself,
refuses addresses that are not globally reachable unless the operator allowed them, connects to
the address it checked, and verifies TLS for the name in the URL."""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import ssl
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from sqlalchemy import text

from service.destinations import IPAddress, address_problem, parse_networks
from service.errors import ConfigurationError
from service.settings import Settings
from service.signals.pinned import DestinationRefused, PinnedTransport, SystemResolver
from service.signals.webhooks import WebhookSettings
from tests.admin.conftest import complete_flow, create_flow
from tests.signals.receiver import Receiver, receiving
from tests.signals.test_webhooks import FAST, delivered_row, with_webhook
from tests.support.apps import RunningApp, free_port, running_app
from tests.support.serving import InProcessServer
from tests.support.waiting import until

LOOPBACK = "127.0.0.0/8,::1/128"


def addr(text_: str) -> IPAddress:
    return ipaddress.ip_address(text_)


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("0.0.0.0", "unspecified"),  # noqa: S104 - an address to judge, not one to bind
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("100.64.0.1", "shared (carrier-grade NAT)"),
        ("169.254.169.254", "link-local"),
        ("224.0.0.1", "multicast"),
        ("240.0.0.1", "private"),
        ("255.255.255.255", "private"),
        ("::", "unspecified"),
        ("::1", "loopback"),
        ("fe80::1", "link-local"),
        ("fd00::1", "unique-local"),
        ("fec0::1", "site-local"),
        ("ff02::1", "multicast"),
        ("2001:db8::1", "private"),
        ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped: judged by the IPv4 address
        ("::ffff:10.0.0.1", "private"),
        ("2002:7f00:1::", "loopback"),  # 6to4 of 127.0.0.1
        ("64:ff9b::a9fe:a9fe", "link-local"),  # NAT64 of 169.254.169.254
    ],
)
def test_non_global_addresses_are_refused_by_default(address: str, kind: str) -> None:
    assert address_problem(addr(address)) == f"{addr(address)} is not a public address ({kind})"


@pytest.mark.parametrize("address", ["93.184.215.14", "2606:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"])
def test_global_addresses_pass(address: str) -> None:
    assert address_problem(addr(address)) is None


def test_allowed_networks_let_their_addresses_through_and_nothing_else() -> None:
    allowed = parse_networks("127.0.0.0/8, 10.20.0.0/16,fd00::/8", name="X")
    assert address_problem(addr("127.0.0.1"), allowed) is None
    assert address_problem(addr("::ffff:127.0.0.1"), allowed) is None
    assert address_problem(addr("10.20.3.4"), allowed) is None
    assert address_problem(addr("fd00::5"), allowed) is None
    assert address_problem(addr("10.21.0.1"), allowed) == "10.21.0.1 is not a public address (private)"
    assert address_problem(addr("::1"), allowed) == "::1 is not a public address (loopback)"


def settings_with(make_settings: Callable[..., Settings], **extra: str) -> WebhookSettings:
    return WebhookSettings.from_settings(make_settings(extra=extra))


def test_the_setting_and_its_defaults(make_settings: Callable[..., Settings]) -> None:
    assert settings_with(make_settings, WEBHOOK_ALLOWED_NETWORKS="").allowed_networks == ()
    assert [str(n) for n in settings_with(make_settings, WEBHOOK_ALLOWED_NETWORKS=LOOPBACK).allowed_networks] == [
        "127.0.0.0/8",
        "::1/128",
    ]
    # Unset: nothing outside development, the loopback networks in it.
    assert WebhookSettings.from_settings(make_settings(extra={}).with_(extra={})).allowed_networks == ()
    dev = make_settings(dev_mode=True).with_(extra={})
    assert [str(n) for n in WebhookSettings.from_settings(dev).allowed_networks] == ["127.0.0.0/8", "::1/128"]
    with pytest.raises(ConfigurationError) as bad:
        settings_with(make_settings, WEBHOOK_ALLOWED_NETWORKS="10.0.0.1/8")
    assert str(bad.value).startswith("ELICITD_WEBHOOK_ALLOWED_NETWORKS: '10.0.0.1/8' is not a network")


async def outbox_row(app: RunningApp, flow_id: str) -> Any:
    async with app.state.sessions() as session:
        return (
            await session.execute(
                text("SELECT * FROM webhook_outbox WHERE flow_id = :f"), {"f": uuid.UUID(flow_id[3:])}
            )
        ).one()


async def test_a_name_resolving_to_loopback_is_refused_and_recorded_then_delivered_once_allowed(
    make_settings: Callable[..., Settings],
) -> None:
    """``localhost`` passes the URL rule at registration (http on loopback) but resolves to a
    loopback address at delivery: refused while loopback is not allowed, recorded as a failed
    attempt with the reason, kept, and delivered by an instance that allows it."""
    first = (await SystemResolver().resolve("localhost", 80))[0]
    refusing = make_settings(extra={**FAST, "WEBHOOK_ALLOWED_NETWORKS": ""})
    allowing = make_settings(extra={**FAST, "WEBHOOK_ALLOWED_NETWORKS": LOOPBACK})
    async with receiving() as receiver:
        url = receiver.url.replace("127.0.0.1", "localhost")
        # Verified while loopback was allowed (the challenge goes through the same rule).
        async with running_app(allowing) as app:
            client, _ = await with_webhook(app, url)
        async with running_app(refusing) as app:
            flow_id = await create_flow(app, client)
            assert (await complete_flow(app, client, flow_id)).status_code == 200

            async def refused_twice() -> bool:
                return int((await outbox_row(app, flow_id)).attempts) >= 2

            await until(refused_twice, timeout=30, what="two refused attempts")
            row = await outbox_row(app, flow_id)
            assert receiver.received == []
            assert (row.delivered_at, row.abandoned_at, row.last_status) == (None, None, None)
            assert row.last_error == f"destination refused: {first} is not a public address (loopback)"
        async with running_app(allowing) as app:
            delivered = await delivered_row(app, flow_id)
    assert len(receiver.ok()) == 1
    assert receiver.ok()[0].headers["host"] == url.split("/")[2]
    assert (delivered.last_status, delivered.last_error) == (200, None)


class Answers:
    """A resolver for names that exist nowhere else (``.test`` is reserved): what a DNS server the
    attacker runs could answer. It counts the questions."""

    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers = answers
        self.asked: list[str] = []

    async def resolve(self, host: str, port: int) -> list[IPAddress]:
        self.asked.append(host)
        return [ipaddress.ip_address(a) for a in self.answers[host]]


async def test_the_connection_goes_to_the_address_that_was_checked() -> None:
    """The name exists only in the injected resolver, so a POST that arrives was sent to the
    address the rule passed: the HTTP client never looked the name up itself."""
    answers = Answers({"hooks.example.test": ["10.1.2.3", "127.0.0.1"], "inside.example.test": ["10.1.2.3"]})
    async with receiving() as receiver:
        port = receiver.url.split(":")[2].split("/")[0]
        transport = PinnedTransport(parse_networks("127.0.0.0/8", name="X"), resolver=answers)
        async with httpx.AsyncClient(transport=transport) as http:
            sent = await http.post(f"http://hooks.example.test:{port}/hooks/elicitd", content=b"{}")
            again = await http.post(f"http://hooks.example.test:{port}/hooks/elicitd", content=b"{}")
            with pytest.raises(DestinationRefused) as refused:
                await http.post(f"http://inside.example.test:{port}/hooks/elicitd", content=b"{}")
    assert (sent.status_code, again.status_code) == (200, 200)
    assert [r.headers["host"] for r in receiver.received] == [f"hooks.example.test:{port}"] * 2
    # One lookup per connection (the second POST reused it), none by the HTTP client.
    assert answers.asked == ["hooks.example.test", "inside.example.test"]
    assert refused.value.reason == "10.1.2.3 is not a public address (private)"


def _certificates(directory: Path, name: str) -> tuple[Path, Path, Path]:
    """A CA and a certificate it signed for ``name`` only: (ca, cert, key) PEM files."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "elicitd test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = (directory / "ca.pem", directory / "cert.pem", directory / "key.pem")
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


@contextlib.asynccontextmanager
async def tls_receiving(cert: Path, key: Path) -> AsyncIterator[tuple[Receiver, int]]:
    receiver = Receiver()
    port = free_port()
    server = InProcessServer(
        uvicorn.Config(
            receiver,
            host="127.0.0.1",
            port=port,
            log_config=None,
            access_log=False,
            lifespan="off",
            ssl_certfile=str(cert),
            ssl_keyfile=str(key),
        )
    )
    task = await server.start()
    try:
        yield receiver, port
    finally:
        server.should_exit = True
        with contextlib.suppress(BaseException):
            await task


async def test_https_is_verified_for_the_name_in_the_url_not_for_the_address(tmp_path: Path) -> None:
    """Both names resolve to the receiver's address, whose certificate names only the first. The
    second is refused by TLS verification even with a connection to that address in the pool:
    connections are pooled per name, SNI and the check use the name."""
    ca, cert, key = _certificates(tmp_path, "hooks.example.test")
    trust = ssl.create_default_context(cafile=str(ca))
    answers = Answers({"hooks.example.test": ["127.0.0.1"], "other.example.test": ["127.0.0.1"]})
    async with tls_receiving(cert, key) as (receiver, port):
        transport = PinnedTransport(parse_networks(LOOPBACK, name="X"), resolver=answers, verify=trust)
        async with httpx.AsyncClient(transport=transport) as http:
            sent = await http.post(f"https://hooks.example.test:{port}/hooks/elicitd", content=b"{}")
            with pytest.raises(httpx.ConnectError) as unverified:
                await http.post(f"https://other.example.test:{port}/hooks/elicitd", content=b"{}")
    assert sent.status_code == 200
    assert [r.headers["host"] for r in receiver.received] == [f"hooks.example.test:{port}"]
    assert "CERTIFICATE_VERIFY_FAILED" in str(unverified.value)
    assert answers.asked == ["hooks.example.test", "other.example.test"]
