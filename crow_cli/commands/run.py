"""`crow run [PROMPT]`, and `crow run -p NAME [ARGUMENTS]`: a prompt file as the message (`prompt_files`)."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..errors import ConfigError, CrowError
from ..prompt_files import NAME
from ..text import clean_text
from .options import (
    LocalModelOpt,
    LocalOpt,
    NoSessionOpt,
    RunFlags,
    ask_trust,
    check_before_start,
    fail,
    resumed_model,
    served_model,
    with_run_flags,
)

if TYPE_CHECKING:
    from ..config import Settings

__all__ = ["run"]

_EXIT_GRACE_S = 3.0
"""After SIGINT/SIGTERM, seconds given to a tool thread that cannot be interrupted before exiting anyway."""


def _stdin_is_data() -> bool:
    """Standard input is a pipe or a regular file (never a terminal or /dev/null)."""
    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (AttributeError, OSError, ValueError):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISREG(mode)


_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "tcsh", "csh", "yash", "busybox"})


def _stdin_is_a_shells_own() -> bool:
    """Our standard input is also the input of the shell that started us (Linux /proc): a `while read`
    loop or a script passed its own input down; it was not piped to this command. Wrappers between
    (`timeout`, `uv run`) that share it are looked through. False where it cannot be told."""
    try:
        mine = os.fstat(sys.stdin.fileno())
        pid = os.getppid()
        for _ in range(8):  # up the ancestors that hold the same pipe or file as their input
            theirs = os.stat(f"/proc/{pid}/fd/0")
            if (theirs.st_dev, theirs.st_ino) != (mine.st_dev, mine.st_ino):
                return False
            if os.path.basename(os.readlink(f"/proc/{pid}/exe")) in _SHELLS:  # also a `#!/bin/sh` script's
                return True
            with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
                pid = int(fh.read().rsplit(")", 1)[1].split()[1])  # the field after the state: ppid
            if pid <= 1:
                return False
    except (AttributeError, OSError, ValueError, IndexError):
        return False
    return False


def _read_stdin() -> str | bytes:
    """Standard input as text, or as bytes when it is an image (PNG, JPEG, GIF, WebP, told by its first bytes:
    `screencap | crow run "what is on screen?"` attaches it, never decodes it as text)."""
    from ..images import MAX_IMAGE_BYTES, image_type
    from ..text import decode_text  # UTF-16 with its byte-order mark: what Windows tools pipe

    data = sys.stdin.buffer.read()
    if image_type(data[:16]) is not None:
        if len(data) > MAX_IMAGE_BYTES:
            raise ConfigError(f"cannot attach the image on standard input: it is {len(data):,} bytes; images are "
                              f"attached up to {MAX_IMAGE_BYTES:,}")
        return data
    if b"\0" in data[:8192] and not data.startswith((b"\xff\xfe", b"\xfe\xff", b"\0\0\xfe\xff")):
        raise ConfigError("standard input is binary, not text nor a PNG, JPEG, GIF or WebP image; it was not sent "
                          "(--no-stdin leaves it unread)")
    return decode_text(data)


def _read_prompt(prompt: str | None, use_stdin: bool | None) -> tuple[str, str, bytes | None]:
    """The argument, with piped stdin after it (`git diff | crow run "Review this"`), or stdin alone; the
    prompt as typed (the argument, or stdin when it is the prompt: the session's title); and the image piped
    on stdin (None when none was).

    With a prompt argument, stdin is added when `use_stdin` is True, or (None) when it is a pipe or a
    file piped to this command, not the starting shell's own input (`printf 'a\\nb\\n' | while read l; do
    crow run "$l"; done` runs two prompts). Without one (or with `-`) stdin is the prompt. An image on stdin
    is attached to the prompt argument (it cannot be the prompt).
    """
    image: bytes | None = None
    typed = prompt or ""
    if prompt is None or prompt == "-":
        if use_stdin is False:
            raise ConfigError("no prompt: pass it as an argument (--no-stdin keeps standard input unread)")
        piped = _read_stdin() if _stdin_is_data() else ""
        if isinstance(piped, bytes):
            raise ConfigError("no prompt: standard input is an image; pass the prompt as an argument "
                              "(the image is attached to it)")
        prompt = typed = piped
        if not prompt.strip():
            raise ConfigError("no prompt: pass it as an argument or on standard input")
    else:
        if use_stdin is None:
            use_stdin = _stdin_is_data() and not _stdin_is_a_shells_own()
        piped = _read_stdin() if use_stdin else ""
        if isinstance(piped, bytes):
            image = piped
        elif piped.strip():
            prompt = f"{prompt}\n\n{piped}"
    if not prompt.strip():
        raise ConfigError("the prompt is empty")
    return clean_text(prompt), clean_text(typed), image  # argv bytes that did not decode arrive as lone surrogates


def _arguments(prompt: str | None, use_stdin: bool | None) -> tuple[str, bytes | None]:
    """A prompt file's arguments and piped image: as `_read_prompt`'s prompt (the argument, piped stdin after
    it), but none at all is no error (a prompt file without `$ARGUMENTS` needs none), and an image piped
    without an argument is attached to the prompt file's text."""
    if prompt is not None:
        text, _typed, image = _read_prompt(prompt, use_stdin)
        return text, image
    if use_stdin is False or not _stdin_is_data():
        return "", None
    piped = _read_stdin()
    return ("", piped) if isinstance(piped, bytes) else (clean_text(piped), None)


def _prompt_file_text(settings: Settings, name: str | None, file: str | None, arguments: str) -> str:
    """The message made of prompt file `name` (`-p`; the project's, else the user's) or `file`
    (`--prompt-file`), `$ARGUMENTS` replaced by `arguments`. A project prompt hiding the user's says so on stderr.

    Raises:
        ConfigError: no prompt file has that name (the folders looked in are named), or it cannot be read,
            or it uses `$ARGUMENTS` and none were given.
    """
    from ..config import default_config_path
    from ..prompt_files import PromptFile, PromptFolders, expand, read_prompt
    from ..surfaces.common import warning_to
    from ..tools.context import resolve_workspace

    if file is not None:
        prompt = PromptFile(Path(file).stem, Path(file).expanduser(), "file")
        usage = f'crow run --prompt-file {file} "TEXT"'
    else:
        assert name is not None
        folders = PromptFolders.for_workspace(resolve_workspace(settings.workspace),
                                              default_config_path().parent)
        found = folders.find(name)
        if found is None:
            raise ConfigError(f"no prompt file {name}.md (looked in {folders.looked_in()})")
        if (note := found.shadow_note()) is not None:
            warning_to()(note)
        prompt = found
        usage = f'crow run -p {name} "TEXT"'
    return expand(read_prompt(prompt, (settings.api_key, *settings.secrets)).body, arguments, usage=usage)


@with_run_flags()
def run(
    *,
    prompt: Annotated[str | None, typer.Argument(help="The prompt; read from stdin when omitted or '-'. With -p "
                                                 "or --prompt-file: what replaces $ARGUMENTS in it.")] = None,
    prompt_name: Annotated[str | None, typer.Option("--prompt", "-p", metavar="NAME", help="Send the prompt file "
                                                    "NAME.md (.crow/prompts in the project, else prompts in "
                                                    "crow's config folder) as the message.")] = None,
    prompt_file: Annotated[str | None, typer.Option("--prompt-file", metavar="FILE", help="Send the prompt file "
                                                    "FILE as the message (as -p).")] = None,
    use_stdin: Annotated[bool | None, typer.Option("--stdin/--no-stdin", help="Add standard input to the prompt "
                                                   "argument, or never read it [default: when it is piped to "
                                                   "crow, not a loop's or script's own input].",
                                                   show_default=False)] = None,
    flags: RunFlags,
    json_events: Annotated[bool, typer.Option("--json", help="Write JSONL events to stdout instead of the answer "
                                              "(schema: crow_cli/schemas/events.schema.json).")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No tool activity, reasoning or notices on stderr "
                                        "(errors and warnings still show). Reasoning includes a <think> block in "
                                        "the answer: stdout leaves it out; the session and --json's final_text "
                                        "keep it verbatim.")] = False,
    record: Annotated[str | None, typer.Option("--record", metavar="DIR", help="Write every request body and "
                                               "raw response stream to numbered files in DIR (API key and auth "
                                               "headers removed).")] = None,
    local: LocalOpt = False,
    local_model: LocalModelOpt = None,
    no_session: NoSessionOpt = False,
    continue_last: Annotated[bool, typer.Option("--continue", "-c", help="Continue the most recent "
                                                "session.")] = False,
    session: Annotated[str | None, typer.Option("--session", metavar="ID", help="Continue the session with this id "
                                                "(crow sessions list).")] = None,
    file: Annotated[list[str] | None, typer.Option("--file", "-f", metavar="FILE", help="Attach a file to the "
                                                   "prompt (repeatable): text into the message, images for "
                                                   "vision models; inside the workspace.")] = None,
    image: Annotated[list[str] | None, typer.Option("--image", "-i", metavar="FILE", help="Attach an image "
                                                    "(PNG, JPEG, GIF, WebP) to the prompt for a vision model "
                                                    "(repeatable; as -f, which also takes text files). An "
                                                    "image piped on stdin is attached too.")] = None,
) -> None:
    """Run one prompt: stream the answer to stdout, tool activity to stderr (or JSONL events with --json)."""
    from ..surfaces.run import RunOptions, run_prompt

    try:
        if no_session and (continue_last or session):
            raise ConfigError("--no-session cannot be combined with --continue or --session")
        if continue_last and session:
            raise ConfigError("--continue and --session cannot be combined")
        if (continue_last or session) and (flags.system_file is not None or flags.no_default_prompt):
            flag = "--system-file" if flags.system_file is not None else "--no-default-prompt"
            raise ConfigError(f"{flag} cannot change "
                              "the system prompt of a continued session; start a new session for a new one")
        if session is not None and not session.strip():
            raise ConfigError("--session needs a session id (crow sessions list shows them)")
        if prompt_name is not None and prompt_file is not None:
            raise ConfigError("-p and --prompt-file cannot be combined")
        from_file = prompt_name is not None or prompt_file is not None
        if prompt_name is not None and not NAME.fullmatch(prompt_name):
            raise ConfigError(f"-p {prompt_name!r}: a prompt name is letters, digits, '_' and '-' (the file's stem)")
        if from_file:
            text, piped_image = _arguments(prompt, use_stdin)
            typed = " ".join(["-p", prompt_name] if prompt_name else ["--prompt-file", Path(str(prompt_file)).name])
            typed += f" {prompt}" if prompt and prompt != "-" else ""  # a title, as chat's `/NAME TEXT`
        else:
            text, typed, piped_image = _read_prompt(prompt, use_stdin)
        settings = flags.settings(local_model)
        if record is not None:
            from ..wire.record import prepare_record_dir

            prepare_record_dir(record)
        check_before_start(settings, yes=flags.yes, local=local or bool(local_model))
        ask_trust(settings)  # before anything of the project is read: its hooks, skills and agents go by it
        if not (local or local_model):  # the continued session's model, else for a server not OpenAI's one it serves
            settings = served_model(resumed_model(settings, flags.model, session, latest=continue_last))
        if from_file:
            text = _prompt_file_text(settings, prompt_name, prompt_file, text)
        options = RunOptions(prompt=text, title=typed, surface=flags.surface(record), json=json_events, quiet=quiet,
                             exit_grace_s=_EXIT_GRACE_S, session=not no_session, session_id=session,
                             continue_last=continue_last, system=flags.system, files=tuple(file or ()),
                             images=tuple(image or ()), stdin_image=piped_image)
        import asyncio  # not at import time: `crow tools` and `--help` do without it

        from ..local import local_session  # start, then stop, the local server

        with local_session(settings, enabled=local or bool(local_model)) as settings:
            code = asyncio.run(run_prompt(settings, options))
    except CrowError as exc:
        raise fail(exc, debug=flags.debug) from None
    raise typer.Exit(code)
