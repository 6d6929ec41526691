"""The declarative config file (``ELICITD_CONFIG_FILE``): issuers and providers as code.

A TOML (``.toml``) or YAML (``.yaml``/``.yml``) file with one top-level key per section::

    [[issuers]]
    issuer = "https://id.example.com"
    client_id = "elicitd"
    client_secret_env = "ID_EXAMPLE_SECRET"   # secrets come from the environment, not the file

Every replica applies it at startup, all sections in one transaction; applying is an upsert by
natural key, so concurrent replicas converge and a restart is idempotent. Each domain owns its
section: add ``"name": "package.module:function"`` to ``SECTIONS``; the function has the
signature of :data:`SectionApplier` and returns how many entries it applied. Unknown top-level
keys are an error, so a typo never silently drops an issuer.
"""

from __future__ import annotations

import importlib
import os
import re
import tomllib
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from service.crypto.vault import Vault
from service.db.unit import unit_of_work
from service.errors import ConfigurationError
from service.settings import Settings

SectionApplier = Callable[[AsyncSession, Vault, Any, Mapping[str, str]], Awaitable[int]]

# section name → "module:function" (imported lazily, so a section's domain loads only when used).
SECTIONS: dict[str, str] = {
    "issuers": "service.identity.issuers:apply_config_section",
    # After issuers: it marks one (saving it too when it gives a client_id) for operator sign-in.
    "operator_signin": "service.operators.store:apply_config_section",
    "providers": "service.connections.providers:apply_config_section",
    "server_clients": "service.identity.clients:apply_config_section",
    # After server_clients: a group names its members, which must exist.
    "trust_groups": "service.grants.groups:apply_config_section",
    # After both: a brand names a server client or a trust group.
    "brands": "service.branding.config:apply_config_section",
}
# Rules that span sections, run after every section in the same transaction; each raises
# ConfigurationError. (``server_clients`` may drop a client's subject proof while it is in a
# trust group that does not allow that, one the file names or one made with the command.)
CHECKS: tuple[str, ...] = ("service.grants.groups:check_config",)


_TOML_POSITION = re.compile(r"^(?P<reason>.*?) \(at line (?P<line>\d+), column (?P<column>\d+)\)$")


def _where_parsing_stopped(exc: Exception) -> str:
    """`` at line L, column C: reason`` from the parser, which names the syntax it expected, never
    the file's values (a secret pasted in the wrong place stays out of the message)."""
    if isinstance(exc, tomllib.TOMLDecodeError):
        found = _TOML_POSITION.match(str(exc))
        if found:
            return f" at line {found['line']}, column {found['column']}: {found['reason']}"
        reason, _, end = str(exc).rpartition(" (at end of document)")
        return f" at the end of the file: {reason}" if end == "" and reason else ""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    if mark is not None:
        return f" at line {mark.line + 1}, column {mark.column + 1}" + (f": {problem}" if problem else "")
    return ""


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Parse the file; errors name the file and never echo its contents (they may hold secrets)."""
    file = Path(path)
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise ConfigurationError(f"ELICITD_CONFIG_FILE: cannot read {file}") from exc
    suffix = file.suffix.lower()
    try:
        if suffix == ".toml":
            data: Any = tomllib.loads(raw.decode())
        elif suffix in {".yaml", ".yml"}:
            data = yaml.safe_load(raw) or {}
        else:
            raise ConfigurationError(f"ELICITD_CONFIG_FILE: {file} must end in .toml, .yaml or .yml")
    except (tomllib.TOMLDecodeError, yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigurationError(
            f"ELICITD_CONFIG_FILE: {file} is not valid {'TOML' if suffix == '.toml' else 'YAML'}"
            f"{_where_parsing_stopped(exc)}"
        ) from exc
    if not isinstance(data, dict):
        raise ConfigurationError(f"ELICITD_CONFIG_FILE: {file} must hold a table at the top level")
    unknown = set(data) - set(SECTIONS)
    if unknown:
        raise ConfigurationError(f"ELICITD_CONFIG_FILE: unknown sections {sorted(unknown)}; known: {sorted(SECTIONS)}")
    return data


def _applier(name: str) -> SectionApplier:
    module, _, function = SECTIONS[name].partition(":")
    applier: SectionApplier = getattr(importlib.import_module(module), function)
    return applier


def _check(path: str) -> Callable[[AsyncSession], Awaitable[None]]:
    module, _, function = path.partition(":")
    check: Callable[[AsyncSession], Awaitable[None]] = getattr(importlib.import_module(module), function)
    return check


async def apply_config(
    sessions: async_sessionmaker[AsyncSession],
    vault: Vault,
    data: Mapping[str, Any],
    env: Mapping[str, str] | None = None,
) -> dict[str, int]:
    """Apply every section in one transaction; returns entries applied per section."""
    env = os.environ if env is None else env
    counts: dict[str, int] = {}
    async with unit_of_work(sessions) as session:
        for name in SECTIONS:
            if name in data:
                counts[name] = await _applier(name)(session, vault, data[name], env)
        if counts:
            for path in CHECKS:
                await _check(path)(session)
    return counts


async def apply_config_file(
    path: str | Path, sessions: async_sessionmaker[AsyncSession], vault: Vault, env: Mapping[str, str] | None = None
) -> dict[str, int]:
    data = load_config_file(path)
    try:
        return await apply_config(sessions, vault, data, env)
    except ConfigurationError as exc:
        raise ConfigurationError(f"ELICITD_CONFIG_FILE {path}: {exc.detail}") from None


async def apply_before_serving(settings: Settings, env: Mapping[str, str] | None = None) -> None:
    """Apply ``settings.config_file`` with a short-lived engine before the server starts.

    The app applies the file again in its lifespan (it is idempotent); doing it first from the
    command means a broken file stops the start with one line naming the file and the entry, where
    a failing lifespan would print the server's startup traceback.
    """
    if not settings.config_file:
        return
    from service.db.engine import make_engine, make_sessionmaker

    engine = make_engine(settings)
    try:
        await apply_config_file(settings.config_file, make_sessionmaker(engine), Vault(settings.keys), env)
    finally:
        await engine.dispose()
