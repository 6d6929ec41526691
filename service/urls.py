"""The one URL rule: every URL elicitd calls, or sends a browser or an MCP client to.

It covers configured and discovered provider and issuer endpoints, completion webhooks, API-key
check URLs, ``external`` flow pages and ``ELICITD_PUBLIC_URL``. A URL passes only when all parsers
that will ever read it must agree on where it leads:

* at most ``MAX_URL_LENGTH`` characters, all of them RFC 3986 characters (printable ASCII without
  space, ``"``, ``<``, ``>``, ``\\``, ``^``, backquote, ``{``, ``|``, ``}``): no control character,
  line break or non-ASCII letter whose meaning depends on who reads it;
* every ``%`` starts a valid escape (``%zz`` is refused);
* ``https``, or ``http`` only on loopback (``service.loopback``, decided on the parsed host);
* no user name or password;
* a host that is a DNS name (labels of letters, digits and inner hyphens, at most 253
  characters, no trailing dot), a dotted IPv4 address or a bracketed IPv6 address without zone;
* a port, when given, from 1 to 65535;
* no fragment unless the caller allows one (a page may have one; an endpoint never does).
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import SplitResult, urlsplit

from service.loopback import is_loopback_url

MAX_URL_LENGTH = 2048

_URL_CHARS = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+")
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")
_DOTTED = re.compile(r"[0-9.]+")


class UrlRejected(ValueError):
    """``str(error)`` says why, in words fit for an error body (it never repeats the URL)."""


def _host_problem(host: str) -> str | None:
    if host.startswith("["):
        try:
            address = ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return "its IPv6 address is not valid"
        return "an IPv6 zone is not allowed" if address.scope_id else None
    if _DOTTED.fullmatch(host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return "its IPv4 address is not valid"
        return None
    if len(host) > 253 or not all(_LABEL.fullmatch(label) for label in host.split(".")):
        return "its host is not a valid DNS name"
    return None


def _text_problem(url: str) -> str | None:
    if not url:
        return "it is empty"
    if len(url) > MAX_URL_LENGTH:
        return f"it is longer than {MAX_URL_LENGTH} characters"
    if not _URL_CHARS.fullmatch(url):
        return "it contains characters a URL may not contain (spaces, control characters, non-ASCII …)"
    if _BAD_ESCAPE.search(url):
        return "it contains an invalid percent escape"
    return None


def _authority_problem(url: str, parts: SplitResult) -> str | None:
    try:
        port = parts.port
    except ValueError:
        return "its port is not valid"
    if "@" in parts.netloc:
        return "it must not carry a user name or password"
    netloc = parts.netloc.lower()
    host = netloc if netloc.endswith("]") else netloc.rsplit(":", 1)[0]
    if not host:
        return "it has no host"
    if port == 0 or (port is None and netloc.endswith(":")):
        return "its port is not valid"
    problem = _host_problem(host)
    if problem is None and parts.scheme.lower() == "http" and not is_loopback_url(url):
        problem = "it must use https (http is allowed only on loopback)"
    return problem


def url_problem(url: str, *, fragment: bool = False, query: bool = True) -> str | None:
    """Why ``url`` breaks the rule, or None when it keeps it. Each part is checked in turn."""
    problem = _text_problem(url)
    if problem is not None:
        return problem
    try:
        parts = urlsplit(url)
    except ValueError:
        return "it cannot be parsed (a bracket or the host is malformed)"
    if parts.scheme.lower() not in {"https", "http"}:
        problem = "it must be an https URL"
    elif not fragment and "#" in url:
        problem = "it must not have a fragment"
    elif not query and "?" in url:
        problem = "it must not have a query"
    return problem or _authority_problem(url, parts)


def check_url(url: str, *, fragment: bool = False, query: bool = True) -> str:
    """``url`` unchanged when it keeps the rule; ``UrlRejected`` saying why otherwise."""
    problem = url_problem(url, fragment=fragment, query=query)
    if problem is not None:
        raise UrlRejected(problem)
    return url


def is_https_or_loopback_http(url: str) -> bool:
    return url_problem(url, fragment=True) is None
