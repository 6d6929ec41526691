"""What the server-client pages share (``pages_clients``, ``pages_client_webhooks``): how a page is
answered, how a refused action reads, and the one page a secret is ever on.

A secret (an API key, a webhook signing secret) is on the answer to the POST that made it and
nowhere else: that page is ``Cache-Control: no-store``, is never a redirect's target, and no other
page, log line or audit row holds it. Every other action answers with a redirect (303) to the page
it changed, so reloading that page repeats nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime
from typing import Any, TypeVar

from litestar import Request
from litestar.response import Redirect, Template

from service.admin.deps import ADMIN
from service.admin.schemas import ServerClientView
from service.console.client_forms import Form, FormError, refused
from service.console.render import render
from service.errors import ElicitdError
from service.i18n import N_, _
from service.signals.webhooks import WEBHOOK_EVENT_TYPES

T = TypeVar("T")

AREA = "clients"
# A change that needs the admin role also needs a recent sign-in (the guard's max_age check).
ADMIN_CHANGE = {**ADMIN, "fresh": True}
NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}
PAGE = 50

_STATES = {
    "pending": N_("Pending"),
    "in_flight": N_("In flight"),
    "delivered": N_("Delivered"),
    "abandoned": N_("Abandoned"),
    "active": N_("Active"),
    "pending_verification": N_("Waiting for verification"),
    "suspended": N_("Suspended"),
    "disabled": N_("Disabled"),
}
_NOTICES = {
    "disabled": N_("The server client is disabled: its API keys no longer authenticate."),
    "enabled": N_("The server client is enabled again."),
    "saved": N_("The change is saved."),
    "replayed": N_("The delivery is queued again."),
    "endpoint_saved": N_("The endpoint is saved."),
    "endpoint_enabled": N_("The endpoint is enabled; it must answer the verification challenge again."),
    "endpoint_disabled": N_("The endpoint is disabled; its queued deliveries are held."),
    "endpoint_deleted": N_("The endpoint and its queued deliveries are deleted."),
}


def _state_label(state: str) -> str:
    return _(_STATES[state]) if state in _STATES else state


def page(
    template: str,
    request: Request[Any, Any, Any],
    *,
    status: int = 200,
    headers: dict[str, str] | None = None,
    **context: Any,
) -> Template:
    """``template`` in the console's frame (``service.console.render``: the operator, whether they
    may act, the CSRF field, dates), with the state words and event types these pages use."""
    return render(
        request,
        template,
        status=status,
        area=AREA,
        headers=headers,
        state_label=_state_label,
        event_types=WEBHOOK_EVENT_TYPES,
        **context,
    )


def notice(done: str | None) -> str | None:
    """The sentence a redirect after an action asks for (``?done=…``): only known ones."""
    return _(_NOTICES[done]) if done in _NOTICES else None


async def form_of(request: Request[Any, Any, Any]) -> Form:
    return Form(list((await request.form()).multi_items()))


async def attempt(action: Callable[[], Awaitable[T]]) -> T | FormError:
    """What ``action`` returns, or the page's account of the service's refusal."""
    try:
        return await action()
    except ElicitdError as exc:
        return refused(exc)


def redirect(path: str, done: str) -> Redirect:
    return Redirect(f"{path}?done={done}", status_code=303)


def missing(request: Request[Any, Any, Any], error: FormError) -> Template:
    """A page whose subject could not be read (an unknown id, a cursor this page never made)."""
    lead = _("Nothing has this id.") if error.status == 404 else _("This page could not be shown.")
    return page("console/clients_missing.html", request, status=error.status, error=replace(error, lead=lead))


def secret_page(
    request: Request[Any, Any, Any],
    *,
    client: ServerClientView,
    secret: str,
    heading: str,
    secret_label: str,
    endpoint: Any = None,
    old_keys_expire_at: datetime | None = None,
) -> Template:
    """The one page a secret is on: the answer to its POST, never stored by the browser."""
    back = f"/console/webhook-endpoints/{endpoint.id}" if endpoint is not None else f"/console/clients/{client.id}"
    return page(
        "console/clients_secret.html",
        request,
        headers=NO_STORE,
        client=client,
        secret=secret,
        heading=heading,
        secret_label=secret_label,
        endpoint=endpoint,
        old_keys_expire_at=old_keys_expire_at,
        back_href=back,
        back_label=_("Back to the endpoint") if endpoint is not None else _("Back to the server client"),
    )
