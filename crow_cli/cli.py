"""The `crow` command: a typer app that registers one module per subcommand.

Exit codes: 0 success, 1 runtime or API error, 2 usage or configuration error, 130 interrupted.
Nothing heavy is imported here: `crow --version` and `crow tools` must start fast.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from . import __version__
from .commands.chat import chat
from .commands.models import models
from .commands.probe import probe
from .commands.run import run
from .commands.sessions import sessions_app
from .commands.tools import tools

__all__ = ["app", "main"]

app = typer.Typer(
    name="crow",
    help="A react-loop agent for any OpenAI-compatible Chat Completions server.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        print(f"crow {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """crow: stream answers, run tools concurrently, loop until done."""


app.command()(run)
app.command()(chat)
app.command()(tools)
app.command()(probe)
app.command()(models)
app.add_typer(sessions_app)


def _reopen_closed_std_streams() -> None:
    """A closed stdin, stdout or stderr (`crow run hi >&-`) becomes /dev/null: crow runs without that
    output, and no file it opens later (the session store) can take descriptor 0, 1 or 2."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)  # the lowest free descriptor: `fd` itself
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            setattr(sys, name, open(fd, "r" if fd == 0 else "w", encoding="utf-8", closefd=False))  # noqa: SIM115


def main() -> None:
    """Console entry point."""
    _reopen_closed_std_streams()
    for stream in (sys.stdout, sys.stderr):  # a latin-1 or cp1252 console still gets the answer
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")
    try:
        app()
    except KeyboardInterrupt:
        print("\ncrow: interrupted", file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:  # `crow run … | head`: the reader left; say nothing more on stdout
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    except Exception as exc:  # a bug: one line, the traceback only with --debug
        print(f"crow: internal error: {type(exc).__name__}: {exc} (run with --debug for the traceback; "
              "please report it)", file=sys.stderr)
        if "--debug" in sys.argv:
            import traceback

            traceback.print_exception(exc, file=sys.stderr)
        sys.exit(1)
