"""`crow acp`: crow as an Agent Client Protocol agent, for editors (Zed, JetBrains IDEs, Neovim, Emacs).

    editor ──JSON-RPC on stdin/stdout (acp SDK)──► CrowAgent ──► Session.prompt ──► Driver.run
       ▲                                                                              │ events
       └──────────── session/update, session/request_permission ◄── Session.handle ◄──┘

Protocol version 1 (`acp.PROTOCOL_VERSION`) through the `agent-client-protocol` SDK: it parses and
validates every message (malformed params are a -32602 error, an unknown method -32601) and runs each
request as a task of its own, so `session/cancel` arrives while a prompt runs. What an editor sees (sessions,
modes, ids, its files) is told at `agent.CrowAgent`; docs/editors.md tells it to users.
"""

from __future__ import annotations

from .agent import CrowAgent
from .convert import prompt_text, tool_kind
from .serve import serve_acp, serve_streams
from .session import MODES

__all__ = ["MODES", "CrowAgent", "prompt_text", "serve_acp", "serve_streams", "tool_kind"]
