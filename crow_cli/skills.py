"""Agent Skills: folders holding a `SKILL.md` (the open Agent Skills format; Claude Code's skills), found on disk.

The model is told each skill's name and description, bounded (`Skills.listing`), and loads one with the built-in
`skill` tool (`load_skill`). A project's skills shape what the model is told, so they are read only in a folder
the person trusts (`trust.is_trusted`), and every skill file gets the care a prompt file gets (`prompt_files`); a
bad one is one line in `Skills.problems`, nothing here raises. `allowed-tools` is shown, never obeyed: approval
stays the person's. Where skills are found and which wins: `find_skills` and docs/skills.md.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from .errors import ConfigError
from .front_matter import split_front_matter
from .instructions import project_folders
from .paths import resolve_path
from .prompt_files import read_text_file, resolve_inside
from .text import mask_secrets, strip_controls
from .trust import is_trusted

__all__ = ["HOME_FOLDERS", "MAX_BYTES", "MAX_DESCRIPTION_CHARS", "MAX_FILES", "MAX_LISTED", "MAX_SKILLS", "NAME",
           "PROJECT_FOLDERS", "SKILL_FILE", "USER_FOLDER", "Skill", "Skills", "find_skills", "load_skill",
           "rows", "skill_files", "skills_here"]

PROJECT_FOLDERS = (Path(".crow") / "skills", Path(".agents") / "skills", Path(".claude") / "skills")
"""Where a project keeps its skills, from each of its folders, in the order a name is looked for."""
USER_FOLDER = "skills"
"""Where the user keeps theirs, in crow's config folder."""
HOME_FOLDERS = (Path(".agents") / "skills", Path(".claude") / "skills")
"""The user's skills of other agents, from the home folder, read as they are."""
SKILL_FILE = "SKILL.md"
MAX_BYTES = 64 * 1024
"""Bytes of one SKILL.md at most (as a prompt file): its body goes into the conversation whole when loaded."""
MAX_SKILLS = 100
"""Skills found at most; the rest are said in one note."""
MAX_LISTED = 20
"""Skills the system prompt lists at most (small local models have small windows); the rest are counted."""
MAX_DESCRIPTION_CHARS = 160
"""Characters of a description the system prompt carries at most (cut with `…`)."""
MAX_FILES = 100
"""Files of a skill's folder a load lists at most."""
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
"""What a skill's name is made of (Agent Skills names are lowercase letters, digits and `-`; crow takes a bit more)."""
_TOOL_ENTRY = re.compile(r"[^,\s()]+(?:\([^)]*\))?")
_SCAN_ENTRIES = 2000  # entries of a skill's folder looked at, at most, when listing its files

Scope = Literal["project", "user"]


@dataclass(frozen=True, slots=True)
class Skill:
    """One skill found (its body is read when the model loads it: `load_skill`)."""

    name: str
    """Its front matter's `name` (the folder's name when there is none)."""
    description: str
    """Its front matter's `description`: what the model reads to choose it."""
    path: Path
    """Its SKILL.md, as found."""
    folder: Path
    """Its folder, resolved: what `read_file` may read of it (`ToolContext.skills`)."""
    scope: Scope
    """`project` (a repository's) or `user` (crow's config folder, `~/.agents`, `~/.claude`)."""
    allowed_tools: tuple[str, ...] = ()
    """Its front matter's `allowed-tools`, shown and never obeyed (see the module)."""
    root: Path | None = None
    """The folder a project skill's files must resolve inside (None: a user's)."""
    shadows: tuple[Path, ...] = ()
    """The SKILL.md files of the same name this one hides (a user's, or one found later; `Skills.shadowing` says so)."""


@dataclass(frozen=True)
class Skills:
    """The skills of a run, by name, and what was said finding them."""

    found: tuple[Skill, ...] = ()
    """The skills offered, by name."""
    problems: tuple[str, ...] = ()
    """Skill files skipped (bad front matter, too big, not UTF-8, a link out of the project …), one line each."""
    notes: tuple[str, ...] = ()
    """What else is worth one line: an untrusted project's skills skipped, more skills than are read."""
    shadowing: tuple[str, ...] = ()
    """One line per skill hiding others of its name (a project's hiding the user's), saying which."""
    _by_name: dict[str, Skill] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._by_name.update((s.name, s) for s in self.found)

    def __bool__(self) -> bool:
        return bool(self.found)

    def __len__(self) -> int:
        return len(self.found)

    def get(self, name: str) -> Skill | None:
        """The skill named `name`, or None."""
        return self._by_name.get(name)

    @property
    def folders(self) -> tuple[Path, ...]:
        """Every skill's folder, resolved: what `read_file` may read outside the workspace."""
        return tuple(s.folder for s in self.found)

    def listing(self) -> list[str]:
        """The system prompt's lines: `- NAME: DESCRIPTION` for the first `MAX_LISTED` skills, each description on
        one line of at most `MAX_DESCRIPTION_CHARS`; then how many more there are."""
        lines = []
        for s in self.found[:MAX_LISTED]:
            text = " ".join(s.description.split())
            if len(text) > MAX_DESCRIPTION_CHARS:
                text = text[:MAX_DESCRIPTION_CHARS - 1] + "…"
            lines.append(f"- {s.name}: {text}")
        if len(self.found) > MAX_LISTED:
            lines.append(f"- ({len(self.found) - MAX_LISTED} more skills are not listed here)")
        return lines


def _candidates(folder: Path) -> list[Path]:
    """The skill folders in `folder`: entries (not hidden) that are folders holding a SKILL.md (a link to nothing
    counts: reading it says what is wrong)."""
    try:
        entries = sorted(folder.iterdir())
    except OSError:  # missing, or no folder
        return []
    return [e for e in entries if not e.name.startswith(".") and e.is_dir() and os.path.lexists(e / SKILL_FILE)]


def _tools(value: Any) -> tuple[str, ...]:
    """`allowed-tools` as a tuple: a list, or a string of entries split by commas or spaces (`Bash(git add:*)`
    is one entry)."""
    if isinstance(value, list):
        return tuple(str(v).strip() for v in value if str(v).strip())
    if isinstance(value, str):
        return tuple(_TOOL_ENTRY.findall(value))
    return ()


def _located(path: Path, root: Path | None, what: str) -> Path:
    """`path` resolved; a project's (`root` given) inside `root`.

    Raises:
        ConfigError: it leads out of the project, is a symlink loop, or is not there.
    """
    if root is not None:
        return resolve_inside(path, root, what)
    try:
        return resolve_path(path, strict=True)
    except OSError as exc:
        raise ConfigError(f"{what} cannot be read: {exc.strerror or exc}") from None


def _read(file: Path, root: Path | None, secrets: Iterable[str | None]) -> tuple[dict[str, Any], str]:
    """The front matter and body of the skill file `file` (secrets masked).

    Raises:
        ConfigError: it cannot be read (see the module), or has no front matter.
    """
    what = f"skill file {str(file)!r}"
    text = mask_secrets(read_text_file(_located(file, root, what), what, MAX_BYTES), secrets)
    front, body = split_front_matter(text, what)
    if front is None:
        raise ConfigError(f"{what} has no front matter (a '---' block with name and description)")
    return front, body


def _skill(entry: Path, scope: Scope, root: Path | None, secrets: Iterable[str | None]) -> Skill:
    """The skill in the folder `entry`.

    Raises:
        ConfigError: its SKILL.md cannot be read or says no usable name or description.
    """
    file = entry / SKILL_FILE
    what = f"skill file {str(file)!r}"
    folder = _located(entry, root, f"skill folder {str(entry)!r}")
    front, _body = _read(file, root, secrets)
    name = front.get("name", entry.name)
    name = str(name) if isinstance(name, (str, int)) and not isinstance(name, bool) else None
    if name is None or not NAME.fullmatch(name):
        raise ConfigError(f"{what}: its name {front.get('name')!r} is no skill name (letters, digits, - and _; "
                          "at most 64)")
    description = front.get("description")
    if not isinstance(description, str) or not description.strip():
        raise ConfigError(f"{what} has no description (the model reads it to choose the skill)")
    return Skill(name, description.strip(), file, folder, scope, _tools(front.get("allowed-tools")),
                 root if root is None else resolve_path(root))


def _real(path: Path) -> Path:
    try:
        return resolve_path(path)
    except OSError:
        return path


def find_skills(workspace: Path, config_dir: Path | None, home: Path | None = None, *, trusted: bool,
                secrets: Iterable[str | None] = ()) -> Skills:
    """The skills for a run in `workspace`; the first found of a name wins, the others are said once
    (`Skills.shadowing`). Looked in: the project's `.crow/skills/`, `.agents/skills/` and `.claude/skills/` in each
    folder from the workspace up to the repository root, nearest first (only when `trusted`); then the user's:
    `skills/` in crow's config folder, `~/.agents/skills/` and `~/.claude/skills/`.

    Args:
        workspace: the resolved workspace root.
        config_dir: crow's config folder (None: no skills of crow's own folder).
        home: the home folder (None: no `~/.agents` or `~/.claude` skills).
        trusted: whether the person trusts the project (`trust.is_trusted`): else its skills are skipped, with
            one note when it has any.
        secrets: values (API keys) masked in what is read.

    Never raises for a bad skill: each is one line in `Skills.problems`.
    """
    secrets = tuple(secrets)
    folders = project_folders(workspace)
    root = folders[0]
    user_dirs = [*([config_dir / USER_FOLDER] if config_dir is not None else []),
                 *([home / sub for sub in HOME_FOLDERS] if home is not None else [])]
    users = {_real(d) for d in user_dirs}
    # nearest first; a folder that is the user's too (the workspace is the home folder) is the user's
    project_dirs = [f / sub for f in reversed(folders) for sub in PROJECT_FOLDERS if _real(f / sub) not in users]
    # one folder linked under two names (`.agents/skills` -> `.claude/skills`) is read once
    project_dirs = list({_real(d): d for d in reversed(project_dirs)}.values())[::-1]
    notes: list[str] = []
    if not trusted:
        present = [str(d) for d in project_dirs if _candidates(d)]
        if present:
            notes.append(f"the project's skills in {', '.join(present)} are not used: {root} is not a folder you "
                         "trust")
        project_dirs = []
    found: dict[str, Skill] = {}
    hidden: dict[str, list[Skill]] = {}
    problems: list[str] = []
    places: tuple[tuple[Scope, list[Path], Path | None], ...] = (("project", project_dirs, root),
                                                                   ("user", user_dirs, None))
    entries = [(scope, within, entry) for scope, dirs, within in places for folder in dirs
               for entry in _candidates(folder)]
    if len(entries) > MAX_SKILLS:
        notes.append(f"{len(entries)} skill folders found: only the first {MAX_SKILLS} are read")
    read: set[Path] = set()
    for scope, within, entry in entries[:MAX_SKILLS]:
        try:
            skill = _skill(entry, scope, within, secrets)
        except ConfigError as exc:
            problems.append(f"{str(exc).removesuffix('; not read')}; skipped")
            continue
        if skill.folder in read:  # the same folder by another link: the same skill
            continue
        read.add(skill.folder)
        if skill.name in found:
            hidden.setdefault(skill.name, []).append(skill)
        else:
            found[skill.name] = skill
    skills = [replace(s, shadows=tuple(h.path for h in hidden.get(s.name, ())))
              for s in sorted(found.values(), key=lambda s: s.name)]
    shadowing = tuple(_shadow_note(s, hidden[s.name]) for s in skills if s.shadows)
    return Skills(tuple(skills), tuple(problems), tuple(notes), shadowing)


def skills_here(workspace: Path, config_dir: Path | None, *, secrets: Iterable[str | None] = ()) -> Skills:
    """`find_skills` for a run in the resolved `workspace`: crow's config folder `config_dir`, the home folder,
    the project's skills when the person trusts it (`trust.is_trusted`)."""
    home = os.path.expanduser("~")  # unchanged ("~") where no home folder is known: then none is read
    return find_skills(workspace, config_dir, Path(home) if home != "~" else None, trusted=is_trusted(workspace),
                       secrets=secrets)


def rows(skills: Skills) -> list[str]:
    """`crow skills list` and `/skills`: per skill, its name, scope and SKILL.md, then its description's first line
    (at most 100 characters), the `allowed-tools` it names and the files of its name it hides; terminal controls
    removed."""
    width = max((len(s.name) for s in skills.found), default=0)
    lines = []
    for s in skills.found:
        first = next((ln.strip() for ln in s.description.splitlines() if ln.strip()), "")
        first = first if len(first) <= 100 else first[:99] + "…"
        lines.append(strip_controls(f"{s.name:<{width}}  {s.scope}: {s.path}"))
        lines.append(strip_controls(f"{'':<{width}}  {first}"))
        if s.allowed_tools:
            lines.append(strip_controls(f"{'':<{width}}  allowed-tools (shown, not obeyed): "
                                        f"{', '.join(s.allowed_tools)}"))
        if s.shadows:
            lines.append(strip_controls(f"{'':<{width}}  hides: {', '.join(str(p) for p in s.shadows)}"))
    return lines


def _shadow_note(used: Skill, hidden: list[Skill]) -> str:
    """One line saying which skill files of the same name `used` hides (a user's called yours)."""
    names = ", ".join(("your " if h.scope == "user" and used.scope == "project" else "") + str(h.path) for h in hidden)
    where = "the project's " if used.scope == "project" else ""
    return f"skill {used.name!r}: {where}{used.path} is used, not {names}"


def _shown(path: Path, workspace: Path) -> str:
    """`path` as `read_file` takes it: relative to the workspace when inside it, else absolute."""
    try:
        return path.relative_to(workspace).as_posix()
    except ValueError:
        return str(path)


def skill_files(skill: Skill) -> tuple[list[Path], int]:
    """The files of `skill`'s folder but its SKILL.md, sorted, at most `MAX_FILES`, and how many more there are.

    Hidden files and folders (`.git`) are left out, and so are a project skill's files that lead out of the
    project (links), which `read_file` would refuse."""
    files: list[Path] = []
    looked = 0
    for top, dirs, names in os.walk(skill.folder):  # links to folders are not followed
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            looked += 1
            path = Path(top) / name
            if name.startswith(".") or path == skill.folder / SKILL_FILE:
                continue
            real = _real(path)
            if skill.root is not None and skill.root not in real.parents:
                continue
            files.append(path)
        if looked >= _SCAN_ENTRIES:
            break
    return files[:MAX_FILES], max(0, len(files) - MAX_FILES)


def load_skill(skill: Skill, workspace: Path, secrets: Iterable[str | None] = ()) -> str:
    """What the `skill` tool returns: the folder, the body (read now: an edit takes effect at once) and the folder's
    other files, each as `read_file` takes it (relative to `workspace` when inside it, else absolute).

    Raises:
        ConfigError: the SKILL.md cannot be read now (see the module).
    """
    _front, body = _read(skill.path, skill.root, secrets)
    folder = _shown(skill.folder, workspace)
    parts = [f"Base directory for this skill: {folder}", body or "(the skill has no instructions besides its files)"]
    files, more = skill_files(skill)
    if files:
        listed = "\n".join(_shown(f, workspace) for f in files)
        extra = f"\n(and {more} more files)" if more else ""
        parts.append(f"Files of this skill (read them with read_file at these paths):\n{listed}{extra}")
    return "\n\n".join(parts)
