"""trust.py: a decision is remembered per folder and covers the folders under it; a "no" is remembered; a
record that cannot be read trusts nothing."""

from __future__ import annotations

from pathlib import Path

from crow_cli.trust import TrustStore, project_root


def test_a_decision_is_remembered_and_covers_subfolders(tmp_path: Path) -> None:
    record = tmp_path / "state" / "trusted_folders.json"
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    store = TrustStore(record)
    assert store.decision(repo) is None
    store.set(repo, True)
    again = TrustStore(record)
    assert again.trusted(repo) and again.trusted(repo / "src")
    assert not again.trusted(tmp_path)
    assert record.stat().st_mode & 0o077 == 0


def test_a_no_is_remembered_and_the_nearest_decision_counts(tmp_path: Path) -> None:
    record = tmp_path / "trusted_folders.json"
    store = TrustStore(record)
    store.set(tmp_path, True)
    store.set(tmp_path / "clone", False)
    again = TrustStore(record)
    assert again.decision(tmp_path / "clone" / "deep") is False
    assert again.decision(tmp_path / "other") is True


def test_an_unreadable_record_trusts_nothing(tmp_path: Path) -> None:
    record = tmp_path / "trusted_folders.json"
    record.write_text('{"version": 1, "folders": {"/": {"trusted": "yes"}}}')
    store = TrustStore(record)
    assert store.decision(tmp_path) is None
    assert store.problem is not None and "nothing is trusted" in store.problem


def test_the_project_root_is_the_repository_root(tmp_path: Path) -> None:
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    (tmp_path / "repo" / "a" / "b").mkdir(parents=True)
    assert project_root(tmp_path / "repo" / "a" / "b") == (tmp_path / "repo").resolve()
    assert project_root(tmp_path) == tmp_path.resolve()
