"""Images told by their bytes: `image_problem` refuses a file cut short before a server sees it."""

from __future__ import annotations

import struct

import pytest

from crow_cli.images import image_problem
from tests.support import png

JPEG = b"\xff\xd8\xff\xe0" + b"\0" * 200 + b"\xff\xd9"
GIF = b"GIF89a" + struct.pack("<HH", 1, 1) + b"\0\0\0" + b"\x2c" + b"\0" * 10 + b"\x3b"
WEBP = b"RIFF" + struct.pack("<I", 4 + 8 + 10) + b"WEBPVP8 " + struct.pack("<I", 10) + b"\0" * 10


@pytest.mark.parametrize("data", [png(), png(3, 2), png() + b"trailing", JPEG, GIF, WEBP, b"plain text"])
def test_whole_images_and_other_files_have_no_problem(data: bytes) -> None:
    assert image_problem(data) is None


# A truncated image (the first 30 bytes of a real PNG) is named as such, never attached with -i and sent
@pytest.mark.parametrize(("data", "problem"), [
    (png()[:30], "a truncated PNG: it is 30 bytes and ends before its IHDR header"),
    (png()[:-12], "a truncated PNG: it is 55 bytes and has no IEND chunk"),
    (png()[:8], "a truncated PNG: it is 8 bytes"),
    (png()[:16] + b"\0" * 8 + png()[24:], "a damaged PNG: its IHDR header gives a width or height of 0"),
    (JPEG[:100], "a truncated JPEG: it is 100 bytes and has no end-of-image marker"),
    (GIF[:10], "a truncated GIF: it is 10 bytes and ends before its header"),
    (GIF[:-1], "a truncated GIF: it is 24 bytes and has no trailer"),
    (WEBP[:25], "a truncated WebP: it is 25 bytes where its header gives 30"),
])
def test_a_file_cut_short_is_named_by_what_is_missing(data: bytes, problem: str) -> None:
    assert (image_problem(data) or "").startswith(problem)
