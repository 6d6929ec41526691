"""The problem+json shape of elicitd's own errors."""

from __future__ import annotations

from service.errors import Forbidden


def test_a_precise_code_names_the_problem_type_too() -> None:
    problem = Forbidden("No.", extra={"code": "provider_not_allowed", "provider": "x"}).problem()
    assert problem == {
        "type": "https://elicitd.dev/problems/provider_not_allowed",
        "title": "Forbidden",
        "status": 403,
        "code": "provider_not_allowed",
        "detail": "No.",
        "provider": "x",
    }
    assert Forbidden("No.").problem()["type"] == "https://elicitd.dev/problems/forbidden"
