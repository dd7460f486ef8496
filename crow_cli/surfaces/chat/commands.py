"""The chat's slash commands: each a function of the app and the text after its name, and the table
(`COMMANDS`: name, aliases, arguments, one line of help) that /help, Tab completion, the dispatch and the manual's
table (`scripts/gen_docs.py`) are made from."""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Protocol

from ...config import Settings
from ...context.compact import Checkpoint
from ...driver import Driver, RunScope
from ...errors import SessionError
from ...export import EXPORT_FORMATS, ExportExists, export_session, exports_dir, write_export
from ...history import Message, content_text, is_prompt
from ...modes import APPROVAL_MODES, ApprovalMode
from ...rewind import BOUNDS_NOTE, Scanner, apply_rewind, plan_rewind
from ...sessions import SessionInfo, SessionStore
from ...text import public_url, strip_controls, visible
from ...tools.registry import ToolRegistry
from ...undo import apply_undo, plan_undo, scan_workspace, snapshot_workspace
from ..options import SurfaceOptions
from ..persist import SessionRecorder
from ..render import TurnView
from ..runtime import Runtime
from ..shell_escape import NOTE_HEAD, is_shell_note
from ..usage import TokenUse
from .pick import shown
from .processes import ps
from .sink import ChatSink

__all__ = ["COMMANDS", "App", "ChatExit", "SlashCommand", "help_text"]


class Options(Protocol):
    """What a command reads of the chat's options (`app.ChatOptions` is one)."""

    @property
    def surface(self) -> SurfaceOptions: ...
    @property
    def session(self) -> bool: ...


class App(Protocol):
    """What a command uses of the chat app (`app.ChatApp` is one): the commands name this, not the app, so the
    app imports its commands and nothing imports the app back."""

    settings: Settings
    recorder: SessionRecorder | None
    history: list[Message]
    usage: TokenUse
    last_usage: TokenUse
    compacting: asyncio.Task[None] | None

    @property
    def view(self) -> TurnView: ...
    @property
    def options(self) -> Options: ...
    @property
    def store(self) -> SessionStore: ...
    @property
    def runtime(self) -> Runtime | None: ...
    @property
    def registry(self) -> ToolRegistry | None: ...
    @property
    def driver(self) -> Driver | None: ...
    @property
    def mcp_joining(self) -> asyncio.Task[None] | None: ...
    @property
    def interrupts(self) -> RunScope: ...
    @property
    def root(self) -> Path: ...
    @property
    def scanner(self) -> Scanner | None: ...

    def fresh(self) -> None: ...
    def set_mode(self, mode: ApprovalMode, *, quiet: bool = False) -> None: ...
    async def pick_mode(self) -> ApprovalMode | None: ...
    async def pick(self, message: str, options: list[tuple[str, str]], default: str | None = None
                   ) -> str | None: ...
    async def confirm(self, question: str) -> bool: ...
    async def pick_session(self) -> str | None: ...
    async def pick_model(self) -> str | None: ...
    async def served_models(self, *, say: bool = False) -> list[str] | None: ...
    def new_compactor(self, checkpoint: Checkpoint | None = None) -> None: ...
    def open(self, session_id: str | None, *, latest: bool, system: str | None = None) -> None: ...
    def last_user(self) -> int | None: ...
    def show_user(self, at: int) -> None: ...
    def tell_once(self, note: str) -> None: ...
    def prompt_rows(self) -> tuple[list[tuple[str, str]], list[str]]: ...
    def interrupt(self) -> bool: ...
    async def run_turn(self) -> bool: ...
    def token_use(self) -> TokenUse: ...

KEYS = "Enter sends · Alt-Enter (or Esc Enter) inserts a newline · Ctrl-C stops a turn · Ctrl-D quits"
"""The first line of /help: the keys."""


class ChatExit(Exception):
    """Raised by /exit (code 0), or when the terminal is gone (the code the driver gave the run)."""

    def __init__(self, code: int = 0) -> None:
        super().__init__(code)
        self.code = code


@dataclass(frozen=True)
class SlashCommand:
    """One chat command: what is typed, one line of help, and the function that runs it."""

    name: str
    """Typed as `/NAME`."""
    args: str
    """Its arguments as /help shows them (`[NAME]`), or ""."""
    doc: str
    """One line for /help."""
    run: Callable[[App, str], Awaitable[None]]
    """Given the app and the text after the name."""
    aliases: tuple[str, ...] = ()


SHELL_HELP = ("!COMMAND", "run COMMAND in the workspace's shell; it and its output go with your next message")
"""/help's line for `!COMMAND` (`shell_escape`), after the slash commands."""


def help_text(prompts: Iterable[tuple[str, str]] = ()) -> str:
    """/help: the keys, then one aligned line per command of `COMMANDS` (aliases after the name),
    then `!COMMAND`, then one per prompt file of `prompts`, (usage, its first line) each."""
    rows = [(", ".join(f"/{name}" for name in (c.name, *c.aliases)) + (f" {c.args}" if c.args else ""), c.doc)
            for c in COMMANDS]
    rows += [SHELL_HELP, *prompts]
    width = max(len(usage) for usage, _ in rows) + 2
    return "\n".join([KEYS, *(f"{usage:<{width}}{doc}" for usage, doc in rows)])


async def _help(app: App, arg: str) -> None:
    rows, notes = app.prompt_rows()
    app.view.line(help_text(rows))
    for note in notes:
        app.tell_once(note)


async def _exit(app: App, arg: str) -> None:
    raise ChatExit


async def _new(app: App, arg: str) -> None:
    app.fresh()
    app.view.line("new session started", "bold")


async def _model(app: App, arg: str) -> None:
    """`/model [NAME]`: switch to model NAME (one the server does not list: said in one line, switched all the
    same: a server may serve more than it lists); without NAME, pick one of the server's (`App.pick_model`)."""
    if not arg:
        picked = await app.pick_model()
        if picked is None:
            return
        arg = picked
    elif (served := await app.served_models()) is not None and arg not in served:
        app.view.line(f"crow: warning: the server does not list {shown(arg)!r}; switching anyway (/model "
                      "lists its models)", "yellow")
    if app.runtime is not None:
        await app.runtime.switch_model(arg)  # its client and compactor follow
        app.settings = app.runtime.settings
    else:
        app.settings = replace(app.settings, model=arg)
    if app.recorder is not None:
        app.recorder.set_model(app.settings)
    app.view.line(f"model: {shown(arg)}")


async def _tools(app: App, arg: str) -> None:
    if app.runtime is not None and app.mcp_joining is not None and (pending := app.runtime.mcp_pending):
        app.view.line(f"(MCP servers still starting: {', '.join(pending)}; their tools join when they are up)",
                      "dim")
    tools = list(app.registry or ())
    if not tools:
        app.view.line("no tools are offered (--no-tools, or none loaded)")
        return
    width = max(len(t.name) for t in tools)
    for t in tools:
        summary = t.description.strip().splitlines()[0] if t.description.strip() else ""
        flag = "  [needs approval]" if t.needs_approval else ""
        app.view.line(strip_controls(f"{t.name:<{width}}  {summary}{flag}"))


async def _sessions(app: App, arg: str) -> None:
    current = app.recorder.session_id if app.recorder else None
    found = app.store.recent(10)
    if not found:
        app.view.line("no sessions yet")
    for s in found:
        mark = "*" if s.id == current else " "
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(s.updated_at))
        title = visible(strip_controls(s.title)) or "(untitled)"
        app.view.line(f"{mark} {s.id}  {when}  {s.messages:>3} msgs  {title}")


async def _resume(app: App, arg: str) -> None:
    """`/resume [ID]`: continue session ID; without one, the session the person picks from a list (this
    folder's first: `App.pick_session`)."""
    picked = arg or await app.pick_session()
    if picked is None:  # left the list: the chat goes on in its session
        return
    app.open(picked or None, latest=not picked)


async def _fork(app: App, arg: str) -> None:
    """`/fork`: copy the current session (`SessionStore.fork`) and go on in the copy; the original stays
    as it is, for `/resume`."""
    if arg:
        app.view.line("crow: error: /fork takes no argument", "red")
        return
    if not app.options.session:
        app.view.line("--no-session: nothing is stored, so there is no session to fork", "yellow")
        return
    if app.recorder is None or app.recorder.info is None:  # made by the first turn's first message
        app.view.line("nothing to fork yet (no message of this chat is stored)", "yellow")
        return
    app.recorder.sync(app.history)  # nothing of this chat is left out of the copy
    old = app.recorder.info.id
    info = app.store.fork(old)
    app.store.release(keep=info.id)  # the original may be continued elsewhere now
    app.recorder = SessionRecorder(app.store, app.settings, info, stored=info.messages)
    app.recorder.reload_checkpoint()
    app.usage, app.last_usage = app.token_use(), app.token_use()
    app.new_compactor()
    app.view.line(f"forked {old} → {info.id}; /resume {old} goes back", "bold")


async def _export(app: App, arg: str) -> None:
    """`/export [md|json|jsonl] [PATH]`: the session to PATH (quoted as in a shell when it holds spaces; a
    folder, or a path ending in `/`, gets `crow-session-ID.FMT` in it; default: the data folder's `exports`,
    not the repository); the format follows PATH's suffix when not given. A file the person names is never
    overwritten."""
    try:
        words = shlex.split(arg)
    except ValueError as exc:  # an unbalanced quote
        app.view.line(f"crow: error: /export: {exc}", "red")
        return
    fmt = words.pop(0) if words and words[0] in EXPORT_FORMATS else None
    if len(words) > 1:  # never a path cut at its first space
        app.view.line("crow: error: /export takes one path (quote one that holds spaces)", "red")
        return
    word = words[0] if words else None
    target = Path(word).expanduser() if word else None
    if word and target is not None and "/" not in word and not target.suffix and not target.exists():
        # `/export jsn`, `/export md json`: a typo, not a file to make here
        what = "one format at a time" if word in EXPORT_FORMATS else f"unknown format {strip_controls(word)!r}"
        app.view.line(f"crow: error: /export: {what} (choose from {', '.join(EXPORT_FORMATS)}, or give a "
                      "path with a suffix, or a folder)", "red")
        return
    if fmt is None:
        suffix = target.suffix.lstrip(".") if target is not None else ""
        fmt = suffix if suffix in EXPORT_FORMATS else "md"
    if not any(m.get("role") != "system" for m in app.history):
        app.view.line("nothing to export yet", "yellow")
        return
    info = app.recorder.info if app.recorder else None
    if info is not None:  # its title is set by the first message, after the session was made
        info = app.store.get(info.id)
    if info is None:  # --no-session, or not stored yet: the conversation as it is in memory
        now = time.time()
        info = SessionInfo("unsaved", "", now, now, app.settings.model, public_url(app.settings.base_url),
                           str(Path.cwd()))
    name = info.id if info.id != "unsaved" else "unsaved-" + time.strftime("%Y%m%d-%H%M%S")
    default = f"crow-session-{name}.{fmt}"
    into_folder = target is not None and (target.is_dir() or str(word).endswith("/"))
    path = (target / default if into_folder else target) if target is not None else exports_dir() / default
    data = export_session(info, app.history, fmt).encode("utf-8")
    try:  # off the loop: a slow disk must not freeze the chat; a FIFO is refused, never waited on
        await asyncio.to_thread(partial(write_export, replace=target is None, make_folder=target is None),
                                path, data)
    except ExportExists:
        app.view.line(f"crow: error: {strip_controls(str(path))} exists; crow does not overwrite a file "
                      "(give another path, or a folder)", "red")
        return
    except OSError as exc:
        app.view.line(f"crow: error: cannot write {strip_controls(str(path))}: {exc.strerror or exc}", "red")
        return
    app.view.line(f"wrote {strip_controls(str(path))}")


async def _usage(app: App, arg: str) -> None:
    app.view.line(f"last turn: {app.last_usage.text()}")
    app.view.line(f"this session (since started or resumed here): {app.usage.text()}")
    compactor = app.driver.compactor if app.driver is not None else None
    if compactor is not None:
        await compactor.budget.ensure_window()
        app.view.line(f"context: {compactor.budget.describe(compactor.outgoing(app.history))}")


async def _undo(app: App, arg: str) -> None:
    """`/undo [--force]`: rewind the last exchange, code and conversation (`undo`): the files its tool calls
    changed, `run_shell`'s too, as its first snapshot found them (without snapshots: the files crow's file tools
    changed, from their backups). Files changed since are named; with snapshots they are restored when the person
    says yes (or `--force`), without them only with `--force`. What the person ran since (`!COMMAND`: a note that
    waits for the next message) stays."""
    if app.recorder is None or app.recorder.info is None:
        why = "--no-session records nothing, so there is nothing to undo" if not app.options.session else \
            "nothing to undo (no exchange is recorded in this chat)"
        app.view.line(why, "yellow")
        return
    if arg.strip() not in ("", "--force", "force"):
        app.view.line("usage: /undo [--force]  (--force: restore files changed since crow wrote them too)",
                      "yellow")
        return
    recorder, sid = app.recorder, app.recorder.info.id
    note = app.history[-1] if app.history and is_shell_note(app.history[-1]) else None
    if note is not None:  # not the exchange: kept, after it
        recorder.truncate(app.history, len(app.history) - 1)
    try:
        workspace = snapshot_workspace(app.store, sid)
        now = await asyncio.to_thread(scan_workspace, workspace, app.store, app.scanner) \
            if workspace is not None else None
        plan = plan_undo(app.store, sid, force=arg.strip() in ("--force", "force"), workspace=workspace, now=now)
        asks = plan.rewind is not None  # as /rewind does; the backups alone hold them back unless --force
        for line in plan.describe(asks=asks):
            app.view.line(strip_controls(line))
        if asks and (held := plan.held()):
            app.view.line(strip_controls(f"changed since crow's turn: {', '.join(held)}"), "yellow")
            if await app.confirm("Overwrite them with their earlier content too? (y/n): "):
                plan = replace(plan, force=True)
            else:
                app.view.line("kept as they are", "yellow")
        for problem in apply_undo(app.store, sid, plan):
            app.view.line(f"crow: warning: {strip_controls(problem)}", "yellow")
        _cut(app, plan.keep)
    finally:
        if note is not None:
            _put_note_back(app, note)
    app.view.line("undone", "bold")


def _cut(app: App, keep: int) -> None:
    """Keep the first `keep` messages of the conversation (stored too); the session's title goes with its
    prompt."""
    assert app.recorder is not None and app.recorder.info is not None
    app.recorder.truncate(app.history, keep)
    app.store.clear_title_if_unprompted(app.recorder.info.id)
    app.recorder.reload_checkpoint()
    app.new_compactor()


def _put_note_back(app: App, note: Message) -> None:
    """Append the shell note `note` again (stored), titling a session it now starts by its command."""
    assert app.recorder is not None
    command = content_text(note.get("content")).removeprefix(NOTE_HEAD).split("\n", 1)[0]
    app.recorder.title = f"!{command}"
    app.history.append(note)
    with contextlib.suppress(SessionError):  # said by the next sync
        app.recorder.sync(app.history)


REWIND_MODES = (("both", "code and conversation, as they were before it"),
                ("conversation", "conversation only: the files stay as they are"),
                ("code", "code only: the files; the conversation stays"))
"""What /rewind puts back, as Claude Code's three choices (the value, the picker's line)."""
_REWIND_USAGE = "usage: /rewind [N] [both|conversation|code]  (N: a prompt of the list /rewind shows)"


def _prompts(history: list[Message]) -> list[tuple[int, str]]:
    """The person's prompts of `history` (a command's note alone is none): position and text on one line."""
    return [(i, " ".join(content_text(m.get("content")).split())) for i, m in enumerate(history)
            if is_prompt(m) and not is_shell_note(m)]


async def _rewind(app: App, arg: str) -> None:
    """`/rewind [N] [both|conversation|code]`: go back to before the person's Nth prompt of this session (none:
    pick it from a list): the files crow's tools changed since (`rewind`: `run_shell`'s too), the conversation
    (cut before the prompt), or both (none: pick). A file changed outside crow since is named and restored
    only when the person says yes."""
    if app.recorder is None or app.recorder.info is None:
        why = "--no-session records nothing, so there is nothing to rewind" if not app.options.session else \
            "nothing to rewind (no prompt is recorded in this chat)"
        app.view.line(why, "yellow")
        return
    prompts = _prompts(app.history)
    words = arg.split()
    mode = words.pop() if words and words[-1] in {m for m, _ in REWIND_MODES} else None
    if len(words) > 1 or (words and not (words[0].isdigit() and 1 <= int(words[0]) <= len(prompts))):
        app.view.line(_REWIND_USAGE, "yellow")
        return
    if not prompts:
        app.view.line("nothing to rewind (no prompt in this session yet)", "yellow")
        return
    if words:
        at = prompts[int(words[0]) - 1][0]
    else:
        options = [(str(i), strip_controls(text[:70])) for i, text in prompts]  # the picker numbers them
        picked = await app.pick("Rewind to before which prompt? (Enter picks, Ctrl-C leaves)", options,
                                default=options[-1][0])
        if picked is None:
            for n, (_, line) in enumerate(options, 1):
                app.view.line(f"{n}. {line}")
            app.view.line(_REWIND_USAGE, "dim")
            return
        at = int(picked)
    if mode is None:
        mode = await app.pick("Rewind what? (Enter picks, Ctrl-C leaves)", list(REWIND_MODES), default="both")
        if mode is None:
            app.view.line(_REWIND_USAGE, "dim")
            return
    text = next(t for i, t in prompts if i == at)
    app.view.line(strip_controls(f"rewind ({mode}) to before “{text[:60]}”"), "bold")
    if mode in ("both", "code"):
        await _rewind_code(app, at, record=mode == "code")
    if mode in ("both", "conversation"):
        _cut(app, at)
        count = len(app.history)
        app.view.line(f"the conversation is as it was before that prompt ({count} message{'' if count == 1 else 's'})")
    app.view.line("rewound", "bold")


async def _rewind_code(app: App, at: int, *, record: bool) -> None:
    """Put the files back as they were before the prompt at `at` (`rewind`); `record`: keep the rewind as a
    change crow made (the conversation stays), so a later rewind does not take it for someone else's."""
    recorder, scanner = app.recorder, app.scanner
    assert recorder is not None and recorder.info is not None
    if scanner is None:
        app.view.line("no snapshot of the workspace is kept in this chat", "yellow")
        return
    now = await asyncio.to_thread(scanner.scan)
    plan = plan_rewind(app.store, recorder.info.id, at, now, scanner.root)
    for line in plan.describe():
        app.view.line(strip_controls(line))
    app.view.line(BOUNDS_NOTE, "dim")
    overwrite = False
    if outside := plan.outside():
        names = ", ".join(c.path for c in outside)
        app.view.line(strip_controls(f"changed outside crow since: {names}"), "yellow")
        overwrite = await app.confirm("Overwrite them with their earlier content too? (y/n): ")
    if record and plan.changes:
        await recorder.snapshot("before", scanner)
    done, problems = apply_rewind(app.store, plan, overwrite=overwrite)
    if record and plan.changes:
        await recorder.snapshot("after", scanner)
    for line in done:
        app.view.line(strip_controls(line))
    for problem in problems:
        app.view.line(f"crow: warning: {strip_controls(problem)}", "yellow")


async def _instructions(app: App, arg: str) -> None:
    if not app.options.surface.project_instructions:
        app.view.line("project instructions are off (--no-project-instructions)")
        return
    if not app.settings.instructions:
        app.view.line(f"no AGENTS.md loaded (looked in crow's config folder, and from the repository root "
                      f"down to {app.root})")
        return
    for item in app.settings.instructions:
        app.view.line(f"{item.scope}: {item.path} ({item.size:,} bytes)")
    app.view.line("(read when a session starts; nearest last, so they have the last word)", "dim")


async def _skills(app: App, arg: str) -> None:
    from ...skills import rows

    skills = app.runtime.skills if app.runtime is not None else None
    if not skills:
        app.view.line("no skills are offered (none found, --no-tools or --no-default-prompt; `crow skills list` "
                      "says where it looks)")
    for line in rows(skills) if skills is not None else ():
        app.view.line(line)
    if skills is not None and (said := len(skills.problems) + len(skills.notes)):
        app.view.line(f"({said} warning{'s' if said > 1 else ''} about skills when this chat started)", "dim")


async def _compact(app: App, arg: str) -> None:
    compactor = app.driver.compactor if app.driver is not None else None
    if compactor is None or not any(m.get("role") == "user" for m in app.history):
        app.view.line("nothing to compact yet", "yellow")
        return

    sink = ChatSink(app.view, app.usage, app.last_usage)

    async def compact() -> None:
        assert compactor is not None
        await compactor.budget.ensure_window()
        assert app.runtime is not None
        async for event in compactor.compact(app.history, app.runtime.client, focus=arg or None,
                                             asked=True):
            sink.handle(event)

    app.compacting = asyncio.ensure_future(compact())
    try:
        with app.interrupts.stopping(lambda _signum: app.interrupt()):
            await app.compacting
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise
        app.view.line("compaction interrupted: the conversation is as it was", "yellow")
    finally:
        app.compacting = None
        with contextlib.suppress(OSError):
            app.view.stop()


async def _approval(app: App, arg: str) -> None:
    """`/approval [MODE]`: switch the approval mode for the rest of the chat (no MODE: pick one from a list)."""
    name = arg.strip()
    mode = next((m for m in APPROVAL_MODES if m == name), None) if name else await app.pick_mode()
    if name and mode is None:
        app.view.line(f"unknown approval mode {strip_controls(name)!r} (choose from {', '.join(APPROVAL_MODES)})",
                      "yellow")
        return
    if mode is not None:
        app.set_mode(mode)


async def _reasoning(app: App, arg: str) -> None:
    app.view.show_reasoning = not app.view.show_reasoning
    app.view.line(f"reasoning is now {'shown' if app.view.show_reasoning else 'hidden'}")


async def _retry(app: App, arg: str) -> None:
    last_user = app.last_user()
    if last_user is None:
        app.view.line("nothing to retry yet", "yellow")
        return
    if is_shell_note(app.history[last_user]):  # no answer to ask for again: they wait for a message
        app.view.line("the commands you ran go with your next message; send it instead of /retry", "yellow")
        return
    if app.recorder is not None:
        app.recorder.truncate(app.history, last_user + 1)
        app.recorder.reload_checkpoint()
        app.new_compactor()
    else:
        del app.history[last_user + 1:]
    app.show_user(last_user)
    await app.run_turn()


COMMANDS: tuple[SlashCommand, ...] = (
    SlashCommand("help", "", "this list", _help),
    SlashCommand("exit", "", "leave (Ctrl-D, or Ctrl-C twice, too)", _exit, aliases=("quit",)),
    SlashCommand("new", "", "start a new session", _new, aliases=("clear",)),
    SlashCommand("model", "[NAME]", "switch the model (none: pick one of the server's)", _model),
    SlashCommand("tools", "", "the tools the model is offered", _tools),
    SlashCommand("sessions", "", "recent sessions", _sessions),
    SlashCommand("resume", "[ID]", "continue a session (none: pick one, this folder's first)", _resume),
    SlashCommand("fork", "", "copy this session into a new one and go on there (the original stays)", _fork),
    SlashCommand("export", "[FMT] [PATH]",
                 "write this conversation to PATH (md, json or jsonl; default: crow's data folder)", _export),
    SlashCommand("usage", "", "token usage of the last turn and of this session; context used / window",
                 _usage),
    SlashCommand("compact", "[FOCUS]", "summarise older exchanges now (keeping FOCUS in particular)",
                 _compact),
    SlashCommand("instructions", "", "the AGENTS.md files in the system prompt, and where they came from",
                 _instructions),
    SlashCommand("skills", "", "the skills the model may load, and where they came from", _skills),
    SlashCommand("undo", "[--force]",
                 "rewind the last exchange, code and conversation (--force: overwrite files changed since)",
                 _undo),
    SlashCommand("rewind", "[N] [MODE]",
                 "go back to before an earlier prompt: code, conversation or both (none: pick from a list)",
                 _rewind),
    SlashCommand("approval", "[MODE]", "switch the approval mode (none: pick one; Shift+Tab cycles "
                 "ask, auto-edit, plan)", _approval),
    SlashCommand("reasoning", "", "show or hide the model's reasoning", _reasoning),
    SlashCommand("retry", "", "run your last message again", _retry),
    SlashCommand("ps", "[stop ID]", "the commands running in the background; stop one", ps),
)
"""The chat's slash commands, in /help's order; /help and the dispatch are made from this table."""

