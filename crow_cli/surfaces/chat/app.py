"""`crow chat`'s app: the REPL over the react loop, recorded in the session store.

Input is a prompt-toolkit prompt (history file in the user state dir, `terminal.input_history`); output is
drawn by `render.TurnView`, from the driver's events (`sink.ChatSink`). The driver (`driver.Driver`) runs each
turn and stores each message as it arrives; the loop closes a cancelled turn's history; this package only
draws events. Keys, signals and commands: `ChatApp`, and docs/chat.md for users.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ...attachments import load_attachment, mentioned_files, user_content
from ...config import Settings, default_config_path
from ...context.compact import Checkpoint
from ...driver import Driver, RunScope, chat_interrupts, output_lost
from ...errors import CrowError, SessionError
from ...events import (
    Event,
    ToolResultReady,
    ToolRunStarted,
    WarningEvent,
)
from ...history import Message, ToolCall, UserMessage, as_json, content_text, is_prompt, user_message
from ...modes import APPROVAL_MODES, SENTENCES, ApprovalMode, is_mode_note, next_mode
from ...prompt_files import ARGUMENTS, PromptFile, PromptFolders, expand, read_prompt, summary
from ...rewind import Scanner
from ...sessions import SessionStore
from ...text import clean_text, public_url, strip_controls, visible
from ...todos import latest_todos
from ...tools.approval import Answer, PlanAnswer, Question
from ...tools.mcp import end_task
from ...tools.registry import ToolRegistry
from ...wire.preload import import_in_background
from ..approve import PLAN_HINT, PLAN_QUESTION, approver_for, ask_until_answered, parse_plan_answer
from ..ask import ask_approval, typed_keys
from ..common import (
    make_console,
    plain_terminal,
)
from ..options import SurfaceOptions
from ..persist import RunModes, SessionRecorder, open_session, settle_modes, tell_modes
from ..render import TurnView
from ..runtime import Runtime
from ..shell_escape import USAGE, is_shell_note, run_typed, shell_note, typed_command, with_note
from ..shown import todo_lines
from ..usage import TokenUse, footer
from .commands import COMMANDS, ChatExit
from .complete import chat_completer
from .pick import MAX_MODELS, model_options, session_options, shown
from .sink import ChatSink
from .status import StatusInfo, StatusLine, status_setting
from .terminal import input_history, key_bindings, no_echo, read_piped_line

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["ChatApp", "ChatOptions", "run_chat"]

MODELS_TIMEOUT_S = 10.0
"""How long `/model` waits for the server's model list (`GET /models`)."""
_COMMAND = re.compile(r"^/([A-Za-z0-9_-]+)(?:\s+(.*))?$", re.DOTALL)
"""`/NAME rest`: a built-in command, or a prompt file's name (`prompt_files.NAME`)."""


@dataclass(frozen=True)
class ChatOptions:
    surface: SurfaceOptions = field(default_factory=SurfaceOptions)
    """The flags every surface shares (tools, `--yes`, `--debug`, `--record`, AGENTS.md)."""
    resume: str | None = None
    """Continue this session id; `""`: the one the person picks from a list (this folder's first; with no
    terminal, this folder's most recent); None starts a new session."""
    session: bool = True
    """Record the chat in the session store."""
    system: str | None = None
    """The `--system` flag (None: not given): a resumed session whose system prompt it would change is refused."""
    first: str | None = None
    """Sent as the first message, as if typed at the prompt (`crow chat "PROMPT"`, `crow "PROMPT"`)."""
    session_model: bool = False
    """A resumed session continues with the model it last used when it ran on the same server (`--model` not
    given); False: with the settings' model."""


class ChatApp:
    """The chat REPL. Construct it, then `await run()`.

    Enter sends, Alt-Enter (or Esc Enter) inserts a newline; pasted text keeps its newlines. Ctrl-C during a
    turn, at a tool approval question too, cancels the stream and the running tools; the partial answer is kept
    and every tool call of the turn without a result gets a "cancelled by the user" one, so the history stays
    valid. At the prompt, a second Ctrl-C in a row (or Ctrl-D, or /exit) leaves. SIGTERM and SIGHUP end the
    chat the same way: the turn is cancelled, the session closed and stored, and the exit code is 143 / 129.
    Besides the built-in commands (`commands.COMMANDS`), `/NAME` sends a prompt file (`prompt_files`:
    `.crow/prompts/NAME.md`) as the message, and a line starting with `!` runs a shell command the way the
    model's `run_shell` calls run (`shell_escape`).

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
                 interrupts: RunScope | None = None) -> None:
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
        self._scanner: Scanner | None = None
        self.history: list[Message] = []
        self.usage = self.token_use()
        self.last_usage = self.token_use()
        self.approver = approver_for(settings, yes=options.surface.yes, ask=self.ask)
        """The approval policy (--approval, --allow, --deny, --yes); "always" answers last for this chat."""
        self.modes = RunModes(self.approver.policy.mode, settings.sandbox)
        """The chat's own modes: a new session's; a resumed one keeps its stricter ones (`_settle_modes`)."""
        self.approver.review = self.review_plan  # a plan exit_plan_mode hands over: the person's answer
        self.approver.mode_changed = lambda mode: self.change_modes(replace(self.modes, approval=mode))
        self.driver: Driver | None = None
        self._unrecorded = False  # the store could not be opened: said once, not retried
        self._commands: dict[str, Callable[[str], Awaitable[None]]] = {
            name: partial(command.run, self) for command in COMMANDS for name in (command.name, *command.aliases)}
        self._told: set[str] = set()  # the prompt files' notes said in this chat (each once)
        self.compacting: asyncio.Task[None] | None = None
        self._served: tuple[str, list[str]] | None = None  # (base URL, its /models), asked once (`served_models`)
        self.mcp_joining: asyncio.Task[None] | None = None
        """Until it is awaited (`_mcp_ready`): the MCP servers' start, which says its problems when it ends."""
        self.status: StatusLine | None = None
        """The line under the prompt (`status`); made when the chat starts, None when the config hides it."""
        self._context: tuple[int, int | None] = (0, None)  # (tokens, window) as of the last prompt
        self._warnings: set[asyncio.Future[None]] = set()  # status line warnings on their way above the prompt

    # set-up

    @property
    def store(self) -> SessionStore:
        if self._store is None:
            self._store = SessionStore()
        return self._store

    async def _start(self, runtime: Runtime) -> bool:
        """Start the chat's run parts and its session; False when `--resume` was given no id and the person
        left the list of sessions without picking one (the chat ends)."""
        self.runtime, self.root, self.registry = runtime, runtime.workspace, runtime.registry
        self.settings = runtime.settings  # with the AGENTS.md files
        for problem in await runtime.start(wait_for_mcp=False):  # the prompt is up while MCP servers start
            self.view.line(f"crow: warning: {strip_controls(problem)}", "yellow")
        if names := runtime.mcp_pending:
            self.view.line(f"crow: starting MCP servers: {', '.join(names)} (their tools join when they are up)",
                           "dim")
            self.mcp_joining = asyncio.create_task(self._join_mcp(runtime), name="crow-mcp-join")
        # files crow's tools change: /undo and /rewind restore them (the backup and the snapshots follow /new
        # and /resume)
        self.driver = runtime.new_driver(self.approver, context=replace(runtime.context, backup=self._backup,
                                                                        snapshot=self._snapshot,
                                                                        keep_transcript=self._keep_transcript),
                                         interrupts=self.interrupts)
        if self.options.resume is not None:
            session_id = self.options.resume or await self.pick_session()
            if session_id is None:
                return False
            if self.options.session_model:
                await self._take_session_model(session_id)
            self.open(session_id or None, latest=not session_id, system=self.options.system)
        else:
            self.fresh()
        setting, _source = status_setting(self.settings.chat, self.settings.config_path, self.root,
                                          warn=lambda line: self.view.line(f"crow: warning: {strip_controls(line)}",
                                                                           "yellow"))
        if setting is not False:
            self.status = StatusLine(setting, self.status_info, self._status_warning, self.root)
        if (hooks := runtime.context.hooks) is not None:
            hooks.report = self._hook_said
            hooks.session_id = self.recorder.session_id or "" if self.recorder is not None else ""
            await hooks.session_start("startup" if self.options.resume is None else "resume")
        return True

    def status_info(self) -> StatusInfo:
        """What the status line tells now (the context's size as of the last prompt)."""
        tokens, window = self._context
        return StatusInfo(model=self.settings.model, mode=self.approver.policy.mode,
                          session_id=self.recorder.session_id if self.recorder is not None else None,
                          cwd=str(self.root), context_tokens=tokens, context_window=window,
                          recorded=self.recorder is not None)

    def _measure_context(self) -> None:
        """Count the conversation's tokens for the status line (once per prompt, not at each keystroke)."""
        compactor = self.driver.compactor if self.driver is not None else None
        if compactor is not None:
            self._context = (compactor.budget.prompt_tokens(compactor.outgoing(self.history)),
                             compactor.budget.window)

    def _status_warning(self, line: str) -> None:
        """A status line command's failure, said above the prompt that is up."""
        said = asyncio.ensure_future(self._show_above_prompt([(f"crow: warning: {strip_controls(line)}", "yellow")]))
        self._warnings.add(said)
        said.add_done_callback(self._warnings.discard)

    async def _take_session_model(self, session_id: str) -> None:
        """Switch to the model the session `session_id` (`""`: this folder's latest) last used, when it ran on
        this server and is not the model in use, said in one line; a session not found is left to `open`."""
        try:
            info = self.store.get(session_id) if session_id else self.store.latest(cwd=os.getcwd())
        except SessionError:
            return
        if (info is None or not info.model or info.model == self.settings.model or self.runtime is None
                or (info.base_url and info.base_url != public_url(self.settings.base_url))):
            return
        await self.runtime.switch_model(info.model)
        self.settings = self.runtime.settings
        self.view.line(f"model: {shown(info.model)}, the one this session used (--model NAME picks another)",
                       "dim")

    def _hook_said(self, event: Event) -> None:
        """What a hook run reports: its warnings are shown (the `hook` events are for --json)."""
        if isinstance(event, WarningEvent):
            self.view.line(f"crow: warning: {strip_controls(event.message)}", "yellow")

    def fresh(self) -> None:
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
        self._settle_modes(self.recorder)
        self.usage = self.token_use()
        self.last_usage = self.token_use()
        self.new_compactor()

    def new_compactor(self, checkpoint: Checkpoint | None = None) -> None:
        """The conversation's compactor (window, checkpoint) for the current session and model; without a
        recorder (--no-session) it starts from `checkpoint` and stores nothing."""
        if self.runtime is not None:
            self.runtime.use_session(self.recorder, checkpoint)

    def open(self, session_id: str | None, *, latest: bool, system: str | None = None) -> None:
        recorder, history = open_session(self.settings, session_id=session_id, latest=latest, store=self.store,
                                         record=self.options.session, system=system)
        assert recorder.info is not None  # open_session raises when it finds none
        self.store.release(keep=recorder.info.id)
        self.recorder, self.history = recorder, history
        self._settle_modes(recorder, record=self.options.session)
        if not self.options.session:  # --no-session: read the old one, record nothing new
            self.recorder = None
            self.view.line("--no-session: this session is read, but nothing new is stored in it (/undo has nothing "
                           "to undo; /export writes what this chat holds)", "yellow")
        self.usage, self.last_usage = self.token_use(), self.token_use()
        self.new_compactor(recorder.checkpoint)
        info = recorder.info
        title = visible(strip_controls(info.title))  # U+202E would reorder the line
        count = f"{len(history)} message" + ("" if len(history) == 1 else "s")
        self.view.line(f"resumed session {info.id} “{title}” ({count})", "bold")
        if recorder.previous_model:
            self.view.line(f"this session was using {shown(recorder.previous_model)}; continuing with "
                           f"{shown(self.settings.model)}", "yellow")
        self._show_last_exchange()
        if (todos := latest_todos(self.history)) is not None:  # the model's todo list, as it last wrote it
            self.view.line("todo list:", "bold")
            for text, style in todo_lines(todos):
                self.view.line(text, style)

    def _settle_modes(self, recorder: SessionRecorder | None, *, record: bool = True) -> None:
        """Run under the chat's modes, kept as strict as `recorder`'s session's were (`persist.settle_modes`:
        recorded, and the system message tells them)."""
        modes = settle_modes(recorder, self.history, self.modes, given=self.options.surface.modes_given,
                             network=self.settings.sandbox_network, record=record)
        self._use_modes(modes)

    def change_modes(self, modes: RunModes) -> None:
        """Run under `modes` from the next call on: the approver's policy and the commands' sandbox, recorded with
        the session and told in the system message. What a change of mode in the chat calls (`/approval`,
        plan mode), so the model is never told a mode it is not under; a new session (/new) keeps them."""
        self.modes = modes
        if self.recorder is not None:
            self.recorder.keep_modes(modes)
        tell_modes(self.history, modes, network=self.settings.sandbox_network)
        self._use_modes(modes)

    def _use_modes(self, modes: RunModes) -> None:
        self.approver.policy = replace(self.approver.policy, mode=modes.approval)
        if self.driver is not None:
            context = self.driver.context
            if context is not None and context.sandbox.mode != modes.sandbox:
                self.driver.context = replace(context, sandbox=replace(context.sandbox, mode=modes.sandbox))

    def last_user(self) -> int | None:
        """Where the last user message is in the history (None: there is none)."""
        return next((i for i in range(len(self.history) - 1, -1, -1) if is_prompt(self.history[i])), None)

    def show_user(self, at: int) -> None:
        """The user message at `at` as a dim `› …` line: its text (an image is named in it)."""
        self.view.line(f"› {strip_controls(content_text(self.history[at].get('content'), images=True))}", "dim")

    def _show_last_exchange(self) -> None:
        last_user = self.last_user()
        if last_user is None:
            return
        self.show_user(last_user)
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
        code = 0
        with self.interrupts as scope:  # a signal at start-up or between turns ends the scope early
            try:
                code = await self._run()
            finally:  # its session is free again for a caller in this process; a given store stays its owner's
                if self._owns_store and self._store is not None:
                    self._store.close()
                    self._store = None
        self._say_how_to_come_back()
        if (finished := scope.finished) is None:
            return code
        with contextlib.suppress(OSError, ValueError):  # stderr may be the closed terminal
            sys.stderr.write(f"crow: {finished.error}\n")
            sys.stderr.flush()
        return finished.exit_code

    def _say_how_to_come_back(self) -> None:
        """The chat's last line: the command that continues the session it ends in (none when nothing was
        stored). Said once, here; a terminal already gone is not written to."""
        if self.recorder is None or self.recorder.session_id is None:
            return
        with contextlib.suppress(OSError, ValueError):
            self.view.line(f"to continue this session: crow chat --resume {self.recorder.session_id}", "dim")
            self.view.stop()

    async def _run(self) -> int:
        early: list[str] = []  # said under the banner, which comes once the settings are known to hold
        runtime = Runtime(self.settings, self.options.surface, warn=early.append)
        if not runtime.mcp_server_names:  # every tool is known: a rule naming none is refused before the banner
            runtime.check_rules()
        self.view.line(f"crow chat · {shown(self.settings.model)} · /help for commands · Ctrl-D to quit",
                       "dim")
        for line in early:
            self.view.line(f"crow: warning: {strip_controls(line)}", "yellow")
        runtime.warn = lambda line: self.view.line(f"crow: {strip_controls(line)}", "dim")  # on the way out
        async with runtime:  # MCP servers stopped, the client closed
            try:
                if not await self._start(runtime):
                    self.view.line("no session picked (crow chat --resume ID continues one)", "yellow")
                    return 0
                if runtime.in_home is not None and not await self._go_on_in_home():
                    self.view.line("crow: not started in the home folder; start crow in a project folder", "yellow")
                    return 0
                return await self._repl()
            finally:
                if self.mcp_joining is not None:
                    await end_task(self.mcp_joining)
                if runtime.context.hooks is not None:
                    if self.recorder is not None:
                        runtime.context.hooks.session_id = self.recorder.session_id or ""
                    with contextlib.suppress(OSError):
                        await runtime.context.hooks.session_end("prompt_input_exit")

    async def _go_on_in_home(self) -> bool:
        """Ask whether to chat with the home folder as the workspace (its warning was shown by `_start`): yes
        only for `y` / `yes`; Enter, anything else, Ctrl-C and the end of the input are no. Piped, the answer
        is the next line."""
        return await self.confirm("Go on with your home folder as the workspace? [y/N]: ")

    async def confirm(self, question: str) -> bool:
        """Ask `question`: yes only for `y` / `yes`; Enter, anything else, Ctrl-C and the end of the input are
        no. Piped, the answer is the next line."""
        if self._piped():
            self.view.line(question)
            try:
                reply = await read_piped_line()
            except EOFError:
                return False
        else:
            from prompt_toolkit import PromptSession

            session: PromptSession[str] = PromptSession(input=self.pt_input, output=self.pt_output)
            try:
                reply = await session.prompt_async(question, handle_sigint=False)
            except (EOFError, KeyboardInterrupt):
                return False
        return reply.strip().lower() in ("y", "yes")

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
        task = self.mcp_joining
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
                        raise ChatExit(self.interrupts.exit_code) from None
                    self.view.line("interrupted: the MCP servers are still starting", "yellow")
                    return False
        self.mcp_joining = None
        task.result()
        return True

    async def _repl(self) -> int:
        from prompt_toolkit import PromptSession

        read: Callable[[], Awaitable[str]]
        if self._piped():  # one message or command per line
            read = read_piped_line
        else:
            # asked at each Tab: new prompt files and files too
            completer = chat_completer(self._completions, lambda: self.root, self._secrets)
            bindings = key_bindings()

            def _cycle(event: Any) -> None:
                self.set_mode(next_mode(self.approver.policy.mode), quiet=True)
                event.app.invalidate()
                if self.status is not None:
                    self.status.update(event.app.invalidate)

            bindings.add("s-tab")(_cycle)  # Shift+Tab: the next mode (`modes.CYCLE`), shown on the prompt line

            session: PromptSession[str] = PromptSession(
                history=input_history(), input=self.pt_input, output=self.pt_output,
                key_bindings=bindings, enable_history_search=False, completer=completer,
                complete_while_typing=False,  # Tab completes the slash commands and @paths; typing stays quiet
                bottom_toolbar=self.status.text if self.status is not None else None,
            )

            async def read() -> str:
                if self.status is not None:
                    self._measure_context()
                    self.status.update(_redraw)
                text: str = await session.prompt_async(lambda: f"{self.approver.policy.mode} › ", handle_sigint=False)
                return text
        if self.options.first is not None:  # typed on the command line: read first, as if typed at the prompt
            self.view.line(f"› {strip_controls(self.options.first)}")
            read = _first_then(self.options.first, read)
        armed = False
        code = 0
        sdk = import_in_background()  # the prompt is up: the SDK loads while the user types the first message
        try:
            while True:
                if self.interrupts.signum is not None:  # SIGTERM / SIGHUP stopped a command (/compact): leave
                    raise ChatExit(self.interrupts.exit_code)
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
                    except ChatExit as exc:
                        code = exc.code
                        break
                    continue
                shell = typed_command(text)
                if shell is not None:
                    await self._shell(shell)
                    continue
                await self._send(text)
        except ChatExit as exc:  # the terminal went away during a turn
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
            if self.status is not None:
                await self.status.close()
        return code

    async def _send(self, text: str, *, title: str | None = None) -> None:
        """Send `text` (what was typed, or a prompt file's) as the user's message, with what the person ran
        since the last one (`!COMMAND`), and run the turn. `title`: what was typed, when `text` is not it."""
        try:
            message = self._with_attachments(text)
        except CrowError as exc:  # an @file too big, binary or outside the workspace: not sent
            self.view.line(strip_controls(f"crow: error: {exc}; the message was not sent"), "red")
            return
        hooks = self.runtime.context.hooks if self.runtime is not None else None
        if hooks is not None:
            hooks.session_id = self.recorder.session_id or "" if self.recorder is not None else ""
            blocked = await hooks.submit(as_json(message))  # its context joins the message
            if blocked is not None:
                self.view.line(strip_controls(f"a UserPromptSubmit hook blocked the message; it was not sent: "
                                              f"{blocked}"), "yellow")
                return
        if self.recorder is not None:
            self.recorder.title = title or text  # a new session's title: what was typed, not the files attached
        note = self._take_notes()
        keep = len(self.history)
        self.history.append(with_note(note, message) if note is not None else message)
        if not await self.run_turn() and all(is_mode_note(m) for m in self.history[keep + 1:]):
            # the turn failed before anything but a mode note was added: a message that cannot be sent is not kept
            # to fail every later turn the same way (what the person ran still goes with the next)
            self._cut(keep)
            if note is not None:
                self.history.append(note)
                self._save()
            self.view.line("(the message was not kept)", "dim")

    def _with_attachments(self, text: str) -> UserMessage:
        """The user message for `text`, with the files its `@path` mentions name attached."""

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
            with no_echo(self.pt_input is None), self.interrupts.stopping(lambda _signum: running.cancel()):
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
                    self.tell_once(f"{hidden.path} is not used: /{name} is a built-in command")
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

    def tell_once(self, note: str) -> None:
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
            self.tell_once(note)
        text = expand(read_prompt(prompt, self._secrets()).body, arg, usage=f"/{prompt.name} TEXT")
        self.view.line(strip_controls(f"(prompt file {prompt.path})"), "dim")
        await self._send(text, title=f"/{prompt.name} {arg}".rstrip())

    def prompt_rows(self) -> tuple[list[tuple[str, str]], list[str]]:
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

    def interrupt(self) -> bool:
        """Cancel the running turn (or /compact); False when none runs."""
        if self.compacting is not None and not self.compacting.done():
            return self.compacting.cancel()
        return self.driver is not None and self.driver.cancel()

    async def run_turn(self) -> bool:
        """Run the loop on the history as it is (it ends with a user message); False when it failed
        with an internal error."""
        assert self.driver is not None
        if not await self._mcp_ready():
            return False
        self.last_usage = self.token_use()
        sink = ChatSink(self.view, self.usage, self.last_usage, self.settings.prices)
        ticker = asyncio.create_task(self._tick())
        self.view.waiting(True)  # until the first token: a server that is slow to answer shows it
        finished = None
        failed = False
        try:
            with no_echo(self.pt_input is None):
                finished = await self.driver.run(self.history, sink, self.recorder)
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
            raise ChatExit(self.interrupts.exit_code)
        if finished is not None and finished.output_gone:  # nobody left to chat with
            raise ChatExit(finished.exit_code)
        if finished is not None and finished.status == "cancelled":
            self.view.cancel_tools()
            self.view.end_answer()
            what = "unfinished tool calls were cancelled" if sink.in_tools else "the partial answer is kept"
            self.view.line(f"interrupted: {what}", "yellow")
        self.view.line(self._footer(), "dim")
        return not failed

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(0.1)
            self.view.tick()

    def _piped(self) -> bool:
        """Whether input is piped (not a terminal, no test input): read line by line (`read_piped_line`)."""
        return self.pt_input is None and not sys.stdin.isatty()

    async def _read_piped_reply(self, text: str, hint: str | None) -> str | None:
        """One reply to an approval question from piped input (None at its end), the hint dimmed before it."""
        if hint is not None:
            self.view.line(hint, "dim")
        self.view.line(text)
        try:
            return await read_piped_line()
        except EOFError:
            return None

    async def ask(self, question: Question) -> Answer:
        """Ask the user about one call: the approval policy's ask callback (it asks one at a time).

        Shows the call's preview (`describe_call`, as `crow run` does) above the question. The live area
        is paused meanwhile and other output held back until the answer. Ctrl-C at the question stops
        the whole turn, as Ctrl-C while streaming does (this call is cancelled with the others).
        """
        await asyncio.sleep(0)  # the turn first draws what is already queued (the lines of calls started)
        with self.view.suspended():
            self.view.call_preview(question.preview)
            if self._piped():  # the answer is the next piped line (prompt-toolkit would read past crow's buffer)
                return await ask_until_answered(question, self._read_piped_reply)
            try:
                return await ask_approval(question, pt_input=self.pt_input, pt_output=self.pt_output)
            except KeyboardInterrupt:
                if not self.interrupt():
                    return Answer("no")
        await asyncio.Event().wait()  # cancelled with the turn: dispatch cancels every call still open
        return Answer("no")  # not reached

    # approval modes and plans

    def set_mode(self, mode: ApprovalMode, *, quiet: bool = False) -> None:
        """Use the approval mode `mode` for the rest of the chat, recorded with the session and told in the system
        message (`change_modes`, through the approver's `mode_changed`) and in a note before the next request
        (`Approvals.mode_note`). `quiet`: the prompt line shows it (Shift+Tab), no line is printed."""
        self.approver.set_mode(mode)
        if not quiet:
            self.view.line(f"approval mode: {mode} ({SENTENCES[mode]})")

    async def pick(self, message: str, options: list[tuple[str, str]], default: str | None = None) -> str | None:
        """The value of the option the person picks from a list (prompt-toolkit's `choice`; `options`: value and
        label); None when they leave it (Ctrl-C, Ctrl-D) or cannot pick (piped input)."""
        if self._piped() or not options:
            return None
        from prompt_toolkit.application import create_app_session
        from prompt_toolkit.shortcuts.choice_input import ChoiceInput

        picker = ChoiceInput(message=message, options=options,
                             default=default if default is not None else options[0][0])
        try:
            with create_app_session(input=self.pt_input, output=self.pt_output):
                picked: str = await picker.prompt_async()
        except (KeyboardInterrupt, EOFError):
            return None
        return picked

    async def pick_mode(self) -> ApprovalMode | None:
        """The approval mode the person picks from a list (prompt-toolkit's `choice`); None when they leave it
        (Ctrl-C, Ctrl-D) or cannot pick (piped input: the modes are listed instead)."""
        current = self.approver.policy.mode
        if self._piped():
            self.view.line(f"approval mode: {current}; /approval MODE switches to one of {', '.join(APPROVAL_MODES)}")
            return None
        picked = await self.pick("Approval mode (Enter picks, Ctrl-C leaves):",
                                 [(mode, f"{mode}: {SENTENCES[mode]}") for mode in APPROVAL_MODES], current)
        return next((mode for mode in APPROVAL_MODES if mode == picked), None)

    async def served_models(self, *, say: bool = False) -> list[str] | None:
        """The models the server lists (`GET /models`, in its order), asked once per chat and server (a failed
        ask is asked again next time); None when the list cannot be read, or Ctrl-C stopped the wait (said in
        one line when `say`). Stored as served: the caller strips a name before showing it."""
        base_url = self.settings.base_url
        if self._served is not None and self._served[0] == base_url:
            return self._served[1]
        from ...probe.models import fetch_models

        task = asyncio.ensure_future(asyncio.to_thread(fetch_models, self.settings, MODELS_TIMEOUT_S))
        try:
            with self.interrupts.stopping(lambda _signum: task.cancel()):
                found = await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():  # SIGTERM / SIGHUP: the chat ends
                raise
            if say:
                self.view.line("interrupted: the server's model list was not read", "yellow")
            return None
        except CrowError as exc:
            if say:
                self.view.line(strip_controls(f"crow: warning: the server's model list could not be read ({exc})"),
                               "yellow")
            return None
        self._served = (base_url, [m.id for m in found])
        return self._served[1]

    async def pick_model(self) -> str | None:
        """`/model` without a name: the model in use, then the server's models (`served_models`) to pick one from
        (prompt-toolkit's `ChoiceInput`, the one in use chosen); the name picked, None when it is the one in use,
        the person leaves the list (Ctrl-C), the list cannot be read, or there is no terminal to pick on (piped
        input: the models are listed)."""
        current = self.settings.model
        self.view.line(f"model: {shown(current)} at {public_url(self.settings.base_url)}")
        served = await self.served_models(say=True)
        if served is None:
            return None
        options = model_options(served, current)
        if not options:
            self.view.line("the server lists no models; /model NAME switches to one it serves", "yellow")
            return None
        if self._piped():
            self.view.line("the server's models (/model NAME switches to one):")
            for _, label in options:
                self.view.line(f"  {label}")
            return None
        from prompt_toolkit.application import create_app_session
        from prompt_toolkit.shortcuts.choice_input import ChoiceInput

        options = model_options(served, current, MAX_MODELS)
        if (more := len(set(served)) - len(options)) > 0:
            self.view.line(f"the server lists {more} more models than shown here; /model NAME switches to any", "dim")
        picker = ChoiceInput(message="Switch to which model? (Enter picks, Ctrl-C leaves)", options=options,
                             default=current if current in served else None)
        try:
            with create_app_session(input=self.pt_input, output=self.pt_output):
                picked: str = await picker.prompt_async()
        except (KeyboardInterrupt, EOFError):
            return None
        return None if picked == current else picked

    async def pick_session(self) -> str | None:
        """The id of the session the person picks from a list (`pick.session_options`: this folder's first, the
        most recent of them chosen; not the session the chat is in); None when they leave it (Ctrl-C) or the chat's
        session is the only one. `""` when there is nothing to pick on (piped input) or from (no session is
        stored): the caller continues this folder's most recent session, as `--resume` without an id did before
        the list (and says when there is none); piped in a chat's session, this folder's most recent other one."""
        current = self.recorder.session_id if self.recorder is not None else None
        if self._piped():
            if current is None:
                return ""
            other = next((s.id for s in self.store.recent(2, cwd=os.getcwd()) if s.id != current), None)
            if other is None:
                self.view.line("no other session of this folder to continue (/resume ID continues any)", "yellow")
            return other
        options = session_options(self.store, os.getcwd(), leave_out=current)
        if not options and current is not None:  # /resume in the only session stored
            self.view.line("no other session to continue", "yellow")
            return None
        if not options:  # none stored: `open` says there is none to continue here
            return ""
        return await self.pick("Resume which session? (this folder's first; Enter picks, Ctrl-C leaves)", options)

    async def review_plan(self, plan: str) -> PlanAnswer:
        """Show the plan the model handed over (`exit_plan_mode`) and ask what to do with it: approve and go on
        in auto-edit, approve and go on asking, or keep planning with a note (`approve.parse_plan_answer`).
        Ctrl-C stops the turn, as at an approval question."""
        await asyncio.sleep(0)  # the turn first draws what is already queued
        with self.view.suspended():
            self.view.document(f"**The plan:**\n\n{strip_controls(plan)}")  # now, above the question
            hint: str | None = None
            while True:
                if self._piped():
                    self.view.line(PLAN_QUESTION)
                    try:
                        reply = await read_piped_line()
                    except EOFError:
                        return PlanAnswer("keep")
                else:
                    from prompt_toolkit import PromptSession

                    session: PromptSession[str] = PromptSession(input=self.pt_input, output=self.pt_output,
                                                                key_bindings=typed_keys())
                    try:
                        # the hint is part of the prompt: a line printed now would be held until the answer
                        reply = await session.prompt_async(f"{hint}\n{PLAN_QUESTION}" if hint else PLAN_QUESTION,
                                                           handle_sigint=False)
                    except EOFError:
                        return PlanAnswer("keep")
                    except KeyboardInterrupt:
                        if not self.interrupt():
                            return PlanAnswer("keep")
                        break
                answer = parse_plan_answer(reply)
                if answer is not None:
                    return answer
                hint = PLAN_HINT
                if self._piped():
                    self.view.line(PLAN_HINT, "dim")
        await asyncio.Event().wait()  # cancelled with the turn
        return PlanAnswer("keep")  # not reached

    def _footer(self) -> str:
        sid = self.recorder.session_id if self.recorder else None
        return footer(self.last_usage, self.usage, shown(self.settings.model), sid)  # a served name

    def token_use(self) -> TokenUse:
        """An empty count, priced with the current model's `[prices]` (if the config gives them)."""
        return TokenUse(self.settings.prices.get(self.settings.model))

    @property
    def scanner(self) -> Scanner | None:
        """Takes the workspace's snapshots for /rewind (None: the chat records nothing, or has not started)."""
        if self._scanner is None and self.runtime is not None and self.recorder is not None:
            self._scanner = Scanner(self.runtime.context.workspace, exclude=self.recorder.store.files())
        return self._scanner

    async def _snapshot(self, kind: Literal["before", "after"]) -> None:
        if self.recorder is not None and (scanner := self.scanner) is not None:  # the workspace's files, for /rewind
            await self.recorder.snapshot(kind, scanner)

    def _backup(self, path: Path, content: bytes | None, written: str) -> None:
        if self.recorder is not None:
            self.recorder.backup(path, content, written)

    def _keep_transcript(self, call_id: str, call_index: int, agent: str, messages: list[Message]) -> None:
        if self.recorder is not None:  # a subagent's history, kept with the session it ran in
            self.recorder.keep_transcript(call_id, call_index, agent, messages)




def _redraw() -> None:
    """Draw the prompt that is up again (a status line command's new line)."""
    from prompt_toolkit.application import get_app_or_none

    if (app := get_app_or_none()) is not None:
        app.invalidate()


def _first_then(first: str, read: Callable[[], Awaitable[str]]) -> Callable[[], Awaitable[str]]:
    """A reader that gives `first` once, then what `read` reads."""
    pending = [first]

    async def read_first() -> str:
        if pending:
            text = pending.pop()
            return text
        return await read()
    return read_first


async def run_chat(settings: Settings, options: ChatOptions) -> int:
    """Run the chat on the terminal; returns the exit code (0; 143 / 129 after SIGTERM / SIGHUP)."""
    return await ChatApp(settings, options).run()
