"""Brands through the admin API, the CLI and the config file: the same rules everywhere, a
round trip that reads back what was set, refusals with stable codes, an audit row per call, and
the logo and stylesheet served from elicitd's origin as immutable, non-sniffable files."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from sqlalchemy import text

from service.config_file import apply_config
from service.errors import ConfigurationError
from tests.admin.conftest import Token, admin_http
from tests.admin.test_secrets_and_cli import _cli, _cli_env
from tests.branding import images
from tests.support.apps import RunningApp, new_server_client

BLUE = "#0b57d0"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def _audit(app: RunningApp, target: str) -> list[tuple[str, int]]:
    async with app.state.sessions() as session:
        rows = await session.execute(
            text("SELECT operation, status FROM admin_audit_log WHERE target = :t ORDER BY id"), {"t": target}
        )
        return [(r.operation, r.status) for r in rows]


async def test_api_round_trip_assets_and_audit(elicitd: RunningApp, tokens: dict[str, Token]) -> None:
    client = await new_server_client(elicitd)
    path = f"/admin/v1/server-clients/{client.public_id}/brand"
    body = {
        "accent": "#0B57D0",
        "logo_base64": _b64(images.png((300, 90))),
        "support_url": "https://help.acme.example/elicitd",
        "tagline": "Acme Files — your documents",
    }
    async with admin_http(elicitd, tokens["admin"]) as http:
        assert (await http.get(path)).json()["code"] == "brand_not_found"
        made = await http.put(path, json=body)
        assert made.status_code == 200, made.text
        shown = await http.get(path)
        logo = await http.get(made.json()["logo_url"])
        style = await http.get(made.json()["style_url"])
        missing = await http.get("/brand/logo/" + "0" * 64 + ".png")
        cleared = await http.delete(path)
        after = await http.get(path)
    view = made.json()
    assert shown.json() == view
    assert {k: view[k] for k in ("owner", "owner_kind", "accent", "accent_dark", "support_url", "tagline")} == {
        "owner": client.public_id,
        "owner_kind": "server_client",
        "accent": BLUE,
        "accent_dark": None,
        "support_url": "https://help.acme.example/elicitd",
        "tagline": "Acme Files — your documents",
    }
    assert (view["logo_width"], view["logo_height"]) == (300, 90)
    assert "logo_base64" not in view and "logo_png" not in view
    # Served from elicitd's origin, by the digest of the very bytes served, for a year, never sniffed.
    assert logo.status_code == 200
    assert logo.headers["content-type"] == "image/png"
    assert view["logo_url"] == f"/brand/logo/{hashlib.sha256(logo.content).hexdigest()}.png"
    assert Image.open(io.BytesIO(logo.content)).size == (300, 90)
    for asset in (logo, style):
        assert asset.headers["cache-control"] == "public, max-age=31536000, immutable"
        assert asset.headers["x-content-type-options"] == "nosniff"
    assert style.headers["content-type"] == "text/css; charset=utf-8"
    assert view["style_url"] == f"/brand/style/{hashlib.sha256(style.content).hexdigest()}.css"
    assert style.text.startswith(f":root {{ --accent: {BLUE}; --on-accent: #ffffff; }}")
    assert missing.status_code == 404
    assert (cleared.status_code, cleared.json()) == (
        200,
        {"owner": client.public_id, "owner_kind": "server_client", "cleared": True},
    )
    assert after.status_code == 404
    assert await _audit(elicitd, f"ref={client.public_id}") == [
        ("adminGetServerClientBrand", 404),
        ("adminSetServerClientBrand", 200),
        ("adminGetServerClientBrand", 200),
        ("adminClearServerClientBrand", 200),
        ("adminGetServerClientBrand", 404),
    ]


@pytest.mark.parametrize(
    ("body", "code", "extra"),
    [
        ({"accent": "#ffcc00"}, "brand_low_contrast", {"field": "accent"}),
        ({"accent": BLUE, "accent_dark": "#0b57d0"}, "brand_low_contrast", {"field": "accent_dark"}),
        ({"logo_base64": _b64(images.SVG)}, "brand_logo_refused", {"reason": "format"}),
        ({"logo_base64": _b64(images.animated("WEBP"))}, "brand_logo_refused", {"reason": "animated"}),
        ({"logo_base64": _b64(images.animated("PNG"))}, "brand_logo_refused", {"reason": "animated"}),
        ({"logo_base64": _b64(images.png((3000, 40)))}, "brand_logo_refused", {"reason": "dimensions"}),
        ({"logo_base64": "abcde"}, "invalid_brand_logo", {}),
        ({"support_url": "javascript:alert(1)//x"}, "invalid_support_url", {}),
        ({"support_url": "http://help.example/"}, "invalid_support_url", {}),
        ({"tagline": "Acme\u202e Files"}, "invalid_brand_text", {}),
        ({}, "invalid_brand", {}),
    ],
    ids=[
        "pale-accent",
        "dark-accent-on-dark",
        "svg",
        "animated-webp",
        "animated-png",
        "too-wide",
        "not-base64",
        "script-url",
        "plain-http",
        "bidi-override",
        "empty",
    ],
)
async def test_refused_brands_change_nothing(
    elicitd: RunningApp, tokens: dict[str, Token], body: dict[str, Any], code: str, extra: dict[str, Any]
) -> None:
    client = await new_server_client(elicitd)
    path = f"/admin/v1/server-clients/{client.public_id}/brand"
    async with admin_http(elicitd, tokens["admin"]) as http:
        refused = await http.put(path, json=body)
        still = await http.get(path)
    assert refused.status_code == 400, refused.text
    assert refused.headers["content-type"] == "application/problem+json"
    problem = refused.json()
    assert problem["code"] == code
    assert {k: problem[k] for k in extra} == extra
    assert still.status_code == 404


async def test_low_contrast_names_every_failing_pair(elicitd: RunningApp, tokens: dict[str, Token]) -> None:
    client = await new_server_client(elicitd)
    async with admin_http(elicitd, tokens["admin"]) as http:
        refused = await http.put(f"/admin/v1/server-clients/{client.public_id}/brand", json={"accent": "#ffcc00"})
    assert refused.json()["shortfalls"] == [
        {"scheme": "light", "pair": "accent on the page background #f5f6f8", "ratio": 1.4},
        {"scheme": "light", "pair": "accent on the card background #ffffff", "ratio": 1.51},
    ]


async def test_a_logo_larger_than_the_limit_is_refused(elicitd: RunningApp, tokens: dict[str, Token]) -> None:
    client = await new_server_client(elicitd)
    big = images.png() + b"\0" * (256 * 1024)
    async with admin_http(elicitd, tokens["admin"]) as http:
        refused = await http.put(f"/admin/v1/server-clients/{client.public_id}/brand", json={"logo_base64": _b64(big)})
    assert (refused.status_code, refused.json()["code"], refused.json()["reason"]) == (
        400,
        "brand_logo_refused",
        "too_large",
    )


async def test_only_admins_set_brands_and_viewers_read_them(elicitd: RunningApp, tokens: dict[str, Token]) -> None:
    client = await new_server_client(elicitd)
    path = f"/admin/v1/server-clients/{client.public_id}/brand"
    async with admin_http(elicitd, tokens["operator"]) as http:
        assert (await http.put(path, json={"accent": BLUE})).status_code == 403
    async with admin_http(elicitd, tokens["admin"]) as http:
        assert (await http.put(path, json={"accent": BLUE})).status_code == 200
    async with admin_http(elicitd, tokens["viewer"]) as http:
        assert (await http.get(path)).json()["accent"] == BLUE
        assert (await http.delete(path)).status_code == 403


async def test_trust_group_brand_and_the_members_own_wins(elicitd: RunningApp, tokens: dict[str, Token]) -> None:
    member, other = await new_server_client(elicitd), await new_server_client(elicitd)
    group = f"brand-group-{uuid.uuid4().hex[:6]}"
    async with admin_http(elicitd, tokens["admin"]) as http:
        made = await http.post(
            "/admin/v1/trust-groups/",
            json={
                "name": group,
                "display_name": "Example Corp",
                "members": [member.name, other.name],
                "allow_unproven": True,
            },
        )
        assert made.status_code == 201, made.text
        set_group = await http.put(
            f"/admin/v1/trust-groups/{group}/brand", json={"accent": "#146c2e", "tagline": "Example Corp"}
        )
        assert set_group.status_code == 200, set_group.text
        assert set_group.json()["owner"].startswith("tg_")
        own = await http.put(f"/admin/v1/server-clients/{member.public_id}/brand", json={"tagline": "Own line"})
        assert own.status_code == 200
    brands = elicitd.state.brands
    mine, theirs = await brands.for_client(member.id), await brands.for_client(other.id)
    assert mine is not None and theirs is not None
    # The member's own brand, whole: not its tagline over the group's accent.
    assert (mine.tagline, mine.style_url) == ("Own line", None)
    assert theirs.tagline == "Example Corp" and theirs.style_url is not None
    assert await brands.for_client(uuid.uuid4()) is None


async def test_cli_round_trip_and_a_renamed_svg(
    elicitd: RunningApp, database_url: str, backend: Any, tmp_path: Path
) -> None:
    env = _cli_env(database_url, backend.redis_url)
    client = await new_server_client(elicitd)
    logo, disguised = tmp_path / "logo.webp", tmp_path / "logo.png"
    logo.write_bytes(images.webp())
    disguised.write_bytes(images.SVG)
    code, out, err = await _cli(
        env,
        "brands",
        "set",
        client.name,
        "--accent",
        BLUE,
        "--logo",
        str(logo),
        "--support-url",
        "https://help.acme.example/",
        "--json",
    )
    assert code == 0, err
    made = json.loads(out)
    assert (made["owner"], made["accent"], made["logo_width"], made["logo_height"]) == (client.public_id, BLUE, 120, 40)
    code, out, _ = await _cli(env, "brands", "show", client.public_id, "--json")
    assert (code, json.loads(out)) == (0, made)
    code, _, err = await _cli(env, "brands", "set", client.name, "--logo", str(disguised))
    assert (code, err.strip().splitlines()[-1]) == (
        1,
        "elicitd: The logo must be a PNG or WebP file (SVG and other formats are refused).",
    )
    code, out, _ = await _cli(env, "brands", "clear", client.name, "--json")
    assert (code, json.loads(out)["cleared"]) == (0, True)
    assert [op for op, _ in await _audit(elicitd, client.name)] == ["adminSetBrand", "adminSetBrand", "adminClearBrand"]
    assert await _audit(elicitd, client.public_id) == [("adminGetBrand", 200)]


async def test_config_file_round_trip(elicitd: RunningApp, tmp_path: Path) -> None:
    client = await new_server_client(elicitd)
    logo = tmp_path / "acme.png"
    logo.write_bytes(images.png((64, 64)))
    section = [{"server_client": client.name, "accent": BLUE, "logo_file": str(logo), "tagline": "Acme"}]
    assert await apply_config(elicitd.state.sessions, elicitd.state.vault, {"brands": section}) == {"brands": 1}
    shown = await elicitd.state.brands.for_client(client.id)
    assert shown is not None and (shown.tagline, shown.logo_width) == ("Acme", 64)
    # Applying again is idempotent; a refused entry names itself and changes nothing.
    assert await apply_config(elicitd.state.sessions, elicitd.state.vault, {"brands": section}) == {"brands": 1}
    pale = [{"server_client": client.name, "accent": "#ffcc00"}]
    with pytest.raises(ConfigurationError) as refused:
        await apply_config(elicitd.state.sessions, elicitd.state.vault, {"brands": pale})
    assert refused.value.detail.startswith("config file: brands[0]: `accent` #ffcc00 reads below 4.5:1")
    again = await elicitd.state.brands.for_client(client.id)
    assert again == shown
