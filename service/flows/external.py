"""The ``external`` kind: the caller hosts its own page and finishes the flow through the API.

elicitd keeps the state, the subject binding and the waiting; ``GET /f/{id}`` only points the
browser at the caller's page, so the kind has no page of its own.
"""

from __future__ import annotations

from service.flows.kinds import BasicKind
from service.flows.plugins import KindPlugin
from service.settings import Settings


def plugin(settings: Settings) -> KindPlugin:
    return KindPlugin(
        name="external",
        handler=BasicKind("external", default_message="Continue in your browser to finish this step."),
    )
