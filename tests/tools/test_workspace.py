"""A refused path says where it resolved to: `~` is expanded first (HOME), then confined like any path."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from crow_cli.errors import OutsideWorkspace
from crow_cli.tools.builtin.files import read_file
from crow_cli.tools.workspace import resolve_in_workspace


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    (home / "proj").mkdir(parents=True)
    (home / "proj" / "a.txt").write_text("inside\n")
    (home / "notes.txt").write_text("private\n")
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture
def ws(home: Path, enter_workspace: Callable[..., object]) -> Path:
    enter_workspace(home / "proj")
    return home / "proj"


def test_tilde_outside_names_the_expanded_path(home: Path, ws: Path) -> None:
    with pytest.raises(OutsideWorkspace) as caught:
        read_file(path="~/notes.txt")
    assert str(caught.value) == (f"'~/notes.txt' is {str(home / 'notes.txt')!r} (~ is the home folder), "
                                 f"outside the workspace {str(ws)!r}; refused")


def test_tilde_inside_the_workspace_is_read(home: Path, ws: Path) -> None:
    assert read_file(path="~/proj/a.txt") == "inside\n"


@pytest.mark.parametrize(("given", "shown"), [("../notes.txt", "notes.txt"), ("/nonexistent-crow/x", None)])
def test_other_refusals_say_where_the_path_leads(home: Path, ws: Path, given: str, shown: str | None) -> None:
    with pytest.raises(OutsideWorkspace) as caught:
        resolve_in_workspace(given)
    message = str(caught.value)
    assert message.endswith(f"outside the workspace {str(ws)!r}; refused")
    if shown is None:  # an absolute path that resolves to itself is not repeated
        assert message.startswith(f"{given!r} is outside")
    else:
        assert message.startswith(f"{given!r} is {str(home / shown)!r}, outside")


def test_a_symlink_out_names_its_target(home: Path, ws: Path) -> None:
    (ws / "link").symlink_to(home / "notes.txt")
    with pytest.raises(OutsideWorkspace, match=r"^'link' is '.*/home/notes.txt', outside the workspace"):
        read_file(path="link")


def test_a_symlink_loop_is_one_line(ws: Path) -> None:
    # `ln -s loop loop`: a path through it is a clear error, not an internal one (Python 3.11's resolve()
    # raises RuntimeError); `--workspace loop` too
    from crow_cli.errors import ConfigError, ToolError
    from crow_cli.tools.context import ToolContext

    (ws / "loop").symlink_to("loop")
    with pytest.raises(ToolError, match=r"^'loop/a.txt': a symlink loop$"):
        resolve_in_workspace("loop/a.txt")
    with pytest.raises(ConfigError, match=r"^workspace '.*loop' is a symlink loop$"):
        ToolContext.for_workspace(ws / "loop")


# under `crow run --yes`, write_file cannot put a hook in .git/hooks/pre-commit nor edit_file change
# .git/config (core.fsmonitor): code the next git command runs
# outside the sandbox, which keeps .git read-only for commands only
@pytest.mark.parametrize("target", [".git/hooks/pre-commit", ".git/config", ".git", "hooks/pre-commit",
                                    "sub/../.git/info/attributes"])
def test_file_tools_write_nothing_in_the_workspace_s_git_while_the_sandbox_confines(
        tmp_path: Path, enter_workspace: Callable[..., object], target: str) -> None:
    from crow_cli.errors import ToolError
    from crow_cli.tools.builtin.edits import edit_file, write_file
    from crow_cli.tools.sandbox import Sandbox

    ws = tmp_path / "proj"
    (ws / ".git" / "hooks").mkdir(parents=True)
    (ws / ".git" / "config").write_text("[core]\n\tbare = false\n")
    (ws / "sub").mkdir()
    (ws / "hooks").symlink_to(ws / ".git" / "hooks")
    enter_workspace(ws, sandbox=Sandbox("workspace-write"))
    with pytest.raises(ToolError, match=r"\.git.*sandbox.*refused"):
        write_file(path=target, content="#!/bin/sh\necho pwned\n")
    with pytest.raises(ToolError, match=r"\.git.*sandbox.*refused"):
        edit_file(path=".git/config", old_string="bare = false", new_string="fsmonitor = ./x")
    assert not (ws / ".git" / "hooks" / "pre-commit").exists()
    assert (ws / ".git" / "config").read_text() == "[core]\n\tbare = false\n"
    enter_workspace(ws, sandbox=Sandbox("off"))  # with no sandbox the user gave full rights: written
    write_file(path=".git/hooks/pre-commit", content="#!/bin/sh\n")
    assert (ws / ".git" / "hooks" / "pre-commit").exists()
