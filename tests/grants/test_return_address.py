"""A sign-in may return to the own page ``/me?iss=<issuer>`` — in one canonical form, and nothing
that merely looks like it: the result always starts with ``/me?iss=`` and is this origin's."""

from __future__ import annotations

import pytest

from service.signin.account_page import me_issuer, me_path, safe_me_path
from service.signin.gate import safe_return_to

ISSUER = "https://id.example.com/realms/main"
CANONICAL = "/me?iss=https%3A%2F%2Fid.example.com%2Frealms%2Fmain"


def test_the_own_page_is_a_return_address_in_one_form() -> None:
    assert me_path(ISSUER) == CANONICAL
    assert me_issuer(CANONICAL) == ISSUER
    # However the issuer arrives encoded (a query decoded once on the way, say), it comes back canonical.
    assert safe_me_path("/me?iss=https://id.example.com/realms/main") == CANONICAL
    assert safe_return_to(CANONICAL) == CANONICAL
    assert safe_return_to("/me?iss=http%3A%2F%2F127.0.0.1%3A9000") == "/me?iss=http%3A%2F%2F127.0.0.1%3A9000"
    flow = "/f/fl_" + "0" * 32
    assert safe_return_to(flow) == flow


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "/me",  # which issuer? the page asks; a sign-in cannot start without one
        "//evil.example/me?iss=https%3A%2F%2Fid.example.com",
        "https://evil.example/me?iss=https%3A%2F%2Fid.example.com",
        "/me/?iss=https%3A%2F%2Fid.example.com",
        "/me?iss=https%3A%2F%2Fid.example.com&next=https%3A%2F%2Fevil.example",
        "/me?iss=https%3A%2F%2Fid.example.com#frag",
        "/me?iss=javascript%3Aalert(1)",
        "/me?iss=http%3A%2F%2Fid.example.com",  # plain http only on loopback
        "/me?iss=https%3A%2F%2Fuser%3Apass%40id.example.com",
        "/me?iss=https%3A%2F%2Fid.example.com%3Fa%3Db",  # an issuer has no query
        "/me?iss=https%3A%2F%2Fid.example.com%0d%0aSet-Cookie%3A%20x",
        "/me?iss=" + "a" * 5000,
        "/me?ISS=https%3A%2F%2Fid.example.com",
        "/me?iss=https%3A%2F%2Fid.example.com&iss=https%3A%2F%2Fevil.example",
        "/f/fl_" + "0" * 31,
    ],
)
def test_anything_else_is_not(value: str | None) -> None:
    assert safe_return_to(value) is None
    assert me_issuer(value) is None
