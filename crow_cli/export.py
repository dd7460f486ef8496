"""A session as text: a Markdown transcript, one JSON object, or a JSON line per message.

Images go by reference (the store's `images/` file), never inline. The transcript fences tool output with
more backticks than it holds and closes a code block an answer left open, so no stored text can end a turn
early or turn the next heading into code.
"""

from __future__ import annotations

import errno
import json
import re
import time
from pathlib import Path
from typing import Any

from .atomic import write_atomic
from .errors import SessionError
from .history import Message, content_text, tool_calls_of
from .private import private_dir
from .sessions import SessionInfo, StoredCheckpoint, StoredSubagentRun, by_reference, default_db_path

__all__ = ["EXPORT_FORMATS", "ExportExists", "export_session", "exports_dir", "write_export"]

EXPORT_FORMATS = ("md", "json", "jsonl")


def exports_dir() -> Path:
    """`crow/exports` in the platformdirs user data dir, beside the store: where chat's `/export` writes
    when given no path (never into the repository the chat works in)."""
    return default_db_path().parent / "exports"


class ExportExists(FileExistsError):
    """The export's path names a file already there (`write_export` without `replace`)."""


def write_export(path: Path, data: bytes, *, replace: bool = False, make_folder: bool = False) -> None:
    """Write an export (`export_session`'s text, encoded) to `path`: private, as the session store is (a
    new file 0600, folders crow creates 0700), and atomically (a failure leaves an older file whole). A file
    already there is replaced only with `replace` (crow's own exports folder, `--force`): a path the person
    names may be any file of theirs. Its folder is created only with `make_folder` (crow's own exports
    folder): as with `cp`, a folder the person names must exist, so a typo in it makes no folders.

    Raises:
        ExportExists: `path` is a file and `replace` is False.
        FileNotFoundError: its folder does not exist and `make_folder` is False.
        OSError: it cannot be written; `atomic.NotRegularFile` when `path` is a FIFO, device or folder.
    """
    if not replace and (path.is_file() or path.is_symlink()):  # a FIFO or device: `write_atomic` says what it is
        raise ExportExists(errno.EEXIST, "it exists; crow does not overwrite a file", str(path))
    if make_folder:
        private_dir(path.parent)
    elif not path.parent.is_dir():
        raise FileNotFoundError(errno.ENOENT, "no such folder (crow creates none for a path you give)", str(path))
    write_atomic(path, data, private=True)


def export_session(info: SessionInfo, messages: list[Message], fmt: str,
                   checkpoints: list[StoredCheckpoint] | None = None,
                   subagents: list[StoredSubagentRun] | None = None) -> str:
    """The session as text: `md` (a readable transcript), `json` (one object) or `jsonl` (a line per message).

    Compaction `checkpoints` are shown in `md` where they were made (with their summary) and listed
    in `json` (`checkpoints`: position, tokens, summary, view); `jsonl` holds the messages only. The
    transcripts of `subagents` follow their parent call's result in `md` and are listed in `json`
    (`subagents`: position, call_id, call_index, agent, messages).

    Raises:
        SessionError: unknown format.
    """
    messages = [by_reference(m) for m in messages]  # an image once, in the store's images folder, not in every export
    if fmt == "json":
        data: dict[str, Any] = {"session": _info_dict(info), "messages": messages}
        if checkpoints:
            data["checkpoints"] = [{"position": c.position, "created_at": c.created_at,
                                    "tokens_before": c.tokens_before, "tokens_after": c.tokens_after,
                                    "summary": c.summary, "view": [by_reference(m) for m in c.view]}
                                   for c in checkpoints]
        if subagents:
            data["subagents"] = [{"position": r.position, "call_id": r.call_id, "call_index": r.call_index,
                                  "agent": r.agent, "created_at": r.created_at, "messages": r.messages}
                                 for r in subagents]
        return json.dumps(data, ensure_ascii=False, indent=2) + "\n"
    if fmt == "jsonl":
        return "".join(json.dumps(m, ensure_ascii=False) + "\n" for m in messages)
    if fmt == "md":
        return _markdown(info, messages, checkpoints or [], subagents)
    raise SessionError(f"unknown export format {fmt!r} (use one of: {', '.join(EXPORT_FORMATS)})")


def _info_dict(info: SessionInfo) -> dict[str, Any]:
    return {"id": info.id, "title": info.title, "created_at": info.created_at, "updated_at": info.updated_at,
            "model": info.model, "base_url": info.base_url, "cwd": info.cwd}


_BACKTICKS = re.compile(r"`+")
_FENCE_LINE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


def _fence(text: str) -> str:
    """A backtick fence longer than any backtick run in `text` (CommonMark: it cannot close early)."""
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    return "`" * max(3, longest + 1)


def _code_span(text: str) -> str:
    """`text` as inline code whose delimiters no backtick run inside can match."""
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    tick = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{tick}{pad}{text}{pad}{tick}"


def _closed_fences(text: str) -> str:
    """Markdown `text` with a code fence it leaves open closed, so the next heading stays a heading."""
    open_fence = ""
    for line in text.split("\n"):
        found = _FENCE_LINE.match(line)
        if found is None:
            continue
        fence, rest = found.groups()
        if not open_fence:
            if not (fence[0] == "`" and "`" in rest):  # an info string with a backtick: not a fence
                open_fence = fence
        elif fence[0] == open_fence[0] and len(fence) >= len(open_fence) and not rest.strip():
            open_fence = ""
    return f"{text}\n{open_fence}" if open_fence else text


def _markdown(info: SessionInfo, messages: list[Message], checkpoints: list[StoredCheckpoint] | None = None,
              subagents: list[StoredSubagentRun] | None = None) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(info.created_at))
    out = [f"# {info.title or 'Untitled session'}\n",
           f"Session {_code_span(info.id)} · {stamp} · model {_code_span(info.model)} · {info.cwd}\n"]
    left = list(subagents or [])  # each shown after its call's result: the first with its id at or after it
    marks: dict[int, list[StoredCheckpoint]] = {}
    for c in checkpoints or []:
        marks.setdefault(c.position, []).append(c)
    for n, m in enumerate([*messages, None]):
        for c in marks.get(n, []):
            how = "the model's summary below" if c.summary else "old tool outputs shortened"
            out.append(f"## Compacted here\n\n{c.tokens_before:,} → {c.tokens_after:,} tokens ({how}); later "
                       "requests start from this point, the messages above stay stored.\n")
            if c.summary:
                out.append("\n".join("> " + line for line in _closed_fences(c.summary).splitlines()) + "\n")
        if m is None:
            break
        out.append(_message_markdown(m))
        run = next((r for r in left if m.get("role") == "tool" and r.call_id == str(m.get("tool_call_id", ""))
                    and r.position <= n), None)
        if run is not None:
            left.remove(run)
            out.append(f"### Subagent {_code_span(run.agent)} (call {_code_span(run.call_id)})\n")
            out += [_message_markdown(child, "####") for child in run.messages]
    return "\n".join(out)


def _message_markdown(m: Message, level: str = "##") -> str:
    """One message as Markdown: a heading of `level` and its text and tool calls, or a tool result's fence."""
    role = m.get("role")
    content = m.get("content")
    if role == "tool":
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        fence = _fence(text)
        return f"**Tool result** ({_code_span(str(m.get('tool_call_id', '')))}):\n\n{fence}\n{text}\n{fence}\n"
    name = {"user": "You", "assistant": "Assistant", "system": "System"}.get(str(role), str(role))
    text = content_text(content, images=True)  # content parts: their text, an image as [image: FILE, SIZE]
    body = [_closed_fences(text)] if text else []
    for call in tool_calls_of(m):
        call_text = f"{call['function']['name']}({call['function']['arguments']})"
        body.append(f"→ {_code_span(call_text)}")
    return f"{level} {name}\n\n" + "\n\n".join(body) + "\n"
