"""Attachments: files put into the user's message (`crow run -f FILE`, `@path` in chat).

A text file goes into the message's text under a line naming its path, fenced (the fence is longer
than any backtick run in the file). An image (PNG, JPEG, GIF, WebP, told by its first bytes) goes as
an OpenAI `image_url` content part with a `data:` URL, for vision models, named by its path
(`images.IMAGE_KEY`, kept in the session, never sent); the message's content is then a list of parts
(`text` first). Paths are confined to the workspace, as the file tools are.

Errors are `ConfigError`s (exit 2), one line each: outside the workspace, missing, a folder, too
big (text 256 KiB, images 10 MiB), binary and not an image, or an image cut short (`images.image_problem`).
"""

from __future__ import annotations

import base64
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ConfigError, ToolError
from .images import IMAGE_KEY, MAX_IMAGE_BYTES, Image, attached_line, image_problem, image_type
from .text import BOMS, clean_text, decode_text, mask_secrets
from .tools.workspace import resolve_in_workspace, workspace_root

__all__ = ["MAX_IMAGE_BYTES", "MAX_TEXT_BYTES", "Attachment", "image_attachment", "load_attachment",
           "mentioned_files", "user_content"]

MAX_TEXT_BYTES = 256 * 1024
_MENTION = re.compile(r"(?<!\S)@(\S+)")


@dataclass(frozen=True, slots=True)
class Attachment:
    """One file to attach."""

    shown: str
    """Its path relative to the workspace root (as shown to the model)."""
    text: str | None = None
    """The file's text (a text file)."""
    data_url: str | None = None
    """`data:image/…;base64,…` (an image)."""


def image_attachment(data: bytes, shown: str) -> Attachment:
    """An image given as bytes (piped on stdin) as an attachment named `shown`.

    Raises:
        ConfigError: `data` is no PNG, JPEG, GIF or WebP image, is over the 10 MiB cap, or is cut short.
    """
    mime = image_type(data)
    if mime is None:
        raise ConfigError(f"cannot attach {shown}: not a PNG, JPEG, GIF or WebP image")
    if len(data) > MAX_IMAGE_BYTES:
        raise ConfigError(f"cannot attach {shown}: it is {len(data):,} bytes; images are attached up to "
                          f"{MAX_IMAGE_BYTES:,}")
    if problem := image_problem(data):
        raise ConfigError(f"cannot attach {shown}: {problem}")
    return Attachment(shown, data_url=Image(data, mime).data_url())


def load_attachment(path: str, root: Path | None = None, secrets: Iterable[str | None] = (), *,
                    image_only: bool = False) -> Attachment:
    """Read `path` (relative to the workspace `root`, or absolute inside it) as an attachment.

    `root` defaults to the current tool context's workspace (`tools.workspace.workspace_root`). Each of
    `secrets` (the run's API keys) in a text file is masked (`text.mask_secrets`), as in tool output.
    `image_only` (`-i FILE`): a file that is no image is refused.

    Raises:
        ConfigError: outside the workspace, missing, not a file, over the size cap, binary (with
            `image_only`: not an image), or an image cut short.
    """
    try:
        root = root or workspace_root()
        file = resolve_in_workspace(path, root)
    except ToolError as exc:  # outside the workspace, a symlink loop
        raise ConfigError(f"cannot attach {clean_text(path)!r}: {exc}") from None
    if not file.is_file():
        raise ConfigError(f"cannot attach {clean_text(path)!r}: {'not a file' if file.exists() else 'no such file'}")
    shown = clean_text(file.relative_to(root).as_posix())  # a non-UTF-8 name: U+FFFD, sendable and storable
    try:  # O_NONBLOCK: a FIFO swapped in after the check is refused, not waited on; never more than the cap read
        with open(file, "rb", opener=lambda p, flags: os.open(p, flags | os.O_NONBLOCK)) as fh:
            info = os.fstat(fh.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise ConfigError(f"cannot attach {shown}: not a file")
            head = fh.read(16)
            mime = image_type(head)
            if image_only and mime is None:
                raise ConfigError(f"cannot attach {shown} with -i: not a PNG, JPEG, GIF or WebP image (-f attaches "
                                  "text files)")
            cap = MAX_IMAGE_BYTES if mime else MAX_TEXT_BYTES
            data = head + fh.read(max(cap + 1 - len(head), 0))
            size = max(info.st_size, len(data))
            if size > cap:
                kind = "images" if mime else "text files"
                raise ConfigError(f"cannot attach {shown}: it is {size:,} bytes; {kind} are attached up to {cap:,}")
    except OSError as exc:
        raise ConfigError(f"cannot attach {shown}: {exc.strerror}") from None
    if mime:
        if problem := image_problem(data):
            raise ConfigError(f"cannot attach {shown}: {problem}")
        return Attachment(shown, data_url=f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}")
    if b"\0" in data and not data.startswith(tuple(bom for bom, _codec, _name in BOMS)):  # UTF-16/32 hold NULs
        raise ConfigError(f"cannot attach {shown}: a binary file (only text files and PNG, JPEG, GIF or WebP "
                          "images can be attached)")
    return Attachment(shown, text=mask_secrets(decode_text(data), secrets))


def _fenced(item: Attachment) -> str:
    text = item.text or ""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"[attached file: {item.shown}]\n{fence}\n{text}{'' if text.endswith(chr(10)) else chr(10)}{fence}"


def user_content(prompt: str, attachments: list[Attachment]) -> str | list[dict[str, Any]]:
    """The user message's `content`: the prompt with the text files after it; a list of content parts
    (text, then one `image_url` per image, named by its path under `images.IMAGE_KEY`) when there are images."""
    text = "\n\n".join([prompt, *(_fenced(a) for a in attachments if a.text is not None)])
    images = [a for a in attachments if a.data_url is not None]
    if not images:
        return text
    text += "\n\n" + "\n".join(attached_line(a.shown) for a in images)
    return [{"type": "text", "text": text},
            *({"type": "image_url", "image_url": {"url": a.data_url}, IMAGE_KEY: {"name": a.shown}} for a in images)]


def mentioned_files(text: str, root: Path | None = None) -> list[str]:
    """The `@path` mentions in `text` that name an existing file (relative to `root`, default the
    workspace root); other `@words` (a handle, an e-mail) are left as text."""
    base = root or workspace_root()
    found = []
    for match in _MENTION.finditer(text):
        path = match.group(1).rstrip(".,;:!?)")
        candidate = Path(path).expanduser()
        if (candidate if candidate.is_absolute() else base / candidate).is_file() and path not in found:
            found.append(path)
    return found
