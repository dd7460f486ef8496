"""Workspace snapshots and the rewind of files (`crow_cli.rewind`), on real files, git and SQLite.

Properties guarded here:

- a rewind restores changed files, creates deleted ones again, removes made ones (and the folders made for
  them), keeps permission bits, and says which;
- files over the size bound, ignored folders, git-ignored files, the session store's own files and a
  workspace over the count bound are not snapshotted, and the plan says so;
- a file changed outside crow since (after a call, between calls) is marked, and only overwritten when asked;
- a scan of an unchanged workspace reads no file; each content is stored once, and dropped with the last
  snapshot that names it; a snapshot naming a content the store lost is refused, not stored.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from crow_cli.rewind import MAX_FILE_BYTES, Scanner, apply_rewind, plan_rewind
from crow_cli.sessions import SessionStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SessionStore]:
    with SessionStore(tmp_path / "store" / "sessions.db") as opened:
        yield opened


def _workspace(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "ws"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root.resolve()


def _keep(store: SessionStore, sid: str, scanner: Scanner, kind: str, position: int = 1) -> None:
    scan = scanner.scan()
    assert store.add_snapshot(sid, position, kind, str(scanner.root), scan.manifest, scan.contents) == []


def test_a_rewind_restores_changed_creates_deleted_and_removes_made_files(store: SessionStore,
                                                                          tmp_path: Path) -> None:
    root = _workspace(tmp_path, {"a.txt": "a1\n", "gone.txt": "kept\n", "run.sh": "#!/bin/sh\n"})
    (root / "run.sh").chmod(0o755)
    sid = store.create().id
    scanner = Scanner(root)
    _keep(store, sid, scanner, "before")
    (root / "a.txt").write_text("a2\n")  # what a formatter or `sed -i` does
    (root / "gone.txt").unlink()
    (root / "new" / "deep").mkdir(parents=True)
    (root / "new" / "deep" / "made.txt").write_text("made\n")
    (root / "run.sh").chmod(0o644)
    _keep(store, sid, scanner, "after")

    plan = plan_rewind(store, sid, 0, scanner.scan(), root)
    assert [(c.path, c.action, c.outside) for c in plan.changes] == [
        ("a.txt", "restore", False), ("gone.txt", "create", False), ("new/deep/made.txt", "remove", False),
        ("run.sh", "restore", False)]
    assert "  restores a.txt" in plan.describe()
    done, problems = apply_rewind(store, plan)
    assert done == ["restored a.txt", "created gone.txt", "removed new/deep/made.txt", "restored run.sh"]
    assert problems == []
    assert (root / "a.txt").read_text() == "a1\n" and (root / "gone.txt").read_text() == "kept\n"
    assert not (root / "new").exists()  # the folders made for the removed file go too
    assert (root / "run.sh").stat().st_mode & 0o777 == 0o755
    assert plan_rewind(store, sid, 0, scanner.scan(), root).changes == []  # as it was: nothing more to do


def test_no_snapshot_since_the_prompt_leaves_the_files_alone(store: SessionStore, tmp_path: Path) -> None:
    root = _workspace(tmp_path, {"a.txt": "a1\n"})
    sid = store.create().id
    scanner = Scanner(root)
    _keep(store, sid, scanner, "before", position=1)
    (root / "a.txt").write_text("a2\n")
    plan = plan_rewind(store, sid, 2, scanner.scan(), root)  # a later prompt: no call that may write since
    assert plan.changes == [] and "no file to restore" in plan.describe()[0]


def test_big_files_are_not_kept_and_the_plan_says_so(store: SessionStore, tmp_path: Path) -> None:
    root = _workspace(tmp_path, {"small.txt": "s1\n", "big.bin": "x" * 100})
    sid = store.create().id
    scanner = Scanner(root, max_bytes=50)
    _keep(store, sid, scanner, "before")
    (root / "big.bin").write_text("y" * 200)
    (root / "small.txt").write_text("s2\n")
    (root / "huge.bin").write_text("z" * 300)  # made since: removed, though its content was never read
    _keep(store, sid, scanner, "after")
    plan = plan_rewind(store, sid, 0, scanner.scan(), root)
    assert [(c.path, c.action) for c in plan.changes] == [("huge.bin", "remove"), ("small.txt", "restore")]
    assert any("not restored: big.bin" in note for note in plan.notes)
    apply_rewind(store, plan)
    assert (root / "big.bin").read_text() == "y" * 200 and not (root / "huge.bin").exists()
    assert MAX_FILE_BYTES >= 1024 * 1024  # the default bound keeps ordinary source files


def test_a_workspace_over_the_count_bound_is_not_snapshotted(store: SessionStore, tmp_path: Path) -> None:
    root = _workspace(tmp_path, {f"f{n}.txt": str(n) for n in range(5)})
    sid = store.create().id
    scanner = Scanner(root, max_files=3)
    scan = scanner.scan()
    assert scan.manifest == {"files": {}, "big": {}, "over": 5} and scan.contents == {}
    _keep(store, sid, scanner, "before")
    (root / "f0.txt").write_text("changed")
    plan = plan_rewind(store, sid, 0, scanner.scan(), root)
    assert plan.changes == [] and "held more than" in plan.notes[0]


def test_ignored_folders_and_git_ignored_files_are_not_snapshotted(tmp_path: Path) -> None:
    root = _workspace(tmp_path, {"src/a.py": "a", "node_modules/x/i.js": "i", ".venv/lib/v.py": "v",
                                 "build/out.o": "o", ".gitignore": "build/\n"})
    (root / "store").mkdir()
    (root / "store" / "sessions.db").write_text("the session store, in the workspace")
    without_git = Scanner(root, exclude=[root / "store" / "sessions.db"]).scan().manifest["files"]
    assert sorted(without_git) == [".gitignore", "build/out.o", "src/a.py"]
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    files = Scanner(root, exclude=[root / "store"]).scan().manifest["files"]
    assert sorted(files) == [".gitignore", "src/a.py"]  # untracked but not ignored are in; .git never


def test_a_file_changed_outside_crow_is_marked_and_kept_unless_overwritten(store: SessionStore,
                                                                          tmp_path: Path) -> None:
    root = _workspace(tmp_path, {"a.txt": "a1", "b.txt": "b1", "c.txt": "c1"})
    sid = store.create().id
    scanner = Scanner(root)
    _keep(store, sid, scanner, "before")
    (root / "a.txt").write_text("a2")  # the call's change
    _keep(store, sid, scanner, "after")
    (root / "c.txt").write_text("c2")  # the person's, between two calls
    _keep(store, sid, scanner, "before", position=3)
    _keep(store, sid, scanner, "after", position=3)
    (root / "b.txt").write_text("b2")  # the person's, after the last call
    plan = plan_rewind(store, sid, 0, scanner.scan(), root)
    assert [(c.path, c.outside) for c in plan.changes] == [("a.txt", False), ("b.txt", True), ("c.txt", True)]
    assert [c.path for c in plan.outside()] == ["b.txt", "c.txt"]
    done, problems = apply_rewind(store, plan)
    assert done == ["restored a.txt"]
    assert problems == ["not restored: b.txt (changed outside crow since)",
                        "not restored: c.txt (changed outside crow since)"]
    assert (root / "b.txt").read_text() == "b2" and (root / "c.txt").read_text() == "c2"
    done, _ = apply_rewind(store, plan, overwrite=True)
    assert (root / "b.txt").read_text() == "b1" and (root / "c.txt").read_text() == "c1"


def test_a_rewind_never_writes_through_a_link(store: SessionStore, tmp_path: Path) -> None:
    root = _workspace(tmp_path, {"a.txt": "a1"})
    outside = tmp_path / "outside.txt"
    outside.write_text("mine")
    sid = store.create().id
    scanner = Scanner(root)
    _keep(store, sid, scanner, "before")
    (root / "a.txt").unlink()
    os.symlink(outside, root / "a.txt")
    _keep(store, sid, scanner, "after")
    plan = plan_rewind(store, sid, 0, scanner.scan(), root)
    done, problems = apply_rewind(store, plan, overwrite=True)
    assert done == [] and "is a link" in problems[0] and outside.read_text() == "mine"


def test_a_link_replaced_by_a_file_is_linked_again_not_removed(store: SessionStore, tmp_path: Path) -> None:
    # `sed -i` on a symbolic link leaves a file in its place; the rewind links it again, never taking it for a
    # file made since and removing it
    root = _workspace(tmp_path, {"real.txt": "old\n"})
    os.symlink("real.txt", root / "link.txt")
    sid = store.create().id
    scanner = Scanner(root)
    _keep(store, sid, scanner, "before")
    subprocess.run(["sed", "-i", "s/old/new/", "link.txt"], cwd=root, check=True)
    os.symlink("real.txt", root / "made-link.txt")  # a link made since is left as it is
    _keep(store, sid, scanner, "after")
    assert not (root / "link.txt").is_symlink()
    plan = plan_rewind(store, sid, 0, scanner.scan(), root)
    assert [(c.path, c.action) for c in plan.changes] == [("link.txt", "link")]
    done, problems = apply_rewind(store, plan)
    assert (done, problems) == (["restored the link link.txt"], [])
    assert os.readlink(root / "link.txt") == "real.txt" and (root / "real.txt").read_text() == "old\n"
    assert (root / "made-link.txt").is_symlink()
    assert plan_rewind(store, sid, 0, scanner.scan(), root).changes == []


def test_an_unchanged_workspace_is_scanned_without_reading_a_file(tmp_path: Path) -> None:
    root = _workspace(tmp_path, {"a.txt": "a1", "b.txt": "b1"})
    scanner = Scanner(root)
    assert len(scanner.scan().contents) == 2
    assert scanner.scan().contents == {}
    (root / "a.txt").write_text("a2")
    assert list(scanner.scan().contents.values()) == [b"a2"]


def test_contents_are_stored_once_and_dropped_with_their_last_snapshot(store: SessionStore, tmp_path: Path) -> None:
    root = _workspace(tmp_path, {"a.txt": "same", "b.txt": "same"})
    first, second = store.create().id, store.create().id
    for sid in (first, second):
        _keep(store, sid, Scanner(root), "before", position=2)

    def count(table: str) -> int:
        with contextlib.closing(sqlite3.connect(store.path)) as db:
            return int(db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])

    assert count("snapshot_blobs") == 1  # two files, two sessions: one content
    store.truncate(first, 2)
    assert count("snapshot_blobs") == 1  # the other session's snapshot still names it
    store.delete(second)
    assert count("snapshot_blobs") == 0 and count("snapshot_manifests") == 0


def test_a_snapshot_naming_a_content_the_store_lost_is_not_stored(store: SessionStore, tmp_path: Path) -> None:
    root = _workspace(tmp_path, {"a.txt": "a1"})
    sid = store.create().id
    scanner = Scanner(root)
    _keep(store, sid, scanner, "before", position=2)
    store.truncate(sid, 0)  # its content is dropped; the scanner still takes it for stored
    scan = scanner.scan()
    assert scan.contents == {}
    assert len(store.add_snapshot(sid, 2, "before", str(root), scan.manifest, scan.contents)) == 1
    assert store.snapshots(sid) == []
