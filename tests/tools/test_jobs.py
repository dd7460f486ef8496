"""`tools.jobs`: the bounded output of a background command, read in pieces, and the run's limit."""

from __future__ import annotations

import asyncio

import pytest

from crow_cli.errors import ToolError
from crow_cli.tools import jobs
from crow_cli.tools.jobs import BackgroundShells, duration


async def _job(shells: BackgroundShells, command: str) -> jobs.Job:
    import os

    read_fd, write_fd = os.pipe()
    process = await asyncio.create_subprocess_exec("/bin/sh", "-c", command, stdout=write_fd,
                                                   stdin=asyncio.subprocess.DEVNULL, start_new_session=True)
    os.close(write_fd)

    def stop() -> None:
        import contextlib
        import signal

        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)

    async def finish() -> str:
        stop()
        return "[the end]"

    return shells.add(command, process, read_fd, stop, finish)


async def test_each_read_returns_what_came_since_the_last_and_the_dropped_bytes_are_counted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobs, "BUFFER_BYTES", 10)
    shells = BackgroundShells()
    job = await _job(shells, "printf 0123456789abcdef")
    assert job.watcher is not None
    await job.watcher
    assert job.total == len("0123456789abcdef\n[the end]\n") and len(job.buffer) == 10
    data, dropped = job.read()
    assert (data, dropped) == (b"[the end]\n", job.total - 10)  # the last 10 bytes kept, the rest counted
    assert job.read() == (b"", 0)
    assert job.state == "exited 0" and not job.running


async def test_the_limit_counts_running_commands_and_close_stops_them_with_a_line_each() -> None:
    shells = BackgroundShells(limit=1)
    job = await _job(shells, "sleep 600")
    with pytest.raises(ToolError, match=r"^1 commands already run in the background \(bg1\)"):
        shells.check_room()
    assert await shells.aclose() == ["stopped background command bg1 after 0s: sleep 600"]
    assert job.state == "stopped" and job.process.returncode is not None
    shells.check_room()  # room again
    with pytest.raises(ToolError, match="max_background_commands is 0"):
        BackgroundShells(limit=0).check_room()


def test_durations_read_as_hours_minutes_and_seconds() -> None:
    assert [duration(s) for s in (4.04, 75.2, 3725)] == ["4s", "1m15s", "1h2m5s"]
