"""The sandbox `run_shell` commands run in: the kernel's boundary, not string rules.

Modes (setting `sandbox`, flag `--sandbox`; default `workspace-write`):

- `workspace-write`: the whole filesystem readable (but /run and the temp dir's sockets: daemons, tmux,
  X11 would run what a command sends them, unconfined); writable only the workspace and the system temp dir
  (`tempfile.gettempdir()`); the workspace's `.git` (folder, or a linked worktree's file) read-only and
  bound in place, so it cannot be moved aside or replaced either: its hooks, config (`core.fsmonitor`),
  `commondir` and submodule configs all run code unconfined at the user's next git command (Codex protects
  `.git` the same way; `git commit` then asks to run outside the sandbox); no network unless `network` (setting
  `sandbox_network`); no new privileges (setuid programs do not gain rights) and no capabilities, also as root.
- `read-only`: as above, but nothing writable (a private, empty temp dir that is discarded).
- `off`: the command runs with the user's full rights (an explicit choice).

Linux: bubblewrap (`bwrap`, the Debian/Fedora package `bubblewrap`; what Codex runs): new user, pid,
IPC, UTS, cgroup and (without network) network namespaces, `--die-with-parent` (the command and every
process it started are killed when crow exits, also on `kill -9`), `--new-session` (no typing into the
terminal). macOS: `sandbox-exec` with a profile made by `seatbelt_profile`. Where neither works
(`backend()` is None: no bwrap, no user namespaces), approval asks about every command instead.

A command that failed *because of* the sandbox (a read-only file system outside the workspace, no
network) is recognised from its output (`blocked_reason`), so the model is told why and the user can
be asked to run it once outside the sandbox.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

__all__ = ["DEFAULT_MODE", "MODES", "Mode", "Sandbox", "SandboxBlocked", "backend", "blocked_reason", "bwrap_argv",
           "sandbox_argv", "seatbelt_profile", "startup_notice", "unavailable_reason"]

Mode = Literal["workspace-write", "read-only", "off"]
MODES: tuple[Mode, ...] = get_args(Mode)
DEFAULT_MODE: Mode = "workspace-write"
_PROTECTED = ".git"  # inside the workspace, yet read-only: what it holds runs code later, unconfined
# What a command's output says when the sandbox stopped it (errno texts of glibc, Python, curl, git).
_FS_SIGNS = ("Read-only file system", "read-only file system", "EROFS")
_NET_SIGNS = ("Network is unreachable", "Connection refused", "Could not resolve host",
              "Temporary failure in name resolution", "Name or service not known", "ENETUNREACH",
              "ECONNREFUSED", "getaddrinfo", "No address associated with hostname", "Failed to connect to")


@dataclass(frozen=True)
class Sandbox:
    """How `run_shell` confines a command (see the module docstring)."""

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
        """Whether `path` (resolved) is the workspace's `.git` or below it while the sandbox confines: what
        commands may not write there (its hooks and config run code unconfined later), file tools may not
        either. Also when `.git` does not exist yet: one written in would be used the same way."""
        if not self.confines:
            return False
        git = Path(os.path.realpath(workspace)) / _PROTECTED
        return path == git or git in path.parents

    def describe(self) -> str:
        """What the sandbox allows, in a few words (for the model and the escalation question)."""
        if not self.confines:
            return "no sandbox"
        writes = "nothing is writable" if self.mode == "read-only" else \
            "only the workspace and the temp dir are writable (.git is not)"
        return f"sandbox {self.mode}: {writes}; network {'on' if self.network else 'off'}"


class SandboxBlocked(Exception):
    """Raised by `run_shell` when a confined command failed because of the sandbox.

    Attributes:
        reason: what the sandbox refused, one line.
        output: the command's result text as the model would have read it.
    """

    def __init__(self, reason: str, output: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.output = output


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


def _resolver_file() -> str:
    return os.path.realpath("/etc/resolv.conf")


def bwrap_argv(sandbox: Sandbox, workspace: Path, command: str, bwrap: str = "bwrap",
               resolv_conf: str | None = None) -> list[str]:
    """The bubblewrap command line running `/bin/sh -c command` in `workspace` under `sandbox`.

    Read-only root, a minimal /dev, a new /proc, an empty /run: the network namespace does not cover Unix
    sockets that have a path, and /run holds the daemons' (docker.sock, the systemd and D-Bus buses behind
    `systemd-run --user`), which would run what they are asked outside the sandbox. The sockets in the
    temp dir (`_sockets`: the user's tmux server would run any command it is sent) are covered with
    /dev/null likewise. With network, the resolver file (`resolv_conf`, default: where /etc/resolv.conf
    leads) is kept when it lives under /run (systemd-resolved, NetworkManager). The workspace and temp
    dir bound writable (`workspace-write`), the workspace's `.git` bound read-only over it when it exists
    (a mount point: neither renamed nor removed).
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
        argv += ["--bind", temp, temp]
        for path in _sockets(temp):
            argv += ["--ro-bind", "/dev/null", path]
        argv += ["--bind", root, root]
        path = os.path.join(root, _PROTECTED)
        if os.path.lexists(path):
            argv += ["--ro-bind", path, path]
    else:
        argv += ["--tmpfs", temp]
    # --cap-drop ALL: run as root (a container, CI), bubblewrap keeps every capability, and one with
    # CAP_SYS_ADMIN unmounts the read-only binds; unprivileged, it drops them anyway.
    argv += ["--unshare-all", *(["--share-net"] if sandbox.network else []), "--cap-drop", "ALL",
             "--die-with-parent", "--new-session", "--chdir", root, "--", "/bin/sh", "-c", command]
    return argv


def _quote(path: str) -> str:
    return '"' + path.replace("\\", "\\\\").replace('"', '\\"') + '"'


def seatbelt_profile(sandbox: Sandbox, workspace: Path) -> str:
    """The macOS `sandbox-exec` profile (SBPL) for `sandbox`: reads allowed, writes only to the workspace,
    the temp dir and the terminal devices (`workspace-write`), the workspace's `.git` denied, network
    denied unless `network`. Later rules win in SBPL, so the denials come last."""
    root = os.path.realpath(workspace)
    lines = ["(version 1)", "(allow default)", "(deny file-write*)",
             '(allow file-write* (literal "/dev/null") (literal "/dev/tty") (regex #"^/dev/fd/"))']
    if sandbox.mode == "workspace-write":
        lines.append(f"(allow file-write* (subpath {_quote(root)}) (subpath {_quote(_temp(sandbox))}))")
        lines.append(f"(deny file-write* (subpath {_quote(os.path.join(root, _PROTECTED))}))")
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
    try:
        done = subprocess.run([program, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all",
                               "--die-with-parent", "true"], stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"bwrap could not start ({exc})"
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return None, f"bwrap cannot make a sandbox here ({why[-1] if why else f'exit code {done.returncode}'})"
    return program, ""


def backend() -> str | None:
    """The sandbox program usable on this machine (`bwrap`, `sandbox-exec`), or None. Probed once per
    process: on Linux by running `true` in a bubblewrap sandbox."""
    return _probe()[0]


def unavailable_reason() -> str | None:
    """Why no sandbox can be had here (one phrase), or None when `backend()` works."""
    program, why = _probe()
    return None if program else why


def sandbox_argv(sandbox: Sandbox, workspace: Path, command: str) -> list[str] | None:
    """The program and arguments running `command` confined by `sandbox`, or None: run it unconfined
    (`off`, or no backend on this machine: approval has asked the user then)."""
    program = backend() if sandbox.confines else None
    if program is None:
        return None
    if sys.platform == "darwin":
        return [program, "-p", seatbelt_profile(sandbox, workspace), "/bin/sh", "-c", command]
    return bwrap_argv(sandbox, workspace, command, program)


def blocked_reason(sandbox: Sandbox, output: str) -> str | None:
    """Why a confined command that failed with `output` was probably stopped by the sandbox, or None."""
    if not sandbox.confines:
        return None
    if any(sign in output for sign in _FS_SIGNS):
        where = "anywhere" if sandbox.mode == "read-only" else \
            "outside the workspace and the temp dir (or to .git)"
        return f"the sandbox ({sandbox.mode}) refused a write {where}: read-only file system"
    if not sandbox.network and any(sign in output for sign in _NET_SIGNS):
        return "the sandbox has no network: connections and name lookups fail"
    return None


def startup_notice(sandbox: Sandbox) -> str | None:
    """The one line a surface shows at start when commands are meant to be confined and cannot be, or None."""
    if not sandbox.confines or backend() is not None:
        return None
    return (f"no sandbox for commands: {unavailable_reason()}; every command will be asked about (none runs "
            "unconfined without a yes; --sandbox off runs them with your full rights)")
