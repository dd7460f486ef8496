"""The `crow` command: a typer app that registers one module per subcommand.

Exit codes: 0 success, 1 runtime or API error, 2 usage or configuration error, 130 interrupted.
Nothing heavy is imported here: `crow --version` and `crow tools` must start fast.
"""

from __future__ import annotations

import errno
import os
import sys
from typing import Annotated, Any, NoReturn

import typer

from . import __version__, startup
from .commands.acp import acp
from .commands.agents import agents_app
from .commands.chat import chat
from .commands.facts import facts_app
from .commands.hooks import hooks_app
from .commands.mcp import mcp
from .commands.models import models
from .commands.options import examples
from .commands.probe import probe
from .commands.prompt import prompt
from .commands.run import run
from .commands.sessions import sessions_app
from .commands.skills import skills_app
from .commands.tools import tools
from .text import visible

__all__ = ["app", "main"]

app = typer.Typer(
    name="crow",
    epilog=examples("crow", 'crow "Fix the failing test"', 'crow run --local "Please use list_directory."',
                    'crow run "Summarise README.md"', "crow chat --resume"),
    help="A react-loop agent for any OpenAI-compatible Chat Completions server.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion [bash|zsh|fish|powershell]
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


app.command(epilog=examples('crow run "Summarise README.md"', 'git diff | crow run "Review this diff"',
                            'crow run --json --yes "Fix the failing test" > events.jsonl'),
            short_help="Run one prompt: the answer to stdout, tool activity to stderr.")(run)
app.command(epilog=examples("crow chat", "crow chat --resume", "crow chat --local"))(chat)
app.command(epilog=examples("crow tools", "crow tools --tools-dir tools"),
            short_help="List the tools the model would be offered.")(tools)
app.command(epilog=examples("crow prompt", "crow prompt --approval auto-edit", "crow prompt --system-file prompt.md"),
            short_help="Print the system message a new run would send.")(prompt)
app.command(epilog=examples("crow acp", "crow acp --profile local --approval auto-edit"),
            short_help="Be an Agent Client Protocol agent for an editor.")(acp)
app.command(epilog=examples("crow mcp", "crow mcp --profile local --approval auto-edit --sandbox workspace-write",
                            "claude mcp add crow -- crow mcp --model qwen3-coder",
                            "codex mcp add crow -- crow mcp"),
            short_help="Be an MCP server: other agents hand crow tasks.")(mcp)
app.command(epilog=examples("crow probe --base-url http://127.0.0.1:8080/v1", "crow probe --local",
                             "crow probe --show"),
            short_help="Probe a server: streaming and tool calling.")(probe)
app.command(epilog=examples("crow models", "crow models --base-url http://127.0.0.1:11434/v1 --json"),
            short_help="List the server's models (GET /models).")(models)
app.add_typer(facts_app, epilog=examples("crow facts list", "crow facts forget --model qwen3"),
              short_help="Show and forget what crow learned about servers.")
app.add_typer(hooks_app, epilog=examples("crow hooks list", "crow hooks list --json"),
              short_help="Show the lifecycle hooks that would run here.")
app.add_typer(sessions_app, epilog=examples("crow sessions list", "crow sessions show ID",
                                             "crow sessions export ID --format md", "crow sessions fork ID"))
app.add_typer(skills_app, epilog=examples("crow skills list", "crow skills list --json"),
              short_help="Show the skills (SKILL.md folders) a run here would offer.")
app.add_typer(agents_app, epilog=examples("crow agents list", "crow agents list --json"),
              short_help="Show the subagents (agent files) a run here would offer.")


_ROOT_OPTIONS = {"--version", "--help", "-h", "--install-completion", "--show-completion"}
"""The options of `crow` itself (the rest belong to a command)."""


def command_names() -> set[str]:
    """The names of crow's commands and command groups (`run`, `chat`, `sessions` ...), as typer names them."""
    names = {(info.name or info.callback.__name__).lower().replace("_", "-")
             for info in app.registered_commands if info.callback is not None}
    return names | {str(group.name or group.typer_instance.info.name) for group in app.registered_groups
                    if group.typer_instance is not None}


def chat_by_default(args: list[str], *, terminal: bool) -> list[str]:
    """The command line crow runs for `args` (what followed `crow`), starting as Codex and Claude Code do:
    nothing on a terminal opens a chat (help when stdin or stdout is not a terminal); a first word that is
    not a command (`crow "fix the test"`), or an option of a command (`crow --model qwen3`), is `crow chat`'s.
    A one-word prompt that is a command name is that command."""
    if not args:
        return ["chat"] if terminal else args
    first = args[0]
    if first in _ROOT_OPTIONS or first in command_names():
        return args
    return ["chat", *args]


def _reopen_closed_std_streams() -> None:
    """A closed stdin, stdout or stderr (`crow run hi >&-`) is taken by /dev/null, so that no file crow
    opens later (the session store) can take descriptor 0, 1 or 2. stdout is opened read-only: writing
    the answer fails (EBADF) and crow exits 1 saying so, as with `>/dev/full`, rather than losing the
    answer and exiting 0."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDONLY if fd == 1 else os.O_RDWR)  # the lowest free descriptor
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            setattr(sys, name, open(fd, "r" if fd == 0 else "w", encoding="utf-8", closefd=False))  # noqa: SIM115


def _is_usage_error(exc: Exception) -> bool:
    """A click exception raised by typer's parser (typer vendors click and exports only some of its
    classes, so they are recognised by their public shape: `exit_code` and `format_message`)."""
    return isinstance(getattr(exc, "exit_code", None), int) and callable(getattr(exc, "format_message", None))


def _usage_error(exc: Any, prompt_words: list[str] | None = None) -> NoReturn:
    """A usage error found by typer (unknown option, missing argument, bad value) in crow's one-line
    `crow: error: …` form, pointing at the command's help; its exit code (2). `crow` or `crow sessions`
    alone print their help, as before. `prompt_words`: what was typed when it went to `crow chat` as a prompt
    (`chat_by_default`): words beyond the first are said to go in quotes, and a mistyped command is named."""
    if type(exc).__name__ == "NoArgsIsHelpError":
        exc.show()
        sys.exit(exc.exit_code)
    message = visible(" ".join(str(exc.format_message()).split()).rstrip("."))  # it may echo any argument
    if message[:1].isupper() and message[1:2].islower():  # "No such option" -> "no such option"
        message = message[0].lower() + message[1:]
    if prompt_words and not prompt_words[0].startswith("-") and message.startswith("got unexpected extra argument"):
        print(f"crow: error: {_quote_hint(prompt_words)}", file=sys.stderr)
        sys.exit(exc.exit_code)
    path = getattr(getattr(exc, "ctx", None), "command_path", None)
    hint = f" (see {path} --help)" if path else ""
    print(f"crow: error: {message}{hint}", file=sys.stderr)
    sys.exit(exc.exit_code)


def _quote_hint(typed: list[str]) -> str:
    """What to say when `crow WORD WORD …` (WORD no command) left words over: the prompt in quotes, and the
    command WORD was likely meant to be (`sesions` -> sessions)."""
    import difflib
    import shlex

    prompt = " ".join(typed[: next((i for i, w in enumerate(typed) if w.startswith("-")), len(typed))])
    quoted = f'"{prompt}"' if not set(prompt) & set('"$`\\!') else shlex.quote(prompt)
    hint = f"a prompt of several words goes in quotes: crow {visible(quoted)}"
    near = difflib.get_close_matches(typed[0], sorted(command_names()), n=1, cutoff=0.75)
    return f"no command {visible(typed[0])!r} (did you mean crow {near[0]}?); {hint}" if near else hint


def main() -> None:
    """Console entry point."""
    startup.loading()  # no garbage collection while crow loads (`startup`)
    _reopen_closed_std_streams()
    for stream in (sys.stdout, sys.stderr):  # a latin-1 or cp1252 console still gets the answer
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")
    try:
        typed = sys.argv[1:]
        args = chat_by_default(typed, terminal=sys.stdin.isatty() and sys.stdout.isatty())
        code = app(args=args, standalone_mode=False)  # crow prints typer's usage errors itself (_usage_error)
    except (KeyboardInterrupt, typer.Abort):
        print("\ncrow: interrupted", file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:  # `crow run … | head`: the reader left; say nothing more on stdout
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    except Exception as exc:  # a usage error from typer, else a bug: one line, the traceback only with --debug
        if _is_usage_error(exc):
            _usage_error(exc, typed if len(args) == len(typed) + 1 else None)  # a prompt, `crow "PROMPT"`
        if isinstance(exc, OSError) and exc.filename is None and exc.errno in _OUTPUT_ERRNOS:
            _output_failed(exc)  # stdout closed or full (`crow tools >/dev/full`): said as crow run says it
        print(f"crow: internal error: {type(exc).__name__}: {exc} (run with --debug for the traceback; "
              "please report it)", file=sys.stderr)
        if "--debug" in sys.argv:
            import traceback

            traceback.print_exception(exc, file=sys.stderr)
        sys.exit(1)
    try:  # what is still buffered: a closed stdout or a full disk fails here, once, not at interpreter exit
        sys.stdout.flush()
    except OSError as exc:
        _output_failed(exc)
    sys.exit(code if isinstance(code, int) else 0)


_OUTPUT_ERRNOS = {errno.EBADF, errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EFBIG}
"""Errors of writing the output itself (no file name): a closed stdout, a full disk or quota."""


def _output_failed(exc: OSError) -> NoReturn:
    """Exit 1 saying the output could not be written (as `>/dev/full`); nothing more goes to stdout."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    print(f"crow: error: cannot write the output: {exc.strerror or exc}", file=sys.stderr)
    sys.exit(1)
