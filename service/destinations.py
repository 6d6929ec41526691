"""The one address rule: which IP addresses elicitd may connect to when it calls a URL someone else
registered (a completion webhook).

A name that resolved to a public address when it was registered can resolve to ``127.0.0.1`` or
``169.254.169.254`` at delivery (DNS rebinding), so the rule is applied to every address the name
resolves to at the moment of connecting, and the connection goes to the address that passed
(``service.signals.pinned``). An address passes when it is globally reachable or lies in a network
the operator allowed (``ELICITD_WEBHOOK_ALLOWED_NETWORKS``; with ``ELICITD_DEV`` on and the
variable unset, the loopback networks that ``service.loopback`` already allows plain ``http`` on).

Refused unless allowed: unspecified, loopback, private (RFC 1918 and the other special-purpose
blocks Python's ``ipaddress`` lists), shared (100.64.0.0/10), link-local, unique-local, site-local,
multicast, reserved and anything else not globally reachable, in IPv4 and IPv6. An IPv6 address
that carries an IPv4 one (IPv4-mapped ``::ffff:a.b.c.d``, 6to4 ``2002::/16``, NAT64
``64:ff9b::/96``) is judged by the IPv4 address it leads to, so ``::ffff:127.0.0.1`` is loopback.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from service.errors import ConfigurationError
from service.loopback import LOOPBACK_NETWORKS

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_SHARED = ipaddress.IPv4Network("100.64.0.0/10")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_UNIQUE_LOCAL = ipaddress.IPv6Network("fc00::/7")


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one leads to (mapped, 6to4 or NAT64), if any."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _kind(address: IPAddress) -> str | None:
    """What makes ``address`` non-global, in words; None for a global unicast address."""
    checks: tuple[tuple[bool, str], ...] = (
        (address.is_unspecified, "unspecified"),
        (address.is_loopback, "loopback"),
        (address.is_link_local, "link-local"),
        (address.is_multicast, "multicast"),
        (isinstance(address, ipaddress.IPv6Address) and address in _UNIQUE_LOCAL, "unique-local"),
        (isinstance(address, ipaddress.IPv6Address) and address.is_site_local, "site-local"),
        (isinstance(address, ipaddress.IPv4Address) and address in _SHARED, "shared (carrier-grade NAT)"),
        (address.is_private, "private"),
        (address.is_reserved, "reserved"),
        (not address.is_global, "not globally reachable"),
    )
    return next((kind for found, kind in checks if found), None)


def address_problem(address: IPAddress, allowed: Iterable[IPNetwork] = ()) -> str | None:
    """Why elicitd must not connect to ``address``, or None when it may. The reason names the
    address and its kind, never a host name or URL (those may carry a secret path)."""
    inner = embedded_ipv4(address)
    candidates = (address,) if inner is None else (address, inner)
    networks = tuple(allowed)
    if any(candidate in network for candidate in candidates for network in networks):
        return None
    # The IPv4 address an IPv6 one leads to decides: ::ffff:10.0.0.1 is private, 2002:0808:0808:: is not.
    judged = candidates[-1]
    kind = _kind(judged)
    if kind is None:
        return None
    return f"{address} is not a public address ({kind})"


def parse_networks(raw: str, *, name: str) -> tuple[IPNetwork, ...]:
    """``10.20.0.0/16,fd00::/8,192.0.2.7`` (an address alone is a one-address network)."""
    networks: list[IPNetwork] = []
    for part in (p.strip() for p in raw.split(",")):
        if not part:
            continue
        try:
            networks.append(ipaddress.ip_network(part, strict=True))
        except ValueError:
            raise ConfigurationError(
                f"{name}: {part!r} is not a network such as 10.0.0.0/8, fd00::/8 or 127.0.0.1 (host bits must be zero)"
            ) from None
    return tuple(networks)


def default_networks(*, dev_mode: bool) -> tuple[IPNetwork, ...]:
    """What is allowed when the operator named nothing: loopback in development, else nothing."""
    return LOOPBACK_NETWORKS if dev_mode else ()
