"""``ELICITD_EVENTS_*`` tunables: read when the app is built, refused unless a positive number."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from service.errors import ConfigurationError
from service.events.hub import EventSettings
from service.settings import Settings


def test_set_values_are_read_by_kind_and_the_rest_keep_their_defaults(make_settings: Callable[..., Settings]) -> None:
    read = EventSettings.from_settings(make_settings(extra={"EVENTS_BUFFER_SIZE": "64", "EVENTS_POLL_SECONDS": "2.5"}))
    assert read == EventSettings(buffer_size=64, poll_seconds=2.5)
    assert type(read.buffer_size) is int


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("1.5", "ELICITD_EVENTS_PAGE_SIZE must be a number"),
        ("ten", "ELICITD_EVENTS_PAGE_SIZE must be a number"),
        ("0", "ELICITD_EVENTS_PAGE_SIZE must be positive"),
        ("-3", "ELICITD_EVENTS_PAGE_SIZE must be positive"),
    ],
)
def test_a_value_that_is_not_a_positive_number_is_refused(
    make_settings: Callable[..., Settings], raw: str, message: str
) -> None:
    with pytest.raises(ConfigurationError) as refused:
        EventSettings.from_settings(make_settings(extra={"EVENTS_PAGE_SIZE": raw}))
    assert str(refused.value) == message
