"""The address of a person's own page, ``/me?iss=<issuer>``, as a sign-in may return to it.

A sign-in returns only to a path of this origin that names what it signs in for: a flow page, or
the own page of the issuer's users. The issuer travels in the query, so the value is parsed, checked
against the URL rule (an issuer identifier: https, or http on loopback, no query, no fragment) and
written back in one canonical form; anything else is not a return address (no open redirect: the
result always starts with ``/me?iss=`` and its only parameter is percent-encoded).
"""

from __future__ import annotations

from urllib.parse import parse_qsl, quote, urlsplit

from service.urls import url_problem

ME_PATH = "/me"
MAX_ISSUER_LENGTH = 512


def me_path(issuer: str) -> str:
    return f"{ME_PATH}?iss={quote(issuer, safe='')}"


def me_issuer(value: str | None) -> str | None:
    """The issuer of a ``/me?iss=…`` return address, or None when ``value`` is not exactly one."""
    if value is None or len(value) > 2 * 3 * MAX_ISSUER_LENGTH:
        return None
    try:
        parts = urlsplit(value)
        pairs = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        return None
    if parts.scheme or parts.netloc or parts.path != ME_PATH or parts.fragment or "#" in value:
        return None
    if len(pairs) != 1 or pairs[0][0] != "iss":
        return None
    issuer = pairs[0][1]
    if len(issuer) > MAX_ISSUER_LENGTH or url_problem(issuer, query=False) is not None:
        return None
    return issuer


def safe_me_path(value: str | None) -> str | None:
    """``value`` in its canonical form when it is a ``/me?iss=…`` return address, else None."""
    issuer = me_issuer(value)
    return None if issuer is None else me_path(issuer)
