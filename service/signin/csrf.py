"""The CSRF token of a browser session, and the one way it is checked.

The token is an HMAC of the session id under the session's own secret (a synchronizer token:
nothing to forge without the session). A request the browser says came from another site is
refused whatever token it carries.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from service.errors import Forbidden
from service.i18n import N_
from service.identity.sessions import SessionRow


class CsrfFailed(Forbidden):
    code = "csrf_failed"
    title = N_("This form has expired")

    def __init__(self) -> None:
        super().__init__(N_("The form could not be verified. Reload the page and try again."))


def csrf_token_for(session: SessionRow) -> str:
    mac = hmac.new(session.csrf_secret, b"elicitd-csrf\x00" + session.id, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).decode().rstrip("=")


def check_csrf(expected: str, submitted: str | None, *, cross_site: bool) -> None:
    """Raise ``CsrfFailed`` (403, ``csrf_failed``) unless ``submitted`` is ``expected``, same-site."""
    if cross_site or submitted is None or not hmac.compare_digest(submitted.encode(), expected.encode()):
        raise CsrfFailed
