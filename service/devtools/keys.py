"""The dev tools' keys and client secrets, kept in one file under the data directory.

They are generated once and reused, so a restart of ``make run`` keeps every token already handed
out valid: the example MCP server still accepts its user token, and the Demo Files connection
elicitd stored keeps working, as it would against a real issuer and provider.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from joserfc.jwk import ECKey, OctKey

FILE_NAME = "dev-tools.json"


@dataclass(frozen=True, slots=True)
class DevSecrets:
    """Dev ID's signing key, Demo Files' token key, and the client secrets elicitd uses at both."""

    id_signing_key: dict[str, Any] = field(repr=False)
    files_token_key: str = field(repr=False)
    id_client_secret: str = field(repr=False)
    files_client_secret: str = field(repr=False)

    @classmethod
    def generate(cls) -> DevSecrets:
        kid = "dev-id-" + secrets.token_hex(4)
        key = ECKey.generate_key("P-256", parameters={"kid": kid, "use": "sig", "alg": "ES256"}, private=True)
        return cls(
            id_signing_key=key.as_dict(private=True),
            files_token_key=secrets.token_urlsafe(32),
            id_client_secret=secrets.token_urlsafe(24),
            files_client_secret=secrets.token_urlsafe(24),
        )

    @classmethod
    def load_or_create(cls, data_dir: Path) -> DevSecrets:
        path = data_dir / FILE_NAME
        if path.exists():
            raw = json.loads(path.read_text())
            return cls(**{name: raw[name] for name in cls.__dataclass_fields__})
        created = cls.generate()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(json.dumps({name: getattr(created, name) for name in cls.__dataclass_fields__}))
        return created

    @property
    def signing_key(self) -> ECKey:
        return ECKey.import_key(self.id_signing_key)

    @property
    def kid(self) -> str:
        return str(self.id_signing_key["kid"])

    def public_jwks(self) -> dict[str, Any]:
        return {"keys": [self.signing_key.as_dict(private=False)]}

    @property
    def token_key(self) -> OctKey:
        return OctKey.import_key(self.files_token_key.encode())
