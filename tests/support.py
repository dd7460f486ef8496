"""The one support module of the tests (fixtures live in conftest.py):

- `crow` as a subprocess against the replay server (`crow`, `run_crow`, `argv`, `run_args`, `Ran`), what
  `crow run` runs in this process (`run_here`), and crow's typer app in this process (`crow_here`);
- SSE builders (`sse`, `chunk`, `tool_delta`, `text_sse`, `sse_chunks`, `assemble`) and turns and replay
  scripts (`tool_calls_sse`, `tool_turn`, `script`);
- the conformance cases (`load_cases`, `case_script`, `needs_the_cli`, `CaseReplay`);
- `ChatTerminal`: `crow chat` on a pseudo-terminal; `chat`: the chat app in-process on a pipe;
- the history contract (`assert_contract`, `assert_valid`), `wait_for` an event, `alive(pid)`,
  `needs_sandbox()` (a skip mark without bubblewrap);
- `png()`: a whole, tiny PNG file;
- a scripted `loop.ChatStream` with a few tools for in-process loop properties.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import io
import itertools
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
import zlib
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field, fields, replace
from functools import cache
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import httpx

from crow_cli.errors import ServerError, StreamCut
from crow_cli.history import Message
from crow_cli.surfaces.options import SurfaceOptions
from crow_cli.tools import tool
from crow_cli.wire.protocol import ChatStream
from tests.replay_server import (
    REQUEST_RULES,
    ReplayServer,
    assistant_fields_mismatch,
    carries,
    history_violations,
    rule_matches,
    stream_duplicate_ids,
    text_stream,
)

if TYPE_CHECKING:
    from crow_cli.config import Settings
    from crow_cli.sessions import SessionStore
    from crow_cli.surfaces.chat.app import ChatApp, ChatOptions

CROW = str(Path(sys.executable).with_name("crow"))
ROOT = Path(__file__).resolve().parents[1]
CASES_DIR = Path(__file__).parent / "cases"
TOOLS = ROOT / "tools"
SECRET = "sk-test-SECRET-123"
CANCELLED = "Error: the tool call was cancelled by the user; no result."
"""The result of a call the user's Ctrl-C (or a signal) cancelled."""


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


def calls_in_text(case: dict[str, Any]) -> bool:
    """Whether the case's tool calls come as text the server's parser missed (`wire.textcalls`, recovered by the
    loop): its expected turn streams no `tool_calls` at all."""
    return bool(case["expected"].get("tool_calls")) and '"tool_calls"' not in expected_sse(case)


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


def crow(*args: str, input: str | None = None, cwd: Path | None = None, env: dict[str, str] | None = None,
         timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run `crow ARGS` (stdin `input`, else empty; never a terminal), capturing text output."""
    full_env = {**os.environ, "NO_COLOR": "1", "TERM": "dumb", **(env or {})}
    return subprocess.run([CROW, *args], input=input, capture_output=True, text=True, timeout=timeout,
                          cwd=cwd, env=full_env, stdin=None if input is not None else subprocess.DEVNULL)


def run_against(script: list[dict[str, Any]], *args: str,
                **kw: Any) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """Serve `script`, `crow run --base-url … --api-key SECRET --model m ARGS`; returns (process, request bodies)."""
    with ReplayServer(script) as srv:
        proc = crow("run", "--base-url", srv.base_url, "--api-key", SECRET, "--model", "m", *args, **kw)
    return proc, srv.requests


def run_args(server: ReplayServer, *args: str, key: str = "sk-test") -> list[str]:
    """`crow` arguments for `run ARGS` against `server`."""
    return ["run", "--base-url", server.base_url, "--api-key", key, "--model", "test-model", *args]


def wait_for(predicate: Callable[[], bool], timeout: float = 60) -> None:
    """Poll `predicate` until it holds; `timeout` (s) only bounds a hang."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def needs_sandbox() -> Any:
    """A pytest mark: skip (saying why) when no bubblewrap sandbox works here; with CROW_SANDBOX_REQUIRED set
    (CI installed bubblewrap), fail instead."""
    import pytest

    from crow_cli.tools.sandbox import backend, unavailable_reason

    if backend() is None and os.environ.get("CROW_SANDBOX_REQUIRED"):
        raise RuntimeError(f"CROW_SANDBOX_REQUIRED is set but no sandbox works here: {unavailable_reason()}")
    return pytest.mark.skipif(backend() is None or not sys.platform.startswith("linux"),
                              reason=f"no bubblewrap sandbox here: {unavailable_reason()}")


def alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def png(width: int = 1, height: int = 1) -> bytes:
    """A whole PNG file of `width` × `height` black pixels (signature, IHDR, IDAT, IEND; real CRCs)."""
    def part(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = (b"\0" + b"\0" * width) * height  # filter byte 0, then one 8-bit grey sample per pixel
    return (b"\x89PNG\r\n\x1a\n" + part(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + part(b"IDAT", zlib.compress(rows)) + part(b"IEND", b""))


GUARDED_TOOL = '''
@tool(needs_approval=True)
def guarded(text: str) -> str:
    """Needs approval.

    Args:
        text: anything.
    """
    return "guarded ran: " + text
'''
"""The source of a plugin tool `guarded(text)` that needs approval (a tools folder's module imports `tool`)."""


def tools_folder(folder: Path, source: str) -> Path:
    """`folder`, created, holding one tools module with `source` (for `--tools-dir`)."""
    folder.mkdir()
    (folder / f"{folder.name.replace('-', '_')}.py").write_text(source)
    return folder


def tool_calls_sse(*calls: tuple[str, str, dict[str, Any]], usage: dict[str, Any] | None = None) -> str:
    """One turn asking for `calls` (id, name, arguments), arguments streamed in two pieces."""
    chunks = [chunk({"role": "assistant", "content": None})]
    for i, (call_id, name, args) in enumerate(calls):
        text = json.dumps(args)
        chunks.append(chunk({"tool_calls": [tool_delta(i, call_id, name, text[:3])]}))
        chunks.append(chunk({"tool_calls": [tool_delta(i, arguments=text[3:])]}))
    chunks.append(chunk({}, "tool_calls"))
    if usage:
        chunks.append({"id": "chatcmpl-t", "object": "chat.completion.chunk", "created": 1, "model": "m",
                       "choices": [], "usage": usage})
    return sse(*chunks)


def script(*turns: list[tuple[str, str, dict[str, Any]]], final: str = "All done.") -> list[dict[str, Any]]:
    """A replay script: one tool-call turn per item of `turns`, then a text answer."""
    return [{"sse": tool_calls_sse(*calls)} for calls in turns] + [{"sse": text_sse(final)}]


def tool_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool results in a request body."""
    return [m for m in request["messages"] if m["role"] == "tool"]


@dataclass
class Ran:
    """What one `crow run` did: exit code, output, and every request body the server received."""

    code: int
    stdout: str
    stderr: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    history_errors: list[tuple[int, str]] = field(default_factory=list)
    """Where a request broke the history contract (`ReplayServer.history_errors`): (request from 1, what)."""

    def events(self) -> list[dict[str, Any]]:
        """stdout as JSONL events, each validated against the shipped schema."""
        events = [json.loads(line) for line in self.stdout.splitlines()]
        validator = schema_validator()
        for event in events:
            validator.validate(event)
        return events


@cache
def schema_validator() -> Any:
    from jsonschema import Draft202012Validator

    from crow_cli.surfaces.jsonl import event_schema

    schema = event_schema()
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def write_config(folder: Path, **values: Any) -> Path:
    """A config file with top-level scalar keys (small retries and timeouts keep tests quick)."""
    path = folder / "crow.toml"
    path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items()))
    return path


def argv(base_url: str, *args: str, config: Path | None = None) -> list[str]:
    cfg = ["--config", str(config)] if config else []
    return [CROW, "run", "--base-url", base_url, "--api-key", "sk-test", "--model", "test-model", *cfg, *args]


def run_crow(script: list[dict[str, Any]], *args: str, cwd: Path, config: Path | None = None,
             timeout: float = 60) -> Ran:
    """Serve `script`, run `crow run … ARGS` in `cwd`, return what happened."""
    with ReplayServer(script) as server:
        proc = subprocess.run(argv(server.base_url, *args, config=config), capture_output=True, text=True,
                              cwd=cwd, timeout=timeout)
        ran = Ran(proc.returncode, proc.stdout, proc.stderr, list(server.requests), list(server.history_errors))
    assert ran.history_errors == [], ran.history_errors  # every request keeps the history contract
    return ran


SURFACE_FIELDS = {f.name for f in fields(SurfaceOptions)}
"""The `run_here` options that go to `RunOptions.surface`."""


async def run_here(script: list[dict[str, Any]], prompt: str = "hi", *, cwd: Path, config: Path | None = None,
                   base_url: str | None = None, model: str = "test-model", flags: dict[str, Any] | None = None,
                   **options: Any) -> Ran:
    """What `run_crow(script, …, PROMPT, cwd=cwd, config=config)` does, in this process: `run_prompt` (what
    `crow run` runs) with the settings `crow run --base-url URL --api-key sk-test --model MODEL --config
    CONFIG` resolves (URL: the replay server's, unless `base_url`), stdout and stderr captured.

    `flags` are more command-line settings, as `load_settings` takes them (`{"deny": ["run_shell"]}` for
    `--deny run_shell`; `system`, `approval`, `allow`, `workspace`…). `options` are `RunOptions` fields
    (`json`, `continue_last`, `session_id`, `system`…) and `SurfaceOptions` ones (`tools_dirs`, `yes`…) for
    its `surface`. A `CrowError` ends the run as `crow
    run` ends it (`commands.options.fail`): its one `crow: error:` line on stderr, its exit code (2 for
    a usage error).
    """
    from crow_cli.commands.options import fail
    from crow_cli.config import load_settings
    from crow_cli.errors import CrowError
    from crow_cli.surfaces.run import RunOptions, run_prompt

    shared = {name: options.pop(name) for name in [*options] if name in SURFACE_FIELDS}
    if shared.get("yes"):  # `--yes` names the approval mode, as `crow run` says of its flags
        shared.setdefault("modes_given", frozenset({"approval"}))
    with ReplayServer(script) as server:
        out, err = io.StringIO(), io.StringIO()
        try:
            settings = load_settings({"base_url": base_url or server.base_url, "api_key": "sk-test", "model": model,
                                      **(flags or {})}, config_path=None if config is None else str(config))
            with contextlib.chdir(cwd):
                run = RunOptions(prompt=prompt, surface=SurfaceOptions(**shared), **options)
                code = await run_prompt(settings, run, out, err)
        except CrowError as exc:
            with contextlib.redirect_stderr(err):
                code = fail(exc).exit_code
        ran = Ran(code, out.getvalue(), err.getvalue(), list(server.requests), list(server.history_errors))
    assert ran.history_errors == [], ran.history_errors  # every request keeps the history contract
    return ran


def crow_here(*args: str, stdin: Path | None = None) -> int:
    """`crow ARGS` in this process, as `cli.main` calls crow's typer app (`standalone_mode=False`), with
    `sys.stdin` the file `stdin` (a regular file: piped input, as `crow run … <FILE`), else /dev/null.
    `cli.main`'s own part (usage errors and exit codes mapped, closed descriptors) needs a `crow` process.

    Returns the exit code; output goes to this process's stdout and stderr (`capsys`). Raises what the
    app raises (a usage error as click's exception).
    """
    from crow_cli.cli import app

    saved = sys.stdin
    with open(os.devnull if stdin is None else stdin, encoding="utf-8") as piped:
        sys.stdin = piped
        try:
            code = app(list(args), prog_name="crow", standalone_mode=False)
        finally:
            sys.stdin = saved
    return code if isinstance(code, int) else 0


def tool_turn(*calls: tuple[str, str, str]) -> str:
    """An SSE tool turn: (id, name, arguments) per call, opened together, arguments split in two."""
    opened = [tool_delta(i, cid, name, "") for i, (cid, name, _) in enumerate(calls)]
    pieces = []
    for i, (_, _, args) in enumerate(calls):
        half = len(args) // 2
        pieces += [chunk({"tool_calls": [tool_delta(i, arguments=args[:half])]}),
                   chunk({"tool_calls": [tool_delta(i, arguments=args[half:])]})]
    return sse(chunk({"role": "assistant", "content": None}), chunk({"tool_calls": opened}), *pieces,
               chunk({}, "tool_calls"))


def assert_valid(history: list[dict[str, Any]]) -> None:
    """`assert_contract`, and no tool call is left pending (`history.pending_tool_calls`)."""
    from crow_cli.history import pending_tool_calls

    assert_contract(history)
    assert pending_tool_calls(history) == []


def assert_contract(messages: list[dict[str, Any]], dup_ids: Iterable[str] = ()) -> None:
    """The history contract ../shared/conformance/run.py checks on every request
    (`replay_server.history_violations`): content or tool_calls on each assistant message, arguments
    that parse, one tool result per call right after it in call order, no stray result. `dup_ids`:
    ids the stream itself gave to several calls of one turn."""
    assert history_violations({"messages": messages}, frozenset(dup_ids)) == []


@tool
async def ok(x: int = 0) -> str:
    """Answer at once."""
    return f"ok {x}"


@tool
async def boom() -> str:
    """Always fails."""
    raise RuntimeError("boom")


@tool(timeout_s=0.01)
async def slow() -> str:
    """Never finishes: always runs past its own timeout (whatever the load, unlike a short sleep)."""
    await asyncio.Event().wait()
    return "late"


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _tool_chunks(calls: list[tuple[str, str]]) -> list[dict[str, Any]]:
    return [_chunk({"tool_calls": [{"index": i, "id": cid, "function": {"name": name, "arguments": "{}"}}]})
            for i, (cid, name) in enumerate(calls)] + [_chunk({}, "tool_calls")]


class UnexpectedModelCall(AssertionError):
    """The loop asked `ScriptedStream` for a turn its script does not have."""


class ScriptedStream(ChatStream):
    """A `loop.ChatStream` that plays one scripted step per request, and fails on a request beyond them.

    Steps: `("text",)` answers "done"; `("error",)` raises a `ServerError`; `("tools", [(id, name), ...])`
    asks for those calls; `("cut", [(id, name), ...])` streams them, then breaks (`StreamCut`). A request
    after the last step raises `UnexpectedModelCall`; `assert_used_up()` fails when steps are left over
    (openai-agents' `ScriptedModel`).
    """

    def __init__(self, steps: list[tuple[Any, ...]], dup_ids: Iterable[str] = ()) -> None:
        self.steps = list(steps)
        self.dup_ids = frozenset(dup_ids)
        """Ids the script gives to several calls of one turn (the contract allows them there)."""

    async def stream(self, messages: list[Message], tools: list[dict[str, Any]] | None = None
                     ) -> AsyncIterator[dict[str, Any]]:
        assert_contract(messages, self.dup_ids)  # never is an invalid history sent
        if not self.steps:
            raise UnexpectedModelCall(f"a request beyond the script, with {len(messages)} messages")
        kind, *rest = self.steps.pop(0)
        await asyncio.sleep(0)
        if kind == "error":
            raise ServerError("server error (500): scripted")
        if kind == "text":
            yield _chunk({"content": "done"})
            yield _chunk({}, "stop")
        elif kind == "tools":
            for chunk in _tool_chunks(rest[0]):
                yield chunk
                await asyncio.sleep(0)
        elif kind == "cut":
            for chunk in _tool_chunks(rest[0])[:-1]:
                yield chunk
            raise StreamCut("the stream broke mid-way (scripted)")

    def assert_used_up(self) -> None:
        """Fail when the loop did not ask for every scripted step."""
        assert self.steps == [], f"{len(self.steps)} scripted steps never asked for: {self.steps}"


def chat_options(**fields: Any) -> ChatOptions:
    """`ChatOptions` of `fields`: its own (`resume`, `session`, `system`) and `SurfaceOptions` ones (`tools_dirs`,
    `yes`…) for its `surface`."""
    from crow_cli.surfaces.chat.app import ChatOptions

    shared = {name: fields.pop(name) for name in [*fields] if name in SURFACE_FIELDS}
    return ChatOptions(surface=SurfaceOptions(**shared), **fields)


async def chat(script: list[dict[str, Any]], keys: str | bytes, store: SessionStore, *,
               options: ChatOptions | None = None, settings: Settings | None = None
               ) -> tuple[str, ReplayServer, ChatApp]:
    """Run the chat in-process on `keys` (Enter is \\r; bytes are sent as they are, as a terminal would)
    against a replay server; returns plain output, server, app."""
    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output import DummyOutput
    from rich.console import Console

    from crow_cli.config import Settings
    from crow_cli.surfaces.chat.app import ChatApp, ChatOptions

    out = io.StringIO()
    with ReplayServer(script) as server, create_pipe_input() as pipe:
        if isinstance(keys, bytes):
            pipe.send_bytes(keys)
        else:
            pipe.send_text(keys)
        # the sandbox as `crow chat` here resolves it (CROW_SANDBOX: `off` where conftest.py found no bubblewrap)
        settings = settings or Settings(model="test-model", api_key="sk-test",
                                        sandbox=os.environ.get("CROW_SANDBOX", "workspace-write"))  # type: ignore[arg-type]
        app = ChatApp(replace(settings, base_url=server.base_url),
                      options or ChatOptions(), console=Console(file=out, width=100), pt_input=pipe,
                      pt_output=DummyOutput(), store=store)
        code = await asyncio.wait_for(app.run(), 120)  # bounds a hang
    assert code == 0
    return out.getvalue(), server, app


def _rewrapped(screen: Any, columns: int, rows: int) -> Any:
    """A pyte screen `columns` x `rows` showing `screen`'s rows as a rewrapping terminal does once resized: each
    row's text on as many rows as it needs (rich ends each line itself: a row is never a wrapped part of another),
    the cursor kept at its place in the text, rows pushed past the top dropped. pyte itself crops on resize."""
    import pyte

    shown: list[str] = []
    cursor = (0, 0)
    for y, text in enumerate(row.rstrip() for row in screen.display[: screen.cursor.y + 1]):
        parts = [text[at : at + columns] for at in range(0, len(text), columns)] or [""]
        if y == screen.cursor.y:
            down = min(screen.cursor.x // columns, len(parts) - 1)
            cursor = (len(shown) + down, screen.cursor.x - down * columns)
        shown += parts
    dropped = max(len(shown) - rows, 0)
    new = pyte.Screen(columns, rows)
    stream = pyte.Stream(new)
    for y, text in enumerate(shown[dropped:]):
        stream.feed(f"\x1b[{y + 1};1H{text}")
    new.cursor.y, new.cursor.x = cursor[0] - dropped, cursor[1]
    return new


_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-Za-z]|\x1b[=>78]")


class ChatTerminal:
    """`crow chat ARGS` (or another `command`) as a real subprocess on a pseudo-terminal `columns` x `rows` (100x30
    by default; stdin and stdout; stderr is a pipe unless `stderr_on_terminal`).

        with ChatTerminal(["--base-url", url, ...], cwd=tmp_path) as term:
            term.expect("› ")          # the prompt is up
            term.send("hello\\r")       # keys, as typed (Enter is \\r, Ctrl-C \\x03, Ctrl-D \\x04)
            term.expect("Hello!")
            term.signal(signal.SIGTERM)
            code = term.wait()

    The screen text is the child's output with escape sequences removed; `display()` is what a terminal shows
    in the end. stderr is a pipe of its own (`term.stderr()` once the process ended), so a traceback cannot hide
    in the redrawn screen. `answer_cpr`: the terminal answers where its cursor is (`ESC[6n`), as real ones do,
    so prompt-toolkit knows the rows below the prompt and draws its bottom toolbar (the status line).
    """

    def __init__(self, args: list[str], *, cwd: Path, env: dict[str, str] | None = None, command: str = "chat",
                 stderr_on_terminal: bool = False, columns: int = 100, rows: int = 30,
                 answer_cpr: bool = False) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        self._sizes = [(0, columns, rows)]  # (output bytes read before the size was set, columns, rows)
        environ = {**os.environ, "TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "0" if answer_cpr else "1", **(env or {})}
        self._answer_cpr = answer_cpr
        environ.pop("NO_COLOR", None)
        for name in ("COLUMNS", "LINES"):  # pytest-xdist's workers set 80x24, which rich takes over the pty's size
            if env is None or name not in env:
                environ.pop(name, None)
        self.proc = subprocess.Popen([CROW, command, *args], cwd=cwd, env=environ, stdin=slave, stdout=slave,
                                     stderr=slave if stderr_on_terminal else subprocess.PIPE, start_new_session=True)
        os.close(slave)
        self.master: int | None = master
        self._raw = bytearray()
        self._lock = threading.Lock()
        self._mark = 0
        self._stop = threading.Event()
        self._reader = threading.Thread(target=self._read, args=(master,), daemon=True)
        self._reader.start()

    def _read(self, fd: int) -> None:
        while not self._stop.is_set():
            if not select.select([fd], [], [], 0.05)[0]:
                continue  # look at `_stop` again: `hang_up` closes `fd` only once this loop has left it
            try:
                data = os.read(fd, 65536)
            except OSError:  # EIO: the child closed the terminal
                return
            if not data:
                return
            with self._lock:
                self._raw += data
            if self._answer_cpr:
                for _ in range(data.count(b"\x1b[6n")):
                    cursor = self._emulated().cursor
                    with contextlib.suppress(OSError):
                        os.write(fd, f"\x1b[{cursor.y + 1};{cursor.x + 1}R".encode())

    def screen(self) -> str:
        """Everything shown so far, escape sequences removed."""
        with self._lock:
            raw = bytes(self._raw)
        return _ESCAPES.sub("", raw.decode("utf-8", "replace"))

    def expect(self, text: str, timeout: float = 60.0) -> None:
        """Wait until `text` shows after what earlier `expect` calls matched, or the child ended without it.

        `timeout` (s) only bounds a hang. Raises AssertionError with the screen when `text` never showed.
        """
        deadline = time.monotonic() + timeout
        while True:
            ended = self.proc.poll() is not None
            if ended:  # let the reader take what the child wrote last
                self._reader.join(5)
            screen = self.screen()
            at = screen.find(text, self._mark)
            if at >= 0:
                self._mark = at + len(text)
                return
            if ended or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        raise AssertionError(f"{text!r} not shown (exit code {self.proc.poll()}); screen:\n{self.screen()}")

    def send(self, keys: str) -> None:
        assert self.master is not None
        os.write(self.master, keys.encode())

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def resize(self, columns: int, rows: int) -> None:
        """Resize the terminal as a window drag does: the new size, then SIGWINCH (the child runs in a session of
        its own, so the kernel signals no one). `display()` rewraps what was shown so far at this point."""
        assert self.master is not None
        with self._lock:
            fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
            self._sizes.append((len(self._raw), columns, rows))
        self.proc.send_signal(signal.SIGWINCH)

    def display(self) -> list[str]:
        """The rows a terminal that rewraps on resize (VTE, kitty, iTerm2 ...) shows after the output so far, trailing
        spaces removed: the output is played on a pyte screen, rewrapped at each `resize`."""
        return [row.rstrip() for row in self._emulated().display]

    def _emulated(self) -> Any:
        """A pyte screen that was shown the output so far (`display`)."""
        import pyte

        with self._lock:
            raw, sizes = bytes(self._raw), list(self._sizes)
        screen: Any = None
        for n, (start, columns, rows) in enumerate(sizes):
            screen = pyte.Screen(columns, rows) if screen is None else _rewrapped(screen, columns, rows)
            end = sizes[n + 1][0] if n + 1 < len(sizes) else len(raw)
            pyte.ByteStream(screen).feed(raw[start:end])
        return screen

    def hang_up(self, closed_once_shown: str | None = None) -> None:
        """SIGHUP, as closing the terminal window sends, then close the terminal (the master side).

        The terminal closes once `closed_once_shown` shows after the signal (crow is cleaning up: its writes
        then fail as on a vanished terminal), or, without it, once crow has ended. Either way crow handles the
        signal before it can see the terminal gone, so the test does not race the two.
        """
        self.proc.send_signal(signal.SIGHUP)
        if closed_once_shown is not None:
            self.expect(closed_once_shown)
        else:
            self.proc.wait(60)
        self._close_master()

    def close_terminal(self) -> None:
        """Close the terminal without a signal (a crashed terminal emulator): crow finds out when it writes."""
        self._close_master()

    def _close_master(self) -> None:
        self._stop.set()
        self._reader.join(60)
        if self.master is not None:
            with contextlib.suppress(OSError):
                os.close(self.master)
            self.master = None

    def wait(self, timeout: float = 60.0) -> int:
        return self.proc.wait(timeout)

    def stderr(self) -> str:
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode("utf-8", "replace")

    def __enter__(self) -> ChatTerminal:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._close_master()
        if self.proc.stderr is not None:
            self.proc.stderr.close()


@contextlib.contextmanager
def raw_http_server(respond: Callable[[Any], None]) -> Iterable[str]:
    """A one-thread HTTP server on 127.0.0.1 whose every GET and POST is answered by `respond(handler)` (it
    writes the status line, headers and body itself: a trickle, a gzip bomb); yields its base URL (`.../v1`).
    Stopping it ends a response still being written."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    stop = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.stop = stop
            with contextlib.suppress(OSError):
                respond(self)

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            self.do_GET()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        stop.set()
        server.shutdown()
        server.server_close()


def trickle(handler: Any, every_s: float = 0.5, seconds: float = 60.0) -> None:
    """`raw_http_server` response: a 200 JSON model list sent one byte per `every_s`, for up to `seconds`."""
    body = b'{"data": [{"id": "m", "max_model_len": 4096}]}' + b" " * 10_000
    handler.send_response(200)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(body)))
    handler.end_headers()
    end = time.monotonic() + seconds
    for byte in body:
        if handler.stop.wait(every_s) or time.monotonic() > end:
            return
        handler.wfile.write(bytes([byte]))
        handler.wfile.flush()


def gzip_bomb(handler: Any, decoded_bytes: int = 40 * 1024 * 1024, status: int = 200,
              head: bytes = b'{"data": [{"id": "m", "max_model_len": 4096}]') -> None:
    """`raw_http_server` response: a JSON body (`head`, `decoded_bytes` spaces, `}`) sent gzip-compressed."""
    import gzip

    body = gzip.compress(head + b" " * decoded_bytes + b"}")
    handler.send_response(status)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-encoding", "gzip")
    handler.send_header("content-length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def authorless(messages):
    """Messages without crow's own records that stored messages carry and the wire never does (an assistant
    message's author, `history.AUTHOR_KEY`; a tool message's outcome, `history.OUTCOME_KEY`): what a request
    sent is the stored history without them."""
    from crow_cli.history import AUTHOR_KEY, OUTCOME_KEY

    strip = lambda m: {k: v for k, v in m.items() if k not in (AUTHOR_KEY, OUTCOME_KEY)} \
        if isinstance(m, dict) else m  # noqa: E731
    return strip(messages) if isinstance(messages, dict) else [strip(m) for m in messages]
