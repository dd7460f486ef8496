"""Garbage collection around start-up: none while crow loads, then collections that skip what it loaded.

Loading crow and the openai SDK creates a few hundred thousand long-lived objects (modules, classes,
the SDK's types) and next to no garbage, yet the collector walked them again and again while they
were created, and once more at exit: about a fifth of a one-shot `crow run`'s CPU. `loading()`
(the first thing `cli.main` does) turns collection off; `loaded()` (once the SDK is in: the first
request's client, or chat's background import) moves everything alive to the permanent generation
(`gc.freeze`) and turns collection back on, so later collections, in a long chat or a long run,
walk only the objects made since. A command that never loads the SDK is short-lived and ends
without collecting.
"""

from __future__ import annotations

import gc
import threading

__all__ = ["loaded", "loading"]

_lock = threading.Lock()
_state = {"loaded": False}


def loading() -> None:
    """Start-up begins: no collection until `loaded()`."""
    with _lock:
        if not _state["loaded"]:
            gc.disable()


def loaded() -> None:
    """Start-up is over (the SDK is imported): freeze what is alive and collect as usual from now on.

    Only the first call freezes (a later one, from another client, changes nothing); safe from any thread.
    """
    with _lock:
        if _state["loaded"]:
            return
        _state["loaded"] = True
        gc.freeze()
        gc.enable()
