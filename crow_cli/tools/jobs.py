"""Commands that keep running: `run_shell` with `background`, read by `shell_output`, stopped by `shell_kill`.

The run owns one `BackgroundShells` (`ToolContext.background`; `surfaces.runtime.Runtime` makes it and
closes it when the chat or run ends, one line for each command it stops). Each command's output goes into
a bounded buffer (`BUFFER_BYTES`, its last bytes kept): `shell_output` returns what came since its last
read. `run_shell` (`tools.builtin.shell`) starts the process, in the sandbox and after the approval any
command gets, and hands it here with what it does when the command ends (`Job.finish`: its process group
and stragglers killed, the sandbox's checks). At most `limit` commands run at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from ..errors import ToolError

__all__ = ["BUFFER_BYTES", "BackgroundShells", "Job", "duration"]

BUFFER_BYTES = 1024 * 1024
"""Bytes of a background command's output kept (its last ones); older output is dropped, and counted."""
_KEEP_ENDED = 20
"""Commands that ended kept for a last `shell_output`; the oldest of more are forgotten."""
_EOF_WAIT_S = 1.0
"""After a command ended and its group was killed: how long its output pipe may stay open (a straggler
that escaped the group) before crow stops reading."""


def duration(seconds: float) -> str:
    """`75.2` → `1m15s`; `4.04` → `4s`; `3725` → `1h2m5s`."""
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return (f"{hours}h{minutes}m{secs}s" if hours else f"{minutes}m{secs}s" if minutes else f"{secs}s")


@dataclass(eq=False)
class Job:
    """One background command: its process, its output buffer and what it came to."""

    id: str
    """The handle the model names it by (`bg1`, `bg2` …)."""
    command: str
    process: asyncio.subprocess.Process
    stop: Callable[[], None]
    """Kills the command: its process group, and those of its processes that left it."""
    finish: Callable[[], Awaitable[str]]
    """Awaited once the command's shell exited: kills what is left of it and makes the sandbox's checks;
    returns a note to add to its output ("" for none)."""
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None
    killed: bool = False
    """Stopped by `shell_kill`, `/ps` or the end of the run (not ended by itself)."""
    buffer: bytearray = field(default_factory=bytearray)
    total: int = 0
    """Bytes of output in all."""
    read_to: int = 0
    """Bytes of output (of `total`) returned by `read` so far."""
    watcher: asyncio.Task[None] | None = None
    drain: Callable[[], None] | None = None
    """Reads what is already in the output pipe (so that `read` returns all the command printed so far)."""

    @property
    def running(self) -> bool:
        return self.ended is None

    @property
    def state(self) -> str:
        """`running`, `exited 0`, `exited 2`, `killed by signal 9` or `stopped` (by crow)."""
        if self.ended is None:
            return "running"
        if self.killed:
            return "stopped"
        code = self.process.returncode
        return f"exited {code}" if code is not None and code >= 0 else f"killed by signal {-(code or 0)}"

    def elapsed(self) -> float:
        """Seconds it ran (so far, while running)."""
        return (self.ended or time.monotonic()) - self.started

    def add(self, data: bytes) -> None:
        self.total += len(data)
        self.buffer += data
        del self.buffer[: max(len(self.buffer) - BUFFER_BYTES, 0)]

    def read(self) -> tuple[bytes, int]:
        """The output that came since the last read, and how many bytes of it the buffer no longer held."""
        if self.drain is not None:
            self.drain()
        first = self.total - len(self.buffer)
        dropped = max(first - self.read_to, 0)
        start = max(self.read_to, first)
        self.read_to = self.total
        return bytes(self.buffer[start - first:]), dropped


class BackgroundShells:
    """The background commands of one run (see the module): at most `limit` running at once.

    Args:
        limit: commands running at once at most (0: none may run in the background).
    """

    def __init__(self, limit: int = 4) -> None:
        self.limit = limit
        self._jobs: dict[str, Job] = {}
        self._made = 0

    def jobs(self) -> list[Job]:
        """Every command kept, running or ended, oldest first."""
        return list(self._jobs.values())

    def check_room(self) -> None:
        """Raise `ToolError` when no other command may start in the background now (`limit` running)."""
        running = [job for job in self._jobs.values() if job.running]
        if self.limit <= 0:
            raise ToolError("commands cannot run in the background here (max_background_commands is 0)")
        if len(running) >= self.limit:
            names = ", ".join(job.id for job in running)
            raise ToolError(f"{len(running)} commands already run in the background ({names}), the most allowed "
                            "(max_background_commands); stop one with shell_kill first")

    def add(self, command: str, process: asyncio.subprocess.Process, read_fd: int, stop: Callable[[], None],
            finish: Callable[[], Awaitable[str]]) -> Job:
        """Keep `process` (running `command`, its output on the pipe `read_fd`, which is this object's to
        close) as a new job, and watch it to its end. Call on the event loop."""
        self._made += 1
        job = Job(f"bg{self._made}", command, process, stop, finish)
        self._jobs[job.id] = job
        loop = asyncio.get_running_loop()
        eof: asyncio.Future[None] = loop.create_future()

        def read() -> None:
            while not eof.done():
                try:
                    chunk = os.read(read_fd, 65536)
                except BlockingIOError:
                    return
                except OSError:
                    chunk = b""
                if not chunk:
                    eof.set_result(None)
                    loop.remove_reader(read_fd)
                    return
                job.add(chunk)

        os.set_blocking(read_fd, False)
        loop.add_reader(read_fd, read)
        job.drain = read  # from now on: a read returns all that is in the pipe
        job.watcher = loop.create_task(self._watch(job, read_fd, eof), name=f"crow-{job.id}")
        ended = [j for j in self._jobs.values() if not j.running]
        for old in ended[: max(len(ended) - _KEEP_ENDED, 0)]:
            del self._jobs[old.id]
        return job

    def get(self, job_id: str) -> Job:
        """The job `job_id` names.

        Raises:
            ToolError: no such job (the message lists those there are).
        """
        job = self._jobs.get(job_id.strip())
        if job is None:
            known = ", ".join(self._jobs) or "none"
            raise ToolError(f"no background command {job_id!r} (there are: {known})")
        return job

    async def _watch(self, job: Job, read_fd: int, eof: asyncio.Future[None]) -> None:
        """Wait for the command's end, kill what is left of it, read the rest of its output, close the pipe."""
        loop = asyncio.get_running_loop()
        try:
            await job.process.wait()
            note = await job.finish()  # stragglers: the group, and those that left it
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_EOF_WAIT_S):
                    await asyncio.shield(eof)
            if job.drain is not None:
                job.drain()
            if note:
                job.add(f"\n{note}\n".encode())
        finally:
            job.drain = None
            loop.remove_reader(read_fd)
            os.close(read_fd)
            if job.ended is None:
                job.ended = time.monotonic()

    async def kill(self, job_id: str) -> Job:
        """Stop the job `job_id` (its process group killed) and wait until it is gone; an ended one as it is.

        Raises:
            ToolError: no such job.
        """
        job = self.get(job_id)
        if job.running:
            job.killed = True
            job.stop()
            if job.watcher is not None:
                await asyncio.shield(job.watcher)
        return job

    async def aclose(self) -> list[str]:
        """Stop every command still running (the end of the chat or run); one line for each, saying what it
        was and how long it ran."""
        lines = []
        for job in self.jobs():
            if job.running:
                await self.kill(job.id)
                lines.append(f"stopped background command {job.id} after {duration(job.elapsed())}: "
                             f"{' '.join(job.command.split())[:80]}")
        return lines
