"""The options every command shares (crow_cli/commands/options.py): what an empty one means."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from tests.support import crow_here


# found trying 746a660 (an empty flag is a usage error) as a new user: `--tools-dir "$DIR"` with DIR unset
# imported every .py file of the working directory as plugin tools, and `--config "$CFG"` read the user's own
# config file, both without a word
@pytest.mark.parametrize("command", [["run", "hi"], ["chat"], ["acp"], ["tools"]])
@pytest.mark.parametrize("flag", ["--tools-dir", "--config"])
def test_an_empty_tools_dir_or_config_is_refused_naming_it(tmp_path: Path, command: list[str], flag: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "plugin.py").write_text(f"open({str(tmp_path / 'imported')!r}, 'w').close()\n")
    with contextlib.chdir(tmp_path), pytest.raises(Exception) as caught:  # click's usage error
        crow_here(command[0], flag, "", *command[1:])
    assert getattr(caught.value, "exit_code", None) == 2
    assert f"'{flag}'" in caught.value.format_message() and "empty" in caught.value.format_message()
    assert not (tmp_path / "imported").exists()
