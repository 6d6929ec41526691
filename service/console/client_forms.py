"""The server-client pages' forms → the admin API's own request bodies.

Each form is turned into the struct the matching admin route takes (``CreateServerClient``,
``UpdateServerClient``, ``RotateKey`` …) with ``msgspec.convert``, so a value the API refuses is
refused here by the same rule; the console only translates the HTML shapes (a list written one
item a line, a limit left empty for "none", a grace period in hours).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec

from service.errors import ElicitdError, InvalidRequest
from service.i18n import _

S = TypeVar("S", bound=msgspec.Struct)

_SPLIT = re.compile(r"[\s,]+")
HOUR = 3600


class Form:
    """A posted form: one value per field, or every value of a repeated one (checkboxes)."""

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        self._pairs = [(k, v) for k, v in pairs if isinstance(v, str)]

    def get(self, name: str) -> str:
        for key, value in self._pairs:
            if key == name:
                return str(value).strip()
        return ""

    def all(self, name: str) -> list[str]:
        return [str(v).strip() for k, v in self._pairs if k == name and str(v).strip()]

    def lines(self, name: str) -> list[str]:
        """A list written one item a line (commas and spaces separate too: no item holds one)."""
        return [item for item in _SPLIT.split(self.get(name)) if item]

    def limit(self, name: str) -> int | str | None:
        """A rate limit: empty is "no limit"; anything else goes to the API's own bounds check."""
        raw = self.get(name)
        if not raw:
            return None
        return int(raw) if raw.isdigit() else raw

    def checked(self, name: str) -> bool:
        return self.get(name) in {"1", "on", "yes"}


@dataclass(frozen=True, slots=True)
class FormError:
    """What a page says when an action was refused: a sentence in the page's language, the
    service's own detail (English, as the API words it) and the field to mark."""

    lead: str
    detail: str | None
    status: int
    field: str | None = None
    code: str | None = None  # the API's problem code (``provider_exists`` …), for the operator to look up


def body(struct: type[S], values: Mapping[str, Any]) -> S:
    """``values`` as the API's request struct: a refused value raises the API's 400."""
    try:
        return msgspec.convert(dict(values), struct)
    except msgspec.ValidationError as exc:
        raise InvalidRequest(str(exc)) from None


def grace_seconds(form: Form, name: str = "grace_hours") -> int | str:
    """Hours on the page, seconds in the API's body (whose bounds then apply)."""
    raw = form.get(name)
    return int(raw) * HOUR if raw.isdigit() else raw


def refused(exc: ElicitdError) -> FormError:
    """The page's account of a refusal; its field from msgspec's ``$.field`` when it names one."""
    match = re.search(r"\$\.([a-z_]+)", exc.detail)
    return FormError(
        lead=_("The change was not made."),
        detail=exc.detail,
        status=exc.status,
        field=match.group(1) if match else None,
        code=exc.problem_code,
    )


def weaker_unconfirmed() -> FormError:
    return FormError(
        lead=_("Confirm the weaker mode: tick the box under the warning to stop requiring subject proof."),
        detail=None,
        status=400,
        field="confirm_weaker",
    )
