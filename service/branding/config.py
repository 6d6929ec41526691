"""The ``brands`` section of the config file: a brand per server client or trust group, as code.

Each entry names its owner (``server_client`` or ``trust_group``, by name or id) and sets any of
``accent``, ``accent_dark``, ``logo_file`` (a PNG or WebP file read at startup; a relative path is
read from the working directory), ``support_url`` and ``tagline``. Applying an entry replaces that
owner's whole brand, like the admin API's ``PUT``; a brand the file does not name is left as it is.
The section is applied after ``server_clients`` and ``trust_groups``, so it may name owners the
same file declares.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from service.branding import store
from service.branding.images import MAX_BYTES
from service.crypto.vault import Vault
from service.errors import ConfigurationError, ElicitdError

_KEYS = {"server_client", "trust_group", "accent", "accent_dark", "logo_file", "support_url", "tagline"}


def _text(entry: Mapping[str, Any], key: str, where: str) -> str | None:
    value = entry.get(key)
    if value is not None and not isinstance(value, str):
        raise ConfigurationError(f"{where}: '{key}' must be a string")
    return value


def _logo(path: str | None, where: str) -> bytes | None:
    if path is None:
        return None
    file = Path(path)
    try:
        with file.open("rb") as handle:
            data = handle.read(MAX_BYTES + 1)  # enough to tell "too large" without reading a huge file
    except OSError:
        raise ConfigurationError(f"{where}: cannot read logo_file {file}") from None
    return data


async def apply_config_section(session: AsyncSession, vault: Vault, entries: Any, env: Mapping[str, str]) -> int:
    if not isinstance(entries, list):
        raise ConfigurationError("config file: 'brands' must be a list of tables")
    for index, entry in enumerate(entries):
        where = f"config file: brands[{index}]"
        if not isinstance(entry, dict):
            raise ConfigurationError(f"{where} must be a table")
        unknown = set(entry) - _KEYS
        if unknown:
            raise ConfigurationError(f"{where}: unknown keys {sorted(unknown)}")
        data = store.BrandInput(
            accent=_text(entry, "accent", where),
            accent_dark=_text(entry, "accent_dark", where),
            logo=_logo(_text(entry, "logo_file", where), where),
            support_url=_text(entry, "support_url", where),
            tagline=_text(entry, "tagline", where),
        )
        try:
            owner = await store.owner_of(
                session,
                server_client=_text(entry, "server_client", where),
                trust_group=_text(entry, "trust_group", where),
            )
            await store.set_brand(session, owner, data)
        except ConfigurationError:
            raise
        except ElicitdError as exc:
            raise ConfigurationError(f"{where}: {exc.detail}") from None
    return len(entries)
