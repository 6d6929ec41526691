"""The claim → role mapping of an issuer marked for operator sign-in."""

from __future__ import annotations

from service.admin.tokens import Role
from service.operators.roles import OperatorSignIn, claim_values, role_for

SIGNIN = OperatorSignIn(
    issuer="https://id.example.com",
    client_id="elicitd-console",
    client_secret_env=None,
    role_claim="groups",
    roles={
        Role.VIEWER: frozenset({"support"}),
        Role.OPERATOR: frozenset({"oncall"}),
        Role.ADMIN: frozenset({"platform", "owners"}),
    },
)


def test_the_highest_role_whose_values_meet_the_claim() -> None:
    assert role_for({"groups": ["support"]}, SIGNIN) is Role.VIEWER
    assert role_for({"groups": ["support", "oncall"]}, SIGNIN) is Role.OPERATOR
    assert role_for({"groups": ["oncall", "owners", "support"]}, SIGNIN) is Role.ADMIN
    assert role_for({"groups": "platform"}, SIGNIN) is Role.ADMIN
    assert role_for({"groups": ("oncall",)}, SIGNIN) is Role.OPERATOR


def test_no_matching_value_no_claim_or_a_strange_claim_is_no_access() -> None:
    assert role_for({"groups": ["marketing"]}, SIGNIN) is None
    assert role_for({"groups": []}, SIGNIN) is None
    assert role_for({}, SIGNIN) is None
    assert role_for({"roles": ["platform"]}, SIGNIN) is None  # another claim than the one named
    assert role_for({"groups": {"platform": True}}, SIGNIN) is None
    assert role_for({"groups": 3}, SIGNIN) is None
    assert role_for({"groups": [["platform"], 7, None]}, SIGNIN) is None
    # One string is one value: a space-separated string is not split into roles.
    assert role_for({"groups": "support platform"}, SIGNIN) is None


def test_a_role_with_no_values_is_never_granted() -> None:
    only_admins = OperatorSignIn(
        issuer=SIGNIN.issuer,
        client_id=SIGNIN.client_id,
        client_secret_env="CONSOLE_SECRET",
        role_claim="roles",
        roles={Role.ADMIN: frozenset({"admin"}), Role.VIEWER: frozenset()},
    )
    assert role_for({"roles": ["admin"]}, only_admins) is Role.ADMIN
    assert role_for({"roles": ["viewer"]}, only_admins) is None
    assert role_for({"roles": [""]}, only_admins) is None


def test_claim_values() -> None:
    assert claim_values({"g": "a"}, "g") == frozenset({"a"})
    assert claim_values({"g": ["a", 1, "b", "a"]}, "g") == frozenset({"a", "b"})
    assert claim_values({"g": None}, "g") == frozenset()
