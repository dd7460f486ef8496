"""What a request needs, imported ahead of it: `import_in_background`."""

from __future__ import annotations

import contextlib
import threading

from .. import startup

__all__ = ["import_in_background"]


def import_in_background() -> threading.Thread:
    """Start importing what a request needs (the openai SDK, ~0.7 s of CPU, and the stream decoder) on
    a daemon thread, and return it: `crow chat` shows its prompt at once and the import runs while the
    user types. A request made before it ends waits for it (Python's per-module import lock), so the
    first turn never fails for it. Join the thread before the process ends: a daemon thread stopped
    inside an import would hold that module's lock during shutdown."""

    def load() -> None:
        with contextlib.suppress(Exception):  # a broken install fails the first request, as without this
            import openai  # noqa: F401

            from . import stream  # noqa: F401
        startup.loaded()

    thread = threading.Thread(target=load, name="crow-import-sdk", daemon=True)
    thread.start()
    return thread
