"""Tab completion at the chat's prompt (`surfaces/chat/complete`): `@` completes the workspace's paths.

Properties guarded here:

- on a terminal, `@s` Tab completes a folder and `@src/` Tab its one file git does not ignore, which the message
  then attaches;
- the paths are git's (ignored files left out, untracked ones in) in a git work tree, a walk without vendor
  folders elsewhere; one folder at a time, each once; no name with white space or a control character.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from crow_cli.surfaces.chat.complete import path_completions, workspace_paths
from tests.replay_server import ReplayServer, text_stream
from tests.support import ChatTerminal, wait_for

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _repo(folder: Path) -> Path:
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    (folder / ".gitignore").write_text("*.log\n")
    (folder / "src").mkdir()
    (folder / "src" / "app.py").write_text("print('hi')\n")  # untracked, not ignored
    (folder / "src" / "build.log").write_text("noise\n")  # ignored
    return folder


@needs_git
def test_at_then_tab_completes_workspace_paths_and_the_message_attaches_the_file(tmp_path: Path) -> None:
    _repo(tmp_path)
    with ReplayServer([{"sse": text_stream("Seen.")}]) as server, ChatTerminal(
            ["--base-url", server.base_url, "--api-key", "sk-test", "--model", "test-model", "--no-tools"],
            cwd=tmp_path) as term:
        term.expect("›")
        term.send("look at @s\t")  # the folder
        wait_for(lambda: any(row.endswith("look at @src/") for row in term.display()))
        term.send("\t")  # its one file git does not ignore (src/build.log is)
        wait_for(lambda: any(row.endswith("look at @src/app.py") for row in term.display()))
        term.send("\r")
        term.expect("Seen.")
        term.expect("›")
        term.send("\x04")
        assert term.wait() == 0
    (request,) = server.requests
    assert request["messages"][-1]["content"].startswith("look at @src/app.py\n\n[attached file: src/app.py]")


@needs_git
def test_in_a_git_work_tree_the_paths_are_gits_without_the_ignored_ones(tmp_path: Path) -> None:
    _repo(tmp_path)
    assert sorted(workspace_paths(tmp_path)) == [".gitignore", "src/app.py"]
    assert workspace_paths(tmp_path / "src") == ["app.py"]  # relative to the workspace root given


def test_outside_git_the_walk_leaves_out_vendor_folders(tmp_path: Path) -> None:
    for name in ("a.txt", "node_modules/x.js", ".git/HEAD", "lib/b.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    assert workspace_paths(tmp_path) == ["a.txt", "lib/b.py"]


def test_a_path_completes_one_folder_at_a_time_each_once() -> None:
    paths = ["src/app.py", "src/lib/a.py", "src/lib/b.py", "setup.py", "docs/x y.md", "docs/\x1b[2J.md", "README"]
    assert path_completions("s", paths) == ["setup.py", "src/"]
    assert path_completions("src/", paths) == ["src/app.py", "src/lib/"]
    assert path_completions("src/lib/", paths) == ["src/lib/a.py", "src/lib/b.py"]
    assert path_completions("docs/", paths) == []  # white space, a control character: never offered
    assert path_completions("", paths) == ["README", "docs/", "setup.py", "src/"]
