"""``ELICITD_WEBHOOK_*`` tunables: read when the app is built, refused unless a positive number."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from service.errors import ConfigurationError
from service.settings import Settings
from service.signals.webhooks import WebhookSettings


def test_set_values_are_read_and_the_rest_keep_their_defaults(make_settings: Callable[..., Settings]) -> None:
    # Only these two variables (the suite's settings also allow loopback for its receivers).
    settings = make_settings().with_(extra={"WEBHOOK_TIMEOUT_SECONDS": "2.5", "WEBHOOK_GIVE_UP_SECONDS": "60"})
    assert WebhookSettings.from_settings(settings) == WebhookSettings(timeout_seconds=2.5, give_up_seconds=60.0)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("soon", "ELICITD_WEBHOOK_BACKOFF_SECONDS must be a number"),
        ("0", "ELICITD_WEBHOOK_BACKOFF_SECONDS must be positive"),
    ],
)
def test_a_value_that_is_not_a_positive_number_is_refused(
    make_settings: Callable[..., Settings], raw: str, message: str
) -> None:
    with pytest.raises(ConfigurationError) as refused:
        WebhookSettings.from_settings(make_settings(extra={"WEBHOOK_BACKOFF_SECONDS": raw}))
    assert str(refused.value) == message
