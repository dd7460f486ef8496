"""The sandbox of `run_shell`: real bubblewrap on Linux (writes, network, .git hooks, crow killed), and the
macOS profile as text.

Properties guarded here:

- `workspace-write` writes the workspace and the run's own temp dir only (the person's temp dir is neither
  seen nor changed; nothing above a workspace under it can be made on disk); `read-only` writes nothing (a
  workspace under the temp dir stays visible); `off` confines nothing;
- from the home folder, only its projects are writable: no dot-entry, nothing new at its top; PATH folders,
  crow's install, the per-user folders and crow's cache stay read-only inside any workspace, and renaming a
  folder above one does not let a new one take its place; it is said at start;
- what the person makes while a command runs is never put aside; the call's outcome is the command's;
- every `.git` in the workspace (any case, a submodule's, a worktree's file) is read-only and cannot be moved
  aside; `git_metadata` finds them without following symlinked folders; a `.git` a command made (also one
  replacing a `.git` symlink, behind a renamed folder, in a folder it locked, or when it is cancelled) is
  put aside under a name not taken; a `.git` symlink brings back nothing the layout hides;
- crow's folders, the start-up files, `~/.ssh` and git's global config stay read-only (`is_guarded`: those
  paths and below, not names that merely start alike);
- /run and the temp dir's sockets are out of reach; no network nor Unix socket unless allowed; no
  capabilities; no command outlives crow;
- `blocked_reason` names a refused write or socket (also in a command that succeeded, in an error's form),
  a network failure only in a command that failed, nothing when the sandbox is off.

# A command the user approved (or that --yes let through) writes only where the sandbox lets it, reaches no
# host unless allowed, and does not outlive `kill -9` of crow.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from crow_cli.errors import ToolFailed
from crow_cli.tools.builtin.shell import run_shell
from crow_cli.tools.context import ToolContext
from crow_cli.tools.sandbox import (
    MODES,
    Layout,
    Sandbox,
    SandboxBlocked,
    blocked_reason,
    bwrap_argv,
    seatbelt_profile,
)
from tests.support import alive, needs_sandbox

needs_bwrap = needs_sandbox()


@pytest.fixture
def place(tmp_path: Path) -> Path:
    """`ws` (the workspace, a git repository), `tmp` (the temp dir) and `outside` (neither), in one folder."""
    for name in ("ws/.git/hooks", "tmp", "outside"):
        (tmp_path / name).mkdir(parents=True)
    (tmp_path / "ws/.git/config").write_text("[core]\n")
    return tmp_path


def _context(place: Path, mode: str = "workspace-write", network: bool = False) -> ToolContext:
    return ToolContext(place / "ws", sandbox=Sandbox(mode, network, str(place / "tmp")))


async def _run(command: str, context: ToolContext) -> str:
    try:
        return await run_shell.invoke({"command": command}, context)
    except SandboxBlocked as blocked:
        return f"BLOCKED {blocked.reason}\n{blocked.output}"
    except ToolFailed as failed:  # not the sandbox's doing: the command's own failure
        return failed.output


@needs_bwrap
async def test_workspace_write_writes_the_workspace_and_the_runs_temp_dir_only(place: Path) -> None:
    out = await _run(f"echo a > inside; echo b > {place}/tmp/t; cat {place}/tmp/t; echo c > {place}/outside/x",
                     _context(place))
    assert out.startswith("BLOCKED the sandbox (workspace-write) refused a write outside the workspace")
    assert "Read-only file system" in out and "\nb\n" in out
    assert (place / "ws/inside").read_text() == "a\n" and not (place / "tmp/t").exists()
    assert not (place / "outside/x").exists()


@needs_bwrap
async def test_git_hooks_and_config_stay_read_only(place: Path) -> None:
    out = await _run("echo 'rm -rf ~' > .git/hooks/pre-commit; echo '[core] hooksPath=/x' >> .git/config",
                     _context(place))
    assert out.startswith("BLOCKED") and out.count("Read-only file system") == 2
    assert not (place / "ws/.git/hooks/pre-commit").exists()
    assert (place / "ws/.git/config").read_text() == "[core]\n"


# `mv .git .git2` and a fresh .git/hooks do not get past read-only hooks; a worktree's .git file cannot be
# pointed at a gitdir the model wrote
@needs_bwrap
async def test_git_cannot_be_renamed_away_nor_a_worktree_pointer_rewritten(place: Path) -> None:
    out = await _run("mv .git .git2; echo x > .git/objects-ok", _context(place))
    assert "Device or resource busy" in out and not (place / "ws/.git/objects-ok").exists()
    assert not (place / "ws/.git2").exists()
    (place / "wt").mkdir()
    (place / "wt/.git").write_text("gitdir: /elsewhere\n")
    worktree = ToolContext(place / "wt", sandbox=Sandbox("workspace-write", False, str(place / "tmp")))
    assert (await _run("echo 'gitdir: ./evil' > .git", worktree)).startswith("BLOCKED")
    assert (place / "wt/.git").read_text() == "gitdir: /elsewhere\n"


@needs_bwrap
async def test_git_metadata_cannot_be_moved_aside_or_redirected(place: Path) -> None:
    # a sandboxed command cannot write `.git/commondir` naming a git dir of its own (copied objects, a config
    # with core.fsmonitor) that the user's next `git status` would run unconfined: all of .git stays as it is
    # (submodule configs under .git/modules likewise), not only the .git entry.
    (place / "ws/.git/HEAD").write_text("ref: refs/heads/main\n")
    out = await _run("mv .git .gitx; printf /x > .git/commondir; mkdir .git/modules; rm -rf .git",
                     _context(place))
    assert out.startswith("BLOCKED") and "Read-only file system" in out
    assert sorted(p.name for p in (place / "ws").iterdir()) == [".git"]
    assert sorted(p.name for p in (place / "ws/.git").iterdir()) == ["HEAD", "config", "hooks"]


@needs_bwrap
async def test_daemon_sockets_under_run_are_out_of_reach(place: Path) -> None:
    # a sandboxed command cannot connect to a Unix socket under /run (docker.sock, the systemd user bus behind
    # `systemd-run --user`): the network namespace does not cover path sockets, so /run is an empty tmpfs inside.
    if not os.access("/run", os.W_OK):
        pytest.skip("cannot place a socket under /run as this user")
    path = f"/run/crow-test-{os.getpid()}.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    try:
        server.listen(1)
        out = await _run(f"{sys.executable} -c \"import socket; socket.socket(socket.AF_UNIX).connect('{path}')\"",
                         _context(place, network=True))  # the network off, no Unix socket can be made at all
        assert "FileNotFoundError" in out
    finally:
        server.close()
        os.unlink(path)


@needs_bwrap
async def test_sockets_in_the_temp_dir_are_out_of_reach(place: Path) -> None:
    # the temp dir is shared and holds the sockets of the user's tmux server (/tmp/tmux-UID/default:
    # `tmux new-window CMD` runs CMD unconfined), X11 (keystrokes into any window), agents. The run's own temp
    # dir has none of them; a workspace that is the temp dir itself has each socket in it (or one folder down)
    # covered, its files readable and writable.
    (place / "tmp/tmux-1").mkdir()
    servers = []
    for path in (place / "tmp/tmux-1/d", place / "tmp/a.s"):
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
        server.listen(1)
        servers.append(server)
    (place / "tmp/tmux-1/notes").write_text("kept\n")
    connect = "import socket,sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])"
    in_temp = ToolContext(place / "tmp", sandbox=Sandbox("workspace-write", True, str(place / "tmp")))
    try:
        for path in ("tmux-1/d", "a.s"):
            out = await _run(f"{sys.executable} -c '{connect}' {place}/tmp/{path}", _context(place, network=True))
            assert "FileNotFoundError" in out, out
            out = await _run(f"{sys.executable} -c '{connect}' {place}/tmp/{path}", in_temp)
            assert "ConnectionRefusedError" in out, out
        out = await _run(f"cat {place}/tmp/tmux-1/notes; echo more >> {place}/tmp/tmux-1/notes", in_temp)
        assert "kept" in out and (place / "tmp/tmux-1/notes").read_text() == "kept\nmore\n"
    finally:
        for server in servers:
            server.close()


def test_run_is_hidden_and_a_resolver_file_under_it_kept_with_network(place: Path) -> None:
    argv = " ".join(bwrap_argv(Sandbox("workspace-write", True, str(place / "tmp")), place / "ws", "make",
                               resolv_conf="/run/systemd/resolve/stub-resolv.conf"))
    assert "--proc /proc --tmpfs /run --ro-bind-try /run/systemd/resolve/stub-resolv.conf " \
           "/run/systemd/resolve/stub-resolv.conf --bind" in argv
    offline = " ".join(bwrap_argv(Sandbox("read-only", False, str(place / "tmp")), place / "ws", "make",
                                  resolv_conf="/run/systemd/resolve/stub-resolv.conf"))
    assert "--tmpfs /run --tmpfs" in offline and "resolve" not in offline


@needs_bwrap
async def test_a_command_has_no_capabilities_even_when_crow_runs_as_root(place: Path) -> None:
    # as root (a container, CI) bubblewrap drops every capability: a sandboxed command cannot unmount the
    # read-only .git or remount / read-write.
    out = await _run(f"umount {place}/ws/.git; mount -o remount,rw,bind /; grep CapEff /proc/self/status; "
                     f"echo x > {place}/ws/.git/planted; echo y > {place}/outside/planted", _context(place))
    assert "CapEff:\t0000000000000000" in out
    assert not (place / "ws/.git/planted").exists() and not (place / "outside/planted").exists()


@needs_bwrap
async def test_read_only_writes_nothing(place: Path) -> None:
    out = await _run("echo a > inside", _context(place, "read-only"))
    assert out.startswith("BLOCKED the sandbox (read-only) refused a write anywhere")
    assert not (place / "ws/inside").exists()


@needs_bwrap
async def test_a_command_that_succeeds_is_plain_output(place: Path) -> None:
    assert await _run("echo hi; pwd", _context(place)) == f"[exit code 0]\nhi\n{place / 'ws'}\n"


@pytest.fixture
def server() -> Iterator[int]:
    """A TCP server on 127.0.0.1 answering every connection with `pong` (its port)."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 4\r\n\r\npong")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    socket.create_connection(listener.getsockname()).close()  # wakes the accept up: it sees stop
    thread.join(60)
    listener.close()


def _python_get(port: int) -> str:
    code = (f"import socket; s = socket.create_connection(('127.0.0.1', {port}));"
            " s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n'); print(s.recv(100).split(b'\\r\\n\\r\\n')[-1].decode())")
    return f"{sys.executable} -c \"{code}\""


@needs_bwrap
@pytest.mark.parametrize("client", ["python", "curl"])
async def test_network_is_off_unless_allowed(place: Path, server: int, client: str) -> None:
    if client == "curl" and not Path("/usr/bin/curl").exists():
        pytest.skip("curl is not installed")
    command = _python_get(server) if client == "python" else f"curl -sS http://127.0.0.1:{server}/"
    off = await _run(command, _context(place))
    assert off.startswith("BLOCKED the sandbox has no network")
    assert "pong" not in off
    on = await _run(command, _context(place, network=True))
    assert on.strip() == "[exit code 0]\npong"


KILLED_SCRIPT = """
import asyncio, sys
from pathlib import Path
from crow_cli.tools.builtin.shell import run_shell
from crow_cli.tools.context import ToolContext
from crow_cli.tools.sandbox import Sandbox
context = ToolContext(Path(sys.argv[1]), sandbox=Sandbox("workspace-write"))
asyncio.run(run_shell.invoke({"command": sys.argv[2], "timeout_s": 600}, context))
"""


def _pids_with(token: bytes) -> list[int]:
    """The sleepers of the test: `python -c 'import time; …' TOKEN-x` processes."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes().startswith(
                    b"%s\0-c\0import time" % sys.executable.encode()) and token in (
                    entry / "cmdline").read_bytes() and alive(int(entry.name)):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@needs_bwrap
def test_no_command_survives_crow_killed(place: Path) -> None:
    token = f"crow-sandbox-{os.getpid()}-{time.monotonic_ns()}"
    # a child that left the process group (setsid) and one in the background, both long-lived
    command = (f"setsid {sys.executable} -c 'import time; time.sleep(900)' {token}-a & "
               f"{sys.executable} -c 'import time; time.sleep(900)' {token}-b & touch started; wait")
    crow = subprocess.Popen([sys.executable, "-c", KILLED_SCRIPT, str(place / "ws"), command])
    try:
        for _ in range(1200):  # up to 60 s: bounds a hang
            if (place / "ws/started").exists() and len(_pids_with(token.encode())) == 2:
                break
            time.sleep(0.05)
        assert len(_pids_with(token.encode())) == 2
    finally:
        crow.send_signal(signal.SIGKILL)
        crow.wait()
    for _ in range(1200):  # up to 60 s for the kernel to end the sandbox
        if not _pids_with(token.encode()):
            break
        time.sleep(0.05)
    assert _pids_with(token.encode()) == []


def test_bwrap_arguments(place: Path) -> None:
    ws = str(place / "ws")
    argv = bwrap_argv(Sandbox("workspace-write", False, str(place / "tmp")), place / "ws", "make")
    assert argv[:8] == ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    text = " ".join(argv)
    assert f"--bind {ws} {ws} --bind " in text and "/crow-run-" in text and f" {place}/tmp --ro-bind" in text
    assert f" {place}/tmp --ro-bind {ws}/.git {ws}/.git --unshare-all" in text
    assert "--unshare-all --cap-drop ALL --die-with-parent --new-session" in text and "--share-net" not in text
    assert argv[-4:] == ["--", "/bin/sh", "-c", "make"]
    networked = bwrap_argv(Sandbox("read-only", True, str(place / "tmp")), place / "ws", "make")
    assert "--share-net" in networked and f"--bind {ws}" not in " ".join(networked)
    assert f"--tmpfs {place}/tmp" in " ".join(networked)


def test_macos_profile_text(place: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = str(place / "ws")
    monkeypatch.setenv("PATH", f"{ws}/bin{os.pathsep}/usr/bin")
    profile = seatbelt_profile(Sandbox("workspace-write", False, str(place / "tmp")), place / "ws", "/private/t")
    assert profile.splitlines() == [
        "(version 1)", "(allow default)", "(deny file-write*)",
        '(allow file-write* (literal "/dev/null") (literal "/dev/tty") (regex #"^/dev/fd/"))',
        f'(allow file-write* (subpath "{ws}") (subpath "/private/t"))',
        f'(deny file-write* (regex #"^{ws.replace(".", "[.]")}/(.*/)?[.][gG][iI][tT](/|$)"))',
        f'(deny file-write* (subpath "{ws}/bin"))',
        "(deny network*)",
    ]
    read_only = seatbelt_profile(Sandbox("read-only", True), Path('/tmp/a "quoted" dir'))
    assert "(subpath" not in read_only and "network" not in read_only
    assert seatbelt_profile(Sandbox("workspace-write", True), Path('/x/a"b'), "/t").count('"/x/a\\"b"') == 1


def test_macos_profile_keeps_a_home_folders_dot_entries_and_top(home_with_dot_folders: Path) -> None:
    home = str(home_with_dot_folders.resolve())
    profile = seatbelt_profile(Sandbox("workspace-write"), home_with_dot_folders, "/private/t")
    assert f'(deny file-write* (literal "{home}") (regex #"^{home.replace(".", "[.]")}/([.]|[^/]*$)"))' in profile
    assert f'(deny file-write* (subpath "{home}/bin"))' in profile


def test_what_counts_as_blocked_by_the_sandbox() -> None:
    confined = Sandbox("workspace-write")
    assert blocked_reason(confined, "sh: cannot create /etc/x: Read-only file system") is not None
    assert blocked_reason(confined, "curl: (7) Failed to connect to 127.0.0.1 port 1: Connection refused")
    assert blocked_reason(Sandbox("workspace-write", network=True), "Connection refused") is None
    assert blocked_reason(Sandbox("off"), "Read-only file system") is None
    assert blocked_reason(confined, "AssertionError: 1 != 2") is None
    assert MODES == ("workspace-write", "read-only", "off")


@pytest.fixture
def home_listener(place: Path) -> Iterator[Path]:
    """A Unix socket server in a home folder outside the workspace and the temp dir (where ssh's
    ControlMaster, `tmux -S`, gpg-agent and Docker Desktop keep theirs): its path."""
    (place / "outside/.ssh").mkdir()
    path = place / "outside/.ssh/cm-host"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen(1)
    yield path
    listener.close()


_CONNECT = "import socket,sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1]); print('CONNECTED')"


@needs_bwrap
async def test_unix_sockets_outside_are_out_of_reach_without_network(place: Path, home_listener: Path) -> None:
    # `tmux -S ~/.ssh/cm-…`, ssh ControlMaster, docker.sock, gpg-agent: with the network off a sandboxed
    # command connects to no Unix socket outside (a daemon there would run what it was sent unconfined).
    # No Unix socket can be made inside; socketpair still works.
    out = await _run(f"{sys.executable} -c '{_CONNECT}' {home_listener}", _context(place))
    assert "CONNECTED" not in out and "Address family not supported" in out, out
    assert out.startswith("BLOCKED the sandbox has no network: no Unix socket")
    pair = "import socket; a, b = socket.socketpair(); a.send(b'pair'); print(b.recv(4).decode())"
    assert await _run(f"{sys.executable} -c \"{pair}\"", _context(place)) == "[exit code 0]\npair\n"
    abstract = "import socket; socket.socket(socket.AF_UNIX).connect(b'\\0x'); print('CONNECTED')"
    assert "Address family not supported" in await _run(f"{sys.executable} -c \"{abstract}\"", _context(place))


@needs_bwrap
async def test_unix_sockets_are_reachable_with_the_network_on(place: Path, home_listener: Path) -> None:
    # the network on opens every local daemon over TCP anyway: the filter is for the network off
    out = await _run(f"{sys.executable} -c '{_CONNECT}' {home_listener}", _context(place, network=True))
    assert "CONNECTED" in out


def test_the_socket_filter_is_known_for_x86_64_and_aarch64_only() -> None:
    from crow_cli.tools.sandbox import socket_filter

    for machine in ("x86_64", "aarch64"):
        program = socket_filter(machine)
        assert program is not None and len(program) % 8 == 0
    assert socket_filter("riscv64") is None


@pytest.fixture
def home_is_workspace(place: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HOME is the workspace, with crow's config, a shell start-up file, ~/.ssh and ~/.gitconfig in it."""
    home = place / "ws"
    monkeypatch.setenv("HOME", str(home))
    for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME"):
        monkeypatch.delenv(name, raising=False)
    (home / ".config/crow").mkdir(parents=True)
    (home / ".config/crow/config.toml").write_text("model = 'm'\n")
    (home / ".bashrc").write_text("# rc\n")
    (home / ".ssh").mkdir()
    (home / ".gitconfig").write_text("[user]\n")
    return home


@needs_bwrap
async def test_crow_config_and_start_up_files_stay_read_only_when_the_workspace_is_home(
        home_is_workspace: Path, place: Path) -> None:
    # Run from the home folder, a sandboxed command cannot append an [mcp_servers] entry to
    # ~/.config/crow/config.toml that the next crow run would start unconfined
    home = home_is_workspace
    (home / "proj").mkdir()
    out = await _run("echo '[mcp_servers.x]' >> .config/crow/config.toml; echo evil >> .bashrc; "
                     "echo k > .ssh/authorized_keys; echo '[core]' >> .gitconfig; mkdir -p .local/share/crow/x; "
                     "echo a > .local/state/crow/AGENTS.md; echo ok > proj/notes", _context(place))
    assert out.startswith("BLOCKED") and out.count("Read-only file system") >= 5, out
    assert (home / ".config/crow/config.toml").read_text() == "model = 'm'\n"
    assert (home / ".bashrc").read_text() == "# rc\n" and (home / ".gitconfig").read_text() == "[user]\n"
    assert not (home / ".ssh/authorized_keys").exists() and not (home / ".local/share/crow/x").exists()
    assert not (home / ".local/state/crow/AGENTS.md").exists()
    assert (home / "proj/notes").read_text() == "ok\n"


@needs_bwrap
async def test_start_up_files_cannot_be_made_in_home(home_is_workspace: Path, place: Path) -> None:
    # from the home folder, a confined command cannot make a missing ~/.bash_profile, ~/.zshrc,
    # ~/.ssh/authorized_keys (with ~/.ssh) or ~/.gitconfig, which would act unconfined later: nothing new can
    # be made at the home folder's top (so nothing the person makes meanwhile is ever put aside).
    home = home_is_workspace
    (home / ".ssh").rmdir()
    (home / ".gitconfig").unlink()
    (home / "proj").mkdir()
    out = await _run("echo a >> .bash_profile; echo b >> .zshrc; mkdir -p .ssh && echo c >> .ssh/authorized_keys; "
                     "echo d >> .gitconfig; echo ok > proj/notes", _context(place))
    assert out.startswith("BLOCKED the sandbox (workspace-write) refused a write"), out
    for name in (".bash_profile", ".zshrc", ".ssh", ".gitconfig"):
        assert not (home / name).exists() and not (home / f"{name}.crow-sandboxed").exists(), name
    assert (home / ".bashrc").read_text() == "# rc\n" and (home / "proj/notes").read_text() == "ok\n"


@needs_bwrap
async def test_read_only_keeps_a_workspace_under_the_temp_dir_visible(place: Path) -> None:
    # --sandbox read-only with the workspace under /tmp: the tmpfs over the temp dir must not hide the
    # workspace (every command would fail with "bwrap: Can't chdir")
    (place / "tmp/ws").mkdir()
    (place / "tmp/ws/f").write_text("seen\n")
    (place / "tmp/other").write_text("hidden\n")
    context = ToolContext(place / "tmp/ws", sandbox=Sandbox("read-only", False, str(place / "tmp")))
    out = await _run(f"cat f; ls {place}/tmp; echo x > g", context)
    assert out.startswith("BLOCKED the sandbox (read-only)") and "seen" in out and "other" not in out, out
    assert not (place / "tmp/ws/g").exists()


@needs_bwrap
async def test_a_refused_write_is_blocked_even_when_the_command_then_succeeds(place: Path) -> None:
    # A refused write followed by `; echo done` is still reported as refused, so the person is asked to run it outside
    out = await _run(f"echo c > {place}/outside/x; echo done", _context(place))
    assert out.startswith("BLOCKED the sandbox (workspace-write) refused a write"), out
    assert "done" in out


def test_a_network_message_in_a_successful_command_is_not_a_refusal() -> None:
    assert blocked_reason(Sandbox("workspace-write"), "log: Connection refused", failed=False) is None
    assert blocked_reason(Sandbox("workspace-write"), "x: Read-only file system", failed=False) is not None
    assert blocked_reason(Sandbox("workspace-write"), "OSError: [Errno 97] Address family not supported by protocol",
                          failed=False) is not None
    assert blocked_reason(Sandbox("workspace-write"), "EROFS: read-only file system, open 'x'", failed=False)
    assert blocked_reason(Sandbox("workspace-write"), "docs: the Read-only file system error", failed=False) is None


def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", "-c", "init.defaultBranch=main", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"})
    return done.stdout + done.stderr


@needs_bwrap
async def test_a_git_repository_made_inside_never_reaches_the_users_git(place: Path) -> None:
    # A sandboxed `git init` plus a hook and core.fsmonitor never runs at the user's next `git status`
    # (also when the workspace has no .git at its root): what the run left named .git is put aside as soon
    # as the command ends.
    (place / "plain").mkdir()
    context = ToolContext(place / "plain", sandbox=Sandbox("workspace-write", False, str(place / "tmp")))
    out = await _run(f"git init -q . && git config core.fsmonitor 'touch {place}/outside/ran' && mkdir -p sub && "
                     "echo 'gitdir: ../evil' > sub/.git && echo ok", context)
    assert "put aside" in out, out
    assert not (place / "plain/.git").exists() and not (place / "plain/sub/.git").exists()
    _git(place / "plain", "status")
    assert not (place / "outside/ran").exists()


@needs_bwrap
async def test_a_submodules_git_dir_is_read_only(place: Path) -> None:
    # A submodule whose git dir is sub/.git keeps its config read-only (a top-level `git status` runs its fsmonitor)
    (place / "ws/sub/.git").mkdir(parents=True)
    (place / "ws/sub/.git/config").write_text("[core]\n")
    (place / "ws/deep/er").mkdir(parents=True)
    (place / "ws/deep/er/.git").write_text("gitdir: /elsewhere\n")
    out = await _run(f"echo '[core] fsmonitor=touch {place}/outside/ran' >> sub/.git/config; "
                     "echo 'gitdir: ./evil' > deep/er/.git; mv sub/.git sub/.g", _context(place))
    assert out.startswith("BLOCKED"), out
    assert (place / "ws/sub/.git/config").read_text() == "[core]\n"
    assert (place / "ws/deep/er/.git").read_text() == "gitdir: /elsewhere\n"


def test_file_tools_refuse_any_git_dir_in_the_workspace(place: Path) -> None:
    # Every .git in the workspace, not only the root's, is refused to write_file / edit_file
    from crow_cli.errors import ToolError
    from crow_cli.tools.workspace import resolve_for_write

    context = _context(place)
    for path in ("sub/.git/config", "a/b/.git", ".git/hooks/x"):
        with pytest.raises(ToolError, match="git"):
            resolve_for_write(path, context)
    assert resolve_for_write("sub/.github/x", context) == place / "ws/sub/.github/x"


@needs_bwrap
async def test_a_dangling_git_symlink_in_the_workspace_does_not_stop_every_command(place: Path) -> None:
    # a fixture's `.git` symlink leading nowhere: binding it read-only must not fail the sandbox's start
    (place / "ws/fixture").mkdir()
    (place / "ws/fixture/.git").symlink_to(place / "nowhere")
    assert await _run("echo hi", _context(place)) == "[exit code 0]\nhi\n"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the socket filter is bubblewrap's")
def test_a_bwrap_that_cannot_take_the_socket_filter_is_no_sandbox(tmp_path: Path) -> None:
    # a kernel without seccomp filters would fail every offline command: no sandbox then (asked about each).
    # A process of its own: the probe runs once per process.
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\ncase \"$*\" in *--seccomp*) echo 'bwrap: seccomp not supported' >&2; exit 1;; "
                    "esac\nexit 0\n")
    fake.chmod(0o755)
    code = "from crow_cli.tools.sandbox import backend, unavailable_reason; print(backend(), unavailable_reason())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"})
    assert done.stdout == "None bwrap cannot make a sandbox here (bwrap: seccomp not supported)\n", done.stderr


# provenance: a mutation check (w5) — `.GIT` not protected, a `.git` put aside over an earlier one, symlinked
# folders followed, and guarded paths matched as bare prefixes each passed every test of this file
def test_a_git_dir_in_any_case_is_protected_while_confined(place: Path) -> None:
    ws = place / "ws"
    assert Sandbox("workspace-write").protects(ws.resolve() / ".GIT" / "config", ws)
    assert not Sandbox("off").protects(ws.resolve() / ".git" / "config", ws)
    assert Sandbox("workspace-write").protects(ws.resolve() / ".git/hooks/x", ws / ".git")  # a workspace inside .git
    assert not Sandbox("workspace-write").protects(ws.resolve().parent / "outside" / ".git", ws)


def test_a_new_git_is_put_aside_under_a_name_not_taken(place: Path) -> None:
    from crow_cli.tools.sandbox import put_aside_new_git

    (place / "plain/.git").mkdir(parents=True)
    (place / "plain/.git.crow-sandboxed").write_text("put aside earlier")
    assert put_aside_new_git(place / "plain", []) == [(str(place / "plain/.git"),
                                                       str(place / "plain/.git.crow-sandboxed-2"))]
    assert (place / "plain/.git.crow-sandboxed").read_text() == "put aside earlier"


def test_git_metadata_does_not_follow_symlinked_folders(place: Path) -> None:
    from crow_cli.tools.sandbox import git_metadata

    (place / "outside/repo/.git").mkdir(parents=True)
    (place / "ws/link").symlink_to(place / "outside/repo")
    assert git_metadata(place / "ws") == [str((place / "ws/.git").resolve())]


def test_guarded_paths_are_those_and_below_not_names_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from crow_cli.tools.sandbox import is_guarded

    monkeypatch.setenv("HOME", str(tmp_path))
    home = tmp_path.resolve()
    assert is_guarded(home / ".ssh") and is_guarded(home / ".ssh/config")
    assert not is_guarded(home / ".ssh-notes")


# the sandbox guards by what may be written (the workspace's project files, a temp dir of the
# run's own), not by a list of what may not.


@pytest.fixture
def home_with_dot_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home folder as a person's looks: projects, dot-folders, `~/.local/bin` and `~/bin` first on PATH
    (crow's per-user launcher in the first), crow's model cache outside any dot-folder, a file at the top."""
    home = tmp_path / "home"
    for name in ("projects/x", ".local/bin", ".config", "bin", "cache"):
        (home / name).mkdir(parents=True)
    (home / ".local/bin/crow").write_text("#!/bin/sh\nexec crow-real \"$@\"\n")
    (home / "todo.txt").write_text("- a\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "cache"))
    for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATH", f"{home}/.local/bin{os.pathsep}{home}/bin{os.pathsep}{os.environ['PATH']}")
    return home


@needs_bwrap
async def test_from_the_home_folder_only_project_files_are_writable(home_with_dot_folders: Path,
                                                                    place: Path) -> None:
    # `crow run --yes` in ~: a confined command cannot write ~/.local/bin/git (first on PATH: the user's
    # next `git status` would run it unconfined), rewrite crow's per-user launcher, or leave systemd user units and
    # autostart entries. The home folder's dot-folders, PATH folders and crow's model cache stay read-only, and
    # nothing new is made at the home folder's top; the projects in it stay writable.
    home = home_with_dot_folders
    context = ToolContext(home, sandbox=Sandbox("workspace-write", False, str(place / "tmp")))
    out = await _run("echo evil > .local/bin/git; echo evil > .local/bin/crow; "
                     "mkdir -p .config/systemd/user && echo x > .config/systemd/user/evil.service; "
                     "mkdir -p .config/autostart && echo x > .config/autostart/evil.desktop; "
                     "echo x > .gitconfig; mkdir .newdot; echo evil > bin/git; echo x > cache/crow/model.gguf; "
                     "echo x > cache/other; echo ok > projects/x/notes; mkdir -p projects/y/src; "
                     "echo '- b' >> todo.txt", context)
    assert out.startswith("BLOCKED the sandbox (workspace-write) refused a write"), out
    for name in (".local/bin/git", ".config/systemd", ".config/autostart", ".gitconfig", ".newdot", "bin/git",
                 "cache/crow/model.gguf", "cache/other"):
        assert not (home / name).exists(), name
    assert (home / ".local/bin/crow").read_text() == "#!/bin/sh\nexec crow-real \"$@\"\n"
    assert (home / "projects/x/notes").read_text() == "ok\n" and (home / "projects/y/src").is_dir()
    assert (home / "todo.txt").read_text() == "- a\n- b\n"


@needs_bwrap
async def test_crows_own_install_in_the_workspace_stays_read_only(place: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # crow's own install (its virtual environment, where its launcher and code live) runs unconfined
    # at the next `crow`: a workspace holding it (crow developed with crow) cannot change it, and renaming a
    # folder above it does not put a new one in its place
    venv = place / "ws/tools/venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin/crow").write_text("real\n")
    monkeypatch.setattr(sys, "prefix", str(venv))
    out = await _run("echo evil > tools/venv/bin/crow; echo x > tools/venv/pyvenv.cfg; "
                     "mv tools tools2 || mv tools/venv tools/v2; mkdir -p tools/venv/bin; echo ok > tools/notes",
                     _context(place))
    assert out.startswith("BLOCKED"), out
    assert (venv / "bin/crow").read_text() == "real\n" and not (venv / "pyvenv.cfg").exists()
    assert not (place / "ws/tools2").exists() and not (place / "ws/tools/v2").exists()
    assert (place / "ws/tools/notes").read_text() == "ok\n"


@needs_bwrap
async def test_crows_install_and_path_folders_in_the_temp_dir_stay_visible_read_only(
        place: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a run's temp dir is its own, yet crow's install (a CI checkout's .venv under /tmp) and the PATH folders
    # there are bound back read-only: the commands they hold still run, and cannot be changed
    venv = place / "tmp/ci/.venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin/tool").write_text("#!/bin/sh\necho TOOL-RAN\n")
    (venv / "bin/tool").chmod(0o755)
    (place / "tmp/other").mkdir()
    (place / "tmp/other/secret").write_text("x\n")
    monkeypatch.setattr(sys, "prefix", str(venv))
    monkeypatch.setenv("PATH", f"{venv}/bin{os.pathsep}{os.environ['PATH']}")
    out = await _run(f"{venv}/bin/tool; tool; echo evil > {venv}/bin/tool; ls {place}/tmp/other", _context(place))
    assert out.count("TOOL-RAN") == 2, out
    assert (venv / "bin/tool").read_text() == "#!/bin/sh\necho TOOL-RAN\n"
    assert "secret" not in out  # the rest of the temp dir is still the run's own


@needs_bwrap
async def test_a_path_folder_in_the_workspace_cannot_be_moved_aside_and_replaced(
        place: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a read-only folder is a mount point, but the folder above it can be renamed: then a new `bin` in its
    # place would be on PATH all the same (the attacker's "rename a parent")
    (place / "ws/a/b/bin").mkdir(parents=True)
    monkeypatch.setenv("PATH", f"{place}/ws/a/b/bin{os.pathsep}{os.environ['PATH']}")
    out = await _run("mv a a2; mv a/b a/b2; mkdir -p a/b/bin; echo evil > a/b/bin/git; echo ok > a/b/ok",
                     _context(place))
    assert out.startswith("BLOCKED"), out
    assert sorted(p.name for p in (place / "ws/a").iterdir()) == ["b"]
    assert not (place / "ws/a/b/bin/git").exists() and (place / "ws/a/b/ok").read_text() == "ok\n"


@needs_bwrap
async def test_the_temp_dir_is_the_runs_own(place: Path) -> None:
    # the temp dir is not writable whole: a confined `git -C $TMPDIR/scratch config core.fsmonitor …`
    # would plant a command the user's later `git status` there runs. Each run has a temp dir of its own at the
    # same path: what commands write there is seen by the run's later commands, never by the person's.
    _git(place / "tmp", "init", "-q", "scratch")
    config = (place / "tmp/scratch/.git/config").read_text()
    tmp = place / "tmp"
    out = await _run(f"git -C {tmp}/scratch config core.fsmonitor 'touch {place}/outside/ran'; "
                     f"echo kept > {tmp}/t; ls {tmp}", _context(place))
    assert out.startswith("[exit code 0]") and out.endswith("No such file or directory\nt\n"), out
    assert (tmp / "scratch/.git/config").read_text() == config and not (tmp / "t").exists()
    assert (await _run(f"cat {tmp}/t", _context(place))) == "[exit code 0]\nkept\n"
    _git(tmp / "scratch", "status")
    assert not (place / "outside/ran").exists()


@needs_bwrap
async def test_no_git_repository_can_be_made_above_a_workspace_in_the_temp_dir(place: Path) -> None:
    # `git init ..` above a workspace under the temp dir makes no repository whose config the user's
    # later `git status` in the workspace reads (core.fsmonitor would run unconfined)
    (place / "tmp/proj/ws").mkdir(parents=True)
    context = ToolContext(place / "tmp/proj/ws", sandbox=Sandbox("workspace-write", False, str(place / "tmp")))
    out = await _run(f"git init -q .. && git -C .. config core.fsmonitor 'touch {place}/outside/ran'; "
                     "echo ok > notes; ls -a ..", context)
    assert out.startswith("[exit code 0]") and ".git" in out, out
    assert not (place / "tmp/proj/.git").exists() and (place / "tmp/proj/ws/notes").read_text() == "ok\n"
    _git(place / "tmp/proj/ws", "status")
    assert not (place / "outside/ran").exists()


async def _until(predicate: Callable[[], bool]) -> None:
    """Wait (on the event loop) until `predicate` holds; 60 s only bounds a hang."""
    import asyncio

    async with asyncio.timeout(60):
        while not predicate():
            await asyncio.sleep(0.02)


def _wait_for_go(folder: str = ".") -> str:
    """A command that makes `folder/started`, then waits until `folder/go` is there (60 s at most: a hang)."""
    return (f"touch {folder}/started; i=0; while [ ! -e {folder}/go ] && [ $i -lt 6000 ]; do sleep 0.01; "
            "i=$((i+1)); done; echo done")


@needs_bwrap
async def test_what_the_person_makes_while_a_command_runs_is_left_alone(home_with_dot_folders: Path,
                                                                        place: Path) -> None:
    # while a confined `sleep 5` runs, the person's own new ~/.gitconfig, ~/.ssh and a cloned lib/.git are
    # never renamed *.crow-sandboxed, and the call is not reported as stopped by the sandbox when sleep exits 0.
    # What the command could not write is never put aside; the call's outcome is the command's.
    import asyncio

    home = home_with_dot_folders
    context = ToolContext(home, sandbox=Sandbox("workspace-write", False, str(place / "tmp")))
    call = asyncio.ensure_future(run_shell.invoke({"command": _wait_for_go("projects/x")}, context))
    await _until(lambda: (home / "projects/x/started").exists() or call.done())
    (home / ".gitconfig").write_text("[user]\n")
    (home / ".ssh").mkdir()
    _git(home, "init", "-q", "lib")
    (home / "projects/x/go").touch()
    assert await call == "[exit code 0]\ndone\n"
    assert sorted(p.name for p in home.iterdir() if "crow-sandboxed" in p.name) == []
    assert (home / ".gitconfig").read_text() == "[user]\n" and (home / ".ssh").is_dir()
    assert (home / "lib/.git").is_dir() and not (home / "lib/.git.crow-sandboxed").exists()


@needs_bwrap
async def test_home_files_the_person_makes_while_a_project_command_runs_are_left_alone(
        home_with_dot_folders: Path, place: Path) -> None:
    import asyncio

    home = home_with_dot_folders
    call = asyncio.ensure_future(run_shell.invoke({"command": _wait_for_go()}, _context(place)))
    await _until(lambda: (place / "ws/started").exists() or call.done())
    (home / ".gitconfig").write_text("[user]\n")
    (home / ".ssh").mkdir()
    (place / "ws/go").touch()
    assert await call == "[exit code 0]\ndone\n"
    assert (home / ".gitconfig").read_text() == "[user]\n" and (home / ".ssh").is_dir()


@needs_bwrap
async def test_a_git_symlink_replaced_by_a_repository_is_put_aside(place: Path) -> None:
    # a `.git` symlink is not a mount point: replacing it with a repository of the command's own kept the path
    # that was there at the start, and a check by path alone let it stay
    (place / "ws/fixture").mkdir()
    (place / "ws/fixture/.git").symlink_to(place / "nowhere")
    (place / "ws/sub/.git").mkdir(parents=True)
    out = await _run("rm fixture/.git && git init -q fixture; mv sub sub2 && git init -q sub; echo ok",
                     _context(place))
    assert "put aside" in out, out
    assert not (place / "ws/fixture/.git").exists() and not (place / "ws/sub/.git").exists()


@needs_bwrap
async def test_no_trick_writes_outside_the_writable_set(home_with_dot_folders: Path, place: Path) -> None:
    # the attacker's spellings: a symlink planted in the workspace pointing out, a hard link, `..`,
    # /proc/self/root, /dev/shm, the XDG folders and ~/.cache of a home-folder workspace
    home = home_with_dot_folders
    (home / ".bashrc").write_text("# rc\n")
    context = ToolContext(home, sandbox=Sandbox("workspace-write", False, str(place / "tmp")))
    out = await _run(f"ln -s {home}/.bashrc projects/x/rc; echo evil >> projects/x/rc; "
                     "ln .bashrc projects/x/hard; echo evil >> projects/x/../../.bashrc; "
                     f"echo evil >> /proc/self/root{home}/.bashrc; echo x > /dev/shm/crow-planted; "
                     "mkdir -p .cache/x; mkdir -p .local/share/applications; echo ok > projects/x/ok",
                     context)
    assert out.startswith("BLOCKED"), out
    assert (home / ".bashrc").read_text() == "# rc\n" and not (home / "projects/x/hard").exists()
    assert not Path("/dev/shm/crow-planted").exists()
    assert not (home / ".cache").exists() and not (home / ".local/share").exists()
    assert (home / "projects/x/ok").read_text() == "ok\n"


def test_the_home_folder_as_workspace_is_said_at_start(home_with_dot_folders: Path, place: Path) -> None:
    from crow_cli.tools.sandbox import home_notice

    home = home_with_dot_folders
    assert home_notice(Sandbox("workspace-write"), home) == (
        f"the workspace {home} is your home folder: commands can change its projects but not its dot-folders "
        "(~/.config, ~/.local …) nor make anything new at its top; start crow in a project folder instead")
    assert home_notice(Sandbox("workspace-write"), home.parent) is not None
    assert home_notice(Sandbox("workspace-write"), home / "projects/x") is None
    assert home_notice(Sandbox("off"), home) == (f"the workspace {home} is your home folder, and the sandbox is "
                                                 "off: commands can change everything in it; start crow in a "
                                                 "project folder instead")
    assert "commands can read all of it" in str(home_notice(Sandbox("read-only"), home))


@needs_bwrap
async def test_a_git_made_by_a_cancelled_command_is_put_aside_too(place: Path) -> None:
    # the put-aside ran only when the command ended by itself: Ctrl-C after a `git init` with a hook of the
    # command's own left the repository for the user's next git command
    import asyncio

    (place / "plain").mkdir()
    context = ToolContext(place / "plain", sandbox=Sandbox("workspace-write", False, str(place / "tmp")))
    call = asyncio.ensure_future(run_shell.invoke(
        {"command": "git init -q sub && touch made && sleep 60"}, context))
    await _until(lambda: (place / "plain/made").exists() or call.done())
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert not (place / "plain/sub/.git").exists() and (place / "plain/sub/.git.crow-sandboxed").is_dir()


@needs_bwrap
async def test_a_git_symlink_does_not_show_what_the_layout_hides(place: Path) -> None:
    # a `.git` symlink was bound read-only where it leads: one a command planted pointing at the temp dir
    # brought the person's temp dir (its files, the tmux socket) back over the run's own at the next command
    (place / "tmp/mine").write_text("kept-from-commands\n")
    (place / "ws/x").mkdir()
    (place / "ws/x/.git").symlink_to(place / "tmp")
    out = await _run(f"ls {place}/tmp; cat {place}/tmp/mine", _context(place, network=True))
    assert out.startswith("[exit code 1]\ncat: ") and "kept-from-commands" not in out, out


@needs_bwrap
async def test_a_git_in_a_folder_the_command_locked_is_put_aside(place: Path) -> None:
    # a folder the walk cannot list hid the repository made in it (`chmod 000 evil`), not from the person's
    # later `cd evil/sub` after a chmod; the folder keeps its mode (as root the walk lists it anyway)
    (place / "plain").mkdir()
    context = ToolContext(place / "plain", sandbox=Sandbox("workspace-write", False, str(place / "tmp")))
    out = await _run("git init -q evil/sub && chmod 000 evil", context)
    assert "put aside" in out, out
    os.chmod(place / "plain/evil", 0o700)
    assert not (place / "plain/evil/sub/.git").exists() and (place / "plain/evil/sub/.git.crow-sandboxed").is_dir()


@needs_bwrap
async def test_a_workspace_inside_a_git_directory_is_read_only(place: Path) -> None:
    # crow started in `repo/.git` (or `.git/modules/x`) had the hooks folder as part of a writable workspace
    (place / "ws/.git/hooks").mkdir(parents=True, exist_ok=True)
    context = ToolContext(place / "ws/.git", sandbox=Sandbox("workspace-write", False, str(place / "tmp")))
    out = await _run("echo 'touch /tmp/ran' > hooks/post-checkout; chmod +x hooks/post-checkout", context)
    assert out.startswith("BLOCKED") and not (place / "ws/.git/hooks/post-checkout").exists(), out


def test_a_workspace_that_is_the_root_keeps_a_private_dev_proc_and_run(tmp_path: Path) -> None:
    # `--bind / /` for a workspace at / brought the host's /dev, /proc and /run (docker.sock) back over the
    # sandbox's own; they are mounted again after it
    argv = bwrap_argv(Sandbox("workspace-write", False, str(tmp_path)), Path("/"), "true",
                      layout=Layout((("/", True, "/"),)), git_dirs=[])
    text = " ".join(argv)
    assert "--bind / / --dev /dev --proc /proc" in text


def test_a_relative_path_entry_is_said_at_start_where_commands_may_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """No mount protects `.` or `bin` in PATH (they name whatever folder a shell is in): crow says so."""
    from crow_cli.tools.sandbox import relative_path_notice

    monkeypatch.setenv("PATH", f":bin:{os.defpath}")
    said = relative_path_notice(Sandbox("workspace-write"))
    assert said is not None and "an empty entry" in said and "'bin'" in said
    assert relative_path_notice(Sandbox("read-only")) is None
    monkeypatch.setenv("PATH", os.defpath)
    assert relative_path_notice(Sandbox("workspace-write")) is None
