"""An exclusive lock on a file that its holder's death releases: `fcntl.flock`, never waited on.

The kernel drops a flock when the last descriptor of its open file closes, also when the process
is killed (SIGKILL, a crash), so a lock can never outlive its process. The holder writes its pid
into the file, for the message of whoever finds it taken. On release the file is removed while
still locked; an acquirer that locked a file removed meanwhile sees that (its inode is no longer
the path's) and tries again, so two processes never hold "the same" lock on different files.
Locks still held when the interpreter exits normally are released then (their files removed); a
killed process leaves its file behind, unlocked, for the next holder to reuse.

Where `fcntl` does not exist (Windows) locks are always granted.
"""

from __future__ import annotations

import atexit
import contextlib
import os
from pathlib import Path

from .private import private_dir

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["FileLock", "LockHeld"]

_HELD: set[FileLock] = set()
"""Every lock held in this process, released at exit."""


@atexit.register
def _release_all() -> None:
    for lock in list(_HELD):
        lock.release()


class LockHeld(Exception):
    """The lock is held by another open file (another process, or another `FileLock` of this one).

    Attributes:
        pid: the holder's process id as it wrote it, or None when it could not be read.
    """

    def __init__(self, path: Path, pid: int | None) -> None:
        super().__init__(f"{path} is locked" + (f" by pid {pid}" if pid else ""))
        self.pid = pid


class FileLock:
    """An exclusive, non-blocking lock on `path` (created 0600, its folder 0700 when missing).

    Args:
        path: the lock file; it exists while the lock is held.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock now, or fail at once; taking a lock this object holds does nothing.

        Raises:
            LockHeld: someone else holds it.
            OSError: the lock file cannot be created.
        """
        if self._fd is not None or fcntl is None:
            return
        private_dir(self.path.parent)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pid = _read_pid(fd)
                os.close(fd)
                raise LockHeld(self.path, pid) from None
            except BaseException:
                os.close(fd)
                raise
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)  # the holder removed it as we opened it: lock the new one
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        _HELD.add(self)

    def release(self) -> None:
        """Remove the lock file and drop the lock (nothing when not held)."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):  # a read-only folder: the file stays, unlocked
            self.path.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = None
        _HELD.discard(self)


def _read_pid(fd: int) -> int | None:
    try:
        return int(os.pread(fd, 32, 0).decode().strip() or "x")
    except (OSError, ValueError):
        return None
