"""How many sign-ins one client address may start per minute.

Opening a flow page without a session starts a sign-in, and a sign-in is a stored login attempt:
before this limit every anonymous visit wrote a row. A browser that comes back with its pre-login
cookie reuses its attempt (``LoginService.begin``) and is not counted; what is counted is a *new*
attempt, which only a client without that cookie — a script — needs over and over.

The count is kept per process, in a fixed one-minute window per address: it bounds the rows one
address can make through one replica, which is what it is for, and needs no shared state (a
limit that must hold across replicas, such as a server client's flow quota, is counted in
PostgreSQL instead). Addresses whose window has passed are forgotten as new ones arrive, so the
table stays as small as the set of addresses active in the last minute.
"""

from __future__ import annotations

import math

from service.clock import Clock, SystemClock
from service.errors import RateLimited
from service.i18n import N_

LOGIN_STARTS_PER_MINUTE = 30
WINDOW_SECONDS = 60.0
# Past this many remembered addresses, the ones whose window ended are dropped.
_PRUNE_AT = 10_000


class LoginThrottle:
    def __init__(
        self, *, limit: int = LOGIN_STARTS_PER_MINUTE, window: float = WINDOW_SECONDS, clock: Clock | None = None
    ) -> None:
        self.limit = limit
        self.window = window
        self._clock: Clock = clock or SystemClock()
        self._windows: dict[str, tuple[float, int]] = {}

    def admit(self, address: str) -> None:
        """Count one new sign-in from ``address``, or raise ``RateLimited`` (429, ``Retry-After``)."""
        now = self._clock.monotonic()
        started, count = self._windows.get(address, (now, 0))
        if now - started >= self.window:
            started, count = now, 0
        if count >= self.limit:
            retry_after = math.ceil(self.window - (now - started))
            raise RateLimited(
                N_("Too many sign-ins were started from your network. Wait a minute, then try again."),
                retry_after=retry_after,
            )
        self._windows[address] = (started, count + 1)
        if len(self._windows) > _PRUNE_AT:
            self._windows = {a: w for a, w in self._windows.items() if now - w[0] < self.window}
