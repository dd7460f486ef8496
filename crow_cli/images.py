"""Images as crow carries them: a tool's returned image, a `data:` URL content part, a stored reference.

An `Image` is bytes and a MIME type. On the wire (OpenAI Chat Completions) an image is a user-message
content part `{"type": "image_url", "image_url": {"url": "data:image/png;base64,…"}}`: tool messages
carry text only, so images a tool returns go in a user message right after the turn's tool results
(`tool_images_message`). Their kind is told by their first bytes (PNG, JPEG, GIF, WebP), never by a
name.

What an image is called (an attached file's path, "stdin", "from TOOL" for a tool's image) rides on its part
under `IMAGE_KEY` (`{"crow_image": {"name": …}}`), so the session store keeps it in its reference and a resumed
chat, an export or an editor's replay shows `[image: NAME, SIZE]`. Servers never see that key: the outgoing
copy of a message carries `sendable_content` (the parts as OpenAI defines them). Standard library only.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["IMAGE_KEY", "IMAGE_TYPES", "MAX_IMAGE_BYTES", "TOOL_IMAGES_NOTE", "Image", "attached_line",
           "data_url_image", "describe_part", "image_name", "image_part", "image_parts", "image_problem", "image_type",
           "is_image_part", "is_tool_images", "sendable_content", "size_text", "tool_images_message"]

MAX_IMAGE_BYTES = 10 * 1024 * 1024
"""The largest image crow attaches or shows the model (a file, standard input, a tool's image)."""
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
"""The MIME types vision servers take (OpenAI's list; vLLM, llama.cpp and Ollama decode the same)."""
IMAGE_KEY = "crow_image"
"""The key of an image part holding what crow knows of the image: its `name` (when one is known) and, in a row
of the session store, its `file`, `mime_type` and `bytes`. Never sent to a server (`sendable_content`)."""

_MAGIC = ((b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"), (b"GIF87a", "image/gif"),
          (b"GIF89a", "image/gif"))
_DATA_URL = re.compile(r"data:([\w.+-]+/[\w.+-]+);base64,(.*)", re.S)


def image_type(data: bytes) -> str | None:
    """The MIME type of `data` told by its first bytes (PNG, JPEG, GIF, WebP), or None for anything else."""
    for magic, mime in _MAGIC:
        if data.startswith(magic):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


@dataclass(frozen=True, slots=True)
class _Layout:
    """What a whole file of one image format holds: a header of `header` bytes starting with `tag` at
    `tag_at`, its width and height (`dims`, a struct format read at `dims_at`; "" where the format puts
    them elsewhere) and an end marker after the header."""

    kind: str
    header: int
    header_name: str
    end: bytes
    end_name: str
    tag: bytes = b""
    tag_at: int = 0
    dims: str = ""
    dims_at: int = 0


_LAYOUTS = {  # PNG: W3C PNG 3rd ed. §5.3, §11.2; JPEG: ITU T.81 B.1.1.2; GIF: GIF89a §17, §18, §27
    "image/png": _Layout("PNG", 33, "IHDR header", b"IEND", "IEND chunk", b"\0\0\0\rIHDR", 8, ">II", 16),
    "image/jpeg": _Layout("JPEG", 3, "start-of-image marker", b"\xff\xd9", "end-of-image marker"),
    "image/gif": _Layout("GIF", 13, "header", b"\x3b", "trailer", dims="<HH", dims_at=6),
}


def image_problem(data: bytes) -> str | None:
    """What makes `data` (a whole file told an image by `image_type`) no usable image, as a phrase ("a truncated
    PNG: …"), or None when its header is whole and its size plausible. Headers and end markers only, never a
    decode: a server refuses a cut-short file with a 400 that names no file, so an attachment is checked first.

    PNG, JPEG, GIF (`_LAYOUTS`): the whole header, a width and height other than 0, and the end marker after
    the header (IEND, FF D9, 3B). WebP (RIFF): as many bytes as the RIFF header's size field, and a VP8/VP8L/VP8X
    chunk. Anything else: None.
    """
    mime = image_type(data)
    if mime == "image/webp":
        (riff_size,) = struct.unpack("<I", data[4:8])
        if len(data) < max(riff_size + 8, 20) or data[12:15] != b"VP8":
            return f"a truncated WebP: it is {len(data):,} bytes where its header gives {riff_size + 8:,}"
        return None
    if (layout := _LAYOUTS.get(mime or "")) is None:
        return None
    if len(data) < layout.header or data[layout.tag_at:layout.tag_at + len(layout.tag)] != layout.tag:
        return f"a truncated {layout.kind}: it is {len(data):,} bytes and ends before its {layout.header_name}"
    if layout.dims and 0 in struct.unpack_from(layout.dims, data, layout.dims_at):
        return f"a damaged {layout.kind}: its {layout.header_name} gives a width or height of 0"
    if layout.end not in data[layout.header:]:
        return (f"a truncated {layout.kind}: it is {len(data):,} bytes and has no {layout.end_name} (the file is "
                "cut short)")
    return None


def size_text(n: int) -> str:
    """A byte count as people read it: `812 B`, `14 KB`, `2.3 MB` (1 KB = 1024 bytes)."""
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.0f} KB"
    return f"{n / 1024 / 1024:.1f} MB"


@dataclass(frozen=True, slots=True)
class Image:
    """An image a tool returns (the plugin API: `return Image(data, "image/png")`, or a list of text and images).

    Attributes:
        data: the encoded image file's bytes (PNG, JPEG, GIF or WebP).
        mime_type: its MIME type, e.g. `image/png`; `""`: told from `data`'s first bytes.
        name: what the model and a transcript call it (a file name); optional.
    """

    data: bytes
    mime_type: str = ""
    name: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.data, bytes | bytearray | memoryview):
            raise TypeError(f"Image data must be bytes, not {type(self.data).__name__}")
        object.__setattr__(self, "data", bytes(self.data))
        if not self.mime_type:
            object.__setattr__(self, "mime_type", image_type(self.data) or "application/octet-stream")

    @property
    def sha256(self) -> str:
        """The hex SHA-256 of `data` (the name it is stored under)."""
        return hashlib.sha256(self.data).hexdigest()

    def data_url(self) -> str:
        """`data:MIME;base64,…`, as an `image_url` part carries it."""
        return f"data:{self.mime_type};base64,{base64.b64encode(self.data).decode('ascii')}"

    def placeholder(self) -> str:
        """The text that stands for the image where only text goes (a tool message, a text-only model)."""
        return f"[image: {self.name + ', ' if self.name else ''}{self.mime_type}, {size_text(len(self.data))}]"


def data_url_image(url: str) -> Image | None:
    """The image of a `data:MIME;base64,…` URL, or None when `url` is not one (an http URL, a reference)."""
    found = _DATA_URL.fullmatch(url)
    if found is None:
        return None
    try:
        return Image(base64.b64decode(found.group(2), validate=False), found.group(1))
    except (binascii.Error, ValueError):
        return None


def image_part(image: Image, name: str | None = None) -> dict[str, Any]:
    """The Chat Completions content part of `image`, with `name` (default `image.name`; `""`: none) under
    `IMAGE_KEY` when there is one: transcripts name the image by it, servers never get it."""
    part: dict[str, Any] = {"type": "image_url", "image_url": {"url": image.data_url()}}
    if shown := image.name if name is None else name:
        part[IMAGE_KEY] = {"name": shown}
    return part


def sendable_content(content: list[Any]) -> list[Any]:
    """A content list as it goes to a server: its parts without `IMAGE_KEY`. The same list when no part has it."""
    if not any(isinstance(p, dict) and IMAGE_KEY in p for p in content):
        return content
    return [{k: v for k, v in p.items() if k != IMAGE_KEY} if isinstance(p, dict) else p for p in content]


def is_image_part(part: Any) -> bool:
    """Whether a content part is an image (`image_url`)."""
    return isinstance(part, dict) and part.get("type") == "image_url"


def image_parts(content: Any) -> list[dict[str, Any]]:
    """The image parts of a message's content (a string has none)."""
    return [p for p in content if is_image_part(p)] if isinstance(content, list) else []


def attached_line(name: str) -> str:
    """The line of a prompt's text that names an image attached to it (`attachments.user_content`): the model
    reads which file each image is; a transcript shows the image there, once (`history.content_text`)."""
    return f"[attached image: {name}]"


def image_name(part: dict[str, Any]) -> str:
    """The name an image part carries under `IMAGE_KEY`, `""` when it has none."""
    ref = part.get(IMAGE_KEY)
    return str(ref.get("name") or "") if isinstance(ref, dict) else ""


def describe_part(part: dict[str, Any], *, named: bool = True) -> str:
    """`[image: NAME, SIZE]` for an image part: NAME is the image's name (`IMAGE_KEY`), else a stored reference's
    file or a data URL's type (an image of an older session, which kept no name). `named=False`: never the name
    (the text compaction sends the model stays as it was)."""
    image_url = part.get("image_url")
    url = image_url.get("url") if isinstance(image_url, dict) else image_url
    ref = part.get(IMAGE_KEY)
    ref = ref if isinstance(ref, dict) else {}
    name = image_name(part) if named else ""
    if "file" in ref:
        return f"[image: {name or ref.get('file', '')}, {size_text(int(ref.get('bytes') or 0))}]"
    if isinstance(url, str) and (image := data_url_image(url)) is not None:
        return f"[image: {name or image.mime_type}, {size_text(len(image.data))}]"
    return f"[image: {url if isinstance(url, str) and not url.startswith('data:') else 'inline'}]"


TOOL_IMAGES_NOTE = "[crow: the images the tool calls above returned, in order]"
"""The first line of the user message that carries a turn's tool images: it tells that message from a prompt."""


def is_tool_images(message: Any) -> bool:
    """Whether `message` is the user message carrying a turn's tool images (`tool_images_message`), not a prompt."""
    content = message.get("content") if isinstance(message, dict) and message.get("role") == "user" else None
    first = content[0] if isinstance(content, list) and content else None
    return isinstance(first, dict) and str(first.get("text", "")).startswith(TOOL_IMAGES_NOTE)


def tool_images_message(results: Iterable[tuple[str, str, Sequence[Image]]]) -> dict[str, Any] | None:
    """The user message that shows the model the images of a turn's tool results, or None when none has one.

    `results`: `(tool name, tool_call_id, images)` per result, in call order. Chat Completions tool messages
    carry text only, so the images follow the turn's tool messages in one user message: a text part naming
    whose they are, then one `image_url` part per image (the contract's order: every tool message first),
    named (`IMAGE_KEY`) by the image's own name, else `from TOOL`.
    """
    lines, parts = [], []
    for name, call_id, images in results:
        for image in images:
            lines.append(f"{name}{f' ({call_id})' if call_id else ''}: {image.placeholder()}")
            parts.append(image_part(image, image.name or f"from {name}"))
    if not parts:
        return None
    text = TOOL_IMAGES_NOTE + "\n" + "\n".join(lines)
    return {"role": "user", "content": [{"type": "text", "text": text}, *parts]}
