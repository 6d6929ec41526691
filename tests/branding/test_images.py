"""What a logo may be, and that the served PNG is elicitd's own: magic bytes decide the format,
size, dimensions and frames are limited, and nothing but pixels survives the re-encoding."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from service.branding.images import MAX_BYTES, MAX_SIDE, SHOWN, LogoRefused, reencode
from tests.branding import images


def _reason(data: bytes) -> str:
    with pytest.raises(LogoRefused) as refused:
        reencode(data)
    assert refused.value.problem_code == "brand_logo_refused"
    assert refused.value.status == 400
    return str(refused.value.extra["reason"])


def test_png_and_webp_become_a_png_of_their_pixels() -> None:
    for data in (images.png(), images.webp()):
        logo = reencode(data)
        decoded = Image.open(io.BytesIO(logo.png))
        assert decoded.format == "PNG"
        assert (decoded.width, decoded.height) == (logo.width, logo.height)
    assert (reencode(images.png((200, 60))).width, reencode(images.png((200, 60))).height) == (200, 60)


def test_a_large_logo_is_scaled_into_the_shown_box() -> None:
    logo = reencode(images.png((1200, 600)))
    assert (logo.width, logo.height) == (192, 96)
    assert logo.width <= SHOWN[0] and logo.height <= SHOWN[1]


def test_svg_is_refused_also_when_named_png() -> None:
    # Nothing here reads a name: an SVG saved as logo.png is still an SVG (the CLI test passes such a file).
    assert _reason(images.SVG) == "format"
    assert _reason(b"GIF89a" + b"\0" * 64) == "format"


def test_animated_png_and_webp_are_refused() -> None:
    assert _reason(images.animated("PNG")) == "animated"
    assert _reason(images.animated("WEBP")) == "animated"


def test_oversized_files_and_dimensions_are_refused() -> None:
    assert _reason(images.png() + b"\0" * MAX_BYTES) == "too_large"
    assert _reason(images.png((MAX_SIDE + 1, 20))) == "dimensions"
    assert _reason(images.png((8, 8))) == "dimensions"


def test_a_truncated_png_is_unreadable_not_an_error() -> None:
    assert _reason(images.png()[:60]) == "unreadable"


def test_no_metadata_or_trailing_bytes_survive() -> None:
    marker = "planted-logo-marker-7f3a"
    data = images.png_with_metadata(marker)
    assert marker.encode() in data
    logo = reencode(data)
    assert marker.encode() not in logo.png
    decoded = Image.open(io.BytesIO(logo.png))
    assert decoded.info == {} or set(decoded.info) <= {"dpi"}
    assert dict(decoded.getexif()) == {}
    assert logo.png.endswith(b"IEND\xaeB`\x82")
