"""read_file never hands the model U+FFFD: binary files are refused, other encodings are decoded and said so."""

from __future__ import annotations

from pathlib import Path

import pytest

from crow_cli.errors import ToolError
from crow_cli.tools.builtin.files import MAX_RETURN_CHARS, SNIFF_BYTES, read_file


def test_latin1_text_is_decoded_with_a_note(ws: Path) -> None:
    (ws / "old.txt").write_bytes("café au lait\nna\u00efve\n".encode("latin-1"))
    out = read_file(path="old.txt")
    note, *lines = out.splitlines()
    assert "\ufffd" not in out
    assert lines == ["café au lait", "naïve"]
    assert note == ("[read_file: old.txt is not UTF-8 (byte 0xe9 at offset 3); decoded as cp1252, a guess. "
                    "edit_file refuses it: it only edits UTF-8 files]")


def test_cp1252_quotes_and_line_ranges(ws: Path) -> None:
    (ws / "win.txt").write_bytes(b"one\r\n\x93two\x94 \x80 5\r\nthree\r\n")
    out = read_file(path="win.txt", start_line=2, end_line=2)
    assert out.startswith("[read_file: win.txt is not UTF-8 (byte 0x93 at offset 5); decoded as cp1252")
    assert out.splitlines()[1:] == ["\u201ctwo\u201d \u20ac 5"]


def test_bytes_cp1252_leaves_undefined_fall_back_to_latin1(ws: Path) -> None:
    (ws / "odd.txt").write_bytes(b"a\x81b\xe9\n")
    out = read_file(path="odd.txt")
    assert "decoded as latin-1" in out.splitlines()[0]
    assert out.splitlines()[1] == "a\x81bé"


def test_utf16_with_a_byte_order_mark_is_text(ws: Path) -> None:
    (ws / "u16.txt").write_bytes("hé\nwörld\n".encode("utf-16"))
    note, *lines = read_file(path="u16.txt").splitlines()
    assert lines == ["hé", "wörld"] and "decoded as UTF-16 (byte-order mark)" in note


async def test_edit_file_calls_utf16_text_what_it_is_not_binary(ws: Path) -> None:
    # Tester: read_file said "UTF-16 … edit_file refuses it: it only edits UTF-8", edit_file said "binary".
    from crow_cli.tools.builtin.edits import edit_file

    (ws / "u16.txt").write_bytes("hé\nwörld\n".encode("utf-16"))
    with pytest.raises(ToolError, match=r"^'u16.txt' is UTF-16 text; edit_file only edits UTF-8 files; not edited$"):
        await edit_file.invoke({"path": "u16.txt", "old_string": "hé", "new_string": "ha"})


# an executable, not a PNG: an image file is shown to the model since issue 33 (tests/test_loop_images.py)
@pytest.mark.parametrize("data", [b"\x7fELF\x02\x01\x01\0\0\0\0\0", b"x" * 10_000 + b"\0tail"])
def test_a_file_with_nul_bytes_is_refused_as_binary(ws: Path, data: bytes) -> None:
    (ws / "blob.bin").write_bytes(data)
    with pytest.raises(ToolError, match=rf"^'blob.bin' is a binary file \({len(data)} bytes\); not read$"):
        read_file(path="blob.bin")


def test_utf8_cut_inside_a_character_at_the_sniff_cap_is_still_utf8(ws: Path) -> None:
    text = "a" + "é" * (SNIFF_BYTES // 2 + 10)  # the sniffed bytes end inside a 2-byte character
    (ws / "big.txt").write_text(text, encoding="utf-8")
    out = read_file(path="big.txt")
    assert "\ufffd" not in out and "decoded as" not in out
    note, body = out.split("\n", 1)
    assert note.startswith("[read_file: big.txt has 1 line (") and body == text[:MAX_RETURN_CHARS]


def test_plain_utf8_has_no_note(ws: Path) -> None:
    (ws / "ok.txt").write_text("naïve ✓\n", encoding="utf-8")
    assert read_file(path="ok.txt") == "naïve ✓\n"
