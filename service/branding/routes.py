"""The brand's logo and stylesheet, served from elicitd's own origin.

Both URLs name the SHA-256 of what they serve, so a response never changes: it may be cached for a
year (``immutable``), and a new logo or colour is a new URL the next page links. They are served as
elicitd wrote them (a PNG it encoded, a stylesheet of two custom properties), with
``X-Content-Type-Options: nosniff`` so no browser reads either as anything else, and nothing on the
pages' ``default-src 'self'`` policy has to change for them.
"""

from __future__ import annotations

import re
from typing import Any

from litestar import Response, get

from service.branding.deps import BrandDeps
from service.errors import NotFound

_SHA256 = re.compile(r"^([0-9a-f]{64})\.(png|css)$")
CACHE = "public, max-age=31536000, immutable"
_HEADERS = {"Cache-Control": CACHE, "X-Content-Type-Options": "nosniff", "Cross-Origin-Resource-Policy": "same-origin"}


class BrandAssetNotFound(NotFound):
    code = "brand_asset_not_found"
    title = "Not found"


def _digest(name: str, suffix: str) -> str:
    found = _SHA256.match(name)
    if found is None or found.group(2) != suffix:
        raise BrandAssetNotFound("No such brand file.")
    return found.group(1)


@get(
    "/brand/logo/{name:str}",
    operation_id="brandLogo",
    tags=["browser"],
    summary="A brand's logo, as elicitd re-encoded it (PNG), by its SHA-256",
    include_in_schema=False,
)
async def brand_logo(name: str, services: BrandDeps) -> Response[Any]:
    png = await services.brands.logo(_digest(name, "png"))
    if png is None:
        raise BrandAssetNotFound("No such brand file.")
    return Response(png, media_type="image/png", headers=_HEADERS)


@get(
    "/brand/style/{name:str}",
    operation_id="brandStyle",
    tags=["browser"],
    summary="A brand's stylesheet (its accent colours), by its SHA-256",
    include_in_schema=False,
)
async def brand_style(name: str, services: BrandDeps) -> Response[Any]:
    css = await services.brands.style(_digest(name, "css"))
    if css is None:
        raise BrandAssetNotFound("No such brand file.")
    return Response(css, media_type="text/css", headers=_HEADERS)


BRAND_ROUTES = [brand_logo, brand_style]
