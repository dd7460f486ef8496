"""Chat's `/ps`: the commands `run_shell` keeps running in the background (`tools.jobs`), and stopping one."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import ToolError
from ...text import strip_controls
from ...tools.jobs import duration

if TYPE_CHECKING:
    from .commands import App

__all__ = ["ps"]


async def ps(app: App, arg: str) -> None:
    """`/ps`: one line per background command (id, state, time, command line); `/ps stop ID` stops one."""
    shells = app.runtime.context.background if app.runtime is not None else None
    words = arg.split()
    if shells is None:
        app.view.line("no command can run in the background here")
        return
    if words and (words[0] not in ("stop", "kill") or len(words) != 2):
        app.view.line("usage: /ps, or /ps stop ID (an id /ps lists)", "yellow")
        return
    if words:
        try:
            job = await shells.kill(words[1])
        except ToolError as exc:
            app.view.line(str(exc), "yellow")
            return
        app.view.line(f"{job.id}: {job.state} after {duration(job.elapsed())}")
        return
    jobs = shells.jobs()
    if not jobs:
        app.view.line("no background commands (the model starts one with run_shell and background)")
        return
    for job in jobs:
        command = " ".join(job.command.split())
        command = command if len(command) <= 80 else command[:79] + "…"
        app.view.line(strip_controls(f"{job.id}  {job.state:<18} {duration(job.elapsed()):>8}  {command}"),
                      "" if job.running else "dim")
    if any(job.running for job in jobs):
        app.view.line("(/ps stop ID stops one; all are stopped when the chat ends)", "dim")
