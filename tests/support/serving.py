"""uvicorn servers that run inside the test process's event loop."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import uvicorn


class InProcessServer(uvicorn.Server):
    """A uvicorn server that leaves the process's signal handlers alone.

    uvicorn installs SIGINT/SIGTERM handlers while it serves and puts the previous ones back when it
    stops. Several servers share one test process and stop in any order, so the last to restore can
    leave a stopped server's handler in place, and Ctrl+C would no longer interrupt pytest.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield
