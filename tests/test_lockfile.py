"""`crow_cli.lockfile`: an exclusive lock, never waited on, whose file goes with its release."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from crow_cli.lockfile import FileLock, LockHeld


def test_a_second_holder_is_refused_with_the_holders_pid_and_the_release_removes_the_file(tmp_path: Path) -> None:
    path = tmp_path / "locks" / "s.lock"
    first, second = FileLock(path), FileLock(path)
    first.acquire()
    first.acquire()  # taking a lock this object holds does nothing
    assert first.held and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    with pytest.raises(LockHeld) as caught:
        second.acquire()
    assert caught.value.pid == os.getpid() and not second.held
    first.release()
    assert not path.exists() and not first.held
    second.acquire()  # free again
    second.release()
