"""`crow chat`: an interactive chat, recorded as a session."""

from __future__ import annotations

from typing import Annotated

import typer

from ..errors import ConfigError, CrowError
from .options import (
    LocalModelOpt,
    LocalOpt,
    NoSessionOpt,
    RunFlags,
    ask_trust,
    check_before_start,
    fail,
    resumed_model,
    served_model,
    with_run_flags,
)

__all__ = ["chat"]


@with_run_flags()
def chat(
    *,
    session_id: Annotated[str | None, typer.Argument(metavar="PROMPT|ID", show_default=False,
                                                     help="The first message to send; with --resume, the "
                                                     "session to continue.")] = None,
    resume: Annotated[bool, typer.Option("--resume", "-r", help="Continue a session: the one with id ID, or "
                                         "one picked from a list (this folder's first; with no terminal, this "
                                         "folder's most recent).")] = False,
    flags: RunFlags,
    no_session: NoSessionOpt = False,
    local: LocalOpt = False,
    local_model: LocalModelOpt = None,
) -> None:
    """Chat with the model in the terminal; type /help for commands. Sessions are kept (crow sessions)."""
    from ..surfaces.chat.app import ChatOptions, run_chat

    try:
        if resume and (flags.system_file is not None or flags.no_default_prompt):
            flag = "--system-file" if flags.system_file is not None else "--no-default-prompt"
            raise ConfigError(f"{flag} cannot change "
                              "the system prompt of a resumed session; start a new chat for a new one")
        first = session_id if not resume else None  # `crow chat "fix the test"`: the first message
        if first is not None and not first.strip():
            raise ConfigError("the first message is empty; give a prompt, or none to start with the prompt line")
        if resume and session_id is not None and not session_id.strip():
            raise ConfigError("--resume needs a session id, or none to pick a session")
        settings = flags.settings(local_model)
        check_before_start(settings, yes=flags.yes, local=local or bool(local_model))
        ask_trust(settings)  # before anything of the project is read: its hooks, skills and agents go by it
        if not (local or local_model):  # the resumed session's model, else for a server not OpenAI's one it serves
            settings = served_model(resumed_model(settings, flags.model, session_id if resume else None))
        options = ChatOptions(surface=flags.surface(), resume=(session_id or "") if resume else None,
                              session=not no_session, system=flags.system, first=first,
                              session_model=not flags.model)
        import asyncio  # not at import time: `crow tools` and `--help` do without it

        from ..local import local_session  # start, then stop, the local server

        with local_session(settings, enabled=local or bool(local_model)) as settings:
            code = asyncio.run(run_chat(settings, options))
    except CrowError as exc:
        raise fail(exc, debug=flags.debug) from None
    raise typer.Exit(code)
