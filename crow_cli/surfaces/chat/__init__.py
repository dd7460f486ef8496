"""`crow chat`: the app and its sink (`app`, `sink`), the slash commands (`commands`) and the terminal
(`terminal`: input history, key bindings, the piped reader, echo)."""

from .app import ChatApp, ChatOptions, run_chat
from .commands import SlashCommand, help_text

__all__ = ["ChatApp", "ChatOptions", "SlashCommand", "help_text", "run_chat"]
