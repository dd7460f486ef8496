"""pytest hooks and fixtures only (an isolated HOME for every test, the llama lock); every helper a test
imports lives in `tests.support`."""

from __future__ import annotations

import compileall
import contextlib
import fcntl
import os
import socketserver
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tests.support import ROOT

settings.register_profile("crow", deadline=None)  # a per-example deadline is a wall-clock margin
settings.load_profile("crow")


# PYTHONDONTWRITEBYTECODE (a common container setting) would have every test process rewrite and compile
# every test module, and every `crow` the tests spawn compile crow_cli again: ~4 s of CPU per worker and
# ~0.2 s per spawn. The caches are __pycache__ folders (git-ignored); the product is not changed.
sys.dont_write_bytecode = False


def pytest_configure(config: pytest.Config) -> None:
    """Compile crow_cli once, in the controlling process, for the `crow` processes the tests spawn (they
    read the cache whatever PYTHONDONTWRITEBYTECODE says; an installed crow has it from pip)."""
    if not hasattr(config, "workerinput"):
        compileall.compile_dir(ROOT / "crow_cli", quiet=1)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: two workers per core. Most tests wait on a `crow` process, a scripted server's pause, a
    retry or a timeout; with one worker per core the cores idled about a third of the time (measured: the
    same 102 CLI tests took 168 s on 2 workers, 95 s on 4, 99 s on 6, on 2 cores; CPU time the same).
    PYTEST_XDIST_AUTO_NUM_WORKERS still decides when set."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return int(os.environ["PYTEST_XDIST_AUTO_NUM_WORKERS"])
    return 2 * len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2 * (os.cpu_count() or 1)


FIRST = ("tests/test_wheel.py", "tests/surfaces/test_jsonl.py::test_the_built_wheel")
"""Long tests that start first besides the smoke tests (each builds the wheel)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest tests start first (the smoke tests, which also run one at a time, then the wheel builds): left
    to their place in the collection, they came last and one worker ran them for a minute after the others had
    finished (a 183 s run whose other workers were done at 120 s). xdist hands each worker a run of consecutive
    tests, so the smoke tests go to one worker, first."""
    def rank(item: pytest.Item) -> int:
        return 0 if item.get_closest_marker("smoke") else 1 if item.nodeid.startswith(FIRST) else 2

    items.sort(key=rank)  # stable: the rest keep their order


@pytest.fixture(autouse=True, scope="session")
def _test_servers_stop_at_once() -> Iterator[None]:
    """The replay server (tests/replay_server.py, a verbatim copy of ../shared's) and `support.raw_http_server`
    serve with `serve_forever()`, whose default poll of 0.5 s made leaving each `with ReplayServer(...)` wait up
    to 0.5 s for `shutdown()`: idle wall time in ~300 tests (tests/probe/test_checks.py and
    tests/surfaces/test_run.py: 46 s -> 28 s, the same CPU). Polling every 0.05 s ends them at once."""
    serve = socketserver.BaseServer.serve_forever

    def serve_forever(self: socketserver.BaseServer, poll_interval: float = 0.05) -> None:
        serve(self, poll_interval)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socketserver.BaseServer, "serve_forever", serve_forever)
        # each SSE event written on its own waited for the client's delayed ACK (~40 ms on Linux loopback: Nagle's
        # algorithm); tests/probe/test_checks.py took 8 s instead of 17-21 s with it off (TCP_NODELAY), the same CPU
        patch.setattr(socketserver.StreamRequestHandler, "disable_nagle_algorithm", True)
        yield


@contextlib.contextmanager
def _llama_lock(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The real-llama smoke tests run one at a time across xdist workers (each loads a model and keeps the
    cores busy): an flock on a file in the folder every worker of this run shares. xdist's `loadgroup` would
    keep them on one worker, but pytest 9 no longer reads the node id xdist 3.8 rewrites, so they ran four at
    once."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    with open(shared / "llama.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or when a killed worker's process ends
        yield


@pytest.fixture
def one_llama_at_a_time(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A smoke test that starts its own llama server (`crow run --local`, a `LocalServer`) holds the llama lock."""
    with _llama_lock(tmp_path_factory):
        yield


@pytest.fixture(scope="module")
def one_llama_for_the_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A module-scoped llama server is started under the llama lock and keeps it until the module's tests on this
    worker are done (taken per test, the server loaded its model while another test's model was running)."""
    with _llama_lock(tmp_path_factory):
        yield


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point HOME and the XDG dirs at a fresh folder and drop CROW_*/OPENAI_* variables."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    for name, sub in (("XDG_CONFIG_HOME", ".config"), ("XDG_DATA_HOME", ".local/share"),
                      ("XDG_STATE_HOME", ".local/state"), ("XDG_CACHE_HOME", ".cache")):
        monkeypatch.setenv(name, str(home / sub))
    import os

    for name in list(os.environ):
        if name.startswith(("CROW_", "OPENAI_")):
            monkeypatch.delenv(name)
    from crow_cli.tools.sandbox import backend

    if backend() is None:  # no bubblewrap here: tests not about the sandbox run commands as before it
        monkeypatch.setenv("CROW_SANDBOX", "off")
    # tests not about crow's built-in system prompt compare requests message by message; those about it (and the
    # conformance corpus, run as a user runs crow) unset this
    monkeypatch.setenv("CROW_DEFAULT_PROMPT", "0")
    return home
