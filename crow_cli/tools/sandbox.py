"""The sandbox `run_shell` commands run in: the kernel's boundary, not string rules.

Modes (`Sandbox.mode`): `workspace-write` (default; writable only what `plan` lays out: the workspace less what
runs code later outside any sandbox, and a temp dir of the run's own; no network nor Unix socket unless allowed),
`read-only`, `off`. Linux: bubblewrap (what Codex runs), every process killed when crow exits, also on `kill -9`;
macOS: `sandbox-exec` (`seatbelt_profile`). Where neither works (`backend()` is None), approval asks about every
command instead. A command the sandbox stopped is recognised from its output (`blocked_reason`), so the model is
told why and the person can be asked to run it once outside. The modes as a person reads them: docs/approvals.md.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import platform
import re
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..history import ToolDisplay
from ..modes import SANDBOX_MODES, SandboxMode

__all__ = ["DEFAULT_MODE", "MODES", "Layout", "Mode", "Sandbox", "SandboxBlocked", "backend", "blocked_reason",
           "bwrap_argv", "git_metadata", "git_snapshot", "guarded_paths", "home_contained", "home_notice",
           "install_paths", "is_guarded", "kept_from_commands", "path_folders", "plan", "private_temp",
           "protected_paths", "put_aside_new_git", "relative_path_notice", "sandbox_argv", "seatbelt_profile",
           "seccomp_fd", "socket_filter", "startup_notice", "unavailable_reason"]

Mode = SandboxMode
"""`workspace-write`, `read-only` or `off` (`modes.SandboxMode`)."""
MODES: tuple[Mode, ...] = SANDBOX_MODES
DEFAULT_MODE: Mode = "workspace-write"
_PROTECTED = ".git"  # inside the workspace, yet read-only: what it holds runs code later, unconfined
# What a command's output says when the sandbox stopped it (errno texts of glibc, Python, curl, git).
_FS_SIGNS = ("Read-only file system", "read-only file system", "EROFS")
# What the socket filter's refusal reads as (EAFNOSUPPORT: the errno only the filter gives for AF_UNIX).
_SOCKET_SIGNS = ("Address family not supported by protocol", "EAFNOSUPPORT")
# In a command that exited 0, only an error message's form counts (`prog: path: strerror`, Python's
# `[Errno N] strerror`, Node's `EROFS:`): a file or log quoting the words is not a refusal.
_ERROR_FORM = re.compile(r"(?:: |\[Errno \d+\] )(?:Read-only file system|Address family not supported by protocol)"
                         r"|\b(?:EROFS|EAFNOSUPPORT)\b:")
# In the home folder, what runs code or grants access later, outside any sandbox: shell start-up files,
# ssh's keys and config, git's global config (core.fsmonitor, hooksPath, aliases).
_HOME_GUARDED = (".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile", ".zshrc", ".zshenv",
                 ".zprofile", ".zlogin", ".zlogout", ".config/fish", ".ssh", ".gitconfig", ".config/git")
_NET_SIGNS = ("Network is unreachable", "Connection refused", "Could not resolve host",
              "Temporary failure in name resolution", "Name or service not known", "ENETUNREACH",
              "ECONNREFUSED", "getaddrinfo", "No address associated with hostname", "Failed to connect to")


@dataclass(frozen=True)
class Sandbox:
    """How `run_shell` confines a command.

    Modes (setting `sandbox`, flag `--sandbox`; default `workspace-write`):

    - `workspace-write`: the whole filesystem readable (but /run: daemons would run what a command sends
      them, unconfined); writable only what `plan` lays out, a list of what may be written, not of what may
      not: the workspace, less what runs code later outside any sandbox (`protected_paths`: the PATH folders,
      crow's own install, the per-user folders such as `~/.config` and `~/.cache`, crow's folders, the shell
      start-up files, `~/.ssh`, git's global config), each pinned so that no folder above it can be renamed
      and a new one made in its place; when the workspace is the home folder or holds it, the home folder
      read-only but for its entries that are not dot-entries (no `~/.xxx` is writable or can be made, nor
      anything new at its top; `home_notice` says so at start); and a temp dir of the run's own
      (`private_temp`), mounted at the temp dir's path, so nothing a command leaves there (a repository with
      `core.fsmonitor`, a socket) reaches the person's temp dir, and a workspace below the temp dir has no
      folder above it on disk that a command could write (`git init ..`). Every `.git` in the workspace
      (folder, or a submodule's or linked worktree's file) is read-only and bound in place, so it cannot be
      moved aside or replaced either: its hooks, config (`core.fsmonitor`), `commondir` and submodule configs
      all run code unconfined at the user's next git command (Codex protects `.git` the same way; `git
      commit` then asks to run outside the sandbox), and one the command made where it could write is put
      aside when it ends, also when it is cancelled (`put_aside_new_git`); no network unless `network`
      (setting `sandbox_network`), and without it no Unix socket either (`socket_filter`: a seccomp filter on
      the socket family, since the network namespace does not cover sockets that have a path: ssh
      ControlMaster, `tmux -S`, docker.sock, gpg-agent); no new privileges (setuid programs do not gain
      rights) and no capabilities, also as root.
    - `read-only`: as above, but nothing writable (a private, empty temp dir that is discarded; a workspace
      below the temp dir stays visible, read-only).
    - `off`: the command runs with the user's full rights (an explicit choice).
    """

    mode: Mode = "off"
    """`workspace-write`, `read-only` or `off`."""
    network: bool = False
    """Whether a confined command may use the network."""
    temp_dir: str | None = None
    """The writable temp dir (None: `tempfile.gettempdir()`)."""

    @property
    def confines(self) -> bool:
        """Whether a command is meant to run confined (`mode` is not `off`)."""
        return self.mode != "off"

    def protects(self, path: Path, workspace: Path) -> bool:
        """Whether `path` (resolved) is a `.git` in the workspace (at its root, a submodule's, a nested
        repository's) or below one while the sandbox confines: what commands may not write there (hooks
        and config run code unconfined later), file tools may not either. Also when that `.git` does not
        exist yet: one written in would be used the same way."""
        if not self.confines:
            return False
        if not path.is_relative_to(os.path.realpath(workspace)):
            return False
        return any(part.lower() == _PROTECTED for part in path.parts)  # a workspace inside .git too

    def describe(self) -> str:
        """What the sandbox allows, in a few words (for the model and the escalation question)."""
        if not self.confines:
            return "no sandbox"
        writes = "nothing is writable" if self.mode == "read-only" else \
            ("only the workspace and the run's own temp dir are writable (no .git, PATH folder or crow's install "
             "in it, nor, in a home folder, its dot-folders or anything new at its top)")
        sockets = "" if self.network else " (no Unix socket either)"
        return f"sandbox {self.mode}: {writes}; network {'on' if self.network else 'off'}{sockets}"


class SandboxBlocked(Exception):
    """Raised by `run_shell` when a confined command failed because of the sandbox.

    Attributes:
        reason: what the sandbox refused, one line.
        output: the command's result text as the model would have read it.
        display: what the person is shown of the command (its output and exit status), as for any command.
    """

    def __init__(self, reason: str, output: str, display: ToolDisplay | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.output = output
        self.display = display


def _temp(sandbox: Sandbox) -> str:
    return os.path.realpath(sandbox.temp_dir or tempfile.gettempdir())


def _is_socket(entry: os.DirEntry[str]) -> bool:
    try:
        return stat.S_ISSOCK(entry.stat(follow_symlinks=False).st_mode)
    except OSError:
        return False


def _sockets(folder: str) -> list[str]:
    """The Unix sockets directly in `folder` or one folder down (symlinks not followed; unreadable ones
    skipped): where tmux (`tmux-UID/default`), X11 (`.X11-unix/X0`), ssh and editor agents keep theirs."""
    found: list[str] = []
    folders: list[str] = []
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        for entry in entries:
            if _is_socket(entry):
                found.append(entry.path)
            elif entry.is_dir(follow_symlinks=False):
                folders.append(entry.path)
    for sub in folders:
        with contextlib.suppress(OSError), os.scandir(sub) as entries:
            found += [entry.path for entry in entries if _is_socket(entry)]
    return found


def git_metadata(workspace: Path, layout: Layout | None = None,
                 opened: list[tuple[str, int]] | None = None) -> list[str]:
    """Every `.git` entry in the workspace (a repository's folder, a submodule's or worktree's gitdir
    file), sorted; symlinked folders not followed, `.git` folders not entered, unreadable ones skipped.
    With `layout`, only where a confined command can write (`Layout.writable`): a `.git` elsewhere is out
    of its reach already, and the walk skips a home folder's dot-folders. With `opened`, a folder of
    the user's own that cannot be listed or entered (`chmod 000 evil` after a `git init evil/sub`) is
    opened (u+rx) and walked, and appended to `opened` with its mode, for the caller to restore."""
    found: list[str] = []
    folders = [os.path.realpath(workspace)]
    while folders:
        folder = folders.pop()
        if opened is not None:
            _open_folder(folder, opened)
        with contextlib.suppress(OSError), os.scandir(folder) as entries:
            for entry in entries:
                if layout is not None and (not layout.writable(entry.path) or layout.private(entry.path)):
                    continue
                if entry.name.lower() == _PROTECTED:  # `.GIT` is git's on a case-insensitive disk (macOS)
                    found.append(entry.path)
                elif entry.is_dir(follow_symlinks=False):
                    folders.append(entry.path)
    return sorted(found)


def _open_folder(folder: str, opened: list[tuple[str, int]]) -> None:
    """Add u+rx to `folder` when it is the user's own and lacks them (remembered in `opened`)."""
    with contextlib.suppress(OSError):
        info = os.lstat(folder)
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and \
                info.st_mode & (stat.S_IRUSR | stat.S_IXUSR) != (stat.S_IRUSR | stat.S_IXUSR):
            os.chmod(folder, stat.S_IMODE(info.st_mode) | stat.S_IRUSR | stat.S_IXUSR)
            opened.append((folder, stat.S_IMODE(info.st_mode)))


def git_snapshot(workspace: Path, layout: Layout | None = None,
                 opened: list[tuple[str, int]] | None = None) -> dict[str, tuple[int, int, int]]:
    """`git_metadata(workspace, layout, opened)` with each entry's identity (device, inode, file type;
    from `lstat`): what `put_aside_new_git` compares with. A path alone is not enough: a `.git` symlink
    (no mount point can pin it) replaced by a repository, or a folder renamed and a new one made in its
    place, keeps the path."""
    snapshot: dict[str, tuple[int, int, int]] = {}
    for path in git_metadata(workspace, layout, opened):
        with contextlib.suppress(OSError):
            info = os.lstat(path)
            snapshot[path] = (info.st_dev, info.st_ino, stat.S_IFMT(info.st_mode))
    return snapshot


def put_aside_new_git(workspace: Path, before: dict[str, tuple[int, int, int]] | list[str],
                      layout: Layout | None = None) -> list[tuple[str, str]]:
    """Rename each `.git` in the workspace that is not in `before` (`git_snapshot` as the command
    started; a list of paths: identities not compared) to `.git.crow-sandboxed` (numbered when taken): a
    repository a confined command made (`git init`, a gitdir file) would run its hooks and
    `core.fsmonitor` at the user's next git command there, unconfined. With `layout`, only where the
    command could write (`Layout.writable`): what it could not write is never its doing. A folder of the
    user's own that cannot be listed is opened for the walk and its mode restored after (one the
    command locked would hide its `.git` from the walk, not from a later `cd` and `git`). Returns (old
    path, new path) pairs; one that cannot be renamed is left out."""
    known = before if isinstance(before, dict) else dict.fromkeys(before)
    opened: list[tuple[str, int]] = []
    try:
        after = git_snapshot(workspace, layout, opened)
        return _put_aside(path for path, identity in after.items()
                          if path not in known or (known[path] is not None and known[path] != identity))
    finally:
        for folder, mode in reversed(opened):
            with contextlib.suppress(OSError):
                os.chmod(folder, mode)


def _put_aside(paths: Iterable[str]) -> list[tuple[str, str]]:
    moved: list[tuple[str, str]] = []
    for path in paths:
        target, number = path + ".crow-sandboxed", 1
        while os.path.lexists(target):
            number += 1
            target = f"{path}.crow-sandboxed-{number}"
        with contextlib.suppress(OSError):
            os.rename(path, target)
            moved.append((path, target))
    return moved


def _crow_folders() -> list[str]:
    """crow's own config, data, state and cache folders (resolved): its config can start a program, its
    AGENTS.md instructs every session, its cache holds the local model crow runs."""
    import platformdirs

    return [os.path.realpath(path) for path in (
        platformdirs.user_config_dir("crow", appauthor=False), platformdirs.user_data_dir("crow", appauthor=False),
        platformdirs.user_state_dir("crow", appauthor=False), platformdirs.user_cache_dir("crow", appauthor=False))]


def _user_folders() -> list[str]:
    """The per-user folders every program keeps its files in (XDG's `~/.config`, `~/.local/share`,
    `~/.local/state`, `~/.cache`, or where `XDG_*_HOME` moved them; `~/snap`; macOS: `~/Library`),
    resolved: systemd user units, autostart entries, launch agents, every program's config and cache."""
    import platformdirs

    folders = [platformdirs.user_config_dir(), platformdirs.user_data_dir(), platformdirs.user_state_dir(),
               platformdirs.user_cache_dir()]
    home = os.path.expanduser("~")
    if sys.platform == "darwin":  # ~/Library/LaunchAgents starts programs at login
        folders.append(os.path.join(home, "Library"))
    else:  # snap applications keep their dot-folders (profiles, extensions) in ~/snap/APP
        folders.append(os.path.join(home, "snap"))
    return [os.path.realpath(path) for path in folders]


def guarded_paths() -> list[str]:
    """The paths a confined command may never write, wherever the workspace is (also when it is the home
    folder), and the file tools write only with a yes (or `yolo`): crow's own config, data, state and cache
    folders (a `[mcp_servers]` entry in its config would start a program unconfined at the next run; its
    `AGENTS.md` instructs every later session), the shell start-up files, `~/.ssh`, git's global config.
    Resolved, existing or not. Read at each call: `HOME` and the XDG variables decide them."""
    return [*_crow_folders(), *_home_guarded()]


def protected_paths() -> list[str]:
    """What a confined command never writes, even inside the workspace (unless one of them holds the
    workspace: then working there is the person's choice): `guarded_paths()`, the per-user folders
    (`~/.config` …), crow's own install (`install_paths`) and the PATH folders (`path_folders`).
    Resolved, existing or not."""
    return list(dict.fromkeys([*guarded_paths(), *_user_folders(), *install_paths(), *path_folders()]))


def _home_guarded() -> list[str]:
    """The shell start-up files, `~/.ssh` and git's global config, resolved (of `guarded_paths`)."""
    home = os.path.expanduser("~")
    return [os.path.realpath(os.path.join(home, name)) for name in _HOME_GUARDED]


def install_paths() -> list[str]:
    """crow's own install, resolved: its Python environment (`sys.prefix`, and the one it was made from)
    and where its launcher (`crow` on PATH) leads; the launcher's own folder is a PATH folder
    (`path_folders`). What is written there runs at the next `crow`, unconfined."""
    paths = [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix]
    launcher = shutil.which("crow")
    return list(dict.fromkeys(os.path.realpath(path) for path in [*paths, *([launcher] if launcher else [])]))


def path_folders() -> list[str]:
    """The folders of `PATH` (absolute ones; resolved): a program put there runs in place of the one the
    person meant (`git`, `ls`) at their next command, unconfined. A relative entry (`.`, `bin`) names
    whatever folder a shell is in, so it protects nothing and is skipped."""
    return list(dict.fromkeys(os.path.realpath(entry) for entry in os.environ.get("PATH", "").split(os.pathsep)
                              if os.path.isabs(entry)))


def is_guarded(path: Path, workspace: Path | None = None) -> bool:
    """Whether `path` (resolved) is one of `guarded_paths()` or below one; with `workspace`, also whether
    it is in the workspace where a confined command cannot write (`kept_from_commands`): the file tools ask
    before writing what the sandbox keeps from commands."""
    text = str(path)
    if any(text == guarded or text.startswith(guarded.rstrip(os.sep) + os.sep) for guarded in guarded_paths()):
        return True
    return workspace is not None and kept_from_commands(text, workspace)


def kept_from_commands(path: str, workspace: Path) -> bool:
    """Whether `path` (absolute, resolved) is inside the workspace yet kept from a `workspace-write`
    command (`plan`): in a dot-entry of the home folder the workspace holds, or in one of
    `protected_paths()` strictly inside the workspace and not holding it. Reads nothing on disk."""
    root = os.path.realpath(workspace)
    if not _within(path, (root,)):
        return False
    home = home_contained(workspace)
    if home is not None and path != home and _within(path, (home,)) and \
            Path(path).relative_to(home).parts[0].startswith("."):
        return True
    return any(_within(path, (hole,)) and not _within(root, (hole,)) for hole in protected_paths())


def _within(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == root or path.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


def _between(top: str, path: str) -> list[str]:
    """The folders strictly between `top` and `path` (below `top`), outermost first."""
    parts = Path(path).relative_to(top).parts[:-1]
    return [os.path.join(top, *parts[:index]) for index in range(1, len(parts) + 1)]


def home_contained(workspace: Path) -> str | None:
    """The home folder (resolved) when the workspace is it or holds it, else None."""
    home, root = os.path.realpath(os.path.expanduser("~")), os.path.realpath(workspace)
    return home if _within(home, (root,)) else None


_private_temps: dict[str, str] = {}


def _remove_private_temps() -> None:
    for backing in _private_temps.values():
        shutil.rmtree(backing, ignore_errors=True)


def private_temp(temp: str) -> str:
    """The folder on disk that holds this process's (this run's) own temp dir, mounted at `temp` inside the
    sandbox: made on first use (0700, in the system temp dir), again if it went away, removed when crow
    exits. Commands of one run share it; nobody else sees it at `temp`."""
    backing = _private_temps.get(temp)
    if backing is None or not os.path.isdir(backing):
        if not _private_temps:
            import atexit

            atexit.register(_remove_private_temps)
        backing = _private_temps[temp] = tempfile.mkdtemp(prefix="crow-run-")
    return backing


@dataclass(frozen=True)
class Layout:
    """What a `workspace-write` command can write, as the mounts that make it (`plan`).

    `mounts` are (path, writable, source) in mount order: a later mount covers what an earlier one showed
    at or below its path, and what no mount covers is read-only (the root)."""

    mounts: tuple[tuple[str, bool, str], ...] = ()

    def writable(self, path: str) -> bool:
        """Whether a confined command can write at `path` (absolute, resolved): the last mount over it decides."""
        mount = self._over(path)
        return mount is not None and mount[1]

    def private(self, path: str) -> bool:
        """Whether `path` is in the run's own temp dir (a mount of another folder): what is on disk at
        `path` is not what a command sees there."""
        mount = self._over(path)
        return mount is not None and mount[0] != mount[2]

    def _over(self, path: str) -> tuple[str, bool, str] | None:
        found = None
        for mount in self.mounts:
            if _within(path, (mount[0],)):
                found = mount
        return found

    def argv(self) -> list[str]:
        """bubblewrap's arguments for these mounts."""
        out: list[str] = []
        for where, writable, source in self.mounts:
            out += ["--bind" if writable else "--ro-bind", source, where]
        return out


def plan(sandbox: Sandbox, workspace: Path) -> Layout:
    """The mounts of a `workspace-write` command (none in other modes): the workspace writable, less what
    runs code later outside the sandbox (`protected_paths`), and a temp dir of the run's own.

    - the workspace (resolved) writable (read-only when it is inside a `.git`: git metadata whole);
    - when it is the home folder or holds it: the home folder read-only, then each of its entries that is
      not a dot-entry (`projects`, `todo.txt`; not symlinks) writable again: no `~/.xxx` is writable or
      can be made, nor anything new at the home folder's top;
    - each of `protected_paths()` strictly inside what is writable so far read-only (a missing folder of
      them made first, so none can be made and filled inside; a missing file is not made), each
      folder between it and its mount bound over itself, so that none above it can be renamed and a new
      one made in its place. One that holds the workspace is the person's choice: not applied;
    - the temp dir (`Sandbox.temp_dir`) is the run's own (`private_temp`), unless it is the workspace
      itself; a workspace below it is bound back over it, so folders between the two are the run's own
      too and a `git init ..` there reaches nobody.
      crow's install and the PATH folders below it are bound back read-only, so their programs still run.

    Makes folders (crow's, missing PATH folders, the run's temp dir); reads the home folder's top."""
    if sandbox.mode != "workspace-write":
        return Layout()
    root, temp = os.path.realpath(workspace), _temp(sandbox)
    temp_mount = () if temp == root else ((temp, True, private_temp(temp)),)
    # a workspace inside a git directory (`repo/.git`, `.git/modules/x`) is git metadata whole: read-only
    inside_git = any(part.lower() == _PROTECTED for part in Path(root).parts)
    layout = Layout((*(temp_mount if _within(root, (temp,)) else ()), (root, not inside_git, root)))
    home = home_contained(workspace)
    if home is not None:
        tops: list[tuple[str, bool, str]] = [(folder, True, folder) for folder in _between(root, home)]
        tops.append((home, False, home))
        with contextlib.suppress(OSError), os.scandir(home) as entries:
            tops += [(entry.path, True, entry.path) for entry in sorted(entries, key=lambda e: e.name)
                     if not entry.name.startswith(".") and not entry.is_symlink()
                     and (entry.is_dir() or entry.is_file())]
        layout = Layout(layout.mounts + tuple(tops))
    made = {*_crow_folders(), *_user_folders(), *path_folders()}
    for path in sorted(protected_paths(), key=lambda p: p.count(os.sep)):
        if _within(root, (path,)) or not _within(path, (root,)) or not layout.writable(path):
            continue
        if not os.path.lexists(path) and path in made:
            with contextlib.suppress(OSError):
                os.makedirs(path, exist_ok=True)
        if not os.path.lexists(path):
            continue  # a start-up file or launcher not there: the layout's read-only top keeps it so
        mount = max((where for where, _w, _s in layout.mounts if _within(path, (where,))), key=len)
        taken = {where for where, _w, _s in layout.mounts}
        pins = tuple((folder, True, folder) for folder in _between(mount, path) if folder not in taken)
        layout = Layout(layout.mounts + pins + ((path, False, path),))
    if temp_mount and not _within(root, (temp,)):
        layout = Layout(layout.mounts + temp_mount)
    if temp_mount:  # crow's install and PATH folders in the temp dir (a CI checkout's .venv): seen, read-only
        shown = [path for path in dict.fromkeys([*install_paths(), *path_folders()])
                 if _within(path, (temp,)) and path != temp and not _within(path, (root,))
                 and not _within(root, (path,)) and os.path.isdir(path)]
        layout = Layout(layout.mounts + tuple((path, False, path) for path in shown))
    return layout


# Classic BPF for seccomp (linux/filter.h, linux/seccomp.h, linux/audit.h): struct seccomp_data is
# {int nr; u32 arch; u64 instruction_pointer; u64 args[6]}, so nr at 0, arch at 4, args[0]'s low half at 16.
_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_X32_BIT = 0x40000000
_AF_UNIX = 1
# machine: (audit arch, socket, io_uring_setup), from the kernel's syscall tables.
_ARCHES = {"x86_64": (0xC000003E, 41, 425), "aarch64": (0xC00000B7, 198, 425)}
_I386 = (0x40000003, 359, 425, 102)  # i386 on x86_64: also socketcall (102)
_Insn = tuple[int, "int | str", "int | str", int]


def _assemble(lines: list[_Insn | str]) -> bytes:
    """`struct sock_filter`s from instructions whose jump targets may be labels (the strings in `lines`)."""
    labels: dict[str, int] = {}
    code: list[_Insn] = []
    for line in lines:
        if isinstance(line, str):
            labels[line] = len(code)
        else:
            code.append(line)
    out = bytearray()
    for index, (op, jt, jf, k) in enumerate(code):
        jumps = [labels[j] - index - 1 if isinstance(j, str) else j for j in (jt, jf)]
        out += struct.pack("=HBBI", op, jumps[0], jumps[1], k)
    return bytes(out)


def socket_filter(machine: str | None = None) -> bytes | None:
    """The seccomp program (classic BPF, as `bwrap --seccomp FD` reads it) that refuses, with
    EAFNOSUPPORT, `socket(AF_UNIX, …)` and `io_uring_setup` (io_uring makes sockets without the
    `socket` call), or None where the machine (`platform.machine()`) is not known here.

    Why by family: seccomp sees a call's arguments but not the memory they point to, so `connect` cannot
    be judged by the socket's path; a Unix socket that cannot be made cannot connect to a daemon outside
    (tmux, ssh ControlMaster, docker.sock, gpg-agent). `socketpair` stays allowed (a process's own
    pipes, asyncio's wake-up). On x86_64 the x32 calls and the i386 ones are covered too (`socketcall`,
    which hides the family behind a pointer, is refused whole); any other architecture's calls fail
    with EPERM.
    """
    machine = machine or platform.machine()
    if machine not in _ARCHES:
        return None
    arch, socket_nr, uring_nr = _ARCHES[machine]
    lines: list[_Insn | str] = [(_LD_W_ABS, 0, 0, 4), (_JEQ_K, 0, "other", arch), (_LD_W_ABS, 0, 0, 0)]
    if machine == "x86_64":
        lines.append((_JGE_K, "refuse", 0, _X32_BIT))
    lines += [(_JEQ_K, "refuse", 0, uring_nr), (_JEQ_K, "family", "allow", socket_nr),
              "family", (_LD_W_ABS, 0, 0, 16), (_JEQ_K, "refuse", "allow", _AF_UNIX), "other"]
    if machine == "x86_64":
        i386, socket32, uring32, socketcall = _I386
        lines += [(_JEQ_K, 0, "unknown", i386), (_LD_W_ABS, 0, 0, 0), (_JEQ_K, "refuse", 0, uring32),
                  (_JEQ_K, "refuse", 0, socketcall), (_JEQ_K, 0, "allow", socket32),
                  (_LD_W_ABS, 0, 0, 16), (_JEQ_K, "refuse", "allow", _AF_UNIX)]  # BPF jumps only forward
    lines += ["unknown", (_RET_K, 0, 0, _RET_ERRNO | errno.EPERM), "allow", (_RET_K, 0, 0, _RET_ALLOW),
              "refuse", (_RET_K, 0, 0, _RET_ERRNO | errno.EAFNOSUPPORT)]
    return _assemble(lines)


@contextlib.contextmanager
def seccomp_fd(sandbox: Sandbox) -> Iterator[int | None]:
    """A pipe's read end holding `socket_filter()` for bwrap's `--seccomp FD` (pass it to the child with
    `pass_fds`; closed on exit), or None: no filter (the network on, the sandbox off, not Linux, an
    unknown machine)."""
    program = socket_filter() if sandbox.confines and not sandbox.network and sys.platform.startswith("linux") \
        else None
    if program is None:
        yield None
        return
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, program)  # a few hundred bytes: well within a pipe's buffer
        os.close(write_fd)
        write_fd = -1
        yield read_fd
    finally:
        if write_fd >= 0:
            os.close(write_fd)
        os.close(read_fd)


def _resolver_file() -> str:
    return os.path.realpath("/etc/resolv.conf")


def bwrap_argv(sandbox: Sandbox, workspace: Path, command: str, bwrap: str = "bwrap",
               resolv_conf: str | None = None, seccomp: int | None = None,
               git_dirs: Iterable[str] | None = None, layout: Layout | None = None) -> list[str]:
    """The bubblewrap command line running `/bin/sh -c command` in `workspace` under `sandbox`.

    Read-only root, a minimal /dev (its /dev/shm private), a new /proc, an empty /run: the network
    namespace does not cover Unix sockets that have a path, and /run holds the daemons' (docker.sock, the
    systemd and D-Bus buses behind `systemd-run --user`), which would run what they are asked outside the
    sandbox. With network, the resolver file (`resolv_conf`, default: where /etc/resolv.conf leads) is
    kept when it lives under /run (systemd-resolved, NetworkManager). In `workspace-write`, the mounts of
    `layout` (default `plan(sandbox, workspace)`: the workspace, less what runs code later, and the run's
    own temp dir), then each `.git` in the workspace (`git_dirs`, default `git_metadata(workspace,
    layout)`) bound read-only over itself (a mount point: neither renamed nor removed); a workspace that
    is the temp dir itself has the sockets in it covered with /dev/null (the user's tmux server would run
    any command it is sent). In `read-only` the temp dir is a private tmpfs, and a workspace below it is
    bound back (read-only) over it. `seccomp`: a file descriptor holding `socket_filter()` (see
    `seccomp_fd`), inherited by bwrap.
    """
    root = os.path.realpath(workspace)
    temp = _temp(sandbox)
    argv = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    if os.path.isdir("/run"):
        argv += ["--tmpfs", "/run"]
    resolver = resolv_conf or _resolver_file()
    if sandbox.network and resolver.startswith("/run/"):
        argv += ["--ro-bind-try", resolver, resolver]
    if sandbox.mode == "workspace-write":
        layout = layout if layout is not None else plan(sandbox, workspace)
        argv += layout.argv()
        if root == "/":  # the workspace bound over / brought the host's /dev, /proc and /run back
            argv += ["--dev", "/dev", "--proc", "/proc", *(["--tmpfs", "/run"] if os.path.isdir("/run") else [])]
        if temp == root:
            for path in _sockets(temp):
                argv += ["--ro-bind", "/dev/null", path]
        for path in git_dirs if git_dirs is not None else git_metadata(workspace, layout):
            if not os.path.islink(path):
                argv += ["--ro-bind", path, path]
                continue
            # a `.git` symlink: what it leads to is bound read-only where a command could write it (else
            # it is read-only or the run's own already); binding where it leads elsewhere would show the
            # command what the layout hides (`.git -> /tmp`: the person's temp dir and its sockets)
            target = os.path.realpath(path)
            if layout.writable(target) and not layout.private(target) and os.path.lexists(target):
                argv += ["--ro-bind", target, target]
    else:
        argv += ["--tmpfs", temp]
        if _within(root, (temp,)):
            argv += ["--ro-bind", root, root]
    # --cap-drop ALL: run as root (a container, CI), bubblewrap keeps every capability, and one with
    # CAP_SYS_ADMIN unmounts the read-only binds; unprivileged, it drops them anyway.
    argv += ["--unshare-all", *(["--share-net"] if sandbox.network else []),
             *(["--seccomp", str(seccomp)] if seccomp is not None else []), "--cap-drop", "ALL",
             "--die-with-parent", "--new-session", "--chdir", root, "--", "/bin/sh", "-c", command]
    return argv


def _quote(path: str) -> str:
    return '"' + path.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _regex(pattern: str) -> str:
    return '#"' + pattern.replace('"', '\\"') + '"'


def _literal(path: str) -> str:
    """`path` as a POSIX extended regular expression matching it alone (SBPL's regex): each special
    character in brackets (`[.]`), or after a backslash where brackets do not work (`\\`, `^`, `]`)."""
    return "".join(f"[{ch}]" if ch in ".[()*+?{}|$" else f"\\{ch}" if ch in "\\^]" else ch for ch in path)


def seatbelt_profile(sandbox: Sandbox, workspace: Path, temp: str | None = None) -> str:
    """The macOS `sandbox-exec` profile (SBPL) for `sandbox`: reads allowed; writes only to the workspace,
    the run's own temp dir (`temp`, default `private_temp` of the temp dir; commands get it as `TMPDIR`)
    and the terminal devices (`workspace-write`); denied in the workspace: every `.git` (any case, made or
    not: SBPL matches by name, so none can be made either), each of `protected_paths()` strictly inside it
    and the folders above one (no renaming a parent to make a new one), and when the workspace is the home
    folder or holds it, the home folder's dot-entries and its top; network denied unless `network`. Later
    rules win in SBPL, so the denials come last."""
    root = os.path.realpath(workspace)
    lines = ["(version 1)", "(allow default)", "(deny file-write*)",
             '(allow file-write* (literal "/dev/null") (literal "/dev/tty") (regex #"^/dev/fd/"))']
    if sandbox.mode == "workspace-write":
        temp = temp or private_temp(_temp(sandbox))
        lines.append(f"(allow file-write* (subpath {_quote(root)}) (subpath {_quote(temp)}))")
        lines.append(f"(deny file-write* (regex {_regex('^' + _literal(root) + '/(.*/)?[.][gG][iI][tT](/|$)')}))")
        home = home_contained(workspace)
        if home is not None:
            lines.append(f"(deny file-write* (literal {_quote(home)}) "
                         f"(regex {_regex('^' + _literal(home) + '/([.]|[^/]*$)')}))")
        for path in protected_paths():
            if _within(path, (root,)) and not _within(root, (path,)):
                above = [_quote(folder) for folder in _between(root, path)]
                lines.append(f"(deny file-write* (subpath {_quote(path)})"
                             + "".join(f" (literal {folder})" for folder in above) + ")")
    if not sandbox.network:
        lines.append("(deny network*)")
    return "\n".join(lines) + "\n"


@functools.cache
def _probe() -> tuple[str | None, str]:
    """(the usable backend's program, or None; why none is usable)."""
    if sys.platform == "darwin":
        program = shutil.which("sandbox-exec") or ("/usr/bin/sandbox-exec" if os.path.exists(
            "/usr/bin/sandbox-exec") else None)
        return (program, "") if program else (None, "sandbox-exec was not found")
    if not sys.platform.startswith("linux"):
        return None, f"no sandbox is known for {sys.platform}"
    program = shutil.which("bwrap")
    if program is None:
        return None, "bubblewrap (bwrap) is not installed"
    try:  # with the socket filter too: a kernel that cannot take it would fail every offline command
        with seccomp_fd(Sandbox("workspace-write")) as fd:
            done = subprocess.run([program, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all",
                                   *(["--seccomp", str(fd)] if fd is not None else []), "--die-with-parent", "true"],
                                  stdin=subprocess.DEVNULL, capture_output=True, timeout=30,
                                  pass_fds=() if fd is None else (fd,))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"bwrap could not start ({exc})"
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return None, f"bwrap cannot make a sandbox here ({why[-1] if why else f'exit code {done.returncode}'})"
    return program, ""


def backend() -> str | None:
    """The sandbox program usable on this machine (`bwrap`, `sandbox-exec`), or None. Probed once per
    process: on Linux by running `true` in a bubblewrap sandbox with the socket filter (`socket_filter`)."""
    return _probe()[0]


def unavailable_reason() -> str | None:
    """Why no sandbox can be had here (one phrase), or None when `backend()` works."""
    program, why = _probe()
    return None if program else why


def sandbox_argv(sandbox: Sandbox, workspace: Path, command: str, seccomp: int | None = None,
                 git_dirs: Iterable[str] | None = None, layout: Layout | None = None) -> list[str] | None:
    """The program and arguments running `command` confined by `sandbox`, or None: run it unconfined
    (`off`, or no backend on this machine: approval has asked the user then). `seccomp`: see `bwrap_argv`
    (the caller passes that descriptor on to the child)."""
    program = backend() if sandbox.confines else None
    if program is None:
        return None
    if sys.platform == "darwin":
        if sandbox.mode != "workspace-write":
            return [program, "-p", seatbelt_profile(sandbox, workspace), "/bin/sh", "-c", command]
        temp = private_temp(_temp(sandbox))  # no mount namespace: the run's temp dir is named by TMPDIR
        return [program, "-p", seatbelt_profile(sandbox, workspace, temp), "/usr/bin/env", f"TMPDIR={temp}",
                "/bin/sh", "-c", command]
    return bwrap_argv(sandbox, workspace, command, program, seccomp=seccomp, git_dirs=git_dirs,
                      layout=layout)


def blocked_reason(sandbox: Sandbox, output: str, failed: bool = True) -> str | None:
    """Why a confined command that printed `output` was probably stopped by the sandbox, or None.

    A refused write or Unix socket counts whether or not the command failed (`failed`: exited non-zero):
    `cp x /etc/y; echo done` exits 0 with the refusal in its output; then only in an error message's form
    (`_ERROR_FORM`). Network failures count only in a command that failed (a log that mentions
    "Connection refused" is common)."""
    if not sandbox.confines:
        return None
    if not failed and _ERROR_FORM.search(output) is None:
        return None
    if any(sign in output for sign in _FS_SIGNS):
        where = "anywhere" if sandbox.mode == "read-only" else \
            "outside the workspace and the temp dir, or to what stays read-only in it (.git, PATH folders, crow's " \
            "install, a home folder's dot-folders)"
        return f"the sandbox ({sandbox.mode}) refused a write {where}: read-only file system"
    if not sandbox.network and any(sign in output for sign in _SOCKET_SIGNS):
        return "the sandbox has no network: no Unix socket can be made (the daemons outside stay out of reach)"
    if failed and not sandbox.network and any(sign in output for sign in _NET_SIGNS):
        return "the sandbox has no network: connections and name lookups fail"
    return None


def home_notice(sandbox: Sandbox, workspace: Path) -> str | None:
    """The one line a surface shows at start when the workspace is the home folder or holds it (`crow chat`
    asks then whether to go on), or None. It says what a command can change there in the sandbox's mode."""
    home = home_contained(workspace)
    if home is None:
        return None
    root = os.path.realpath(workspace)
    where = f"the workspace {home} is your home folder" if home == root else \
        f"the workspace {root} holds your home folder {home}"
    if sandbox.mode == "off":
        what = "and the sandbox is off: commands can change everything in it"
    elif sandbox.mode == "read-only":
        what = "commands can read all of it (the sandbox is read-only)"
    else:
        what = ("commands can change its projects but not its dot-folders (~/.config, ~/.local …) nor make "
                "anything new at its top")
    return f"{where}{',' if sandbox.mode == 'off' else ':'} {what}; start crow in a project folder instead"


def relative_path_notice(sandbox: Sandbox) -> str | None:
    """What to say when `PATH` holds an empty or relative entry (`.`, `bin`) and commands may write the
    workspace: a program a command writes there runs in place of the one the person meant, in whatever folder
    their shell is in, unconfined. No mount can protect a folder that depends on where a shell stands."""
    if sandbox.mode != "workspace-write":
        return None
    relative = [entry for entry in os.environ.get("PATH", "").split(os.pathsep) if not os.path.isabs(entry)]
    if not relative:
        return None
    shown = ", ".join(repr(entry) if entry else "an empty entry" for entry in dict.fromkeys(relative))
    return (f"PATH holds {shown}: a program a command writes in the workspace would run in place of the one you "
            "meant from a shell in that folder; take such entries out of PATH")


def startup_notice(sandbox: Sandbox, workspace: Path | None = None) -> str | None:
    """The one line a surface shows at start when commands are meant to be confined and cannot be, when the
    workspace is the home folder or holds it (`home_notice`), or when PATH holds a relative entry
    (`relative_path_notice`), or None."""
    home = home_notice(sandbox, workspace) if workspace is not None else None
    if (relative := relative_path_notice(sandbox)) is not None:
        home = f"{home}; {relative}" if home else relative
    if not sandbox.confines or backend() is not None:
        return home
    return (f"no sandbox for commands: {unavailable_reason()}; every command will be asked about (none runs "
            "unconfined without a yes; --sandbox off runs them with your full rights)") + (f"; {home}" if home else "")
