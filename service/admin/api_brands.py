"""Admin API for brands: ``/admin/v1/server-clients/{client}/brand`` and
``/admin/v1/trust-groups/{group}/brand``. Setting or clearing needs ``admin``; reading ``viewer``.

``PUT`` replaces the whole brand (a field left out is no longer set), so what an operator sends is
what the pages show. A refused field answers 400 with its own code (``brand_low_contrast``,
``brand_logo_refused`` with a ``reason``, ``invalid_brand_colour``, ``invalid_support_url``,
``invalid_brand_text``) and changes nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import msgspec
from litestar import Controller, Request, delete, get, put
from msgspec import Meta

from service.admin.deps import ADMIN, AdminDeps, unit
from service.branding import store
from service.branding.images import MAX_BYTES

# The base64 of the largest logo accepted (padded) with 8 KiB over it, so that a logo a little too
# large is refused by the image rule with its reason (``too_large``); and room for the other fields,
# each bounded, so that every body the schema allows fits under the limit.
LOGO_BASE64_LENGTH = 4 * -(-MAX_BYTES // 3) + 8 * 1024
BODY_LIMIT = LOGO_BASE64_LENGTH + 16 * 1024
Colour = Annotated[str, Meta(min_length=7, max_length=7, pattern=r"^#[0-9A-Fa-f]{6}$")]


class SetBrand(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    accent: Colour | None = None
    accent_dark: Colour | None = None
    # The logo file, base64: a PNG or WebP; elicitd re-encodes it and serves its own PNG.
    logo_base64: Annotated[str, Meta(max_length=LOGO_BASE64_LENGTH, pattern=r"^[A-Za-z0-9+/]*={0,2}$")] | None = None
    support_url: Annotated[str, Meta(min_length=8, max_length=2000)] | None = None
    tagline: Annotated[str, Meta(min_length=1, max_length=store.MAX_TAGLINE)] | None = None


class BrandView(msgspec.Struct, kw_only=True):
    owner: str
    owner_kind: str
    accent: str | None
    accent_dark: str | None
    style_url: str | None
    logo_url: str | None
    logo_width: int | None
    logo_height: int | None
    support_url: str | None
    tagline: str | None
    updated_at: datetime


class ClearedBrand(msgspec.Struct, kw_only=True):
    owner: str
    owner_kind: str
    cleared: bool


def brand_input(data: SetBrand) -> store.BrandInput:
    return store.BrandInput(
        accent=data.accent,
        accent_dark=data.accent_dark,
        logo=store.decode_logo(data.logo_base64),
        support_url=data.support_url,
        tagline=data.tagline,
    )


def _owner(kind: str, ref: str) -> dict[str, str]:
    return {"server_client": ref} if kind == "server_client" else {"trust_group": ref}


def _controller(kind: str, path: str, tag: str, word: str) -> type[Controller]:
    prefix = "ServerClient" if kind == "server_client" else "TrustGroup"

    class BrandController(Controller):
        tags = [tag]

        @get("/", operation_id=f"adminGet{prefix}Brand", summary=f"The {word}'s brand")
        async def show(self, request: Request[Any, Any, Any], services: AdminDeps, ref: str) -> BrandView:
            async with unit(services) as session:
                owner = await store.owner_of(session, **_owner(kind, ref))
                return msgspec.convert(await store.show_brand(session, owner), BrandView)

        @put(
            "/",
            operation_id=f"adminSet{prefix}Brand",
            opt=ADMIN,
            request_max_body_size=BODY_LIMIT,
            summary=f"Set the {word}'s brand (replaces the whole brand): logo, accent colours, support link, text",
        )
        async def set_brand(
            self, request: Request[Any, Any, Any], services: AdminDeps, ref: str, data: SetBrand
        ) -> BrandView:
            async with unit(services) as session:
                owner = await store.owner_of(session, **_owner(kind, ref))
                return msgspec.convert(await store.set_brand(session, owner, brand_input(data)), BrandView)

        @delete(
            "/",
            operation_id=f"adminClear{prefix}Brand",
            opt=ADMIN,
            status_code=200,
            summary=f"Clear the {word}'s brand",
        )
        async def clear(self, request: Request[Any, Any, Any], services: AdminDeps, ref: str) -> ClearedBrand:
            async with unit(services) as session:
                owner = await store.owner_of(session, **_owner(kind, ref))
                return msgspec.convert(await store.clear_brand(session, owner), ClearedBrand)

    BrandController.path = path
    BrandController.__name__ = BrandController.__qualname__ = f"Admin{prefix}BrandController"
    return BrandController


BRAND_CONTROLLERS = [
    _controller("server_client", "/server-clients/{ref:str}/brand", "admin: server clients", "server client"),
    _controller("trust_group", "/trust-groups/{ref:str}/brand", "admin: trust groups", "trust group"),
]
