"""`run_shell`: a shell command in the workspace, in its own process group.

The command runs under `/bin/sh -c` with the workspace root as working directory, stdin from /dev/null
and stdout+stderr merged. It gets its own session (`start_new_session`), so on timeout, on cancellation
(Ctrl-C, the run's own timeout) and when the command itself ends, the whole process group is killed:
no background process outlives the call.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal

from ..registry import tool
from ..workspace import workspace_root

__all__ = ["run_shell"]

DEFAULT_TIMEOUT_S = 120.0
MAX_TIMEOUT_S = 600.0
MAX_OUTPUT_BYTES = 30_000
_HIDDEN_ENV = ("CROW_API_KEY", "OPENAI_API_KEY")  # secrets stay out of commands' reach (and so of the model)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def _read_capped(stream: asyncio.StreamReader, buffer: bytearray, total: list[int]) -> None:
    while chunk := await stream.read(65536):
        total[0] += len(chunk)
        room = MAX_OUTPUT_BYTES - len(buffer)
        if room > 0:
            buffer.extend(chunk[:room])


@tool(needs_approval=True, parallel=False, timeout_s=MAX_TIMEOUT_S + 30)
async def run_shell(command: str, timeout_s: float | None = None) -> str:
    """Run a shell command in the workspace root and return its exit code and output (stdout and stderr merged).

    The command gets no input (stdin is empty). Background processes it starts are stopped when it ends.

    Args:
        command: the command line, run with /bin/sh -c.
        timeout_s: seconds before the command and everything it started are killed (default 120, at most 600).
    """
    limit = min(max(float(timeout_s or DEFAULT_TIMEOUT_S), 0.1), MAX_TIMEOUT_S)
    env = {k: v for k, v in os.environ.items() if k not in _HIDDEN_ENV}
    proc = await asyncio.create_subprocess_shell(
        command, cwd=workspace_root(), env=env, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, start_new_session=True,
    )
    pgid = proc.pid  # start_new_session: the shell leads a new session and process group
    buffer, total = bytearray(), [0]
    assert proc.stdout is not None
    reader = asyncio.ensure_future(_read_capped(proc.stdout, buffer, total))
    timed_out = False
    try:
        try:
            await asyncio.wait_for(proc.wait(), limit)
        except TimeoutError:
            timed_out = True
    finally:
        _kill_group(pgid)  # stragglers, the timed-out command, or everything on cancellation
        if proc.returncode is None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(proc.wait())
        # The pipe closes once every process holding it is dead; a process that left the group
        # (setsid) may keep it open: stop reading after a grace period.
        try:
            await asyncio.wait_for(asyncio.shield(reader), 2.0)
        except (TimeoutError, asyncio.CancelledError):
            reader.cancel()
    output = buffer.decode("utf-8", "replace")
    if total[0] > MAX_OUTPUT_BYTES:
        output += f"\n[output truncated: {total[0] - MAX_OUTPUT_BYTES} of {total[0]} bytes not shown]"
    if timed_out:
        status = f"timed out after {limit:g} s; the command and its process group were killed"
    else:
        code = proc.returncode
        status = f"exit code {code}" if code is not None and code >= 0 else f"killed by signal {-(code or 0)}"
    return f"[{status}]\n{output}" if output else f"[{status}] (no output)"
