"""Rendering a console page: ``render(request, "console/<page>.html", **context)``.

Every console page extends ``console/base.html`` and gets, besides its own context: ``operator``
(the signed-in ``Operator``, or None on the sign-in pages), ``can_operate`` / ``can_admin`` (show
an action's form only when the operator's role may use it), ``csrf_field()`` (the hidden input every
``<form method="post">`` must hold), ``csrf_token``, ``when(datetime)`` (a ``<time>`` element),
``nav`` (every area of the console, the current one marked) and ``area``. The response carries the
console's headers: no caching, the app's CSP (``default-src 'self'``, ``frame-ancestors 'none'``),
no framing, the referrer kept to this origin.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from litestar import Request
from litestar.response import Template

from service.admin.tokens import Role
from service.console.audit import OPERATOR_STATE
from service.console.auth import Operator
from service.i18n import N_, _

ROLE_NAMES = {Role.VIEWER: N_("viewer"), Role.OPERATOR: N_("operator"), Role.ADMIN: N_("admin")}

CONSOLE_HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
}


@dataclass(frozen=True, slots=True)
class NavEntry:
    """One area in the console's navigation: a page module's ``NAV = (order, href, label)``."""

    order: int
    href: str
    label: str  # a msgid (N_), translated when the page renders
    area: str


_nav: list[NavEntry] = []


def set_navigation(entries: Sequence[NavEntry]) -> None:
    """The router's discovery hands over every page module's entry, once, when the app is built."""
    _nav[:] = sorted(entries, key=lambda entry: (entry.order, entry.href))


def navigation() -> list[NavEntry]:
    return list(_nav)


def operator_of(request: Request[Any, Any, Any]) -> Operator | None:
    """The operator the console's guard signed in for this request (None on the public pages)."""
    found: Operator | None = request.scope["state"].get(OPERATOR_STATE)
    return found


def when(value: datetime | None) -> Any:
    """A moment as ``<time datetime="…">2026-12-03 08:14 UTC</time>``; an em dash when unknown."""
    from markupsafe import Markup

    if value is None:
        return Markup("—")
    moment = value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    return Markup('<time datetime="%s">%s</time>') % (
        moment.isoformat(timespec="seconds"),
        moment.strftime("%Y-%m-%d %H:%M UTC"),
    )


def csrf_field_for(operator: Operator | None) -> Any:
    from markupsafe import Markup

    token = "" if operator is None else operator.csrf_token
    return lambda: Markup('<input type="hidden" name="csrf_token" value="%s">') % token


def render(
    request: Request[Any, Any, Any],
    template: str,
    *,
    status: int = 200,
    area: str | None = None,
    headers: dict[str, str] | None = None,
    **context: Any,
) -> Template:
    """The console page ``template`` (under ``service/templates/console/``) with the shared context."""
    operator = operator_of(request)
    shared = {
        "operator": operator,
        "can_operate": operator is not None and operator.can(Role.OPERATOR),
        "can_admin": operator is not None and operator.can(Role.ADMIN),
        "csrf_field": csrf_field_for(operator),
        "csrf_token": "" if operator is None else operator.csrf_token,
        "when": when,
        "role_name": lambda role: _(ROLE_NAMES[Role(role)]),
        "nav": navigation(),
        "area": area,
        "path": request.url.path,
    }
    return Template(
        template_name=template,
        context={**shared, **context},
        status_code=status,
        headers={**CONSOLE_HEADERS, **(headers or {})},
    )
