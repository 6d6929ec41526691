"""Logo files for the brand tests, made with Pillow: a still PNG, a still WebP, animated ones, an
SVG, and a PNG carrying metadata that must not survive."""

from __future__ import annotations

import io

from PIL import Image, ImageDraw, ImageFont, PngImagePlugin

SVG = b'<svg xmlns="http://www.w3.org/2000/svg" width="64" height="64"><script>alert(1)</script></svg>'


def png(size: tuple[int, int] = (200, 60), colour: tuple[int, int, int] = (11, 87, 208)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, colour).save(out, format="PNG")
    return out.getvalue()


def webp(size: tuple[int, int] = (120, 40)) -> bytes:
    out = io.BytesIO()
    Image.new("RGBA", size, (20, 120, 60, 255)).save(out, format="WEBP")
    return out.getvalue()


def animated(kind: str) -> bytes:
    frames = [Image.new("RGB", (32, 32), c) for c in ((255, 0, 0), (0, 0, 255))]
    out = io.BytesIO()
    frames[0].save(out, format=kind, save_all=True, append_images=frames[1:], duration=100, loop=0)
    return out.getvalue()


def png_with_metadata(marker: str) -> bytes:
    info = PngImagePlugin.PngInfo()
    info.add_text("Comment", marker)
    exif = Image.Exif()
    exif[0x010E] = marker  # ImageDescription
    out = io.BytesIO()
    Image.new("RGB", (64, 64), (200, 30, 30)).save(out, format="PNG", pnginfo=info, exif=exif.tobytes())
    return out.getvalue() + marker.encode()  # and trailing bytes after IEND


def wordmark(text: str = "ACME FILES", size: tuple[int, int] = (240, 64)) -> bytes:
    """A logo that looks like one: a mark and a word, on transparency."""
    image = Image.new("RGBA", size, (0, 0, 0, 0))
    draw = ImageDraw.Draw(image)
    height = size[1]
    draw.rounded_rectangle((0, 0, height - 1, height - 1), radius=height // 5, fill=(106, 27, 154, 255))
    draw.polygon(
        [(height * 0.28, height * 0.72), (height / 2, height * 0.25), (height * 0.72, height * 0.72)], fill="white"
    )
    draw.text(
        (height + 10, height / 2), text, fill=(106, 27, 154, 255), anchor="lm", font=ImageFont.load_default(size=26)
    )
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()
