"""Every ``ELICITD_*`` variable elicitd reads is in the settings tables of docs/configuration.md."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

from service.settings import KeyRing, Settings
from tests.support.docs import ROOT, read


class RecordingEnv(Mapping[str, str]):
    """An environment that remembers every variable asked for, present or not."""

    def __init__(self, values: dict[str, str]) -> None:
        self.known = values
        self.asked: set[str] = set()

    def __getitem__(self, key: str) -> str:
        self.asked.add(key)
        return self.known[key]

    def get(self, key: str, default: str | None = None) -> str | None:  # type: ignore[override]
        self.asked.add(key)
        return self.known.get(key, default)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self.asked.add(key)
        return key in self.known

    def __iter__(self) -> Iterator[str]:
        return iter(self.known)

    def __len__(self) -> int:
        return len(self.known)


def read_by_settings() -> set[str]:
    env = RecordingEnv(
        {
            "ELICITD_DATABASE_URL": "postgresql://elicitd@127.0.0.1/elicitd",
            "ELICITD_PUBLIC_URL": "https://elicitd.example.com",
            "ELICITD_KEYS": KeyRing.generate_entry("k1"),
        }
    )
    Settings.from_env(env)
    return {name for name in env.asked if name.startswith("ELICITD_")}


def named_in_the_code() -> set[str]:
    """Names spelled out in the service's source: the CLI's own variables, ``settings.extra`` reads
    and every message that names a variable."""
    found: set[str] = set()
    for source in (ROOT / "service").rglob("*.py"):
        text = source.read_text()
        found.update(re.findall(r"\b(ELICITD_[A-Z0-9_]*[A-Z0-9])(?![A-Z0-9_{])", text))
        found.update("ELICITD_" + name for name in re.findall(r"\bextra\.get\(\"([A-Z0-9_]*[A-Z0-9])\"[,)]", text))
    return found


def documented() -> set[str]:
    rows = [line for line in read("docs/configuration.md").splitlines() if line.startswith("| `ELICITD_")]
    return {name for row in rows for name in re.findall(r"`(ELICITD_[A-Z0-9_]+)`", row.split(" | ")[0])}


def test_every_setting_the_service_reads_is_documented() -> None:
    read_somewhere = read_by_settings() | named_in_the_code()
    assert {"ELICITD_DATABASE_URL", "ELICITD_DB_POOL_SIZE", "ELICITD_OTEL_EXPORTER", "ELICITD_PORT"} <= read_somewhere
    assert sorted(read_somewhere - documented()) == []
