"""Prompt files: custom slash commands, as Claude Code's `.claude/commands/NAME.md` convention.

A prompt file is a Markdown file whose text is sent as the user's message (`/NAME rest` in chat, `crow run -p
NAME`), found in the project's `.crow/prompts/` or the user's config folder (`PromptFolders`), `$ARGUMENTS`
replaced (`expand`). Files are read when used and get the care AGENTS.md files get: a project file must resolve
inside the project (a repository cannot have `/review` send `~/.ssh/id_rsa`), and every file is a regular UTF-8 file
of at most `MAX_BYTES` (`read_text_file`, `resolve_inside`, shared with skills and agents).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError
from .instructions import project_folders
from .paths import SymlinkLoop, resolve_path
from .text import mask_secrets, visible

__all__ = ["ARGUMENTS", "MAX_BYTES", "MAX_MESSAGE_CHARS", "NAME", "PROJECT_FOLDER", "USER_FOLDER", "PromptFile",
           "PromptFolders", "PromptText", "expand", "parse_prompt", "read_prompt", "read_text_file", "resolve_inside",
           "summary"]

PROJECT_FOLDER = Path(".crow") / "prompts"
"""Where a project keeps its prompt files, from its root."""
USER_FOLDER = "prompts"
"""Where the user keeps theirs, in crow's config folder."""
SUFFIX = ".md"
MAX_BYTES = 64 * 1024
"""Bytes of one prompt file at most: as a system prompt file (`default_prompt.MAX_FILE_BYTES`)."""
ARGUMENTS = "$ARGUMENTS"
"""The placeholder the rest of the command line replaces."""
MAX_MESSAGE_CHARS = 1_000_000
"""Characters of an expanded prompt at most (more than any model's context takes): the expansion is measured
before it is built, so `$ARGUMENTS` written thousands of times never multiplies a long argument into memory."""
NAME = re.compile(r"[A-Za-z0-9_-]+")
"""What a prompt's name (the file's stem) is made of."""
_SUMMARY_CHARS = 72
_FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?)^---[ \t]*$\n?", re.DOTALL | re.MULTILINE)
_DESCRIPTION = re.compile(r"^description:[ \t]*(.*?)[ \t]*$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class PromptText:
    """A prompt file's text as read."""

    body: str
    """What is sent: the text without its front matter."""
    description: str | None = None
    """The front matter's `description:` (None: there is none)."""


def parse_prompt(text: str) -> PromptText:
    """`text` split into its front matter's description and the body sent. Front matter is a first line
    `---`, then lines up to the next `---` line (Claude Code's; only `description: TEXT` is read, quotes
    around TEXT dropped: the other keys are Claude Code's own)."""
    match = _FRONT_MATTER.match(text)
    if match is None:
        return PromptText(text)
    found = _DESCRIPTION.search(match.group(1))
    description = found.group(1) if found else None
    if description and len(description) > 1 and description[0] == description[-1] and description[0] in "'\"":
        description = description[1:-1]
    return PromptText(text[match.end():].strip(), description or None)


@dataclass(frozen=True, slots=True)
class PromptFile:
    """One prompt file found (not yet read: `read_prompt` reads it)."""

    name: str
    """Its stem: typed as `/NAME`."""
    path: Path
    scope: str
    """`project` (`.crow/prompts`), `user` (crow's config folder) or `file` (a path given: `--prompt-file`)."""
    root: Path | None = None
    """The folder a project file must resolve inside (None: a user's file, read wherever it leads)."""
    shadows: Path | None = None
    """The user's prompt file of the same name this project one hides, if any."""

    def shadow_note(self) -> str | None:
        """One line saying this prompt hides the user's of the same name (None: it hides none)."""
        if self.shadows is None:
            return None
        return f"/{self.name}: the project's {self.path} is used, not your {self.shadows}"


@dataclass(frozen=True, slots=True)
class PromptFolders:
    """The folders prompt files are looked for in (each may be missing)."""

    project: Path
    """The project's `.crow/prompts` folder (the workspace root's when no folder up to the repository root has one)."""
    root: Path
    """The project: what a project prompt file must resolve inside (the repository root, else the workspace)."""
    user: Path | None
    """`prompts` in crow's config folder (None: no user prompts)."""

    @classmethod
    def for_workspace(cls, workspace: Path, config_dir: Path | None) -> PromptFolders:
        """The folders for the resolved workspace root `workspace` and crow's config folder `config_dir`."""
        folders = project_folders(workspace)  # the repository root down to the workspace
        project = next((f / PROJECT_FOLDER for f in reversed(folders) if (f / PROJECT_FOLDER).is_dir()),
                       workspace / PROJECT_FOLDER)
        return cls(project, folders[0], config_dir / USER_FOLDER if config_dir is not None else None)

    def looked_in(self) -> str:
        """The folders, for a message saying where a prompt was looked for."""
        return " and ".join(str(f) for f in (self.project, self.user) if f is not None)

    def find(self, name: str) -> PromptFile | None:
        """The prompt file named `name` (the project's first), or None when there is none or `name` is no
        prompt name."""
        if not NAME.fullmatch(name):
            return None
        user = self.user / f"{name}{SUFFIX}" if self.user is not None else None
        user = user if user is not None and _is_file(user) else None
        project = self.project / f"{name}{SUFFIX}"
        if _is_file(project):
            return PromptFile(name, project, "project", self.root, shadows=user)
        return PromptFile(name, user, "user") if user is not None else None

    def misnamed(self) -> list[Path]:
        """The `.md` files of the folders whose stem is no prompt name (`with space.md`): never used, so
        /help says so rather than leave them out without a word."""
        return sorted(p for folder in (self.project, self.user) if folder is not None for p in _entries(folder)
                      if p.name.endswith(SUFFIX) and not NAME.fullmatch(p.name[:-len(SUFFIX)]))

    def all(self) -> list[PromptFile]:
        """Every prompt file, by name (a project one in place of the user's of the same name)."""
        names = {p.name[:-len(SUFFIX)] for folder in (self.project, self.user) if folder is not None
                 for p in _entries(folder) if p.name.endswith(SUFFIX)}
        found = (self.find(name) for name in sorted(names))
        return [p for p in found if p is not None]


def _entries(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except OSError:  # missing, or no folder
        return []


def _is_file(path: Path) -> bool:
    """Whether `path` is there and no folder (a link to nothing counts: reading it says what is wrong)."""
    return os.path.lexists(path) and not path.is_dir()


def read_text_file(path: Path, what: str, limit: int = MAX_BYTES) -> str:
    """The text of the file at `path`, stripped: a regular file (never a FIFO or /dev/zero, which would hang
    or fill the memory) of at most `limit` bytes, UTF-8. `what` names it in the error (`prompt file 'x'`).

    Raises:
        ConfigError: it cannot be read, is not a regular file, is larger, or is not UTF-8 text.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise ConfigError(f"{what} cannot be read: {exc.strerror or exc}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):  # before `open`, which refuses a folder with IsADirectoryError
        os.close(fd)
        raise ConfigError(f"{what} is {'a folder' if stat.S_ISDIR(info.st_mode) else 'not a regular file'}")
    with open(fd, "rb") as fh:
        if info.st_size > limit:
            raise ConfigError(f"{what} is {info.st_size:,} bytes; at most {limit:,}")
        try:
            data = fh.read(limit + 1)
        except OSError as exc:
            raise ConfigError(f"{what} cannot be read: {exc.strerror or exc}") from None
    if len(data) > limit:  # it grew since fstat
        raise ConfigError(f"{what} is over {limit:,} bytes")
    try:
        return data.decode("utf-8-sig").strip()
    except UnicodeDecodeError:
        raise ConfigError(f"{what} cannot be read: it is not UTF-8 text") from None


def resolve_inside(path: Path, root: Path, what: str) -> Path:
    """`path` resolved (symlinks followed), when that is inside the folder `root` (a project's file a repository
    brings: a link to `~/.ssh/id_rsa` must not be read). `what` names it in the error.

    Raises:
        ConfigError: it leads outside `root`, is a symlink loop, or is not there.
    """
    try:
        real = resolve_path(path, strict=True)
    except SymlinkLoop:
        raise ConfigError(f"{what} is a symlink loop") from None
    except OSError as exc:
        raise ConfigError(f"{what} cannot be read: {exc.strerror or exc}") from None
    if resolve_path(root) not in real.parents:
        raise ConfigError(f"{what} leads to {real}, outside the project; not read")
    return real


def read_prompt(prompt: PromptFile, secrets: Iterable[str | None] = ()) -> PromptText:
    """The text of `prompt` (`parse_prompt`), with each of `secrets` (the run's API keys) masked.

    Raises:
        ConfigError: a project file leads outside the project (or is a symlink loop), the file (without its
            front matter) is empty, or `read_text_file`'s.
    """
    what = f"prompt file {str(prompt.path)!r}"
    path = prompt.path if prompt.root is None else resolve_inside(prompt.path, prompt.root, what)
    text = parse_prompt(mask_secrets(read_text_file(path, what), secrets))
    if not text.body:
        raise ConfigError(f"{what} is empty")
    return text


def expand(text: str, arguments: str, *, usage: str) -> str:
    """The message for a prompt's `text` and the `arguments` given after its name (stripped): each
    `$ARGUMENTS` replaced by them; without one, the arguments after a blank line (Claude Code's way).

    `usage` shows how to give them (`/review TEXT`), in the error.

    Raises:
        ConfigError: the text uses `$ARGUMENTS` and none were given (nothing is to be sent), or the message
            would be longer than `MAX_MESSAGE_CHARS` (measured before it is built).
    """
    arguments = arguments.strip()
    count = text.count(ARGUMENTS)
    if count and not arguments:
        raise ConfigError(f"this prompt uses {ARGUMENTS} and none were given ({usage}); nothing was sent")
    size = len(text) + count * (len(arguments) - len(ARGUMENTS)) if count else len(text) + 2 + len(arguments)
    if size > MAX_MESSAGE_CHARS:
        times = f"{ARGUMENTS} {count:,} times with {len(arguments):,} characters" if count else \
            f"{len(arguments):,} characters of arguments"
        raise ConfigError(f"this prompt would be {size:,} characters ({times}); at most {MAX_MESSAGE_CHARS:,}; "
                          "nothing was sent")
    if count:
        return text.replace(ARGUMENTS, arguments)
    return f"{text}\n\n{arguments}" if arguments else text


def summary(text: PromptText) -> str:
    """A prompt's line for a list: its description, else its first non-blank line (a heading's `#` dropped);
    terminal controls escaped (`text.visible`), at most 72 characters."""
    first = text.description or text.body
    line = next((ln.strip() for ln in first.splitlines() if ln.strip()), "")
    line = visible(line.lstrip("#").strip() or line)
    return line if len(line) <= _SUMMARY_CHARS else line[:_SUMMARY_CHARS - 1] + "…"
