"""The one loopback rule: which addresses may be reached over plain ``http``.

Every setting, provider, issuer, webhook and page URL that allows ``http`` allows it only here, so
this is the single place that decides it (``service.urls`` holds the rest of the URL rule). The
host is compared after parsing, never as a string prefix: ``http://127.0.0.1.evil.example/`` is a public name and ``http://localhost@evil.example/``
is ``evil.example`` with a user name. Loopback is ``localhost`` exactly, an IPv4 address in
``127.0.0.0/8`` or ``::1`` — nothing that needs a resolver to decide (``localhost.`` or
``127.1`` are refused rather than guessed about).

A URL that carries credentials or characters parsers disagree about (a backslash, whitespace,
control characters) is never loopback: Python, httpx and browsers could each see a different host
in it, and the one that matters is the one that connects.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

_LOOPBACK_V4 = ipaddress.IPv4Network("127.0.0.0/8")
_LOOPBACK_V6 = ipaddress.IPv6Address("::1")
# The same addresses as networks, for the address rule (``service.destinations``) to allow in development.
LOOPBACK_NETWORKS: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = (
    _LOOPBACK_V4,
    ipaddress.IPv6Network("::1/128"),
)


def is_loopback_host(host: str) -> bool:
    """``host`` as ``urlsplit(...).hostname`` gives it (lowercased, IPv6 without brackets)."""
    if host.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv4Address):
        return address in _LOOPBACK_V4
    return address == _LOOPBACK_V6


def is_loopback_url(url: str) -> bool:
    """Whether ``url`` names a loopback host (and nothing ambiguous besides)."""
    if any(c == "\\" or c.isspace() or not c.isprintable() for c in url):
        return False
    try:
        parts = urlsplit(url)
        host = parts.hostname
        _ = parts.port  # a port that is not a number makes the whole authority suspect
    except ValueError:
        return False
    if host is None or parts.username is not None or parts.password is not None:
        return False
    return is_loopback_host(host)
