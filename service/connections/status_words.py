"""A connection's health in a person's words (``/me``): a short status and, when it is not
healthy, why — never a raw error code, which means nothing to the person who must act on it."""

from __future__ import annotations

from service.connections.models import EXPIRING, HEALTHY, NEEDS_REAUTHORIZATION
from service.i18n import N_, _

_ENDS_SOON = N_("The access %(provider)s gave ends soon. Reconnect to keep it working.")
_ENDED = N_("The access %(provider)s gave has ended.")
_REFUSED = N_(
    "%(provider)s no longer accepts this connection: it may have been removed there, or your password changed."
)
# Each health reason (``service.connections.health``, ``probes``) a person may meet on ``/me``.
_REASONS = {
    "refresh_token_expiring": _ENDS_SOON,
    "access_token_expiring": _ENDS_SOON,
    "refresh_token_expired": _ENDED,
    "access_token_expired": _ENDED,
    "account_changed": N_("%(provider)s now answers for a different account than the one you connected."),
    "invalid_grant": _REFUSED,
    "probe_unauthorized": _REFUSED,
    "probe_forbidden": _REFUSED,
    "provider_refused": _REFUSED,
}


def status_label(health: str) -> str:
    if health == HEALTHY:
        return _("Working")
    if health == EXPIRING:
        return _("Stops working soon")
    if health == NEEDS_REAUTHORIZATION:
        return _("Needs to be connected again")
    return _("Disconnected")


def status_reason(health: str, reason: str | None, provider: str) -> str | None:
    """Why the connection is not healthy, naming the provider (already isolated for the page)."""
    if health == HEALTHY:
        return None
    words = _REASONS.get(reason or "")
    if words is not None:
        return _(words, provider=provider)
    if health == NEEDS_REAUTHORIZATION:
        return _("%(provider)s no longer accepts this connection.", provider=provider)
    return None
