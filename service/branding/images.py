"""Logos: what is accepted, and the PNG elicitd makes of it.

Accepted: a PNG or a WebP, told by its first bytes (never by a name or a declared type, so an SVG
renamed ``logo.png`` is still an SVG), at most ``MAX_BYTES`` long and ``MAX_SIDE`` pixels on a
side, one frame only. Refused: everything else — SVG (a document that can carry script and
links), animations (motion a person cannot stop), other formats.

The stored logo is never the upload: Pillow decodes it to pixels and elicitd encodes a new PNG
from those pixels alone, scaled to fit ``SHOWN``. Nothing of the file but its pixels survives — no
text chunks, no EXIF or XMP, no colour profile, no trailing bytes — and the served file is one
elicitd wrote, under its own origin.
"""

from __future__ import annotations

import hashlib
import io
import warnings
from dataclasses import dataclass

from service.errors import InvalidRequest

MAX_BYTES = 256 * 1024
MAX_SIDE = 2048
MIN_SIDE = 16
# The box a logo is scaled into (it is shown at most 3rem high; twice that for sharp screens).
SHOWN = (480, 96)

_PNG = b"\x89PNG\r\n\x1a\n"


class LogoRefused(InvalidRequest):
    code = "brand_logo_refused"
    title = "Logo refused"


@dataclass(frozen=True, slots=True)
class Logo:
    png: bytes
    sha256: str
    width: int
    height: int


def sniff(data: bytes) -> str | None:
    """``PNG`` or ``WEBP`` from the file's first bytes, or None."""
    if data.startswith(_PNG):
        return "PNG"
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    return None


def _refuse(reason: str, detail: str) -> LogoRefused:
    return LogoRefused(detail, extra={"reason": reason})


def reencode(data: bytes) -> Logo:
    """The PNG elicitd serves for ``data``, or :class:`LogoRefused` (400, ``brand_logo_refused``)
    with a ``reason``: ``too_large``, ``format``, ``unreadable``, ``dimensions``, ``animated``.

    Pillow is imported here, by the first upload: every server process imported it with the admin
    API's routes before, ~1.8 MB of an idle process's RSS for something a deployment does once."""
    from PIL import Image, UnidentifiedImageError

    if len(data) > MAX_BYTES:
        raise _refuse("too_large", f"The logo is {len(data)} bytes; at most {MAX_BYTES} are accepted.")
    kind = sniff(data)
    if kind is None:
        raise _refuse("format", "The logo must be a PNG or WebP file (SVG and other formats are refused).")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data), formats=[kind])
            width, height = image.size  # from the header: checked before any pixel is decoded
            if not (MIN_SIDE <= width <= MAX_SIDE and MIN_SIDE <= height <= MAX_SIDE):
                raise _refuse(
                    "dimensions",
                    f"The logo is {width} x {height} pixels; each side must be {MIN_SIDE} to {MAX_SIDE}.",
                )
            if getattr(image, "is_animated", False) or getattr(image, "n_frames", 1) > 1:
                raise _refuse("animated", "Animated logos are refused; use a single still image.")
            image.load()
    except LogoRefused:
        raise
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, Image.DecompressionBombWarning):
        raise _refuse("unreadable", f"The logo is not a readable {kind} image.") from None
    pixels = image.convert("RGBA")
    pixels.thumbnail(SHOWN, Image.Resampling.LANCZOS)
    # Pixels only: a new image from the raw bytes carries no info, no profile, nothing else.
    clean = Image.frombytes("RGBA", pixels.size, pixels.tobytes())
    out = io.BytesIO()
    clean.save(out, format="PNG", optimize=True)
    png = out.getvalue()
    return Logo(png=png, sha256=hashlib.sha256(png).hexdigest(), width=clean.width, height=clean.height)
