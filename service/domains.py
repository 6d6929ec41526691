"""Domains as a person should read them on elicitd's pages, look-alikes included.

A host may be written with letters of any script (``apple.example`` spelt with a Cyrillic a,
U+0430); on the wire it is its ASCII (punycode) form, ``xn--pple-43d.example``. A page that names
a domain (its own origin, the provider the person is about to sign in at, the page an
``external`` flow continues on) shows the Unicode form, which is what a browser may show in its
address bar, and, when the host has any non-ASCII label, the ASCII form beside it: the two
differ exactly when letters can pass for others, and the ASCII form cannot.
"""

from __future__ import annotations

from urllib.parse import urlsplit


def _label_forms(label: str) -> tuple[str, str]:
    """``(ascii, unicode)`` of one label; a label that does not convert stays as it is."""
    try:
        if label.isascii():
            if label.startswith("xn--"):
                return label, label.encode("ascii").decode("idna")
            return label, label
        return label.encode("idna").decode("ascii"), label
    except UnicodeError:
        return label, label


def host_forms(host: str) -> tuple[str, str]:
    """``(ascii, unicode)`` forms of ``host`` (lowercase; IP addresses and bad labels unchanged)."""
    labels = [_label_forms(label) for label in host.lower().split(".")]
    return ".".join(a for a, _ in labels), ".".join(u for _, u in labels)


def display_host(host: str) -> str:
    """``host``, or ``unicode (ascii)`` when it has a non-ASCII label."""
    ascii_form, unicode_form = host_forms(host)
    return unicode_form if ascii_form == unicode_form else f"{unicode_form} ({ascii_form})"


def display_url_host(url: str) -> str:
    """The host of ``url`` for display (empty when it has none)."""
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return ""
    return display_host(host) if host else ""


def display_origin(url: str) -> str:
    """``scheme://host[:port]`` of ``url``, with the ASCII form of a non-ASCII host beside it."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    ascii_form, unicode_form = host_forms(host)
    port = f":{parts.port}" if parts.port is not None else ""
    shown = f"{parts.scheme}://{unicode_form}{port}"
    return shown if ascii_form == unicode_form else f"{shown} ({ascii_form})"
