"""surfaces/options.py: `yes` names the approval mode, so a continued session may be loosened to it by any
caller (the CLI's flags, or a library caller building the options itself)."""

from __future__ import annotations

from crow_cli.surfaces.options import SurfaceOptions


def test_yes_names_the_approval_mode_however_the_options_are_built() -> None:
    assert "approval" in SurfaceOptions(yes=True).modes_given
    assert SurfaceOptions(yes=True, modes_given=frozenset({"sandbox"})).modes_given == {"approval", "sandbox"}
    assert SurfaceOptions().modes_given == frozenset()
