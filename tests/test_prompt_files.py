"""Prompt files (`.crow/prompts/NAME.md`, `prompts/NAME.md` in crow's config folder): found, read, expanded."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from crow_cli.errors import ConfigError
from crow_cli.prompt_files import (
    MAX_BYTES,
    MAX_MESSAGE_CHARS,
    PromptFile,
    PromptFolders,
    PromptText,
    expand,
    parse_prompt,
    read_prompt,
    read_text_file,
    summary,
)


def folders(workspace: Path, config: Path) -> PromptFolders:
    return PromptFolders.for_workspace(workspace, config)


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def test_a_project_prompt_shadows_the_users_and_says_so(tmp_path: Path) -> None:
    work, config = tmp_path / "work", tmp_path / "config"
    project = write(work / ".crow/prompts/review.md", "Project review.")
    user = write(config / "prompts/review.md", "User review.")
    write(config / "prompts/hello.md", "Hello.")
    write(config / "prompts/not a name.md", "Never listed.")
    write(work / ".crow/prompts/notes.txt", "Not markdown.")
    found = folders(work, config)
    review = found.find("review")
    assert review is not None and review.path == project and review.scope == "project" and review.shadows == user
    assert review.shadow_note() == f"/review: the project's {project} is used, not your {user}"
    hello = found.find("hello")
    assert hello is not None and hello.scope == "user" and hello.shadow_note() is None
    assert [p.name for p in found.all()] == ["hello", "review"]
    assert found.find("not a name") is None and found.find("../hello") is None and found.find("nope") is None


def test_the_nearest_prompts_folder_up_to_the_repository_root_is_the_projects(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    write(tmp_path / ".crow/prompts/top.md", "At the top.")
    sub = tmp_path / "pkg" / "sub"
    sub.mkdir(parents=True)
    found = folders(sub, tmp_path / "config")
    top = found.find("top")
    assert top is not None and top.path == tmp_path / ".crow/prompts/top.md" and top.root == tmp_path
    outside = tmp_path / "elsewhere"  # no repository: only the workspace's own folder
    outside.mkdir()
    (tmp_path / ".git").rmdir()
    assert folders(outside, tmp_path / "config").project == outside / ".crow/prompts"


def test_arguments_replace_the_placeholder_or_follow_after_a_blank_line() -> None:
    assert expand("Review $ARGUMENTS, then $ARGUMENTS again.", "  app.py ", usage="/r TEXT") == \
        "Review app.py, then app.py again."
    assert expand("Say hello.", "in French", usage="/h TEXT") == "Say hello.\n\nin French"
    assert expand("Say hello.", "", usage="/h TEXT") == "Say hello."
    with pytest.raises(ConfigError, match=r"uses \$ARGUMENTS and none were given \(/r TEXT\); nothing was sent"):
        expand("Review $ARGUMENTS.", "  ", usage="/r TEXT")


def test_an_expansion_over_the_bound_is_refused_in_one_line_before_it_is_built() -> None:
    # 2,900 `$ARGUMENTS` in a 64 KB file times a 100 KB argument made a 290 MB message (crow at 1.18 GB)
    text = "$ARGUMENTS\n" * 2900
    with pytest.raises(ConfigError) as refused:
        expand(text, "x" * 100_000, usage="/r TEXT")
    message = str(refused.value)
    assert "\n" not in message and "2,900 times" in message and "nothing was sent" in message
    assert f"at most {MAX_MESSAGE_CHARS:,}" in message
    long = "y" * MAX_MESSAGE_CHARS  # appended arguments count too
    with pytest.raises(ConfigError, match="characters of arguments"):
        expand("Say hello.", long, usage="/h TEXT")
    assert expand("Review $ARGUMENTS.", "z" * 100_000, usage="/r TEXT") == f"Review {'z' * 100_000}."


def test_a_project_prompt_leading_out_of_the_project_is_not_read(tmp_path: Path) -> None:
    secret = write(tmp_path / "secret.txt", "the key")
    work = tmp_path / "work"
    link = work / ".crow/prompts/leak.md"
    link.parent.mkdir(parents=True)
    link.symlink_to(secret)
    prompt = folders(work, tmp_path / "config").find("leak")
    assert prompt is not None
    with pytest.raises(ConfigError, match="outside the project; not read"):
        read_prompt(prompt)
    user_link = tmp_path / "config/prompts/mine.md"  # the user's own file goes where they point it
    user_link.parent.mkdir(parents=True)
    user_link.symlink_to(secret)
    mine = folders(work, tmp_path / "config").find("mine")
    assert mine is not None and read_prompt(mine).body == "the key"


@pytest.mark.parametrize(("content", "error"), [
    (b"caf\xe9", "it is not UTF-8 text"),
    (b"x" * (MAX_BYTES + 1), f"is {MAX_BYTES + 1:,} bytes; at most {MAX_BYTES:,}"),
    (b"  \n", "is empty"),
])
def test_a_file_that_cannot_be_used_is_one_error(tmp_path: Path, content: bytes, error: str) -> None:
    write(tmp_path / "work/.crow/prompts/bad.md", content)
    prompt = folders(tmp_path / "work", tmp_path / "config").find("bad")
    assert prompt is not None
    with pytest.raises(ConfigError, match=error) as raised:
        read_prompt(prompt)
    assert "\n" not in str(raised.value)


def test_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "work/.crow/prompts/pipe.md"
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    prompt = folders(tmp_path / "work", tmp_path / "config").find("pipe")
    assert prompt is not None
    with pytest.raises(ConfigError, match="is not a regular file"):
        read_prompt(prompt)


# `--prompt-file /tmp`, `--system-file /tmp` (a folder) are one clear line, not an internal error
def test_a_folder_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^system prompt file 'x' is a folder$"):
        read_text_file(tmp_path, "system prompt file 'x'")


def test_secrets_are_masked_and_the_summary_is_escaped_and_short(tmp_path: Path) -> None:
    write(tmp_path / "work/.crow/prompts/k.md", "Use sk-test-SECRET-123 here.")
    prompt = folders(tmp_path / "work", tmp_path / "config").find("k")
    assert prompt is not None
    assert read_prompt(prompt, ["sk-test-SECRET-123"]).body == "Use [REDACTED] here."
    assert summary(PromptText("\n\n# Review \x1b[2Jthe code\nmore")) == "Review \\u001b[2Jthe code"
    assert summary(PromptText("x" * 100)) == "x" * 71 + "…"


def test_front_matter_is_not_sent_and_its_description_is_the_summary(tmp_path: Path) -> None:
    # Claude Code's command files start so: one copied into .crow/prompts must not send its front matter
    write(tmp_path / "work/.crow/prompts/fix.md",
          '---\ndescription: "Fix an issue"\nargument-hint: [issue]\nallowed-tools: Bash(git:*)\n---\n\n'
          "Fix issue $ARGUMENTS.\n")
    prompt = folders(tmp_path / "work", tmp_path / "config").find("fix")
    assert prompt is not None
    text = read_prompt(prompt)
    assert text == PromptText("Fix issue $ARGUMENTS.", "Fix an issue") and summary(text) == "Fix an issue"
    assert parse_prompt("---\nno end\nBody.") == PromptText("---\nno end\nBody.")
    assert parse_prompt("---\nargument-hint: x\n---\nBody.") == PromptText("Body.")
    assert summary(parse_prompt("---\n---\n# Title\nBody.")) == "Title"
    write(tmp_path / "work/.crow/prompts/bare.md", "---\ndescription: only this\n---\n")
    with pytest.raises(ConfigError, match="is empty"):
        read_prompt(PromptFile("bare", tmp_path / "work/.crow/prompts/bare.md", "user"))
