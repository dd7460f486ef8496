"""`crow run`: one prompt, the answer streamed to stdout, tool activity on stderr (or JSONL events with --json).

SIGINT / SIGTERM / SIGHUP cancel the run (`driver.Driver`): the loop closes the history with a result
for every unanswered call and the run ends `cancelled` with exit code 130 / 143 / 129.
A turn whose stream was cut and is asked for again (a `turn_restarted` notice) restarts its answer: on a
terminal the cut text stays, marked `[cut]`, and the answer restarts on a new line; when stdout is not a
terminal (`> answer.md`, a pipe), each turn's text is written once the turn has streamed whole, so only
the answer that completed is there.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TextIO

from ..attachments import image_attachment, load_attachment, user_content
from ..config import Settings
from ..driver import RunScope, output_lost, run_interrupts
from ..errors import ConfigError, SessionError
from ..events import (
    Event,
    Notice,
    PlanReady,
    ReasoningDelta,
    RunFinished,
    RunStarted,
    SubagentEvent,
    SubagentFinished,
    SubagentStarted,
    TextDelta,
    ToolCallDelta,
    ToolResultReady,
    ToolRunStarted,
    TurnFinished,
    WarningEvent,
)
from ..history import Message, as_json, user_message
from ..stdout import private_stdout
from ..text import strip_controls
from ..tools.approval import Answer, AskFn, Choice, Question
from ..tools.dispatch import Approver
from ..tools.hooks import Hooks
from ..wire.preload import import_in_background
from ..wire.vision import holds_images
from .approve import approver_for, terminal_ask
from .common import (
    make_console,
    short_json,
    warning_to,
)
from .jsonl import JsonlWriter
from .options import SurfaceOptions
from .persist import RunModes, open_session, settle_modes
from .refusals import Refusals, refused_line
from .runtime import Runtime
from .shown import Indented, call_arguments, display_lines, display_status
from .usage import TokenUse, footer

if TYPE_CHECKING:
    from .persist import SessionRecorder

__all__ = ["PlainPrinter", "RunOptions", "run_prompt"]


@dataclass(frozen=True)
class RunOptions:
    prompt: str
    title: str | None = None
    """The prompt as typed, without piped input: a new session's title (None: the prompt's own text)."""
    surface: SurfaceOptions = field(default_factory=SurfaceOptions)
    """The flags every surface shares (tools, `--yes`, `--debug`, `--record`, AGENTS.md)."""
    json: bool = False
    """Write JSONL events to stdout instead of the answer (`surfaces.jsonl`)."""
    quiet: bool = False
    """Plain mode: no tool activity, reasoning or notices on stderr (warnings and errors stay)."""
    exit_grace_s: float | None = None
    """After a signal, exit this many seconds after cleanup even if a tool thread still runs."""
    session: bool = True
    """Record the run in the session store (`--no-session` turns it off)."""
    session_id: str | None = None
    """Continue this stored session (`--session ID`)."""
    continue_last: bool = False
    """Continue the most recent session (`--continue`)."""
    system: str | None = None
    """The `--system` flag as given (None when not given): refused on a continued session it would change."""
    files: tuple[str, ...] = ()
    """Files attached to the prompt (`-f`): text into the message, images as `image_url` parts."""
    images: tuple[str, ...] = ()
    """Images attached to the prompt (`-i`): as `files`, but a file that is no image is refused."""
    stdin_image: bytes | None = None
    """An image piped on standard input, attached after the files."""


class PlainPrinter:
    """The plain sink: answer text to stdout as it arrives; everything else to stderr, one line per fact.

    What came from outside (model text on a terminal, tool names and output, warnings, server error
    messages) loses its control characters first. While a question waits for its answer (`held`),
    stderr lines are kept back and shown after it, so none lands on the question's line.
    """

    def __init__(self, out: TextIO, err: TextIO, *, debug: bool, quiet: bool = False,
                 prices: Mapping[str, float] | None = None,
                 all_prices: Mapping[str, Mapping[str, float]] | None = None) -> None:
        self.out = out
        self.all_prices = all_prices or {}
        """Every model's `[prices."MODEL"]`: a subagent's requests are priced at its model's."""
        self._child_models: dict[tuple[str, int], str] = {}
        self.err = make_console(err, highlight=False, soft_wrap=True)  # no escapes under NO_COLOR
        self.debug = debug
        self.quiet = quiet
        self.at_line_start = True
        self.reasoning_open = False
        self.out_is_terminal = out.isatty()  # model text reaching a terminal loses its control characters
        self._held: list[tuple[str, str, str, bool]] | None = None
        self._answering = False  # answer text came and the turn has not ended: warnings wait for its end
        self._after_answer: list[str] = []
        self.usage = TokenUse(prices)
        """The run's token use, summed over its requests (`prices`: the model's, for the cost)."""
        self.footer = self.err.is_terminal and not quiet  # the line chat ends a turn with: on a terminal only
        self._model = ""
        self._session_id: str | None = None
        self._pending: list[str] = []
        """Off a terminal: the text of the turn streaming, written once it ends (dropped if it is cut)."""
        self._refusals = Refusals()
        self._turn_ended = False

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Keep stderr lines back until the block ends (a question is on screen)."""
        self._held = []
        try:
            yield
        finally:
            lines, self._held = self._held, None
            for text, style, end, indented in lines:
                self._print(text, style, end, indented=indented)

    def _print(self, text: str, style: str = "", end: str = "\n", *, indented: bool = False) -> None:
        """A line on stderr (`end` after it); `indented`: a long line wraps onto rows that keep its indent
        (`shown.Indented`, on a terminal) instead of the terminal's own wrap from the first column."""
        if self._held is not None:
            self._held.append((text, style, end, indented))
            return
        if indented and self.err.is_terminal:
            self.err.print(Indented([(strip_controls(text), style)]), end="", soft_wrap=False)
            return
        self.err.print(strip_controls(text), style=style or None, end=end, markup=False)

    def _break_line(self) -> None:
        if not self.at_line_start and self.out_is_terminal:
            self.out.write("\n")
            self.out.flush()
            self.at_line_start = True

    def handle(self, event: Event) -> None:
        event = self._refusals.saw(event)
        if self.quiet and isinstance(event, ReasoningDelta | ToolRunStarted | ToolResultReady | Notice
                                     | SubagentStarted | SubagentEvent | SubagentFinished):
            if isinstance(event, Notice) and event.code == "turn_restarted":
                self._restart()
            return
        match event:
            case TextDelta(text=text):  # first: one per chunk
                if self.reasoning_open:
                    self._close_reasoning()
                if self._turn_ended:  # a later turn's answer (a Stop hook's one more turn) starts on its own line
                    self._turn_ended = False
                    self._new_line()
                if self.out_is_terminal:
                    self._write(strip_controls(text))
                else:
                    self._pending.append(text)
                self._answering = True
            case RunStarted(model=model, session_id=session_id):
                self._model, self._session_id = model, session_id
            case ReasoningDelta(text=text) if self.err.is_terminal or self.debug:
                self._print(text, "dim", end="")
                self.reasoning_open = True
            case TurnFinished(tool_calls=calls):
                self.usage.add(event.usage, event.timings)  # llama.cpp's cached tokens are in its timings
                self._write_pending()
                self._turn_ended = True
                if calls:
                    self._new_line()  # the next turn's text starts on its own line, in a pipe too
                self._end_answer()
            case ToolCallDelta() if self.debug:
                self._print(f"[delta] index={event.index!r} id={event.call_id!r} name={event.name!r} "
                            f"args={event.arguments!r}", "dim")
            case ToolRunStarted(call=call):
                self._close_reasoning()
                self._break_line()
                self._print(f"→ {call.name}({call_arguments(call.arguments)})", "cyan")
            case ToolResultReady(result=r):
                mark, style = ("✓", "green") if r.ok else ("✗", "red")
                ended = display_status(r.display)  # a command: its exit code, never read from the output
                detail = f" · {ended}" if ended else "" if r.ok else f": {short_json(r.output, 160)}"
                self._print(f"  {mark} {r.name} {r.duration_s:.2f}s{detail}", style)
                for line, line_style in display_lines(r.display):  # its output's first and last lines, a diff
                    self._print(line, line_style, indented=True)
            case PlanReady(plan=plan):  # the run's answer: on stdout, as answer text is
                self._close_reasoning()
                self._new_line()
                self.out.write(strip_controls(plan) if self.out_is_terminal else plan)
                self.out.write("" if plan.endswith("\n") else "\n")
                self.out.flush()
                self.at_line_start = True
            case WarningEvent(message=message) if self._answering:  # shown after the answer, never inside it
                self._after_answer.append(message)
            case WarningEvent(message=message):
                self._break_line()
                self._print(f"crow: warning: {message}", "yellow")
            case Notice(code="prompt_progress"):  # one per batch of the prompt: chat's spinner shows them
                pass
            case Notice(message=message):
                self._close_reasoning()
                if event.code == "turn_restarted":
                    self._restart()
                    self._end_answer()
                else:
                    self._break_line()
                self._print(message, "dim")
            case SubagentStarted(agent=agent, description=description, model=model):
                self._child_models[(event.call_id, event.index)] = model
                self._print(f"  ↳ {agent}: {description} ({model})", "cyan")
            case SubagentEvent(event=TurnFinished() as turn):  # the child's token use counts with the run's
                model = self._child_models.get((event.call_id, event.index), "")
                self.usage.add_other(turn.usage, turn.timings, self.all_prices.get(model))
            case SubagentEvent(agent=agent, event=ToolRunStarted(call=call)):
                self._print(f"  ↳ {agent} → {call.name}({short_json(call.arguments)})", "cyan")
            case SubagentEvent(agent=agent, event=ToolResultReady(result=r)):
                mark, style = ("✓", "green") if r.ok else ("✗", "red")
                ended = display_status(r.display)
                detail = f" · {ended}" if ended else "" if r.ok else f": {short_json(r.output, 160)}"
                self._print(f"  ↳ {agent} {mark} {r.name} {r.duration_s:.2f}s{detail}", style)
            case SubagentEvent(agent=agent, event=Notice(message=message) | WarningEvent(message=message)):
                self._print(f"  ↳ {agent}: {message}", "dim")
            case RunFinished():
                self._close_reasoning()
                self._write_pending()  # a cancelled turn's partial answer is kept, as on a terminal
                if not self.at_line_start:
                    self.out.write("\n")
                    self.out.flush()
                self._end_answer()
                if self.footer and event.turns:
                    self._print(footer(self.usage, self.usage, self._model, self._session_id, last_name="this run",
                                       total_name=None), "dim")
                if event.error and event.status == "cancelled":
                    self._print(f"crow: {event.error}", "bold red")
                elif event.error:
                    self._print(f"crow: error: {event.error}", "bold red")
                if event.changes_refused:  # last: what a person checks first after a run that changed nothing
                    self._print(refused_line(event.changes_refused), "bold yellow")

    def _end_answer(self) -> None:
        """The answer of the turn has ended: the warnings that came while it streamed are shown now."""
        self._answering = False
        held, self._after_answer = self._after_answer, []
        for message in held:
            self._break_line()
            self._print(f"crow: warning: {message}", "yellow")

    def _write(self, text: str) -> None:
        if text:
            self.out.write(text)
            self.out.flush()
            self.at_line_start = text.endswith("\n")

    def _write_pending(self) -> None:
        """Off a terminal: the turn's text, now that it streamed whole."""
        text, self._pending = "".join(self._pending), []
        self._write(text)

    def _restart(self) -> None:
        """The turn's stream was cut and is asked for again: on a terminal the cut text is marked and the answer
        restarts below it; off a terminal the cut text, never written, is dropped."""
        if self._pending:
            self._pending = []
        elif not self.at_line_start and self.out_is_terminal:
            self._write(" [cut]")
        self._new_line()

    def _new_line(self) -> None:
        """End a partial answer line on stdout whatever it is (the answer restarts below it)."""
        if not self.at_line_start:
            self.out.write("\n")
            self.out.flush()
            self.at_line_start = True

    def _close_reasoning(self) -> None:
        if self.reasoning_open:
            self._print("")
            self.reasoning_open = False


def _start_history(settings: Settings, options: RunOptions, content: Any = None, *, modes: RunModes | None = None
                   ) -> tuple[list[Message], SessionRecorder | None, WarningEvent | None, RunModes | None]:
    """The history to run (a continued session's, or new) ending with the prompt, already stored.

    Returns the history, the recorder (None when not recording), a warning when the store could
    not be used for a new session (the run goes on unrecorded), and the modes the run runs under: `modes`,
    kept as strict as a continued session's were (`persist.settle_modes`; None when `modes` is).
    """
    recorder: SessionRecorder | None = None
    history: list[Message] = []
    warning = None
    if options.session or options.session_id or options.continue_last:

        try:
            recorder, history = open_session(settings, session_id=options.session_id, latest=options.continue_last,
                                             system=options.system)
        except SessionError as exc:
            if options.session_id or options.continue_last:
                raise
            warning = WarningEvent(f"{exc}; this run is not recorded")
    if recorder is not None:
        recorder.title = options.title
    try:
        if settings.system and not history:
            history.append({"role": "system", "content": settings.system})
        if modes is not None:  # a continued session is never loosened by a looser config (only by a flag)
            modes = settle_modes(recorder, history, modes, given=options.surface.modes_given,
                                 network=settings.sandbox_network)
        history.append(user_message(options.prompt) if content is None else {"role": "user", "content": content})
        if recorder is not None:
            recorder.sync(history)  # the session exists (and has its id) from the first event on
    except BaseException:
        if recorder is not None:
            recorder.store.close()
        raise
    return history, recorder, warning, modes


def _held_ask(ask: AskFn | None, printer: PlainPrinter | JsonlWriter) -> AskFn | None:
    """`ask` with the printer's stderr lines held back while the question waits (none lands on its line)."""
    if ask is None or not isinstance(printer, PlainPrinter):
        return ask
    asking = ask

    async def held(question: Question) -> Answer | Choice:
        with printer.held():
            return await asking(question)

    return held


async def run_prompt(settings: Settings, options: RunOptions, out: TextIO | None = None,
                     err: TextIO | None = None) -> int:
    """Run one prompt to completion; return the process exit code (0, 1, 2, 130, 143).

    The answer (or the JSONL events) goes to `out`, everything else to `err` (None: `sys.stdout` and
    `sys.stderr` as they are at the call). For the whole run,
    plugin imports included, `sys.stdout` is `err`, and when `out` is the process's stdout, file
    descriptor 1 is stderr too (`private_stdout`): what a tool, plugin or subprocess prints lands
    on stderr and never mixes into the answer or breaks the event stream.
    """
    out, err = sys.stdout if out is None else out, sys.stderr if err is None else err
    with contextlib.ExitStack() as stack:
        if out is sys.__stdout__:  # the process's own stdout: only the answer or events may reach fd 1
            out = stack.enter_context(private_stdout())
        stack.enter_context(contextlib.redirect_stdout(err))
        try:
            return await _run_prompt(settings, options, out, err)
        except OSError as exc:  # the output failed before the driver ran (`run_started`); files name theirs
            if exc.filename is not None:
                raise
            return _say_output_failed(output_lost(exc), err)


def _say_output_failed(finished: RunFinished, err: TextIO) -> int:
    """Say on `err` why the output could not be written, unless it went away (nobody to tell); the exit code."""
    if finished.output_errno is not None and not finished.output_gone:
        print(f"crow: error: {finished.error}", file=err, flush=True)
    return finished.exit_code


async def _run_prompt(settings: Settings, options: RunOptions, out: TextIO, err: TextIO) -> int:
    # Usage errors (ConfigError, exit 2) come before any event and before a session is stored.
    runtime = Runtime(settings, options.surface, warn=warning_to(err))
    async with runtime:  # MCP servers stopped, the client closed
        return await _run_in(runtime, options, out, err)


async def _run_in(runtime: Runtime, options: RunOptions, out: TextIO, err: TextIO) -> int:
    settings = runtime.settings
    secrets = runtime.context.secrets
    attached = [*(load_attachment(f, runtime.workspace, secrets) for f in options.files),
                *(load_attachment(f, runtime.workspace, secrets, image_only=True) for f in options.images),
                *([image_attachment(options.stdin_image, "stdin")] if options.stdin_image is not None else [])]
    content = user_content(options.prompt, attached) if attached else None
    printer: PlainPrinter | JsonlWriter = (JsonlWriter(out, err, debug=options.surface.debug) if options.json
                                           else PlainPrinter(out, err, debug=options.surface.debug, quiet=options.quiet,
                                                             prices=settings.prices.get(settings.model),
                                                             all_prices=settings.prices))
    # with --yes too: the policy asks nothing then, but running a command outside the sandbox is a question
    approve = approver_for(settings, yes=options.surface.yes, ask=_held_ask(terminal_ask(), printer))
    if not runtime.mcp_server_names:  # every tool is known already: a rule naming none is refused before any event
        runtime.check_rules()
    # the MCP servers start (and the SDK loads) while the session is read; the run waits for them in `_drive`
    runtime.begin()
    sdk = import_in_background() if runtime.mcp_server_names else None
    try:
        try:
            current = RunModes(approve.policy.mode, runtime.context.sandbox.mode)
            history, recorder, warning, modes = _start_history(settings, options, content, modes=current)
            new_session = not (options.session_id or options.continue_last)
            if modes is not None and modes != current:  # the continued session's stricter modes
                approve.policy = replace(approve.policy, mode=modes.approval)
                runtime.context = replace(runtime.context, sandbox=replace(runtime.context.sandbox,
                                                                           mode=modes.sandbox))
        except SessionError as exc:  # no such session, or one in use: a run that starts and fails (exit 1)
            printer.handle(RunStarted(model=settings.model))
            printer.handle(RunFinished("error", "", 0, str(exc), exc.exit_code))
            return exc.exit_code
        # From the first event on, a signal ends the run with one run_finished: before the driver runs, it
        # ends the scope (MCP servers starting, the client being built); then it stops the driver.
        try:
            with run_interrupts(options.exit_grace_s) as scope:
                printer.handle(RunStarted(model=settings.model, session_id=recorder.session_id if recorder else None))
                return await _drive(runtime, printer, history, recorder, new_session, warning, approve, scope, err)
            finished = scope.finished
            assert finished is not None  # the scope ends its block early for an end signal only
            printer.handle(finished)
            return finished.exit_code
        finally:  # however the run ended, its session is free again: a caller in this process (ACP, tests) may
            if recorder is not None:  # continue it next, where only a process exit freed it before
                recorder.store.close()
    finally:
        if sdk is not None:
            sdk.join()  # never leave while that thread holds an import lock (shutdown would wait on it)


def _warnings_to(err: TextIO) -> Callable[[Event], None]:
    def say(event: Event) -> None:
        if isinstance(event, WarningEvent):
            print(f"crow: warning: {strip_controls(event.message)}", file=err, flush=True)
    return say


async def _submit(hooks: Hooks, printer: PlainPrinter | JsonlWriter, history: list[Message],
                  recorder: SessionRecorder | None, new_session: bool) -> str | None:
    """Fire `SessionStart` and `UserPromptSubmit` for the prompt that ends `history`: why a hook blocked it (it is
    then taken out of the history and the session, a new session deleted), or None, with the hooks' context
    added to the prompt (stored as sent)."""
    hooks.report = printer.handle
    hooks.session_id = recorder.session_id or "" if recorder is not None else ""
    await hooks.session_start("startup" if new_session else "resume")
    prompt = history[-1]
    before = dict(prompt)
    blocked = await hooks.submit(as_json(prompt))
    if blocked is not None or prompt != before:
        if recorder is not None and new_session and blocked is not None:
            recorder.discard()
            del history[-1]
        elif recorder is not None:
            recorder.truncate(history, len(history) - 1)  # the prompt is stored again as it is sent
            if blocked is None:
                history.append(prompt)
                recorder.sync(history)
        elif blocked is not None:
            del history[-1]
    return blocked


async def _drive(runtime: Runtime, printer: PlainPrinter | JsonlWriter, history: list[Message],
                 recorder: SessionRecorder | None, new_session: bool, warning: WarningEvent | None,
                 approve: Approver, scope: RunScope, err: TextIO) -> int:
    if warning is not None:
        printer.handle(warning)
    if recorder is not None and recorder.previous_model:
        printer.handle(Notice(f"crow: session {recorder.session_id} was using {recorder.previous_model}; "
                              f"continuing with {runtime.settings.model}", code="model_changed"))
    if names := runtime.mcp_pending:  # they may take up to their startup_timeout: say what is awaited
        printer.handle(Notice(f"crow: starting MCP servers: {', '.join(names)}", code="mcp_starting"))
    try:
        for problem in await runtime.start():
            printer.handle(WarningEvent(problem))
    except ConfigError as exc:  # a rule naming no tool: refused now that every tool is known
        if recorder is not None:  # a usage error stores nothing: not a new session, not the prompt
            if new_session:
                recorder.discard()
            else:
                recorder.truncate(history, len(history) - 1)
        printer.handle(RunFinished("error", "", 0, str(exc), exc.exit_code))
        return exc.exit_code
    hooks = runtime.context.hooks
    if hooks is not None:
        blocked = await _submit(hooks, printer, history, recorder, new_session)
        if blocked is not None:
            printer.handle(RunFinished("error", "", 0, f"a UserPromptSubmit hook blocked the prompt; it was not "
                                       f"sent: {blocked}", 1))
            hooks.report = _warnings_to(err)  # after run_finished: only what went wrong, on stderr
            await hooks.session_end()
            return 1
    # files crow's tools change can be restored by `sessions undo` (the recorder keeps them)
    driver = runtime.new_driver(approve, recorder=recorder, interrupts=scope)
    finished = await driver.run(history, printer, recorder)
    if hooks is not None:
        hooks.report = _warnings_to(err)  # after run_finished: only what went wrong, on stderr
        await hooks.session_end()
    _say_output_failed(finished, err)  # the printer cannot say it (its output is what failed)
    if (recorder is not None and new_session and finished.status == "error"
            and not any(m.get("role") in ("assistant", "tool") for m in history) and not holds_images(history)):
        recorder.discard()  # unreachable, 401, 404, no key: nothing worth continuing was said (a prompt with an
        # image is kept: a text-only model refused it, and `crow run -c -m VISION_MODEL` continues it)
    return finished.exit_code
