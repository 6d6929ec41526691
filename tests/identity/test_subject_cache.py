"""The verification cache of subject tokens, past its size limit."""

from __future__ import annotations

from typing import Any, cast

import pytest

from service.identity import subject_proof
from service.identity.subject_proof import ProvenSubject, SubjectProver


def test_past_its_limit_the_cache_drops_its_oldest_entry_not_every_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clearing the whole cache at the limit made every live token cost a verification at once."""
    monkeypatch.setattr(subject_proof, "_CACHE_LIMIT", 3)
    prover = SubjectProver(cast(Any, None), cast(Any, None), http=cast(Any, None))
    proven = ProvenSubject(iss="https://id.example", sub="alice", audiences=frozenset({"https://mcp"}), expires_at=None)
    digests = [bytes([n]) * 32 for n in range(5)]
    for digest in digests:
        prover._remember(digest, proven)
    assert list(prover._cache) == digests[2:]
