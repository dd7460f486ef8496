"""search_files walks the tree crow is given: the git it runs runs nothing the repository configures, and a
symlink loop is skipped."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from crow_cli.tools.builtin.search import search_files
from crow_cli.tools.context import ToolContext, using_context

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(root: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run(["git", *args], cwd=root, check=True, env=env, capture_output=True)


# issue: in a git work tree, search_files ran `git ls-files`, which executed .git/config's core.fsmonitor
# (with no approval, and with the API-key variables run_shell hides)
@needs_git
def test_the_repository_s_fsmonitor_never_runs(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _git(ws, "init", "-q")
    (ws / "a.txt").write_text("needle\n")
    marker = ws.parent / f"{ws.name}-ran"
    hook = ws.parent / f"{ws.name}-fsmonitor.sh"
    hook.write_text(f"#!/bin/sh\nenv > {marker}\nexit 1\n")
    hook.chmod(0o755)
    _git(ws, "config", "core.fsmonitor", str(hook))
    _git(ws, "add", "a.txt")
    marker.unlink(missing_ok=True)  # `git add` above may have run it
    monkeypatch.setenv("CROW_API_KEY", "sk-live-abcdef")
    with using_context(ToolContext.for_workspace(ws, secrets=["sk-live-abcdef"])):
        assert search_files("needle") == "a.txt:1: needle"
    assert not marker.exists()


@needs_git
def test_git_gets_the_scrubbed_environment(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from crow_cli.tools.builtin import search

    _git(ws, "init", "-q")
    (ws / "a.txt").write_text("needle\n")
    envs: list[dict[str, str]] = []
    real_run = subprocess.run

    def run(*args: object, env: dict[str, str], **kwargs: object) -> object:
        envs.append(env)
        return real_run(*args, env=env, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(search.subprocess, "run", run)
    monkeypatch.setenv("CROW_API_KEY", "sk-live-abcdef")
    monkeypatch.setenv("OTHER_TOKEN", "x-sk-live-abcdef-y")
    with using_context(ToolContext.for_workspace(ws, secrets=["sk-live-abcdef"])):
        assert search_files("needle") == "a.txt:1: needle"
    (env,) = envs
    assert "CROW_API_KEY" not in env and "OTHER_TOKEN" not in env and "PATH" in env


# issue: `ln -s loop loop` made every search_files of the tree fail
@pytest.mark.parametrize("git", [False, True])
def test_a_symlink_loop_is_skipped(ws: Path, git: bool) -> None:
    if git:
        if shutil.which("git") is None:
            pytest.skip("git is not installed")
        _git(ws, "init", "-q")
    (ws / "loop").symlink_to("loop")
    (ws / "a.txt").write_text("needle\n")
    assert search_files("needle") == "a.txt:1: needle"
