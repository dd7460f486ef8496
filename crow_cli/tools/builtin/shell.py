"""`run_shell`: a shell command in the workspace, in its own process group.

Its own process group, so that on timeout, on cancellation and when the shell exits nothing it started lives
on; confined by the run's sandbox when there is one; with the run's secrets kept out of its environment and its
output. `_start` tells the process, the sandbox and the secrets in full, `_PipeReader` the output and the
result; `shell_output` and `shell_kill` serve commands started in the background.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import ToolError, ToolFailed
from ...history import ToolDisplay
from ...text import is_proxy_variable, mask_secrets, without_userinfo
from ..context import ToolContext
from ..jobs import BackgroundShells, Job, duration
from ..sandbox import (
    SandboxBlocked,
    backend,
    blocked_reason,
    git_snapshot,
    plan,
    put_aside_new_git,
    sandbox_argv,
    seccomp_fd,
)
from ..tool import ToolOutput, tool

__all__ = ["run_shell", "scrubbed_environ", "shell_kill", "shell_output"]

DEFAULT_TIMEOUT_S = 120.0
MAX_TIMEOUT_S = 600.0
MAX_OUTPUT_BYTES = 30_000
_HIDDEN_ENV = ("CROW_API_KEY", "OPENAI_API_KEY")  # secrets stay out of commands' reach (and so of the model)
_MIN_SUBSTRING_SECRET = 6  # shorter values (dummy keys like "x") hide a variable only when equal to it
_MARKER = "CROW_SHELL_RUN"
# After the shell exits (group killed): the waits for the pipe's end between marker sweeps. Their sum
# (1 s) is how long a straggler that escaped the sweeps may keep the pipe open.
_SWEEP_WAITS_S = (0.02, 0.05, 0.13, 0.3, 0.5)


def _is_secret(value: str, secrets: tuple[str, ...]) -> bool:
    return any(s in value if len(s) >= _MIN_SUBSTRING_SECRET else s == value for s in secrets)


def scrubbed_environ(secrets: tuple[str, ...]) -> dict[str, str]:
    """The environment without the API key variables and any variable holding one of `secrets`, and the
    proxy variables without their `user:password@` (a command still finds the proxy; one that needs the
    credentials gets 407 from it, never the password): what every program crow starts gets (`run_shell`'s
    commands, the git that `search_files` runs)."""
    env = {k: without_userinfo(v) if is_proxy_variable(k) else v for k, v in os.environ.items()}
    return {k: v for k, v in env.items() if k not in _HIDDEN_ENV and not _is_secret(v, secrets)}


def _command_env(token: str, secrets: tuple[str, ...]) -> dict[str, str]:
    env = scrubbed_environ(secrets)
    env[_MARKER] = token
    return env


def _mask(output: str, secrets: tuple[str, ...]) -> str:
    return mask_secrets(output, secrets)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _kill_marked(token: str) -> None:
    """SIGKILL every process (of ours) whose environment carries this call's marker (Linux /proc)."""
    marker = f"{_MARKER}={token}".encode()
    proc_dir = Path("/proc")
    if not proc_dir.is_dir():
        return
    for entry in proc_dir.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone, or not ours
            continue
        if marker in environ.split(b"\0"):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)


class _PipeReader:
    """Reads the command's output pipe on the event loop (no transport left behind), keeping the first
    two thirds of `MAX_OUTPUT_BYTES` and the last third.

    Output beyond `MAX_OUTPUT_BYTES` keeps its head and its tail (the end of a test run holds the summary)
    around a line saying how many bytes were not shown. A command that exits non-zero, is killed by a signal
    or times out raises `ToolFailed` with that same result text: the model reads it unchanged, and the call's
    outcome is `error`. Either way the person is shown the output and the exit code too (`history.ToolDisplay`,
    carried on the result).
    """

    def __init__(self, fd: int) -> None:
        import asyncio

        self.fd, self.buffer, self.tail, self.total, self.newlines = fd, bytearray(), bytearray(), 0, 0
        self.head_room = MAX_OUTPUT_BYTES - MAX_OUTPUT_BYTES // 3
        self.loop = asyncio.get_running_loop()
        self.eof = self.loop.create_future()
        os.set_blocking(fd, False)
        self.loop.add_reader(fd, self.read)

    def read(self) -> None:
        while not self.eof.done():
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:
                self.eof.set_result(None)
                self.loop.remove_reader(self.fd)
                return
            self.total += len(chunk)
            self.newlines += chunk.count(b"\n")
            room = self.head_room - len(self.buffer)
            if room > 0:
                self.buffer.extend(chunk[:room])
            self.tail.extend(chunk[max(room, 0):])
            del self.tail[: max(len(self.tail) - MAX_OUTPUT_BYTES // 3, 0)]

    @property
    def lines(self) -> int:
        """Lines the command printed in all (a last line without a newline counts)."""
        return self.newlines + (1 if bytes((self.tail or self.buffer)[-1:]) not in (b"\n", b"") else 0)

    def text(self) -> str:
        """The output read, decoded; when more came than fits, whole head and tail lines around a marker line."""
        if self.total <= MAX_OUTPUT_BYTES:
            return (self.buffer + self.tail).decode("utf-8", "replace")
        head = self.buffer[: self.buffer.rfind(b"\n") + 1] or self.buffer  # a line cut in two is no line
        tail = self.tail[self.tail.find(b"\n") + 1:] if b"\n" in self.tail[:-1] else self.tail
        hidden = self.total - len(head) - len(tail)
        return (head.decode("utf-8", "replace").removesuffix("\n") + f"\n[output truncated: {hidden} of "
                f"{self.total} bytes not shown]\n" + tail.decode("utf-8", "replace"))

    def close(self) -> None:
        self.read()  # whatever is already in the pipe
        self.loop.remove_reader(self.fd)
        os.close(self.fd)


def _command(arguments: dict[str, Any]) -> str | None:
    command = arguments.get("command")
    return command if isinstance(command, str) else None


def _preview(arguments: dict[str, Any], context: ToolContext) -> str:
    return f"$ {arguments.get('command')}"


def _preview_shell(arguments: dict[str, Any], context: ToolContext) -> str:
    shown = _preview(arguments, context)
    return f"{shown}\n(runs in the background: it keeps running until it ends or is stopped)" if arguments.get(
        "background") else shown


@dataclass(frozen=True)
class _Started:
    """A command started: its process, the read end of its output pipe, whether it runs confined, and what
    the sandbox checks when it ends (what it may write, `layout`, and the git metadata there was before it)."""

    proc: asyncio.subprocess.Process
    read_fd: int
    confined: bool
    watch_git: bool
    layout: Any = None
    git_before: dict[str, tuple[int, int, int]] = field(default_factory=dict)


async def _start(command: str, token: str, context: ToolContext) -> _Started:
    """Start `command` as `run_shell` runs it, its output on a pipe.

    The command runs under `/bin/sh -c` with the workspace root as working directory, stdin from /dev/null
    and stdout+stderr merged into one pipe that this module reads itself. It gets its own session
    (`start_new_session`), so on timeout, on cancellation (Ctrl-C, the run's own timeout) and as soon as
    the shell itself exits, the whole process group is killed. The call returns when the shell exits, even
    if a background process still holds the output open (its output after that is not read).

    Confined (`ToolContext.sandbox`, see `tools.sandbox`), the shell runs inside bubblewrap (Linux) or
    `sandbox-exec` (macOS): writes outside the workspace and the run's own temp dir fail (`sandbox.plan`),
    the network is off unless allowed, and on Linux every process of the command lives in a pid namespace
    that dies with the call and with crow (`--die-with-parent`, also on `kill -9`). A confined command that
    failed because of the sandbox raises `SandboxBlocked` with the reason and its output: dispatch reports
    it to the model, or runs it once more outside the sandbox when the user approves. So does one that made
    git metadata (a `.git`) where it could write in the workspace, which is put aside as it ends or is
    cancelled (`sandbox.put_aside_new_git`).

    Unconfined (`off`, or no sandbox on this machine after the user approved the command), a process that
    leaves the group (`setsid`, a double-forking daemon) is found on Linux by a marker variable in its
    environment (`CROW_SHELL_RUN`) and killed too; one that also clears its environment (`env -i`) on a
    system without `/proc` can outlive the call.

    Secrets: the API key variables (`CROW_API_KEY`, `OPENAI_API_KEY`) and every variable whose value
    contains one of the run's secrets (`ToolContext.secrets`, the configured API key) are removed from the
    command's environment, and a secret that still shows up in the output is replaced by `[REDACTED]`.
    Values shorter than 6 characters (dummy keys such as `"x"`) hide only variables whose whole value
    equals them.
    """
    # what a confined command may write (`plan`); the git metadata there is bound read-only, and checked
    # afterwards (off the event loop: the walk reads every folder a command can write)
    watch_git = context.sandbox.mode == "workspace-write" and backend() is not None
    layout = await asyncio.to_thread(plan, context.sandbox, context.workspace) if watch_git else None
    git_before = await asyncio.to_thread(git_snapshot, context.workspace, layout) if watch_git else {}
    read_fd, write_fd = os.pipe()
    try:
        with seccomp_fd(context.sandbox) as program:
            confined = sandbox_argv(context.sandbox, context.workspace, command, seccomp=program,
                                    git_dirs=list(git_before), layout=layout)
            how: dict[str, Any] = {"cwd": context.workspace, "env": _command_env(token, context.secrets),
                                   "stdin": asyncio.subprocess.DEVNULL, "stdout": write_fd,
                                   "stderr": asyncio.subprocess.STDOUT, "start_new_session": True}
            if confined is not None and program is not None:
                how["pass_fds"] = (program,)
            proc = await (asyncio.create_subprocess_exec(*confined, **how) if confined is not None
                          else asyncio.create_subprocess_shell(command, **how))
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)  # only the command's processes hold the write end: EOF when they are all gone
    return _Started(proc, read_fd, confined is not None, watch_git, layout, git_before)


async def _put_aside(started: _Started, context: ToolContext) -> tuple[str, str | None]:
    """What the sandbox put aside after a confined command: (the note for its result, the reason the
    command counts as blocked, or None)."""
    if not (started.confined and started.watch_git):
        return "", None
    moved = await asyncio.to_thread(put_aside_new_git, context.workspace, started.git_before, started.layout)
    if not moved:
        return "", None
    names = ", ".join(f"{os.path.relpath(old, context.workspace)} -> {os.path.relpath(new, context.workspace)}"
                      for old, new in moved)
    return ((f"\n[the sandbox put aside the git metadata this command made ({names}): its hooks and config would "
             "run outside the sandbox at the next git command]"),
            "the sandbox does not let a command make a git repository or gitdir file (.git) in the workspace")


async def _in_background(command: str, context: ToolContext) -> ToolOutput:
    """Start `command` as a background job of the run (`tools.jobs`) and return its handle at once."""
    shells = context.background
    if shells is None:
        raise ToolError("commands cannot run in the background here; run it without background")
    shells.check_room()
    token = secrets.token_hex(8)
    started = await _start(command, token, context)
    pgid = started.proc.pid

    def stop() -> None:
        _kill_group(pgid)
        _kill_marked(token)

    async def finish() -> str:
        stop()
        return (await _put_aside(started, context))[0].strip()

    job = shells.add(command, started.proc, started.read_fd, stop, finish)
    text = (f"[started in the background as {job.id}; it keeps running until it ends, shell_kill stops it, or "
            f"crow exits. Read its output with shell_output (id {job.id!r})]")
    return ToolOutput(text, ToolDisplay(status=f"running in the background as {job.id}"))


@tool(needs_approval=True, parallel=False, timeout_s=MAX_TIMEOUT_S + 30, kind="shell", preview=_preview_shell,
      subject=_command)
async def run_shell(command: str, timeout_s: float | None = None, background: bool = False,
                    context: ToolContext | None = None) -> ToolOutput:
    """Run a shell command in the workspace root and return its exit code and output (stdout and stderr merged).

    stdin is empty; processes it leaves behind are stopped when it exits. For a command that keeps running
    (a dev server, a watcher), set background: you get an id for shell_output and shell_kill.

    Args:
        command: run with /bin/sh -c (POSIX sh: no bash extensions; bash -c '...' for those).
        timeout_s: seconds before it is killed (default 120, at most 600).
        background: return at once, leaving it running.
    """
    if timeout_s is not None and not timeout_s > 0:  # NaN too
        raise ToolError(f"timeout_s must be more than 0 seconds (at most {MAX_TIMEOUT_S:g}); got {timeout_s}")
    limit = min(float(timeout_s or DEFAULT_TIMEOUT_S), MAX_TIMEOUT_S)
    context = context or ToolContext.current()
    if background:
        return await _in_background(command, context)
    token = secrets.token_hex(8)
    started = await _start(command, token, context)
    proc, read_fd = started.proc, started.read_fd
    pgid = proc.pid  # start_new_session: the shell leads a new session and process group
    try:
        reader = _PipeReader(read_fd)
        timed_out = False
        try:
            try:
                async with asyncio.timeout(limit):
                    await proc.wait()
            except TimeoutError:
                timed_out = True
        finally:
            _kill_group(pgid)  # stragglers, the timed-out command, or everything on cancellation
            _kill_marked(token)  # those that left the group (setsid)
            try:
                if proc.returncode is None:
                    with contextlib.suppress(asyncio.CancelledError):
                        await asyncio.shield(proc.wait())
                # Sweep again: a process caught mid-exec or mid-fork by the last sweep showed no environment
                # (or was not listed yet). The pipe closes once every process holding it is dead; one that
                # escaped both the group and the marker may keep it open: stop reading after the grace period.
                for wait_s in _SWEEP_WAITS_S:
                    with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                        async with asyncio.timeout(wait_s):
                            await asyncio.shield(reader.eof)
                    _kill_marked(token)
                    if reader.eof.done():
                        break
            finally:
                reader.close()
    except BaseException:  # cancelled (Ctrl-C, the run's end): what the command made is put aside all the same
        if started.confined and started.watch_git:
            put_aside_new_git(context.workspace, started.git_before, started.layout)
        raise
    output = _mask(reader.text(), context.secrets)
    code = proc.returncode
    if timed_out:
        status = f"timed out after {limit:g} s; the command and its process group were killed"
    else:
        status = f"exit code {code}" if code is not None and code >= 0 else f"killed by signal {-(code or 0)}"
    result = f"[{status}]\n{output}" if output else f"[{status}] (no output)"
    reason = blocked_reason(context.sandbox, output, bool(proc.returncode)) if started.confined else None
    note, blocked = await _put_aside(started, context)
    result += note
    reason = blocked or reason
    exited = code if not timed_out and code is not None and code >= 0 else None
    shown = ToolDisplay(output=output, exit_code=exited, status=status,  # the person sees it too
                        lines=reader.lines if reader.total > MAX_OUTPUT_BYTES else None)
    if reason is not None:
        raise SandboxBlocked(reason, result, shown)
    if timed_out or proc.returncode:  # the model reads `result` all the same; the call is shown failed
        raise ToolFailed(status, result, display=shown)
    return ToolOutput(result, shown)


def _shells(context: ToolContext | None) -> BackgroundShells:
    shells = (context or ToolContext.current()).background
    if shells is None:
        raise ToolError("no command runs in the background here")
    return shells


def _tail(data: bytes, dropped: int) -> str:
    """New output of a background command, at most `MAX_OUTPUT_BYTES` (its last ones), with what was not kept."""
    if len(data) > MAX_OUTPUT_BYTES:
        cut = data[-MAX_OUTPUT_BYTES:]
        cut = cut[cut.find(b"\n") + 1:] if b"\n" in cut[:-1] else cut  # a line cut in two is no line
        dropped, data = dropped + len(data) - len(cut), cut
    text = data.decode("utf-8", "replace")
    return (f"[{dropped} earlier bytes of output not shown]\n" if dropped else "") + text


def _job_status(job: Job) -> str:
    if job.running:
        return f"{job.id} is still running ({duration(job.elapsed())})"
    if job.killed:
        return f"{job.id} was stopped after {duration(job.elapsed())}"
    code = job.process.returncode
    ended = f"exit code {code}" if code is not None and code >= 0 else f"killed by signal {-(code or 0)}"
    return f"{job.id} has ended ({ended}) after {duration(job.elapsed())}"


@tool(kind="read")
async def shell_output(id: str, context: ToolContext | None = None) -> ToolOutput:
    """Read what a background run_shell command printed since the last read, and whether it still runs.

    Args:
        id: the id run_shell returned.
    """
    context = context or ToolContext.current()
    job = _shells(context).get(id)
    data, dropped = job.read()
    output = _mask(_tail(data, dropped), context.secrets)
    status = _job_status(job)
    code = job.process.returncode if not job.running and not job.killed else None
    shown = ToolDisplay(output=output, exit_code=code if code is not None and code >= 0 else None, status=status)
    return ToolOutput(f"[{status}]\n{output}" if output else f"[{status}] (no new output)", shown)


@tool(kind="other")
async def shell_kill(id: str, context: ToolContext | None = None) -> ToolOutput:
    """Stop a background run_shell command and every process it started.

    Args:
        id: the id run_shell returned.
    """
    shells = _shells(context)
    job = shells.get(id)
    if not job.running:
        return ToolOutput(f"[{_job_status(job)}; nothing to stop]")
    await shells.kill(job.id)
    return ToolOutput(f"[{job.id} stopped after {duration(job.elapsed())}: {' '.join(job.command.split())[:200]}]",
                      ToolDisplay(status=f"stopped {job.id}"))
