"""``columns``: an admin view shows the fields it names, from the row's columns of those names,
and never a sealed column."""

from __future__ import annotations

from types import SimpleNamespace

import msgspec
import pytest

from service.admin.views import columns


class Shown(msgspec.Struct):
    name: str
    client_secret_set: bool


class Leaky(msgspec.Struct):
    name: str
    client_secret_enc: bytes


ROW = SimpleNamespace(name="acme", client_secret_enc=b"sealed", other="not named")


def test_a_view_takes_its_named_columns_and_what_is_given_nothing_else() -> None:
    shown = columns(Shown, ROW, client_secret_set=ROW.client_secret_enc is not None)
    assert msgspec.to_builtins(shown) == {"name": "acme", "client_secret_set": True}


def test_a_sealed_column_is_refused_even_when_a_view_names_it() -> None:
    with pytest.raises(TypeError, match=r"Leaky\.client_secret_enc: a sealed column is never shown"):
        columns(Leaky, ROW)
