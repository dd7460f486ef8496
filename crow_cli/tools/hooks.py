"""Lifecycle hooks, Claude Code's protocol: a command per event, one JSON object on its stdin, its answer read
from its exit code and (optionally) JSON on its stdout (`_answer`): exit 0 goes on, exit 2 blocks with stderr as
the reason, JSON may end the run, block, decide a permission or change a call's input; anything else is one
warning and the run goes on as if the hook had said nothing.

Each event is fired by its owner (`EVENTS`: `PreToolUse`/`PostToolUse` by `tools.orchestrator`, `Stop` by the
loop, the session events by the surfaces) through `Hooks.fire`, which runs every matching command at once and
returns one `HookDecision`. Hooks run with the run's secrets out of their environment and stdin, output bounded
(`MAX_OUTPUT_BYTES`), killed with their process group at `timeout_s`. Which hooks load (a project's only in a
trusted folder) is the surfaces' decision (`surfaces.hooks`). The protocol as a person reads it: docs/hooks.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import time
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, cast, get_args

from ..errors import ConfigError
from ..events import Event, HookRan, Notice, WarningEvent
from ..history import content_text
from ..text import clean_text, mask_secrets, strip_controls

__all__ = ["DEFAULT_TIMEOUT_S", "EVENTS", "MAX_CONTEXT_CHARS", "MAX_OUTPUT_BYTES", "PROJECT_SETTINGS",
           "HookDecision", "HookEvent", "HookSpec", "Hooks", "add_context", "kill_group", "parse_hooks",
           "read_project_hooks"]

HookEvent = Literal["PreToolUse", "PostToolUse", "UserPromptSubmit", "SessionStart", "SessionEnd", "Stop",
                    "SubagentStop", "PreCompact", "Notification"]
"""The events, named as Claude Code names them."""
EVENTS: tuple[HookEvent, ...] = get_args(HookEvent)
DEFAULT_TIMEOUT_S = 60.0
"""Seconds a hook may run when its table sets no `timeout_s`."""
MAX_OUTPUT_BYTES = 64 * 1024
"""Bytes of a hook's stdout (and of its stderr) read; the rest is dropped."""
MAX_CONTEXT_CHARS = 10_000
"""Characters of one hook's context (its stdout or `additionalContext`) the model is given."""
PROJECT_SETTINGS = Path(".crow") / "settings.toml"
"""A project's own settings file, relative to its root: its `[[hooks.EVENT]]` tables run in a trusted folder."""
_KEYS = {"matcher", "command", "timeout_s"}
_START_S = 5.0
"""Seconds a hook being started when its run is cancelled is waited for, to be killed at once."""
_MATCHED_BY = {"PreToolUse": "tool_name", "PostToolUse": "tool_name", "SessionStart": "source",
               "PreCompact": "trigger", "Notification": "notification_type", "SessionEnd": "reason"}
"""What an event's `matcher` is compared with (the other events run every hook configured for them)."""
_PERMISSIONS = ("allow", "deny", "ask")


@dataclass(frozen=True, slots=True)
class HookSpec:
    """One configured hook: a `[[hooks.EVENT]]` table."""

    event: HookEvent
    command: str
    """Run with `/bin/sh -c` in the workspace."""
    matcher: str = ""
    """A pattern of what the event is about (`_MATCHED_BY`: a tool's wire name for tool events): `""` or `"*"`
    matches everything, else a regular expression matching the whole name (`run_shell`, `write_file|edit_file`,
    `mcp__.*`)."""
    timeout_s: float = DEFAULT_TIMEOUT_S
    source: str = ""
    """The file it is configured in."""
    project: bool = False
    """It comes from a project's `.crow/settings.toml` (runs only in a trusted folder)."""

    def matches(self, target: str | None) -> bool:
        """Whether this hook runs for `target` (None: the event has nothing to match; every hook runs)."""
        if self.matcher in ("", "*") or target is None:
            return True
        return re.fullmatch(self.matcher, target) is not None


def parse_hooks(table: Any, source: str, *, project: bool = False) -> list[HookSpec]:
    """The hooks of a `[hooks]` table (`{"PreToolUse": [{"matcher": …, "command": …, "timeout_s": …}], …}`),
    in the order they are written.

    Raises:
        ConfigError: an unknown event, a table that is not one, a missing or empty `command`, an unknown key, a
            `timeout_s` that is not a positive number, a `matcher` that is not a regular expression.
    """
    if not isinstance(table, Mapping):
        raise ConfigError(f"{source}: 'hooks' must be a table of [[hooks.EVENT]] tables")
    found: list[HookSpec] = []
    for event, entries in table.items():
        if event not in EVENTS:
            raise ConfigError(f"{source}: unknown hook event {strip_controls(str(event))!r} (events: "
                              f"{', '.join(EVENTS)})")
        if not isinstance(entries, list) or not all(isinstance(e, Mapping) for e in entries):
            raise ConfigError(f"{source}: hooks.{event} must be tables, written [[hooks.{event}]]")
        for entry in entries:
            where = f"{source}: [[hooks.{event}]]"
            unknown = sorted(set(entry) - _KEYS)
            if unknown:
                raise ConfigError(f"{where} has an unknown key {strip_controls(unknown[0])!r} (keys: matcher, "
                                  "command, timeout_s)")
            command, matcher = entry.get("command"), entry.get("matcher", "")
            timeout = entry.get("timeout_s", DEFAULT_TIMEOUT_S)
            if not isinstance(command, str) or not command.strip():
                raise ConfigError(f"{where} needs a command (a string)")
            if not isinstance(matcher, str):
                raise ConfigError(f"{where}: matcher must be a string (a tool-name pattern)")
            if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < float("inf"):
                raise ConfigError(f"{where}: timeout_s must be a number of seconds greater than 0")
            try:
                re.compile(matcher)
            except re.error as exc:
                raise ConfigError(f"{where}: matcher {strip_controls(matcher)!r} is not a pattern ({exc})") from None
            found.append(HookSpec(cast(HookEvent, event), command, matcher, float(timeout), source, project))
    return found


def read_project_hooks(path: Path) -> list[HookSpec]:
    """The hooks of a project settings file (`PROJECT_SETTINGS`); none when it does not exist. Keys beside
    `hooks` are not read here.

    Raises:
        ConfigError: the file cannot be read, is not UTF-8 TOML, or its hooks are invalid (`parse_hooks`).
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    return parse_hooks(data.get("hooks", {}), str(path), project=True)


@dataclass(frozen=True, slots=True)
class HookDecision:
    """What the hooks of one event said together (`Hooks.fire`); `HookDecision()` when none ran or all went on."""

    blocked: str | None = None
    """Why a hook blocked (exit 2's stderr, a JSON `block`'s or `deny`'s reason); None: nothing blocked."""
    by: HookSpec | None = None
    """The hook that blocked or decided the permission (the first in configuration order)."""
    permission: Literal["allow", "deny", "ask"] | None = None
    """`PreToolUse`: the strictest `permissionDecision` given (deny, then ask, then allow); None: none."""
    permission_reason: str | None = None
    updated_input: dict[str, Any] | None = None
    """`PreToolUse`: the arguments to run the call with instead (the first hook's that gave them)."""
    context: tuple[str, ...] = ()
    """Text for the model: `additionalContext`, and plain stdout of `UserPromptSubmit` / `SessionStart` hooks."""
    stop: str | None = None
    """A hook answered `continue: false`: its `stopReason` (maybe ""): the run ends."""


@dataclass(slots=True)
class _Ran:
    spec: HookSpec
    code: int | None
    stdout: str
    stderr: str
    duration_s: float
    problem: str | None = None
    """Why it counts as a non-blocking error (a timeout, a command that could not start), or None."""
    timed_out: bool = False
    stdout_cut: bool = False
    """Its stdout ran past `MAX_OUTPUT_BYTES`: only the first were kept."""


def add_context(message: dict[str, Any], texts: Iterable[tuple[str, str]]) -> None:
    """Give the model `texts` (hooks' context: (event, text) pairs) with a user `message`, in place: after its text
    (a string), or as one more text part (a list of parts)."""
    said = [(event, t) for event, t in texts if t.strip()]
    if not said:
        return
    block = "\n\n".join(f"[{event} hook context]\n{t.strip()}" for event, t in said)
    content = message.get("content")
    if isinstance(content, list):
        message["content"] = [*content, {"type": "text", "text": block}]
    else:
        message["content"] = f"{content or ''}\n\n{block}" if content else block


@dataclass
class Hooks:
    """The hooks of a run, and what every hook is told about it (session, workspace, approval mode).

    Mutable: a surface sets `session_id` once its session is known, `report` to its sink, `permission_mode`
    when the approval policy changes. `fire` is safe to call from concurrent tool calls.
    """

    specs: Sequence[HookSpec] = ()
    cwd: Path = field(default_factory=Path.cwd)
    """The workspace: where hooks run, and `cwd`, `CROW_PROJECT_DIR`, `CLAUDE_PROJECT_DIR` in what they get."""
    secrets: tuple[str, ...] = ()
    """Kept out of hooks' environment (`run_shell`'s rule) and masked in what they are sent and report."""
    session_id: str = ""
    transcript_path: str | None = None
    """crow keeps sessions in SQLite: there is no transcript file, so this stays None (`null`)."""
    permission_mode: str = "default"
    """Claude Code's name for the approval policy (`default`, `acceptEdits`, `bypassPermissions`, `plan`)."""
    report: Callable[[Event], None] | None = None
    """Where each `HookRan` (and a `WarningEvent` for what went wrong) goes; None: nowhere."""
    stop_reason: str | None = field(default=None, init=False)
    """Set when a hook answered `continue: false` (its `stopReason`); the loop ends the run and clears it."""
    stop_event: Literal["Stop", "SubagentStop"] = "Stop"
    """What the loop these hooks run in fires as it is about to end: `SubagentStop` in a subagent's (the `task`
    tool's child) loop, whose tool calls the same hooks see."""
    pending_context: list[tuple[str, str]] = field(default_factory=list, init=False)
    """`SessionStart` hooks' context ((event, text) pairs), given to the model with the next prompt (`submit`)."""
    _background: set[asyncio.Task[HookDecision]] = field(default_factory=set, init=False, repr=False)

    def copy(self, **changes: Any) -> Hooks:
        """The same hooks for another session or folder (`session_id=…`, `cwd=…`, `report=…`), with a state of
        their own (a pending stop, context, background hooks)."""
        return replace(self, **changes)

    def matching(self, event: HookEvent, target: str | None = None) -> list[HookSpec]:
        """The hooks that run for `event` about `target` (a tool's wire name, a `source` …), identical commands
        once (Claude Code's rule), in configuration order."""
        seen: set[str] = set()
        found = []
        for spec in self.specs:
            if spec.event == event and spec.matches(target) and spec.command not in seen:
                seen.add(spec.command)
                found.append(spec)
        return found

    def has(self, event: HookEvent) -> bool:
        """Whether any hook is configured for `event` (whatever it matches)."""
        return any(spec.event == event for spec in self.specs)

    async def fire(self, event: HookEvent, fields: Mapping[str, Any] | None = None, *,
                   call_id: str | None = None) -> HookDecision:
        """Run the hooks of `event` at once, each with the JSON object of the event on stdin; their decision.

        Args:
            event: the event.
            fields: the event's own fields (`tool_name`, `tool_input`, `prompt`, `source` …); the matcher is
                compared with the one `_MATCHED_BY` names.
            call_id: the tool call the event is about (reported in `HookRan`).

        Raises:
            asyncio.CancelledError: the run is cancelled (each running hook's process group is killed first).
        """
        fields = dict(fields or {})
        key = _MATCHED_BY.get(event)
        specs = self.matching(event, str(fields.get(key, "")) if key is not None else None)
        if not specs:
            return HookDecision()
        payload = {"session_id": self.session_id, "transcript_path": self.transcript_path, "cwd": str(self.cwd),
                   "permission_mode": self.permission_mode, "hook_event_name": event, **fields}
        data = mask_secrets(json.dumps(payload, ensure_ascii=False, default=str), self.secrets).encode()
        ran = await asyncio.gather(*(self._run(spec, data) for spec in specs))
        return self._decide(event, ran, call_id)

    async def session_start(self, source: Literal["startup", "resume", "clear", "compact"]) -> None:
        """Fire `SessionStart` (`source`: a new session, a continued one, `/new`, after a compaction); what its
        hooks print is given to the model with the next prompt."""
        decision = await self.fire("SessionStart", {"source": source})
        self.pending_context += [("SessionStart", text) for text in decision.context]

    async def submit(self, message: dict[str, Any]) -> str | None:
        """Fire `UserPromptSubmit` for the user `message` about to be sent: why a hook blocked it (drop it, show
        the reason), or None, the hooks' context (and `SessionStart`'s) added to `message` in place."""
        decision = await self.fire("UserPromptSubmit", {"prompt": content_text(message.get("content"))})
        if decision.blocked is not None:
            return decision.blocked
        add_context(message, [*self.pending_context, *(("UserPromptSubmit", t) for t in decision.context)])
        self.pending_context.clear()
        return None

    async def session_end(self, reason: Literal["clear", "logout", "prompt_input_exit", "other"] = "other"
                          ) -> None:
        """Fire `SessionEnd` (what its hooks answer decides nothing), then stop the background hooks."""
        try:
            await self.fire("SessionEnd", {"reason": reason})
        finally:
            await self.aclose()

    def notify(self, fields: Mapping[str, Any]) -> None:
        """Fire `Notification` in the background (the question it is about is not held up by it)."""
        if not self.has("Notification"):
            return
        task = asyncio.get_running_loop().create_task(self.fire("Notification", fields))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def stop_continues(self, event: Literal["Stop", "SubagentStop"] = "Stop", *, active: bool,
                             fields: Mapping[str, Any] | None = None) -> str | None:
        """Fire `Stop` (or `SubagentStop`) as a loop is about to end; what the loop must go on with, or None.

        A hook that blocks (exit 2, `decision: "block"`) keeps the loop going with its reason as the next user
        message, once: when `active` (the loop already went on for a stop hook: `stop_hook_active`), its block is
        a warning and the loop ends.
        """
        decision = await self.fire(event, {**(fields or {}), "stop_hook_active": active})
        if decision.blocked is None or decision.stop is not None:
            return None
        if active:
            self._say(WarningEvent(f"the {event} hook {_shown(decision.by)} asked to go on again; a run goes on "
                                   "once for a stop hook (stop_hook_active), so it ends here"))
            return None
        return decision.blocked

    async def aclose(self) -> None:
        """Stop the `Notification` hooks still running (their process groups are killed)."""
        for task in list(self._background):
            task.cancel()
        for task in list(self._background):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def _say(self, event: Event) -> None:
        if self.report is not None:
            with contextlib.suppress(OSError):  # the sink's output is gone: the driver says so, not a hook
                self.report(event)

    def _environ(self) -> dict[str, str]:
        from .builtin.shell import scrubbed_environ  # what run_shell's commands get: no key, no secret

        env = scrubbed_environ(self.secrets)
        env["CROW_PROJECT_DIR"] = env["CLAUDE_PROJECT_DIR"] = str(self.cwd)
        return env

    async def _run(self, spec: HookSpec, data: bytes) -> _Ran:
        """Run one hook: `data` on its stdin, its output read (capped), killed with its group at its timeout."""
        started = time.perf_counter()
        start = asyncio.ensure_future(asyncio.create_subprocess_shell(
            spec.command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, cwd=self.cwd, env=self._environ(), start_new_session=True))
        try:
            proc = await asyncio.shield(start)  # cancelled meanwhile, asyncio would wait for it to end by itself
        except OSError as exc:
            return _Ran(spec, None, "", "", time.perf_counter() - started, f"it could not start: {exc.strerror}")
        except asyncio.CancelledError:  # it may have started already: it goes with the run
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait([start], timeout=_START_S)
            start.add_done_callback(_kill_started)
            raise
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        out, err = _Capped(proc.stdout), _Capped(proc.stderr)
        readers = [asyncio.ensure_future(out.read()), asyncio.ensure_future(err.read())]
        writer = asyncio.ensure_future(_feed(proc.stdin, data))
        timed_out = waited_out = False
        try:
            try:  # the wait ends when the hook and every process holding its output have ended
                async with asyncio.timeout(spec.timeout_s):
                    await proc.wait()
                    await asyncio.gather(*readers)
            except TimeoutError:
                # exited, but what it left behind held its output: not a timeout of its own (killed all the same)
                waited_out, timed_out = True, proc.returncode is None
        finally:
            if waited_out or proc.returncode is None:  # cancelled, or out of time: it and all it started
                kill_group(proc.pid)
            for task in (*readers, writer):
                task.cancel()
            if proc.returncode is None:
                with contextlib.suppress(asyncio.CancelledError, ProcessLookupError):
                    await asyncio.shield(proc.wait())
        duration = time.perf_counter() - started
        problem = f"ran past its timeout_s ({spec.timeout_s:g} s) and was killed" if timed_out else None
        return _Ran(spec, None if timed_out else proc.returncode, out.text(), err.text(), duration, problem,
                    timed_out, out.cut)

    def _decide(self, event: HookEvent, ran: list[_Ran], call_id: str | None) -> HookDecision:
        """One decision from every hook's answer, each reported (`HookRan`, a warning for a non-blocking error)."""
        blocked: str | None = None
        by: HookSpec | None = None
        permission: str | None = None
        permission_reason: str | None = None
        permission_by: HookSpec | None = None
        updated: dict[str, Any] | None = None
        context: list[str] = []
        stop: str | None = None
        rank = {"deny": 3, "ask": 2, "allow": 1}
        updated_by: HookSpec | None = None
        for one in ran:
            answer, problem = _answer(event, one)
            outcome: Literal["ok", "blocked", "error", "timeout"] = (
                "timeout" if one.timed_out else "error" if problem else
                "blocked" if answer.blocked is not None or answer.permission == "deny" else "ok")
            message = problem or answer.blocked or (answer.permission_reason if answer.permission == "deny" else None)
            self._say(HookRan(event, self._masked(one.spec.command), outcome, one.duration_s, one.spec.source,
                              one.code, self._masked(_one_line(message)) if message else None, call_id))
            if problem:
                self._say(WarningEvent(f"{event} hook {_shown(one.spec, self.secrets)} {problem}; the run goes on"))
                continue
            if answer.blocked is not None and blocked is None:
                blocked, by = answer.blocked, one.spec
            if answer.permission is not None and rank[answer.permission] > rank.get(permission or "", 0):
                permission, permission_reason, permission_by = (answer.permission, answer.permission_reason,
                                                                one.spec)
            if answer.updated_input is not None and updated is None:
                updated, updated_by = answer.updated_input, one.spec
            context += [self._masked(strip_controls(c[:MAX_CONTEXT_CHARS])) for c in answer.context]
            if answer.stop is not None and stop is None:
                stop = answer.stop
        if updated is not None and updated_by is not None and blocked is None and permission != "deny":
            # the tool line showed the model's arguments: the person reads the ones that run
            shown = _one_line(json.dumps(updated, ensure_ascii=False))
            self._say(Notice(f"crow: the {event} hook {_shown(updated_by, self.secrets)} changed the arguments of "
                             f"call [{call_id or 'no id'}] to {self._masked(shown)}"))
        if stop is not None:
            stop = self._said(stop) if stop else stop
            self.stop_reason = stop
        return HookDecision(self._said(blocked) if blocked is not None else None, by or permission_by,
                            cast(Literal["allow", "deny", "ask"] | None, permission),
                            self._said(permission_reason) if permission_reason else permission_reason,
                            updated, tuple(context), stop)

    def _masked(self, text: str) -> str:
        return mask_secrets(clean_text(text), self.secrets)

    def _said(self, text: str) -> str:
        """A hook's reason as the model and the person read it: no control characters (JSON escapes can carry
        them), secrets masked, at most `MAX_CONTEXT_CHARS` as context is."""
        text = strip_controls(text)
        if len(text) > MAX_CONTEXT_CHARS:
            text = f"{text[:MAX_CONTEXT_CHARS]}… [the hook's reason was cut at {MAX_CONTEXT_CHARS} characters]"
        return self._masked(text)


def _answer(event: HookEvent, ran: _Ran) -> tuple[HookDecision, str | None]:
    """What one hook answered, or why its answer counts as a non-blocking error."""
    if ran.problem is not None:
        return HookDecision(), ran.problem
    if ran.code == 2:
        reason = ran.stderr.strip() or f"blocked by the {event} hook {_shown(ran.spec)} (exit code 2, no reason)"
        return HookDecision(blocked=reason, by=ran.spec), None
    if ran.code != 0:
        said = _one_line(ran.stderr) or _one_line(ran.stdout)
        return HookDecision(), f"failed (exit code {ran.code}{': ' + said if said else ''})"
    text = ran.stdout.strip()
    if not text.startswith("{"):
        plain = (text,) if text and event in ("UserPromptSubmit", "SessionStart") else ()
        return HookDecision(context=plain), None
    try:
        data = json.loads(text)
    except ValueError as exc:
        if ran.stdout_cut and event == "PreToolUse":  # perhaps a deny: the call is not run on a guess
            return HookDecision(blocked=f"the hook's answer ran past {MAX_OUTPUT_BYTES // 1024} KiB and could not be "
                                f"read whole, so the call was refused", by=ran.spec), None
        cut = f"; its output was cut at {MAX_OUTPUT_BYTES // 1024} KiB" if ran.stdout_cut else ""
        return HookDecision(), f"answered with JSON crow cannot read ({exc}{cut})"
    if not isinstance(data, dict):
        return HookDecision(), "answered with JSON that is not an object"
    return _json_answer(event, data, ran.spec)


def _json_answer(event: HookEvent, data: dict[str, Any], spec: HookSpec) -> tuple[HookDecision, str | None]:
    """A hook's JSON answer as a decision (Claude Code's fields), or what in it cannot be read."""
    specific = data.get("hookSpecificOutput") or {}
    if not isinstance(specific, dict):
        return HookDecision(), "answered hookSpecificOutput that is not an object"
    stop = None
    if data.get("continue") is False:
        stop = str(data.get("stopReason") or "")
    reason = data.get("reason")
    reason = str(reason) if reason is not None else None
    decision = data.get("decision")
    blocked = None
    permission = specific.get("permissionDecision")
    permission_reason = specific.get("permissionDecisionReason")
    if decision == "block":
        blocked = reason or f"blocked by the {event} hook {_shown(spec)}"
    elif decision == "approve" and event == "PreToolUse" and permission is None:  # Claude Code's older field
        permission, permission_reason = "allow", reason
    elif decision not in (None, "approve", "undefined"):
        return HookDecision(), f"answered an unknown decision {strip_controls(str(decision))!r} (block or nothing)"
    if permission is not None and (event != "PreToolUse" or permission not in _PERMISSIONS):
        return HookDecision(), (f"answered permissionDecision {strip_controls(str(permission))!r}, which only "
                                "PreToolUse takes (allow, deny or ask)")
    if permission == "deny":
        blocked = str(permission_reason or reason or f"denied by the PreToolUse hook {_shown(spec)}")
    updated = specific.get("updatedInput")
    if updated is not None and (event != "PreToolUse" or not isinstance(updated, dict)):
        return HookDecision(), "answered updatedInput that is not an object of the call's arguments (PreToolUse)"
    context = specific.get("additionalContext")
    texts = (str(context),) if context else ()
    if stop is not None and blocked is None:
        blocked = stop or f"stopped by the {event} hook {_shown(spec)}"
    return HookDecision(blocked, spec, cast(Literal["allow", "deny", "ask"] | None, permission),
                        str(permission_reason) if permission_reason is not None else None, updated, texts, stop), None


def _shown(spec: HookSpec | None, secrets: tuple[str, ...] = ()) -> str:
    """How a message names a hook: its command (one line, cut) and the file it is configured in."""
    if spec is None:
        return "(unknown)"
    command = _one_line(mask_secrets(spec.command, secrets))
    command = command if len(command) <= 60 else command[:59] + "…"
    return f"`{command}` ({spec.source})" if spec.source else f"`{command}`"


def _one_line(text: str | None) -> str:
    return " ".join(strip_controls(text or "").split())[:300]


class _Capped:
    """Reads a stream to its end, keeping its first `MAX_OUTPUT_BYTES`."""

    def __init__(self, stream: asyncio.StreamReader) -> None:
        self.stream = stream
        self.kept = bytearray()
        self.cut = False

    async def read(self) -> None:
        while chunk := await self.stream.read(65536):
            room = MAX_OUTPUT_BYTES - len(self.kept)
            self.cut = self.cut or len(chunk) > room
            if room > 0:
                self.kept += chunk[:room]

    def text(self) -> str:
        return clean_text(self.kept.decode("utf-8", "replace"))


async def _feed(stdin: asyncio.StreamWriter, data: bytes) -> None:
    """Write the event to a hook's stdin and close it; a hook that does not read it is no error."""
    with contextlib.suppress(OSError):  # BrokenPipeError, ConnectionResetError: it exited without reading
        stdin.write(data)
        await stdin.drain()
    with contextlib.suppress(OSError):
        stdin.close()


def _kill_started(start: asyncio.Future[asyncio.subprocess.Process]) -> None:
    """Kill the process group of a hook that started after its run was cancelled."""
    if not start.cancelled() and start.exception() is None:
        kill_group(start.result().pid)


def kill_group(pgid: int) -> None:
    """SIGKILL the process group `pgid` (a command started in a session of its own, and what it started); one
    already gone is no error."""
    with contextlib.suppress(OSError):
        os.killpg(pgid, signal.SIGKILL)

