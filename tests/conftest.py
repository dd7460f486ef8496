"""Shared fixtures: an isolated HOME for every test, SSE builders, the conformance cases."""

from __future__ import annotations

import compileall
import contextlib
import fcntl
import itertools
import json
import os
import re
import socketserver
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import settings

from tests.replay_server import (
    REQUEST_RULES,
    assistant_fields_mismatch,
    carries,
    history_violations,
    rule_matches,
    stream_duplicate_ids,
    text_stream,
)

settings.register_profile("crow", deadline=None)  # a per-example deadline is a wall-clock margin
settings.load_profile("crow")

CASES_DIR = Path(__file__).parent / "cases"
ROOT = Path(__file__).resolve().parent.parent

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
    tests/surfaces/test_run_faults.py: 46 s -> 28 s, the same CPU). Polling every 0.05 s ends them at once."""
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


def load_cases() -> list[dict[str, Any]]:
    """Every conformance case (tests/cases/*.json, copied from ../shared/conformance/cases)."""
    cases = []
    for f in sorted(CASES_DIR.glob("*.json")):
        case = json.loads(f.read_text())
        case.setdefault("id", f.stem)
        cases.append(case)
    return cases


def first_sse(case: dict[str, Any]) -> str:
    """The SSE body of the case's first streamed response."""
    if "sse" in case:
        return case["sse"]
    return next(r["sse"] for r in case["responses"] if "sse" in r)


def expected_sse(case: dict[str, Any]) -> str:
    """The SSE body of the turn `expected` describes: with tool calls, the last tool turn (the streamed
    response before the final answer, as ../shared/conformance/run.py reads it), else the first."""
    if "sse" in case or not case["expected"].get("tool_calls"):
        return first_sse(case)
    streamed = [r["sse"] for r in case["responses"] if "sse" in r]
    if (case.get("scenario") or {}).get("followup_runs"):  # later runs' answers follow the first run's
        return [body for body in streamed if '"tool_calls"' in body][-1]
    return streamed[-2] if len(streamed) > 1 else streamed[0]


def sse_chunks(body: str) -> Iterator[dict[str, Any]]:
    """Decode an SSE body into chunk dicts, for feeding the pure accumulator (test helper only)."""
    for line in body.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        if line.startswith("data:"):
            data = line[5:].strip()
            if data == "[DONE]":
                return
            try:
                yield json.loads(data)
            except ValueError:  # a damaged event: the frames after an embedded `data:`, as wire.stream recovers
                from crow_cli.wire.stream import recover_frames

                yield from recover_frames(data)


def assemble(*chunks: dict[str, Any], trace: bool = False) -> tuple[Any, list[Any]]:
    """Feed chunk dicts to a fresh `StreamAccumulator`: the assembled turn and every event, in order."""
    from crow_cli.wire.accumulate import StreamAccumulator

    acc = StreamAccumulator(trace=trace)
    events = []
    for c in chunks:
        events += acc.feed(c)
    turn, tail = acc.finish()
    return turn, events + tail


def sse(*chunks: dict[str, Any], done: bool = True) -> str:
    """An SSE body from chunk dicts (each becomes one `data:` event)."""
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks)
    return body + ("data: [DONE]\n\n" if done else "")


def chunk(delta: dict[str, Any] | None = None, finish_reason: str | None = None, **extra: Any) -> dict[str, Any]:
    """One `chat.completion.chunk` with a single choice."""
    return {"id": "chatcmpl-t", "object": "chat.completion.chunk", "created": 1, "model": "test-model",
            "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish_reason}], **extra}


def tool_delta(index: int | None = None, id: str | None = None, name: str | None = None,
               arguments: Any = None) -> dict[str, Any]:
    """A `tool_calls[]` delta entry; None fields are left out."""
    entry: dict[str, Any] = {}
    if index is not None:
        entry["index"] = index
    if id is not None:
        entry["id"] = id
        entry["type"] = "function"
    fn: dict[str, Any] = {}
    if name is not None:
        fn["name"] = name
    if arguments is not None:
        fn["arguments"] = arguments
    if fn:
        entry["function"] = fn
    return entry


def text_sse(text: str) -> str:
    """A plain text answer, streamed in small pieces."""
    pieces = [text[i : i + 5] for i in range(0, len(text), 5)] or [""]
    return sse(*(chunk({"content": p}) for p in pieces), chunk({}, "stop"))


FINAL_ANSWER = "All done: ZEBRA-42."


def case_script(case: dict[str, Any]) -> list[dict[str, Any]]:
    """A case's scripted responses as ../shared/conformance/run.py builds them: `responses`, or `sse`
    followed (when tool calls are expected) by a final text answer."""
    if "responses" in case:
        return [dict(step) for step in case["responses"]]
    script = [{"sse": case["sse"]}]
    if case["expected"].get("tool_calls"):
        script.append({"sse": text_stream(FINAL_ANSWER)})
    return script


def needs_the_cli(case: dict[str, Any]) -> str | None:
    """Why a case runs only through the CLI (../shared/conformance/run.py over tests/cases, as .ci/run does),
    not in process with stub tools: it configures the CLI (`extra_args`: a config file's [params], a tools
    folder), runs it again (`followup_runs`), or refuses requests for what crow's own tools or parameters
    carry (request-level `reject_if` rules, `tools_kept`); None when it runs in process too."""
    scenario = case.get("scenario") or {}
    if scenario.get("extra_args") or scenario.get("followup_runs"):
        return "it configures or re-runs the CLI"
    rules = [r["reject_if"]["rule"] for r in case.get("responses") or [] if isinstance(r.get("reject_if"), dict)]
    if scenario.get("tools_kept") or any(k in REQUEST_RULES and k not in ("message_matches", "message_content_blank",
                                                                          "message_role_present")
                                         for rule in rules for k in rule):
        return "its refusals are about the tools or parameters the CLI sends"
    return None


class CaseReplay:
    """A case's script as a respx side effect: answers like tests/replay_server.py (`reject_if` included)
    and records every request body with its history-contract violations (`history_violations`)."""

    def __init__(self, case: dict[str, Any]) -> None:
        self.case = case
        self.script = case_script(case)
        self.dup_ids = frozenset(stream_duplicate_ids(self.script))
        self.allow_empty = bool((case.get("scenario") or {}).get("allow_empty_assistant_content"))
        self.bodies: list[dict[str, Any]] = []
        self.history_errors: list[tuple[int, str]] = []
        self.refused: list[int] = []
        """The numbers (from 1) of the requests a `reject_if` answered."""

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.bodies.append(body)
        self.history_errors += [(len(self.bodies), v)
                                for v in history_violations(body, self.dup_ids, self.allow_empty)]
        if not self.script:
            return httpx.Response(500, json={"error": {"message": "replay script exhausted"}})
        step = self.script[0]
        rejection = step.get("reject_if")
        if rejection and rule_matches(rejection["rule"], body):
            self.refused.append(len(self.bodies))
            if not (rejection.get("retry_same_step") or step.get("retry_same_step")):
                self.script.pop(0)
            return self._response(rejection["response"])
        return self._response(self.script.pop(0))

    @staticmethod
    def _response(step: dict[str, Any]) -> httpx.Response:
        if "status" in step:
            return httpx.Response(step["status"], content=step.get("body", "").encode(),
                                  headers={"content-type": "application/json", **(step.get("headers") or {})})
        if "json" in step:
            return httpx.Response(200, json=step["json"])
        return httpx.Response(200, content=step["sse"].encode(), headers={"content-type": "text/event-stream"})

    def assert_requests(self) -> None:
        """What ../shared/conformance/run.py `check_requests` checks: the history contract in every
        request (unless `strict_history` is false), `assistant_content_key_present`,
        `request_messages_equal`, `request_messages_prefix`, `max_requests` and `min_requests`, and
        `expected.assistant_fields_by_turn` on every request no reject_if answered, and on the last."""
        scenario = self.case.get("scenario") or {}
        found = list(self.history_errors) if scenario.get("strict_history", True) else []
        if scenario.get("assistant_content_key_present"):
            found += [(n, f"messages[{i}] (assistant) has no 'content' key")
                      for n, body in enumerate(self.bodies, 1) for i, m in enumerate(body["messages"])
                      if m.get("role") == "assistant" and "content" not in m]
        assert found == []
        for key, same in (("request_messages_equal", True), ("request_messages_prefix", False)):
            spec = scenario.get(key) or []
            for group in [list(g) for g in spec] if spec and isinstance(spec[0], list) else [spec] if spec else []:
                present = [self.bodies[n - 1]["messages"] for n in group if 1 <= n <= len(self.bodies)]
                for a, b in itertools.pairwise(present):
                    assert (b if same else b[: len(a)]) == a, (key, group)
        per_message = (self.case.get("expected") or {}).get("assistant_fields_by_turn")
        if per_message:
            for n, body in enumerate(self.bodies, 1):
                if n not in self.refused or n == len(self.bodies):
                    assert assistant_fields_mismatch(per_message, body["messages"]) is None, (n, body["messages"])
        assert len(self.bodies) <= scenario.get("max_requests", len(self.bodies))
        assert len(self.bodies) >= scenario.get("min_requests", 0)
        accepted = [b for n, b in enumerate(self.bodies, 1) if n not in self.refused]
        if "accepted_request_carries" in scenario:
            assert all(carries(b, scenario["accepted_request_carries"]) is None for b in accepted)
        for n in self.refused:  # the request sent right after a refused one changes nothing else
            if n < len(self.bodies):
                for key in scenario.get("resend_unchanged") or []:
                    assert self.bodies[n - 1].get(key) == self.bodies[n].get(key), (n, key)
        for entry in scenario.get("tools_kept") or []:
            name = entry if isinstance(entry, str) else entry["name"]
            wire = re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64]
            assert all(any(t["function"]["name"] in (name, wire) for t in b.get("tools") or []) for b in accepted), name

    def assert_tool_turn(self) -> None:
        """What run.py `check_tool_round_trip` checks in the last request: the last assistant message with
        tool_calls carries `expected` (ids, names, arguments, content, `assistant_fields`), its results
        follow in call order, nothing after them; `tool_call_ids_by_turn` over the whole conversation."""
        expected = self.case["expected"]
        msgs = self.bodies[-1]["messages"]
        at = max(i for i, m in enumerate(msgs) if m.get("role") == "assistant" and m.get("tool_calls"))
        assistant, want = msgs[at], expected["tool_calls"]
        calls = assistant["tool_calls"]
        assert [(c["id"], c["type"], c["function"]["name"]) for c in calls] == \
            [(c["id"], "function", c["function"]["name"]) for c in want]
        assert [json.loads(c["function"]["arguments"]) for c in calls] == \
            [json.loads(c["function"]["arguments"]) for c in want]
        assert (assistant.get("content") or "").strip() == (expected.get("content") or "").strip()
        for name, value in (expected.get("assistant_fields") or {}).items():
            assert assistant.get(name) == value, name
        if "tool_call_ids_by_turn" in expected:
            assert [[c["id"] for c in m["tool_calls"]] for m in msgs
                    if m.get("role") == "assistant" and m.get("tool_calls")] == expected["tool_call_ids_by_turn"]
        results = msgs[at + 1 :]
        assert [(m["role"], m["tool_call_id"]) for m in results] == [("tool", c["id"]) for c in want]
