"""`crow chat`: an interactive terminal chat over the react loop, recorded in the session store.

Input is a prompt-toolkit prompt (history file in the user state dir; Enter sends, Alt-Enter (or
Esc Enter) inserts a newline; pasted text keeps its newlines). Output is drawn by
`render.TurnView`. Every message the loop appends is committed to the session as it arrives.

Ctrl-C during a turn, at a tool approval question too, cancels the stream and the running tools; the
partial answer is kept and every tool call of the turn without a result gets a "cancelled by the
user" one, so the history stays valid. At the prompt, a second Ctrl-C in a row (or Ctrl-D, or /exit)
leaves. SIGTERM and SIGHUP end the chat the same way: the turn is cancelled, the session closed and
stored, and the exit code is 143 / 129. Besides the built-in commands (`ChatApp.COMMANDS`), `/NAME`
sends a prompt file (`prompt_files`: `.crow/prompts/NAME.md`) as the message, and a line starting with `!`
runs a shell command the way the model's `run_shell` calls run (`shell_escape`). The driver
(`driver.Driver`) runs each turn and stores each message; the loop closes a cancelled turn's history;
this module only draws events.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import Settings, default_config_path
from ..context.compact import Checkpoint
from ..driver import Driver, Interrupts, chat_interrupts, output_lost
from ..errors import CrowError, SessionError
from ..events import (
    Event,
    MessageAppended,
    Notice,
    ReasoningDelta,
    RunFinished,
    TextDelta,
    ToolResultReady,
    ToolRunStarted,
    TurnFinished,
    WarningEvent,
)
from ..export import EXPORT_FORMATS, ExportExists, export_session, exports_dir, write_export
from ..history import Message, ToolCall, UserMessage, content_text, is_prompt, user_message
from ..prompt_files import ARGUMENTS, PromptFile, PromptFolders, expand, read_prompt, summary
from ..sessions import SessionInfo, SessionStore
from ..text import clean_text, public_url, strip_controls
from ..tools.approval import Answer, always_scope, answer_hint, approval_question, make_approver, parse_answer
from ..tools.mcp import end_task
from ..tools.registry import ToolRegistry
from ..tools.tool import Tool
from ..wire.client import import_in_background
from .ask import ask_approval, typed_keys
from .common import (
    make_console,
    plain_terminal,
)
from .persist import SessionRecorder, open_session
from .render import TurnView
from .runtime import Runtime, RuntimeOptions
from .shell_escape import USAGE, is_shell_note, run_typed, shell_note, typed_command, with_note
from .usage import TokenUse, footer

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["ChatApp", "ChatOptions", "SlashCommand", "help_text", "run_chat"]

KEYS = "Enter sends · Alt-Enter (or Esc Enter) inserts a newline · Ctrl-C stops a turn · Ctrl-D quits"
"""The first line of /help: the keys."""

_COMMAND = re.compile(r"^/([A-Za-z0-9_-]+)(?:\s+(.*))?$", re.DOTALL)
"""`/NAME rest`: a built-in command, or a prompt file's name (`prompt_files.NAME`)."""


@dataclass(frozen=True)
class ChatOptions:
    tools_dirs: tuple[str, ...] = ()
    no_tools: bool = False
    yes: bool = False
    """Approve every tool call without asking."""
    debug: bool = False
    record_dir: str | None = None
    resume: str | None = None
    """Continue this session id; `""` continues the most recent one; None starts a new session."""
    session: bool = True
    """Record the chat in the session store."""
    project_instructions: bool = True
    """Put AGENTS.md files into the system prompt of new sessions (`--no-project-instructions`: off)."""
    system: str | None = None
    """The `--system` flag (None: not given): a resumed session whose system prompt it would change is refused."""


class _Exit(Exception):
    """Raised by /exit (code 0), or when the terminal is gone (the code the driver gave the run)."""

    def __init__(self, code: int = 0) -> None:
        super().__init__(code)
        self.code = code


@dataclass(frozen=True)
class SlashCommand:
    """One chat command: what is typed, one line of help, and the `ChatApp` method that runs it."""

    name: str
    """Typed as `/NAME`."""
    args: str
    """Its arguments as /help shows them (`[NAME]`), or ""."""
    doc: str
    """One line for /help."""
    run: Callable[[Any, str], Awaitable[None]]
    """The `ChatApp` method, given the text after the name."""
    aliases: tuple[str, ...] = ()



class ChatApp:
    """The chat REPL. Construct it, then `await run()`.

    Args:
        settings: connection and loop settings (the model can change with /model).
        options: chat options.
        console: where output goes (default: a rich Console on stdout).
        pt_input, pt_output: prompt-toolkit input and output (default: the terminal); tests pass a
            pipe input and `DummyOutput`.
        store: the session store (default: the one in the user data dir).
        interrupts: the chat's signals (default `driver.chat_interrupts`: Ctrl-C stops the turn, SIGTERM
            and SIGHUP end the chat); entered by `run`.
    """

    def __init__(self, settings: Settings, options: ChatOptions, *, console: Console | None = None,
                 pt_input: Any = None, pt_output: Any = None, store: SessionStore | None = None,
                 interrupts: Interrupts | None = None) -> None:
        self.settings = settings
        self.interrupts = interrupts or chat_interrupts()
        self.options = options
        self.console = console or make_console(highlight=False)
        plain = plain_terminal() or not self.console.is_terminal
        self.view = TurnView(self.console, plain=plain)
        self.pt_input, self.pt_output = pt_input, pt_output
        self._store = store
        self._owns_store = store is None  # opened here (`store`): closed when the chat ends
        self.runtime: Runtime | None = None
        """The chat's run parts: tools, MCP servers, client, driver (made when the chat starts)."""
        self.registry: ToolRegistry | None = None
        self.root = Path.cwd()
        """The workspace root (set when the chat starts)."""
        self.recorder: SessionRecorder | None = None
        self.history: list[Message] = []
        self.usage = self._token_use()
        self.last_usage = self._token_use()
        self.approver = make_approver(settings.approval, allow=settings.allow, deny=settings.deny, yes=options.yes,
                                      ask=self.ask)
        """The approval policy (--approval, --allow, --deny, --yes); "always" answers last for this chat."""
        self.driver: Driver | None = None
        self._unrecorded = False  # the store could not be opened: said once, not retried
        self._calls: dict[int, ToolCall] = {}
        self._in_tools = False
        self._commands: dict[str, Callable[[str], Awaitable[None]]] = {
            name: partial(command.run, self) for command in self.COMMANDS for name in (command.name, *command.aliases)}
        self._told: set[str] = set()  # the prompt files' notes said in this chat (each once)
        self._compacting: asyncio.Task[None] | None = None
        self._mcp_joining: asyncio.Task[None] | None = None
        """Until it is awaited (`_mcp_ready`): the MCP servers' start, which says its problems when it ends."""

    # set-up

    @property
    def store(self) -> SessionStore:
        if self._store is None:
            self._store = SessionStore()
        return self._store

    async def _start(self, runtime: Runtime) -> None:
        self.runtime, self.root, self.registry = runtime, runtime.workspace, runtime.registry
        self.settings = runtime.settings  # with the AGENTS.md files
        for problem in await runtime.start(wait_for_mcp=False):  # the prompt is up while MCP servers start
            self.view.line(f"crow: warning: {strip_controls(problem)}", "yellow")
        if names := runtime.mcp_pending:
            self.view.line(f"crow: starting MCP servers: {', '.join(names)} (their tools join when they are up)",
                           "dim")
            self._mcp_joining = asyncio.create_task(self._join_mcp(runtime), name="crow-mcp-join")
        # files crow's tools change: /undo restores them (the backup follows /new and /resume)
        self.driver = runtime.new_driver(self.approver, context=replace(runtime.context, backup=self._backup),
                                         interrupts=self.interrupts)
        if self.options.resume is not None:
            self._open(self.options.resume or None, latest=not self.options.resume, system=self.options.system)
        else:
            self._fresh()

    def _fresh(self) -> None:
        if self._store is not None:
            self._store.release()  # the session left behind may be continued elsewhere now
        self.recorder = None
        if self.options.session and not self._unrecorded:
            try:
                self.recorder = SessionRecorder(self.store, self.settings)
            except SessionError as exc:  # e.g. a damaged sessions.db: say it once, keep chatting (as crow run)
                self._unrecorded = True
                self.view.line(f"crow: warning: {strip_controls(str(exc))}; this chat is not recorded", "yellow")
        self.history = [{"role": "system", "content": self.settings.system}] if self.settings.system else []
        self.usage = self._token_use()
        self.last_usage = self._token_use()
        self._new_compactor()

    def _new_compactor(self, checkpoint: Checkpoint | None = None) -> None:
        """The conversation's compactor (window, checkpoint) for the current session and model; without a
        recorder (--no-session) it starts from `checkpoint` and stores nothing."""
        if self.runtime is not None:
            self.runtime.use_session(self.recorder, checkpoint)

    def _open(self, session_id: str | None, *, latest: bool, system: str | None = None) -> None:
        recorder, history = open_session(self.settings, session_id=session_id, latest=latest, store=self.store,
                                         record=self.options.session, system=system)
        assert recorder.info is not None  # open_session raises when it finds none
        self.store.release(keep=recorder.info.id)
        self.recorder, self.history = recorder, history
        if not self.options.session:  # --no-session: read the old one, record nothing new
            self.recorder = None
            self.view.line("--no-session: this session is read, but nothing new is stored in it (/undo has nothing "
                           "to undo; /export writes what this chat holds)", "yellow")
        self.usage, self.last_usage = self._token_use(), self._token_use()
        self._new_compactor(recorder.checkpoint)
        info = recorder.info
        self.view.line(f"resumed session {info.id} “{strip_controls(info.title)}” ({len(history)} messages)", "bold")
        if recorder.previous_model:
            self.view.line(f"this session was using {strip_controls(recorder.previous_model)}; continuing with "
                           f"{self.settings.model}", "yellow")
        self._show_last_exchange()

    def _last_user(self) -> int | None:
        """Where the last user message is in the history (None: there is none)."""
        return next((i for i in range(len(self.history) - 1, -1, -1) if is_prompt(self.history[i])), None)

    def _show_user(self, at: int) -> None:
        """The user message at `at` as a dim `› …` line: its text (an image is named in it)."""
        self.view.line(f"› {strip_controls(content_text(self.history[at].get('content'), images=True))}", "dim")

    def _show_last_exchange(self) -> None:
        last_user = self._last_user()
        if last_user is None:
            return
        self._show_user(last_user)
        for message in self.history[last_user + 1:]:
            if message["role"] == "assistant" and (text := content_text(message.get("content"))):
                self.view.text(strip_controls(text))
                self.view.end_answer()
        self.view.stop()

    # the REPL

    async def run(self) -> int:
        """Chat until /exit, Ctrl-D or a second Ctrl-C; returns the exit code (0; 129 / 141 when the
        terminal or output went away during a turn; 143 / 129 after SIGTERM / SIGHUP).

        SIGTERM or SIGHUP ends the chat (`driver.chat_interrupts`): a turn in progress is closed as after
        Ctrl-C (every call answered) and stored before the process ends; a second signal exits at once.

        Raises:
            CrowError: the session store could not be opened, `--resume ID` matched nothing, `--system`
                would change the resumed session's system prompt, or the workspace or an MCP server table is invalid.
        """
        with self.interrupts:
            try:
                code = await self._run()
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if self.interrupts.signum is None or current is None:
                    raise
                current.uncancel()
            finally:  # its session is free again for a caller in this process; a given store stays its owner's
                if self._owns_store and self._store is not None:
                    self._store.close()
                    self._store = None
            if self.interrupts.signum is None:
                return code
        with contextlib.suppress(OSError, ValueError):  # stderr may be the closed terminal
            sys.stderr.write(f"crow: interrupted ({self.interrupts.name})\n")
            sys.stderr.flush()
        return self.interrupts.exit_code

    async def _run(self) -> int:
        early: list[str] = []  # said under the banner, which comes once the settings are known to hold
        runtime = Runtime(self.settings, RuntimeOptions(self.options.tools_dirs, self.options.no_tools,
                                                        self.options.debug, self.options.record_dir,
                                                        self.options.project_instructions), warn=early.append)
        self.view.line(f"crow chat · {self.settings.model} · /help for commands · Ctrl-D to quit", "dim")
        for line in early:
            self.view.line(f"crow: warning: {strip_controls(line)}", "yellow")
        async with runtime:  # MCP servers stopped, the client closed
            try:
                await self._start(runtime)
                return await self._repl()
            finally:
                if self._mcp_joining is not None:
                    await end_task(self._mcp_joining)

    async def _join_mcp(self, runtime: Runtime) -> None:
        """Wait for the MCP servers in the background; say their problems (and that they are up) at once,
        above the prompt. A ConfigError (an allow or deny rule naming no tool) is raised to `_mcp_ready`."""
        problems = await runtime.mcp_ready()
        lines = [(f"crow: warning: {strip_controls(p)}", "yellow") for p in problems]
        lines.append((f"crow: MCP servers up: {', '.join(runtime.mcp_server_names)}", "dim"))
        await self._show_above_prompt(lines)

    async def _show_above_prompt(self, lines: list[tuple[str, str]]) -> None:
        """Show `lines` now: above the prompt while one is read (prompt-toolkit redraws it), else as they come."""
        from prompt_toolkit.application import get_app_or_none, run_in_terminal

        def show() -> None:
            for text, style in lines:
                self.view.line(text, style)
        if get_app_or_none() is not None:
            await run_in_terminal(show)
        else:
            show()

    async def _mcp_ready(self) -> bool:
        """Before a turn: wait for the MCP servers still starting, with one line naming them. Ctrl-C stops
        the wait (False: the message is not sent); the servers go on starting.

        Raises:
            ConfigError: an allow or deny rule names no tool, now that every tool is known (the chat ends, exit 2).
        """
        task = self._mcp_joining
        if task is None:
            return True
        if not task.done():
            assert self.runtime is not None
            pending = self.runtime.mcp_pending
            self.view.line(f"crow: waiting for MCP server{'s' if len(pending) != 1 else ''} "
                           f"{', '.join(pending)} to start…", "dim")
            waiter = asyncio.ensure_future(asyncio.shield(task))
            with self.interrupts.stopping(lambda _signum: waiter.cancel()):
                try:
                    await waiter
                except asyncio.CancelledError:
                    if not waiter.cancelled():
                        raise
                    if self.interrupts.signum is not None:  # SIGTERM / SIGHUP: the chat ends
                        raise _Exit(self.interrupts.exit_code) from None
                    self.view.line("interrupted: the MCP servers are still starting", "yellow")
                    return False
        self._mcp_joining = None
        task.result()
        return True

    async def _repl(self) -> int:
        from prompt_toolkit import PromptSession

        read: Callable[[], Awaitable[str]]
        if self._piped():  # one message or command per line
            read = _read_piped_line
        else:
            from prompt_toolkit.completion import WordCompleter

            commands = WordCompleter(self._completions, sentence=True)  # asked at each Tab: new prompt files too
            session: PromptSession[str] = PromptSession(
                history=input_history(), input=self.pt_input, output=self.pt_output,
                key_bindings=_key_bindings(), enable_history_search=False, completer=commands,
                complete_while_typing=False,  # Tab completes the slash commands; typing stays quiet
            )

            async def read() -> str:
                text: str = await session.prompt_async("› ", handle_sigint=False)
                return text
        armed = False
        code = 0
        sdk = import_in_background()  # the prompt is up: the SDK loads while the user types the first message
        try:
            while True:
                if self.interrupts.signum is not None:  # SIGTERM / SIGHUP stopped a command (/compact): leave
                    raise _Exit(self.interrupts.exit_code)
                try:
                    text = await read()
                except KeyboardInterrupt:
                    if armed:
                        break
                    armed = True
                    self.view.line("(press Ctrl-C again, or Ctrl-D, to quit)", "dim")
                    continue
                except EOFError:
                    break
                armed = False
                text = clean_text(text)  # a non-UTF-8 byte typed (surrogate-escaped) could never be sent
                if not text.strip():
                    continue
                if text.strip() == "/" or text.strip().startswith("//"):  # a slip, not a message for the model
                    self.view.line(f"unknown command {strip_controls(text.strip()[:40])}; /help lists the commands",
                                   "yellow")
                    continue
                command = _COMMAND.match(text.strip())
                if command:
                    try:
                        await self._command(command.group(1), (command.group(2) or "").strip())
                    except _Exit as exc:
                        code = exc.code
                        break
                    continue
                shell = typed_command(text)
                if shell is not None:
                    await self._shell(shell)
                    continue
                await self._send(text)
        except _Exit as exc:  # the terminal went away during a turn
            code = exc.code
        except OSError as exc:  # ... or while the chat drew something else: the session is already stored
            gone = output_lost(exc)
            if not gone.output_gone:
                raise
            code = gone.exit_code
        finally:
            with contextlib.suppress(OSError):  # the terminal may be gone (SIGHUP)
                self.view.stop()
            sdk.join()  # never leave while that thread holds an import lock (shutdown would wait on it)
        return code

    async def _send(self, text: str, *, title: str | None = None) -> None:
        """Send `text` (what was typed, or a prompt file's) as the user's message, with what the person ran
        since the last one (`!COMMAND`), and run the turn. `title`: what was typed, when `text` is not it."""
        try:
            message = self._with_attachments(text)
        except CrowError as exc:  # an @file too big, binary or outside the workspace: not sent
            self.view.line(strip_controls(f"crow: error: {exc}; the message was not sent"), "red")
            return
        if self.recorder is not None:
            self.recorder.title = title or text  # a new session's title: what was typed, not the files attached
        note = self._take_notes()
        keep = len(self.history)
        self.history.append(with_note(note, message) if note is not None else message)
        if not await self._run_turn() and len(self.history) == keep + 1:
            # the turn failed before anything was added: a message that cannot be sent is not kept
            # to fail every later turn the same way (what the person ran still goes with the next)
            self._cut(keep)
            if note is not None:
                self.history.append(note)
                self._save()
            self.view.line("(the message was not kept)", "dim")

    def _with_attachments(self, text: str) -> UserMessage:
        """The user message for `text`, with the files its `@path` mentions name attached."""
        from ..attachments import load_attachment, mentioned_files, user_content

        files = mentioned_files(text, self.root)
        if not files:
            return user_message(text)
        secrets = self.runtime.context.secrets if self.runtime is not None else ()
        attachments = [load_attachment(f, self.root, secrets) for f in files]
        self.view.line("attached: " + ", ".join(strip_controls(a.shown) for a in attachments), "dim")
        return {"role": "user", "content": user_content(text, attachments)}

    async def _shell(self, command: str) -> None:
        """`!COMMAND`: run it as the model's run_shell calls run (`shell_escape.run_typed`), shown as they
        are; Ctrl-C stops it. What it printed is kept for the next message (`_keep_note`)."""
        if not command:
            self.view.line(USAGE, "yellow")
            return
        assert self.driver is not None
        calls: dict[int, ToolCall] = {}

        def show(event: Event) -> None:
            if isinstance(event, ToolRunStarted):
                calls[event.call.index] = event.call
                self.view.tool_started(event.call)
            elif isinstance(event, ToolResultReady):
                self.view.tool_finished(event.result, calls.get(event.result.index))

        running = asyncio.ensure_future(run_typed(command, self.approver, self.driver.settings, self.driver.context,
                                                  show))
        ticker = asyncio.create_task(self._tick())
        try:
            with _no_echo(self.pt_input is None), self.interrupts.stopping(lambda _signum: running.cancel()):
                result = await running
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            self.view.cancel_tools()
            self.view.line("interrupted: the command was stopped; nothing was added to the conversation", "yellow")
            return
        finally:
            ticker.cancel()
            with contextlib.suppress(OSError):  # the terminal may be gone (SIGHUP)
                self.view.stop()
        if result.display is None or result.display.output is None:  # refused before it ran (a deny rule, read-only)
            self.view.line("(it did not run; nothing was added to the conversation)", "dim")
            return
        if self.recorder is not None:
            self.recorder.title = f"!{command}"  # a session started by a command is titled by it, not the note
        self._keep_note(shell_note(command, result))
        self.view.line("(the command and its output go to the model with your next message)", "dim")

    def _keep_note(self, note: str) -> None:
        """Keep `note` (a command the person ran) as the last message of the history, joined to the notes
        already there, stored at once; the next message takes them (`_take_notes`)."""
        earlier = self._take_notes()
        if earlier is not None:
            note = f"{content_text(earlier['content'])}\n\n{note}"
        self.history.append(user_message(note))
        self._save()

    def _take_notes(self) -> Message | None:
        """The shell notes that end the history, removed from it (and from the session), or None."""
        if not self.history or not is_shell_note(self.history[-1]):
            return None
        note = self.history[-1]
        self._cut(len(self.history) - 1)
        return note

    def _cut(self, keep: int) -> None:
        """Keep the first `keep` messages of the history, in the session too."""
        if self.recorder is not None:
            self.recorder.truncate(self.history, keep)
        else:
            del self.history[keep:]

    def _save(self) -> None:
        """Store what the chat added to the history itself (the loop's messages are stored by the driver)."""
        if self.recorder is None:
            return
        try:
            self.recorder.sync(self.history)
        except SessionError as exc:
            self.view.line(f"crow: warning: {strip_controls(str(exc))}; the rest of this session is not recorded",
                           "yellow")

    async def _command(self, name: str, arg: str) -> None:
        """Run `/name arg`: a built-in command, else the prompt file named `name`."""
        handler = self._commands.get(name)
        try:
            if handler is not None:
                if (hidden := self._prompt_folders().find(name)) is not None:
                    self._tell_once(f"{hidden.path} is not used: /{name} is a built-in command")
                await handler(arg)
            elif (prompt := self._prompt_folders().find(name)) is not None:
                await self._use_prompt(prompt, arg)
            else:
                self.view.line(f"unknown command /{strip_controls(name)}; /help lists the commands", "yellow")
        except CrowError as exc:
            self.view.line(strip_controls(f"crow: error: {exc}"), "red")

    # prompt files: custom commands

    def _prompt_folders(self) -> PromptFolders:
        """Where prompt files are looked for: looked at each time, so a new or edited file is used at once."""
        return PromptFolders.for_workspace(self.root, default_config_path().parent)

    def _secrets(self) -> tuple[str, ...]:
        return self.runtime.context.secrets if self.runtime is not None else ()

    def _tell_once(self, note: str) -> None:
        """Say `note` (about a prompt file) the first time only in this chat."""
        if note not in self._told:
            self._told.add(note)
            self.view.line(strip_controls(note), "yellow")

    def _completions(self) -> list[str]:
        """What Tab completes: the built-in commands, then the prompt files' names."""
        names = [*self._commands, *(p.name for p in self._prompt_folders().all() if p.name not in self._commands)]
        return [f"/{name}" for name in names]

    async def _use_prompt(self, prompt: PromptFile, arg: str) -> None:
        """`/NAME rest`: the prompt file's text, `$ARGUMENTS` replaced by `rest`, sent as the user's message.

        Raises:
            ConfigError: the file cannot be read, or it uses `$ARGUMENTS` and no `rest` was given.
        """
        if (note := prompt.shadow_note()) is not None:
            self._tell_once(note)
        text = expand(read_prompt(prompt, self._secrets()).body, arg, usage=f"/{prompt.name} TEXT")
        self.view.line(strip_controls(f"(prompt file {prompt.path})"), "dim")
        await self._send(text, title=f"/{prompt.name} {arg}".rstrip())

    def _prompt_rows(self) -> tuple[list[tuple[str, str]], list[str]]:
        """/help's lines for the prompt files, (usage, first line) each (a file that cannot be used says why),
        and the notes on files not used or hiding others."""
        rows: list[tuple[str, str]] = []
        folders = self._prompt_folders()
        notes = [f"{path} is not used: a prompt file's name is letters, digits, '_' and '-' (NAME.md)"
                 for path in folders.misnamed()]
        for prompt in folders.all():
            if prompt.name in self._commands:
                notes.append(f"{prompt.path} is not used: /{prompt.name} is a built-in command")
                continue
            if (note := prompt.shadow_note()) is not None:
                notes.append(note)
            try:
                text = read_prompt(prompt, self._secrets())
            except CrowError as exc:
                rows.append((f"/{prompt.name}", strip_controls(f"(cannot be used: {exc})")))
                continue
            rows.append((f"/{prompt.name}" + (" TEXT" if ARGUMENTS in text.body else ""), summary(text)))
        return rows, notes

    def _interrupt(self) -> bool:
        """Cancel the running turn (or /compact); False when none runs."""
        if self._compacting is not None and not self._compacting.done():
            return self._compacting.cancel()
        return self.driver is not None and self.driver.cancel()

    async def _run_turn(self) -> bool:
        """Run the loop on the history as it is (it ends with a user message); False when it failed
        with an internal error."""
        assert self.driver is not None
        if not await self._mcp_ready():
            return False
        self.last_usage = self._token_use()
        self._calls, self._in_tools = {}, False
        ticker = asyncio.create_task(self._tick())
        self.view.waiting(True)  # until the first token: a server that is slow to answer shows it
        finished = None
        failed = False
        try:
            with _no_echo(self.pt_input is None):
                finished = await self.driver.run(self.history, self, self.recorder)
        except asyncio.CancelledError:  # SIGTERM / SIGHUP: the loop closed the history; the chat ends (run_chat)
            raise
        except Exception as exc:  # a bug: say so in one line, keep the chat (the loop kept the history valid)
            self.view.cancel_tools()
            self.view.end_answer()
            self.view.line(f"crow: internal error: {type(exc).__name__}: {exc} (please report it)", "bold red")
            failed = True
        finally:
            ticker.cancel()
            with contextlib.suppress(OSError):  # the terminal may be gone (SIGHUP)
                self.view.stop()
        if self.interrupts.signum is not None:  # SIGTERM / SIGHUP stopped the turn: the chat ends (run)
            raise _Exit(self.interrupts.exit_code)
        if finished is not None and finished.output_gone:  # nobody left to chat with
            raise _Exit(finished.exit_code)
        if finished is not None and finished.status == "cancelled":
            self.view.cancel_tools()
            self.view.end_answer()
            what = "unfinished tool calls were cancelled" if self._in_tools else "the partial answer is kept"
            self.view.line(f"interrupted: {what}", "yellow")
        self.view.line(self._footer(), "dim")
        return not failed

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(0.1)
            self.view.tick()

    def handle(self, event: Event) -> None:
        """The driver's sink: draw each event of the turn."""
        progress = isinstance(event, Notice) and event.code == "prompt_progress"  # still no token: keep waiting
        if not isinstance(event, MessageAppended | ToolRunStarted | ToolResultReady) and not progress:
            self.view.waiting(False)
        match event:
            case TextDelta(text=text):
                self.view.text(strip_controls(text))  # model output must not drive the terminal
            case ReasoningDelta(text=text):
                self.view.reasoning(strip_controls(text))
            case TurnFinished():
                self.view.end_answer()
                self.usage.add(event.usage, event.timings)  # llama.cpp's cached tokens are in its timings
                self.last_usage.add(event.usage, event.timings)
                self._calls = {c.index: c for c in event.tool_calls}
                self._in_tools = bool(event.tool_calls)
            case ToolRunStarted(call=call):
                self.view.tool_started(call)
            case ToolResultReady(result=result) if result.outcome != "cancelled":
                self.view.tool_finished(result, self._calls.get(result.index))
                self._calls.pop(result.index, None)
                if not self._calls:  # every call answered: the next turn is being asked for
                    self.view.waiting(True)
            case WarningEvent(message=message):  # after the answer, when one is streaming
                self.view.warning(f"crow: warning: {strip_controls(message)}")
            case Notice(code="prompt_progress"):  # on the waiting spinner, not a line of its own
                self.view.waiting_for(strip_controls(event.message))
            case Notice(code="turn_restarted"):  # the stream broke; the turn is asked for again
                self.view.end_answer()
                self.view.line(strip_controls(event.message), "dim")
            case Notice(message=message):
                self.view.line(strip_controls(message), "dim")
            case RunFinished(status="cancelled"):
                self.view.cancel_tools()  # no spinner is drawn again for a call that will not finish
            case RunFinished(error=error) if error:
                self.view.end_answer()
                self.view.line(f"crow: error: {strip_controls(error)}", "bold red")

    def _piped(self) -> bool:
        """Whether input is piped (not a terminal, no test input): read line by line (`_read_piped_line`)."""
        return self.pt_input is None and not sys.stdin.isatty()

    async def ask(self, call: ToolCall, tool: Tool, preview: str) -> Answer:
        """Ask the user about one call: the approval policy's ask callback (it asks one at a time).

        Shows the call's preview (`describe_call`, as `crow run` does) above the question. The live area
        is paused meanwhile and other output held back until the answer. Ctrl-C at the question stops
        the whole turn, as Ctrl-C while streaming does (this call is cancelled with the others).
        """
        await asyncio.sleep(0)  # the turn first draws what is already queued (the lines of calls started)
        with self.view.suspended():
            self.view.call_preview(preview)
            if self._piped():  # the answer is the next piped line (prompt-toolkit would read past crow's buffer)
                scope = always_scope(call, tool, preview)
                question = approval_question(tool.name, preview, scope)
                while True:
                    self.view.line(question)
                    try:
                        answer = parse_answer(await _read_piped_line(), scope)
                    except EOFError:
                        return Answer("no")
                    if answer is not None:
                        return answer
                    self.view.line(answer_hint(scope), "dim")
            try:
                return await ask_approval(call, tool, preview=preview, pt_input=self.pt_input,
                                          pt_output=self.pt_output)
            except KeyboardInterrupt:
                if not self._interrupt():
                    return Answer("no")
        await asyncio.Event().wait()  # cancelled with the turn: dispatch cancels every call still open
        return Answer("no")  # not reached

    def _footer(self) -> str:
        sid = self.recorder.session_id if self.recorder else None
        return footer(self.last_usage, self.usage, self.settings.model, sid)

    def _token_use(self) -> TokenUse:
        """An empty count, priced with the current model's `[prices]` (if the config gives them)."""
        return TokenUse(self.settings.prices.get(self.settings.model))

    # slash commands

    async def _help(self, arg: str) -> None:
        rows, notes = self._prompt_rows()
        self.view.line(help_text(rows))
        for note in notes:
            self._tell_once(note)

    async def _exit(self, arg: str) -> None:
        raise _Exit

    async def _new(self, arg: str) -> None:
        self._fresh()
        self.view.line("new session started", "bold")

    async def _model(self, arg: str) -> None:
        if not arg:
            self.view.line(f"model: {self.settings.model} at {public_url(self.settings.base_url)}")
            return
        if self.runtime is not None:
            await self.runtime.switch_model(arg)  # its client and compactor follow
            self.settings = self.runtime.settings
        else:
            self.settings = replace(self.settings, model=arg)
        if self.recorder is not None:
            self.recorder.set_model(self.settings)
        self.view.line(f"model: {arg}")

    async def _tools(self, arg: str) -> None:
        if self.runtime is not None and self._mcp_joining is not None and (pending := self.runtime.mcp_pending):
            self.view.line(f"(MCP servers still starting: {', '.join(pending)}; their tools join when they are up)",
                           "dim")
        tools = list(self.registry or ())
        if not tools:
            self.view.line("no tools are offered (--no-tools, or none loaded)")
            return
        width = max(len(t.name) for t in tools)
        for t in tools:
            summary = t.description.strip().splitlines()[0] if t.description.strip() else ""
            flag = "  [needs approval]" if t.needs_approval else ""
            self.view.line(strip_controls(f"{t.name:<{width}}  {summary}{flag}"))

    async def _sessions(self, arg: str) -> None:
        current = self.recorder.session_id if self.recorder else None
        found = self.store.recent(10)
        if not found:
            self.view.line("no sessions yet")
        for s in found:
            mark = "*" if s.id == current else " "
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(s.updated_at))
            self.view.line(f"{mark} {s.id}  {when}  {s.messages:>3} msgs  {strip_controls(s.title) or '(untitled)'}")

    async def _resume(self, arg: str) -> None:
        self._open(arg or None, latest=not arg)

    async def _fork(self, arg: str) -> None:
        """`/fork`: copy the current session (`SessionStore.fork`) and go on in the copy; the original stays
        as it is, for `/resume`."""
        if arg:
            self.view.line("crow: error: /fork takes no argument", "red")
            return
        if not self.options.session:
            self.view.line("--no-session: nothing is stored, so there is no session to fork", "yellow")
            return
        if self.recorder is None or self.recorder.info is None:  # made by the first turn's first message
            self.view.line("nothing to fork yet (no message of this chat is stored)", "yellow")
            return
        self.recorder.sync(self.history)  # nothing of this chat is left out of the copy
        old = self.recorder.info.id
        info = self.store.fork(old)
        self.store.release(keep=info.id)  # the original may be continued elsewhere now
        self.recorder = SessionRecorder(self.store, self.settings, info, stored=info.messages)
        self.recorder.reload_checkpoint()
        self.usage, self.last_usage = self._token_use(), self._token_use()
        self._new_compactor()
        self.view.line(f"forked {old} → {info.id}; /resume {old} goes back", "bold")

    async def _export(self, arg: str) -> None:
        """`/export [md|json|jsonl] [PATH]`: the session to PATH (quoted as in a shell when it holds spaces; a
        folder, or a path ending in `/`, gets `crow-session-ID.FMT` in it; default: the data folder's `exports`,
        not the repository); the format follows PATH's suffix when not given. A file the person names is never
        overwritten."""
        try:
            words = shlex.split(arg)
        except ValueError as exc:  # an unbalanced quote
            self.view.line(f"crow: error: /export: {exc}", "red")
            return
        fmt = words.pop(0) if words and words[0] in EXPORT_FORMATS else None
        if len(words) > 1:  # never a path cut at its first space
            self.view.line("crow: error: /export takes one path (quote one that holds spaces)", "red")
            return
        word = words[0] if words else None
        target = Path(word).expanduser() if word else None
        if word and target is not None and "/" not in word and not target.suffix and not target.exists():
            # `/export jsn`, `/export md json`: a typo, not a file to make here
            what = "one format at a time" if word in EXPORT_FORMATS else f"unknown format {strip_controls(word)!r}"
            self.view.line(f"crow: error: /export: {what} (choose from {', '.join(EXPORT_FORMATS)}, or give a "
                           "path with a suffix, or a folder)", "red")
            return
        if fmt is None:
            suffix = target.suffix.lstrip(".") if target is not None else ""
            fmt = suffix if suffix in EXPORT_FORMATS else "md"
        if not any(m.get("role") != "system" for m in self.history):
            self.view.line("nothing to export yet", "yellow")
            return
        info = self.recorder.info if self.recorder else None
        if info is not None:  # its title is set by the first message, after the session was made
            info = self.store.get(info.id)
        if info is None:  # --no-session, or not stored yet: the conversation as it is in memory
            now = time.time()
            info = SessionInfo("unsaved", "", now, now, self.settings.model, public_url(self.settings.base_url),
                               str(Path.cwd()))
        name = info.id if info.id != "unsaved" else "unsaved-" + time.strftime("%Y%m%d-%H%M%S")
        default = f"crow-session-{name}.{fmt}"
        into_folder = target is not None and (target.is_dir() or str(word).endswith("/"))
        path = (target / default if into_folder else target) if target is not None else exports_dir() / default
        data = export_session(info, self.history, fmt).encode("utf-8")
        try:  # off the loop: a slow disk must not freeze the chat; a FIFO is refused, never waited on
            await asyncio.to_thread(partial(write_export, replace=target is None), path, data)
        except ExportExists:
            self.view.line(f"crow: error: {strip_controls(str(path))} exists; crow does not overwrite a file "
                           "(give another path, or a folder)", "red")
            return
        except OSError as exc:
            self.view.line(f"crow: error: cannot write {strip_controls(str(path))}: {exc.strerror or exc}", "red")
            return
        self.view.line(f"wrote {strip_controls(str(path))}")

    async def _usage(self, arg: str) -> None:
        self.view.line(f"last turn: {self.last_usage.text()}")
        self.view.line(f"this session (since started or resumed here): {self.usage.text()}")
        compactor = self.driver.compactor if self.driver is not None else None
        if compactor is not None:
            await compactor.budget.ensure_window()
            self.view.line(f"context: {compactor.budget.describe(compactor.outgoing(self.history))}")

    def _backup(self, path: Path, content: bytes | None, written: str) -> None:
        if self.recorder is not None:
            self.recorder.backup(path, content, written)

    async def _undo(self, arg: str) -> None:
        from ..undo import apply_undo, plan_undo

        if self.recorder is None or self.recorder.info is None:
            why = "--no-session records nothing, so there is nothing to undo" if not self.options.session else \
                "nothing to undo (no exchange is recorded in this chat)"
            self.view.line(why, "yellow")
            return
        if arg.strip() not in ("", "--force", "force"):
            self.view.line("usage: /undo [--force]  (--force: restore files changed since crow wrote them too)",
                           "yellow")
            return
        plan = plan_undo(self.store, self.recorder.info.id, force=arg.strip() in ("--force", "force"))
        for line in plan.describe():
            self.view.line(strip_controls(line))
        for problem in apply_undo(self.store, self.recorder.info.id, plan):
            self.view.line(f"crow: warning: {strip_controls(problem)}", "yellow")
        self.recorder.truncate(self.history, plan.keep)
        self.recorder.reload_checkpoint()
        self._new_compactor()
        self.view.line("undone", "bold")

    async def _instructions(self, arg: str) -> None:
        if not self.options.project_instructions:
            self.view.line("project instructions are off (--no-project-instructions)")
            return
        if not self.settings.instructions:
            self.view.line(f"no AGENTS.md loaded (looked in crow's config folder, and from the repository root "
                           f"down to {self.root})")
            return
        for item in self.settings.instructions:
            self.view.line(f"{item.scope}: {item.path} ({item.size:,} bytes)")
        self.view.line("(read when a session starts; nearest last, so they have the last word)", "dim")

    async def _compact(self, arg: str) -> None:
        compactor = self.driver.compactor if self.driver is not None else None
        if compactor is None or not any(m.get("role") == "user" for m in self.history):
            self.view.line("nothing to compact yet", "yellow")
            return

        async def compact() -> None:
            assert compactor is not None
            await compactor.budget.ensure_window()
            assert self.runtime is not None
            async for event in compactor.compact(self.history, self.runtime.client, focus=arg or None,
                                                 asked=True):
                self.handle(event)

        self._compacting = asyncio.ensure_future(compact())
        try:
            with self.interrupts.stopping(lambda _signum: self._interrupt()):
                await self._compacting
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            self.view.line("compaction interrupted: the conversation is as it was", "yellow")
        finally:
            self._compacting = None
            with contextlib.suppress(OSError):
                self.view.stop()

    async def _reasoning(self, arg: str) -> None:
        self.view.show_reasoning = not self.view.show_reasoning
        self.view.line(f"reasoning is now {'shown' if self.view.show_reasoning else 'hidden'}")

    async def _retry(self, arg: str) -> None:
        last_user = self._last_user()
        if last_user is None:
            self.view.line("nothing to retry yet", "yellow")
            return
        if is_shell_note(self.history[last_user]):  # no answer to ask for again: they wait for a message
            self.view.line("the commands you ran go with your next message; send it instead of /retry", "yellow")
            return
        if self.recorder is not None:
            self.recorder.truncate(self.history, last_user + 1)
            self.recorder.reload_checkpoint()
            self._new_compactor()
        else:
            del self.history[last_user + 1:]
        self._show_user(last_user)
        await self._run_turn()

    COMMANDS: tuple[SlashCommand, ...] = (
        SlashCommand("help", "", "this list", _help),
        SlashCommand("exit", "", "leave (Ctrl-D, or Ctrl-C twice, too)", _exit, aliases=("quit",)),
        SlashCommand("new", "", "start a new session", _new, aliases=("clear",)),
        SlashCommand("model", "[NAME]", "show or switch the model", _model),
        SlashCommand("tools", "", "the tools the model is offered", _tools),
        SlashCommand("sessions", "", "recent sessions", _sessions),
        SlashCommand("resume", "[ID]", "continue a session (the most recent when no id)", _resume),
        SlashCommand("fork", "", "copy this session into a new one and go on there (the original stays)", _fork),
        SlashCommand("export", "[FMT] [PATH]",
                     "write this conversation to PATH (md, json or jsonl; default: crow's data folder)", _export),
        SlashCommand("usage", "", "token usage of the last turn and of this session; context used / window",
                     _usage),
        SlashCommand("compact", "[FOCUS]", "summarise older exchanges now (keeping FOCUS in particular)",
                     _compact),
        SlashCommand("instructions", "", "the AGENTS.md files in the system prompt, and where they came from",
                     _instructions),
        SlashCommand("undo", "[--force]",
                     "remove the last exchange and restore the files crow's file tools changed in it", _undo),
        SlashCommand("reasoning", "", "show or hide the model's reasoning", _reasoning),
        SlashCommand("retry", "", "run your last message again", _retry),
    )
    """The chat's slash commands, in /help's order; /help and the dispatch are made from this table."""



MAX_HISTORY_ENTRY_CHARS = 4096
"""Longer inputs (pastes) are not kept in the input history."""
MAX_HISTORY_BYTES = 512 * 1024
"""The input history file is cut to its newest entries within this size when a chat starts."""


def input_history() -> Any:
    """prompt-toolkit's `FileHistory` on `_history_path()`, bounded: pastes over 4096 characters are not
    kept, and a file grown past 512 KiB is cut to its newest entries (atomically) before it is loaded. The
    history is a convenience: a file that cannot be read or written (a folder in its place, a full disk)
    leaves the chat without it (in memory only), never stops it."""
    from prompt_toolkit.history import FileHistory, InMemoryHistory

    class BoundedHistory(FileHistory):
        def load_history_strings(self) -> Iterable[str]:
            _trim_history(Path(os.fsdecode(self.filename)))
            try:
                return list(super().load_history_strings())
            except OSError:
                return []

        def store_string(self, string: str) -> None:
            if len(string) <= MAX_HISTORY_ENTRY_CHARS:
                with contextlib.suppress(OSError):
                    super().store_string(string)

    try:
        return BoundedHistory(str(_history_path()))
    except OSError:  # the state folder cannot be made (a file in its place)
        return InMemoryHistory()


def _trim_history(path: Path, limit: int = MAX_HISTORY_BYTES) -> None:
    """Cut prompt-toolkit's history file (entries start with a `# <date>` line) to its newest entries
    within `limit` bytes; it is read only from where those start."""
    from ..atomic import write_atomic

    try:
        size = path.stat().st_size
        if size <= limit:
            return
        with path.open("rb") as fh:
            fh.seek(size - limit)
            tail = fh.read()
        start = tail.find(b"\n# ")
        write_atomic(path, tail[start + 1:] if start >= 0 else b"", private=True)
    except OSError:
        pass  # the history is a convenience: a chat starts without it


SHELL_HELP = ("!COMMAND", "run COMMAND in the workspace's shell; it and its output go with your next message")
"""/help's line for `!COMMAND` (`shell_escape`), after the slash commands."""


def help_text(prompts: Iterable[tuple[str, str]] = ()) -> str:
    """/help: the keys, then one aligned line per command of `ChatApp.COMMANDS` (aliases after the name),
    then `!COMMAND`, then one per prompt file of `prompts`, (usage, its first line) each."""
    rows = [(", ".join(f"/{name}" for name in (c.name, *c.aliases)) + (f" {c.args}" if c.args else ""), c.doc)
            for c in ChatApp.COMMANDS]
    rows += [SHELL_HELP, *prompts]
    width = max(len(usage) for usage, _ in rows) + 2
    return "\n".join([KEYS, *(f"{usage:<{width}}{doc}" for usage, doc in rows)])


def _history_path() -> Path:
    import platformdirs

    from ..private import private_dir, private_file

    return private_file(private_dir(Path(platformdirs.user_state_dir("crow", appauthor=False))) / "chat_history")


async def _read_piped_line() -> str:
    """The next line of piped standard input, without its line end (bytes decoded here: a non-UTF-8 byte is
    U+FFFD). Every piped read goes through here: messages and approval answers share one buffer.

    Raises:
        EOFError: the input ended.
    """
    raw = getattr(sys.stdin, "buffer", None)
    line = (await asyncio.to_thread(raw.readline)).decode("utf-8", "replace") if raw is not None \
        else await asyncio.to_thread(sys.stdin.readline)
    if not line:
        raise EOFError
    return str(line).rstrip("\n")


def _key_bindings() -> Any:
    bindings = typed_keys()

    @bindings.add("escape", "enter")  # Alt-Enter; plain \n stays Enter (typed-ahead lines arrive as \n)
    def _newline(event: Any) -> None:
        event.current_buffer.insert_text("\n")

    return bindings


@contextmanager
def _no_echo(enabled: bool) -> Iterator[None]:
    """While a turn runs, keys typed ahead are not echoed and are kept as typed (read at the next prompt).

    An echoed `^C` or typed-ahead text would also shift the live area and leave stray lines. Canonical mode is
    off too: there Ctrl-D is no key but an end of line that no later read sees, so a Ctrl-D typed during a
    turn was lost and the chat did not quit.
    """
    if not enabled or not sys.stdin.isatty():
        yield
        return
    import termios

    fd = sys.stdin.fileno()
    try:
        saved = termios.tcgetattr(fd)
    except termios.error:
        yield
        return
    quiet = list(saved)
    quiet[3] &= ~(termios.ECHO | getattr(termios, "ECHOCTL", 0) | termios.ICANON)
    termios.tcsetattr(fd, termios.TCSANOW, quiet)
    try:
        yield
    finally:
        with contextlib.suppress(termios.error):  # the terminal is gone (SIGHUP)
            termios.tcsetattr(fd, termios.TCSANOW, saved)


async def run_chat(settings: Settings, options: ChatOptions) -> int:
    """Run the chat on the terminal; returns the exit code (0; 143 / 129 after SIGTERM / SIGHUP)."""
    return await ChatApp(settings, options).run()
