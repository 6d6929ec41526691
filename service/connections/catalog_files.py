"""Where the provider catalog's files are and how one is read: the leaf both the catalog
(``service.connections.catalog``) and its lint (``service.connections.catalog_lint``) stand on,
so loading an operator's entry can lint it without the two importing each other."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from service.errors import ConfigurationError

BUILT_IN_DIR = Path(__file__).resolve().parent / "providers_catalog"
SCHEMA_PATH = BUILT_IN_DIR / "schema.json"
PROVIDERS_DIR_VARIABLE = "ELICITD_PROVIDERS_DIR"
# A template's placeholder: ``{subdomain}`` in ``https://{subdomain}.zendesk.com/oauth/tokens``.
PLACEHOLDER = re.compile(r"\{([a-z][a-z0-9_]{0,31})\}")
KEY_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_document(path: Path) -> dict[str, Any]:
    """One entry file's document (YAML's safe subset only: no tags, no objects)."""
    try:
        document = yaml.load(path.read_text(encoding="utf-8"), Loader=_LOADER)  # noqa: S506 - a safe loader
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigurationError(f"provider entry {path.name}: cannot be read ({type(exc).__name__})") from None
    if not isinstance(document, dict):
        raise ConfigurationError(f"provider entry {path.name}: expected a mapping at the top")
    return document


def entry_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("*.yaml") if p.is_file())


def key_of(path: Path) -> str:
    return path.name.removesuffix(".yaml")


def placeholders(template: str) -> list[str]:
    return PLACEHOLDER.findall(template)
