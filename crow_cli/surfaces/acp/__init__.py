"""`crow acp`: crow as an Agent Client Protocol agent, for editors (Zed, JetBrains IDEs, Neovim, Emacs).

    editor ──JSON-RPC on stdin/stdout (acp SDK)──► CrowAgent ──► Session.prompt ──► Driver.run
       ▲                                                                              │ events
       └──────────── session/update, session/request_permission ◄── Session.handle ◄──┘

Protocol version 1 (`acp.PROTOCOL_VERSION`) through the `agent-client-protocol` SDK: it parses and
validates every message (malformed params are a -32602 error, an unknown method -32601) and runs each
request as a task of its own, so `session/cancel` arrives while a prompt runs.

- stdout is the protocol's alone (`stdout.private_stdout`): the real descriptor 1 is kept for it and
  descriptor 1 points at stderr, so whatever a tool, plugin, subprocess or library prints lands on
  stderr. Logs go to stderr.
- ACP sessions are crow sessions (the SQLite store): `crow sessions list` shows them and `crow chat
  --resume ID` continues one; `session/load` replays a stored history as `session/update` notifications.
  A session created but never prompted is deleted when the process ends.
- ACP tool-call ids are crow's own, `"{turn}-{index}"` with a turn counter per session (unique within the
  session, also across prompts and after a load); the model's ids go into the history unchanged
  (`../shared/reference/streaming-tool-calls.md` §7).
- When the editor offers `fs/read_text_file` and `fs/write_text_file`, the file tools use them
  (`editor_files`): unsaved buffers are read, edits show in the editor.
- Session modes are approval policies: `ask`, `auto-edit`, `yolo` (crow's own) and `read-only` (every
  tool that needs approval is refused). "Allow always" / "reject always" hold for the session.
"""

from __future__ import annotations

from .agent import CrowAgent
from .convert import prompt_text, tool_kind
from .serve import serve_acp, serve_streams
from .session import MODES

__all__ = ["MODES", "CrowAgent", "prompt_text", "serve_acp", "serve_streams", "tool_kind"]
