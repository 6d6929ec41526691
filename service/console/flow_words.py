"""The words the Flows and People pages show for stable codes: flow states, kinds, which side caused
an event, connection health, and why a tool call fails; and the time windows the Flows and Audit
searches offer.

Codes stay the API's (an operator can search the docs and the API for them); the page shows the
sentence in its language next to the code. An unknown code is shown as itself, never hidden.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from service.errors import ElicitdError
from service.i18n import N_, _

STATES = {
    "pending": N_("Pending"),
    "completed": N_("Completed"),
    "declined": N_("Declined"),
    "cancelled": N_("Cancelled"),
    "expired": N_("Expired"),
    "failed": N_("Failed"),
}

KINDS = {
    "oauth_connect": N_("Connect an account"),
    "api_key": N_("Enter an API key"),
    "consent": N_("Consent"),
    "payment": N_("Payment"),
    "external": N_("External step"),
}

# ``flow_events.actor``: which side caused the event.
SIDES = {
    "api": N_("Server (API)"),
    "mcp_client": N_("MCP client"),
    "browser": N_("Person, in the browser"),
    "provider": N_("Provider"),
    "sweeper": N_("elicitd (expiry)"),
    "admin": N_("Operator"),
}

HEALTH = {
    "healthy": N_("Healthy"),
    "expiring": N_("Expiring"),
    "needs_reauthorization": N_("Needs reauthorization"),
    "revoked": N_("Revoked"),
}

CONNECTION_STATES = {
    "active": N_("Active"),
    "reauthorization_required": N_("Reauthorization required"),
    "revoked": N_("Revoked"),
}

# A diagnosis finding's code (``service.admin.diagnosis``) → what the operator reads.
FINDINGS = {
    "not_connected": N_("The person has no connection here: a tool's next call starts a connect."),
    "connection_revoked": N_("The connection was revoked: the person must connect again."),
    "not_granted": N_(
        "The server client holds no live grant on this connection, so the token endpoint answers not_connected."
    ),
    "reauthorization_required": N_("No authorization of this connection works any more: the person must reconnect."),
    "expiring": N_("The connection still works, but expires soon."),
    "flow_pending": N_("The latest flow still waits for the person in the browser."),
    "last_flow_failed": N_("The latest flow failed."),
    "last_flow_declined": N_("The person declined the latest flow."),
    "last_flow_expired": N_("The latest flow expired before the person finished it."),
    "last_flow_cancelled": N_("The latest flow was cancelled."),
    "client_disabled": N_("The server client is disabled: its API key is refused."),
    "provider_not_allowed": N_("The server client may not use this provider."),
    "issuer_not_trusted": N_("The server client does not trust the person's issuer."),
    "no_problem_found": N_("Nothing here stops a token: the connection is live and granted."),
}
GOOD_FINDINGS = frozenset({"no_problem_found"})

# The windows a search offers, by their query value; "all" sets no lower bound.
WINDOWS = {
    "1h": (timedelta(hours=1), N_("Last hour")),
    "24h": (timedelta(hours=24), N_("Last 24 hours")),
    "7d": (timedelta(days=7), N_("Last 7 days")),
    "30d": (timedelta(days=30), N_("Last 30 days")),
    "all": (None, N_("Any time")),
}


def word(table: dict[str, str], code: str | None) -> str:
    """``code``'s words in the page's language; the code itself when the table has none."""
    if code is None:
        return ""
    return _(table[code]) if code in table else code


def finding_text(finding: Any) -> str:
    """A finding's sentence: the page's words for its code, else the diagnosis' own (English)."""
    return _(FINDINGS[finding.code]) if finding.code in FINDINGS else str(finding.detail)


def refusal(refused: dict[str, str], exc: ElicitdError) -> dict[str, Any]:
    """A refused request as a page shows it: the page's sentence for the code (``refused``, else a
    general one), the error's own detail and the code."""
    lead = refused.get(exc.problem_code, N_("The request was refused."))
    return {"lead": _(lead), "detail": exc.detail, "code": exc.problem_code}


def template_words() -> dict[str, Any]:
    """The helpers both pages' templates use."""
    return {
        "state_word": lambda code: word(STATES, code),
        "kind_word": lambda code: word(KINDS, code),
        "side_word": lambda code: word(SIDES, code),
        "health_word": lambda code: word(HEALTH, code),
        "connection_state_word": lambda code: word(CONNECTION_STATES, code),
        "finding_text": finding_text,
        "good_findings": GOOD_FINDINGS,
    }
