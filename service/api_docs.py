"""The API docs page (``/schema``): Swagger UI served by elicitd itself, never from a CDN.

Litestar's Swagger plugin loads Swagger UI's JavaScript and CSS from a CDN by default, so on a
machine without internet (an air-gapped deployment, a laptop on a train) ``/schema`` is a blank
page. The files come instead from the pinned ``swagger-ui-bundle-v2`` distribution (Swagger UI's
own ``dist`` files) and are served under ``/schema/assets/<version>/``: the version in the path lets
browsers cache them for good, and a new pin changes every URL at once.
"""

from __future__ import annotations

from pathlib import Path

from litestar import Router, get
from litestar.openapi.plugins import SwaggerRenderPlugin
from litestar.response import File

from service.errors import NotFound
from service.openapi import DescribedRender

# Only what the page loads; the bundle's source maps and ES modules are not served.
ASSETS: dict[str, str] = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui-standalone-preset.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "favicon-32x32.png": "image/png",
}
_IMMUTABLE = {"Cache-Control": "public, max-age=31536000, immutable"}


def swagger_ui_dist() -> Path:
    """The directory of Swagger UI's dist files inside the installed bundle."""
    from swagger_ui_bundle import swagger_ui_path

    return Path(str(swagger_ui_path))


class OfflineSwaggerRenderPlugin(DescribedRender, SwaggerRenderPlugin):
    """``SwaggerRenderPlugin`` whose page loads only elicitd's own URLs and shows the described
    document (``service.openapi``)."""

    def __init__(self, schema_path: str = "/schema") -> None:
        self.dist = swagger_ui_dist()
        # The bundle's directory is named after the Swagger UI release it holds: swagger-ui-5.31.0.
        self.version = self.dist.name.removeprefix("swagger-ui-")
        base = f"{schema_path.rstrip('/')}/assets/{self.version}"
        super().__init__(
            js_url=f"{base}/swagger-ui-bundle.js",
            css_url=f"{base}/swagger-ui.css",
            standalone_preset_js_url=f"{base}/swagger-ui-standalone-preset.js",
            favicon=f"<link rel='icon' type='image/png' href='{base}/favicon-32x32.png'>",
        )

    def receive_router(self, router: Router) -> None:
        super().receive_router(router)
        dist, version = self.dist, self.version

        @get(f"/assets/{version}/{{name:str}}", include_in_schema=False, sync_to_thread=False)
        def swagger_asset(name: str) -> File:
            media_type = ASSETS.get(name)
            if media_type is None:
                raise NotFound("No such API docs asset.")
            return File(dist / name, media_type=media_type, content_disposition_type="inline", headers=_IMMUTABLE)

        router.register(swagger_asset)
