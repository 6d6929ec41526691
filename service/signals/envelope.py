"""The body every webhook delivery and stream event carries, and its event id's public form."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any

from service.db.base import PrefixedId

EVENT_ID = PrefixedId("evt")


def event_body(event_id: uuid.UUID, event_type: str, created_at: datetime, payload: dict[str, Any]) -> bytes:
    """The exact bytes POSTed (identical on every retry; the signature covers them as sent)."""
    document = {
        "id": EVENT_ID.format(event_id),
        "type": event_type,
        "created_at": created_at.isoformat(),
        "data": payload,
    }
    return json.dumps(document, separators=(",", ":"), sort_keys=True).encode()
