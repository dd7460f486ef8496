"""Pure conversions between crow and the Agent Client Protocol: prompt blocks, titles, kinds, locations, diffs.

No I/O but reading a file for a diff; no session state: each function maps values to values.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import acp
from acp import RequestError
from acp.schema import (
    AudioContentBlock,
    BlobResourceContents,
    EmbeddedResourceContentBlock,
    HttpMcpServer,
    ImageContentBlock,
    McpServerStdio,
    ResourceContentBlock,
    TextContentBlock,
    TextResourceContents,
    ToolCallLocation,
    ToolKind,
)

from ...config import OPTIONS
from ...errors import ToolError
from ...history import AssistantMessage, ToolCall, as_json, thinking_of
from ...modes import APPROVAL_MODES, SANDBOX_MODES
from ...text import clean_text, has_surrogates, strip_controls
from ...tools.builtin.edits import MAX_EDIT_BYTES, apply_edit, check_edit
from ...tools.tool import Tool
from ...tools.workspace import resolve_in_workspace
from ...wire.profiles import BLOCK_TEXT_FIELDS, REASONING_BLOCK_FIELDS, REASONING_FIELDS
from ..common import short_json

__all__ = ["ACP_KINDS", "arguments", "diff_of", "disk_diff", "edit_target", "editor_failure", "for_editor",
           "line_error", "locations", "mcp_tables", "prompt_text", "reasoning_text", "screen_line", "stored_diff",
           "title", "tool_kind"]

log = logging.getLogger("crow.acp")

_FLAG_KEYS = {option.flag: option.key for option in OPTIONS if option.flag}
_FLAG = re.compile(r"--([a-z][a-z-]+)(?:[ =]([A-Za-z0-9_.:/-]+))?")


_FLAG_VALUES = {"approval": APPROVAL_MODES, "sandbox": SANDBOX_MODES}
"""The keys whose value a message may give after the flag (`--sandbox off`); other words after a flag are prose."""


def _config_words(match: re.Match[str]) -> str:
    key = _FLAG_KEYS.get(f"--{match.group(1)}")
    if key is None:
        return match.group(0)
    value = match.group(2)
    if value in _FLAG_VALUES.get(key, ()):
        return f'`{key} = "{value}"` in crow\'s config'
    return f"the config key `{key}`{match.group(0)[len(match.group(1)) + 2:]}"


def for_editor(message: str) -> str:
    """A message of the CLI's as an editor's user reads it: without the `crow: ` prefix (the log line has its
    own), and with each command-line flag that has a config key named by that key (`--sandbox off` becomes
    `` `sandbox = "off"` in crow's config ``): the editor starts crow, its user sets no flag."""
    return _FLAG.sub(_config_words, message.removeprefix("crow: "))


ACP_KINDS: dict[str, ToolKind] = {"read": "read", "write": "edit", "search": "search", "shell": "execute",
                                  "fetch": "fetch", "plan": "switch_mode", "other": "other"}
"""A tool's neutral kind (`tools.registry.ToolKind`) as the editor protocol (ACP `ToolKind`) names it."""


def tool_kind(tool: Tool | None) -> ToolKind:
    """The ACP `kind` of a tool: read, edit, search, execute, fetch or other (`other` for an unknown tool)."""
    return ACP_KINDS.get(tool.kind, "other") if tool is not None else "other"


def arguments(call: ToolCall) -> dict[str, Any] | None:
    try:
        args = json.loads(call.arguments)
    except ValueError:
        return None
    return args if isinstance(args, dict) else None


def title(call: ToolCall, args: dict[str, Any] | None) -> str:
    name = strip_controls(call.name) or "(no name)"
    if args is not None and isinstance(args.get("command"), str):
        return f"{name}: {short_json(args['command'], 120)}"
    if args is not None and isinstance(args.get("path"), str):
        return f"{name} {short_json(args['path'], 120)}"
    return f"{name}({short_json(call.arguments)})"


def locations(args: dict[str, Any] | None, root: Path) -> list[ToolCallLocation] | None:
    if args is None or not isinstance(args.get("path"), str):
        return None
    try:
        path = resolve_in_workspace(args["path"], root)
    except (ToolError, OSError, ValueError):  # outside the workspace, a symlink loop
        return None
    line = args.get("start_line")
    return [ToolCallLocation(path=str(path), line=line if isinstance(line, int) and line >= 0 else None)]


def edit_target(tool: Tool | None, args: dict[str, Any] | None, root: Path) -> Path | None:
    """The file a file-changing tool (kind `write`) will change; None for another tool or a bad path."""
    if tool is None or tool.kind != "write" or args is None or not isinstance(args.get("path"), str):
        return None
    try:
        return resolve_in_workspace(args["path"], root)
    except (ToolError, OSError, ValueError):  # outside the workspace, a symlink loop
        return None


def diff_of(args: dict[str, Any], file: Path, old: str | None, *, strict: bool = False) -> Any | None:
    """The `diff` content block a change of `file` (now `old`, None: absent) will make; None when unknown.

    An edit (`old_string` / `new_string` arguments) is made by the built-in edit's own rules
    (`edits.check_edit`, `edits.apply_edit`: one match unless `replace_all`, a CRLF text matched and
    written in its own line ends); other arguments with a `content` replace the whole text.

    Raises:
        ToolError: with `strict`, the edit cannot be made: the error the tool itself would answer.
    """
    o, n = args.get("old_string"), args.get("new_string")
    if isinstance(o, str) and isinstance(n, str):
        if old is None:
            return None
        try:
            check_edit(o, n)
            new: object = apply_edit(old, o, n, bool(args.get("replace_all")), str(args.get("path")))[0]
        except ToolError:
            if strict:
                raise
            return None
    else:
        new = args.get("content")
    return acp.tool_diff_content(str(file), new, old) if isinstance(new, str) else None


def disk_diff(tool: Tool | None, args: dict[str, Any] | None, root: Path) -> Any | None:
    """The `diff` content block (old and new text) a change will make, from the disk; None when unknown."""
    file = edit_target(tool, args, root)
    if file is None or args is None:
        return None
    try:  # the size first: a huge file is not read whole for a preview (edit_file refuses it anyway)
        if file.is_file() and file.stat().st_size > MAX_EDIT_BYTES:
            return None
        old = file.read_bytes().decode("utf-8") if file.is_file() else None  # its own line ends
    except (OSError, UnicodeDecodeError):
        return None
    return diff_of(args, file, old)


def stored_diff(tool: Tool | None, args: dict[str, Any] | None, root: Path) -> Any | None:
    """The diff of a stored edit (`old_string` → `new_string`) for a replay: the replaced text and its
    replacement (the whole file before and after is not stored); None for another call."""
    file = edit_target(tool, args, root)
    if file is None or args is None:
        return None
    old, new = args.get("old_string"), args.get("new_string")
    return acp.tool_diff_content(str(file), new, old) if isinstance(old, str) and isinstance(new, str) else None


def typed_text(blocks: Sequence[Any]) -> str:
    """The text blocks of a `session/prompt` alone, without its resources: what a new session is titled by."""
    return " ".join(block.text for block in blocks if isinstance(block, TextContentBlock))


def prompt_text(blocks: Sequence[Any]) -> str:
    """The user message of a `session/prompt`: text, resource links and embedded resources, in order.

    A link becomes a line naming it (a `file://` link by its path, for the file tools); an embedded
    text resource is included whole inside `<context uri="…">` tags (a `</context` in its text is
    written `<\\/context`, a `"` in its uri `%22`, so it cannot end the wrapper); a binary one is named only.

    Raises:
        RequestError: -32602 for an image or audio block (not advertised in `promptCapabilities`), or a
            prompt with no text at all.
    """
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, TextContentBlock):
            parts.append(block.text)
        elif isinstance(block, ResourceContentBlock):
            parts.append(f"[{block.name}]({_uri_text(block.uri)})")
        elif isinstance(block, EmbeddedResourceContentBlock):
            resource = block.resource
            if isinstance(resource, TextResourceContents):
                uri = _uri_text(resource.uri).replace('"', "%22")  # neither can end the wrapper early
                body = resource.text.replace("</context", "<\\/context")
                parts.append(f'<context uri="{uri}">\n{body}\n</context>')
            elif isinstance(resource, BlobResourceContents):
                parts.append(f"[attached binary {_uri_text(resource.uri)} ({resource.mime_type or 'unknown type'}), "
                             "not shown]")
        elif isinstance(block, ImageContentBlock | AudioContentBlock):
            raise RequestError(-32602, f"crow accepts text, resource links and embedded resources, not {block.type}")
    text = "\n\n".join(parts)
    if not text.strip():
        raise RequestError(-32602, "the prompt is empty")
    return text


def _uri_text(uri: str) -> str:
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme == "file" else uri


def reasoning_text(assistant: AssistantMessage) -> str:
    """The reasoning of a stored assistant message, to show as a thought: its reasoning text field, or else
    the text and summaries of its reasoning blocks (a gateway may send only those), or else the thinking parts
    of its content (Mistral), "" when it has none."""
    message = as_json(assistant)  # reasoning is kept under the server's own field names
    for name in REASONING_FIELDS:
        if isinstance(message.get(name), str) and message[name]:
            return str(message[name])
    blocks = next((v for v in map(message.get, REASONING_BLOCK_FIELDS) if isinstance(v, list)), [])
    texts: list[Any] = [block.get(name) for block in blocks if isinstance(block, dict) for name in BLOCK_TEXT_FIELDS]
    content = message.get("content")
    if not texts and isinstance(content, list):
        texts = [thinking_of(part) for part in content]
    return "\n\n".join(text for text in texts if isinstance(text, str) and text)


def mcp_tables(servers: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """The editor's MCP servers as crow `[mcp_servers]` tables (stdio and streamable HTTP)."""
    tables: dict[str, dict[str, Any]] = {}
    for server in servers:
        if isinstance(server, McpServerStdio):
            tables[server.name] = {"command": server.command, "args": list(server.args),
                                   "env": {v.name: v.value for v in server.env}}
        elif isinstance(server, HttpMcpServer):
            if server.headers:
                log.warning("MCP server %r: crow sends no HTTP headers; connecting without them", server.name)
            tables[server.name] = {"url": server.url}
        else:
            log.warning("MCP server %r: transport %r is not supported; skipped", getattr(server, "name", "?"),
                        getattr(server, "type", "?"))
    return tables



def _invalid(ident: Any, what: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "error": {"code": -32600, "message": f"Invalid Request: {what}"}}


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
"""A JSON escape of a UTF-16 surrogate half (`\\ud83d`); only lines holding one are checked further."""


def screen_line(line: bytes) -> tuple[bytes | None, dict[str, Any] | None]:
    """What to do with one input line: the line to pass on to the SDK (None: none) and an answer to write
    at once (None: none).

    JSON-RPC 2.0 §4-5: -32700 for a line that is not JSON (or not UTF-8); -32600 for JSON that is not a
    request object (`[]`, `42`, `null`, a batch: crow does not take batches), a request whose `jsonrpc`
    is not "2.0", whose `id` is not a string, a number or null (answered with id null), whose `method`
    is not a string, or that has neither a method nor a result or error (it is no answer to crow
    either). `session/cancel` is a notification in ACP; sent as a request, it is passed on as the
    notification and answered with a null result. Answers from the editor pass on unchecked.
    A lone surrogate escape (half of an emoji pair) in any string becomes U+FFFD, as typed text does in
    chat: Python would hold it as a string that can never be encoded (sent, stored or printed).
    """
    try:
        message = json.loads(line.decode("utf-8"))
    except (ValueError, RecursionError):  # UnicodeDecodeError is one; so is nesting deeper than the parser goes
        return None, {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}}
    if not isinstance(message, dict):
        what = "a batch (not supported)" if isinstance(message, list) and message else "not a JSON-RPC object"
        return None, _invalid(None, what)
    ident = message.get("id")
    if "id" in message and (isinstance(ident, bool) or not isinstance(ident, str | int | float | None)):
        return None, _invalid(None, "id must be a string, a number or null")
    if "method" not in message:
        if "result" in message or "error" in message:
            return _paired(line, message), None  # the editor's answer to a request of crow's
        return None, _invalid(ident, "no method")
    if message.get("jsonrpc") != "2.0":
        return None, _invalid(ident, 'jsonrpc must be "2.0"')
    if not isinstance(message["method"], str):
        return None, _invalid(ident, "method must be a string")
    if message["method"] == "session/cancel" and "id" in message:
        notification = {k: v for k, v in message.items() if k != "id"}
        return json.dumps(notification).encode(), {"jsonrpc": "2.0", "id": ident, "result": None}
    return _paired(line, message), None


def _paired(line: bytes, message: dict[str, Any]) -> bytes:
    """`line`, or `message` written again with its lone surrogates replaced (U+FFFD) when it holds any."""
    if _SURROGATE_ESCAPE.search(line) is None:
        return line
    text = json.dumps(message, ensure_ascii=False)
    return clean_text(text).encode("utf-8") if has_surrogates(text) else line


def line_error(line: bytes) -> dict[str, Any] | None:
    """The JSON-RPC error answering one input line that is not passed on (None: pass it on); see `screen_line`."""
    passed, answer = screen_line(line)
    return answer if passed is None else None


def editor_failure(exc: Exception) -> str:
    """What a failed request to the editor (a JSON-RPC error, or an answer that is not the response
    ACP defines: a pydantic `ValidationError`) says, on one line of at most 300 characters."""
    if isinstance(exc, RequestError):
        return " ".join(str(exc).split())[:300]
    return "its answer was malformed"
