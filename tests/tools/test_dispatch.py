"""Dispatch: every call gets one result, whatever the tool raises or returns, and a hung tool cannot keep crow alive.

Properties guarded here:

- every call gets exactly one result, with its own id and its call index, whatever happens to it;
- a tool raising any Exception (or SystemExit, KeyboardInterrupt, its own CancelledError or TimeoutError) is
  answered with an error naming it; a `ToolError` with its message; `ToolFailed` with its output as it is;
- arguments failing the schema, cut-off calls and unknown tools are answered without running the tool;
- a tool needing approval runs only when the approver says yes (denied: `denied`, not run);
- a call past its tool's own `timeout_s` (else dispatch's) is cancelled and answered `timeout`;
- every result's text and display is made sendable, masked of the run's secrets and capped at
  `max_output_chars`; at most `MAX_IMAGES` images reach the model, the others are named;
- every call runs with the run's `ToolContext` current;
- scheduling (the readers-writer lock): exclusive tools run alone; parallel-safe ones overlap and are not held
  up by prompts.
"""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from crow_cli.events import ToolResultReady
from crow_cli.history import ToolCall, ToolResult
from crow_cli.tools.approval import Answer, ApprovalPolicy, Approvals, Question
from crow_cli.tools.dispatch import dispatch
from crow_cli.tools.registry import ToolRegistry
from crow_cli.tools.tool import Tool, tool
from tests.support import chunk, needs_sandbox, run_against, sse, text_sse, tool_delta


async def results_of(registry: ToolRegistry, *calls: ToolCall, timeout_s: float = 60.0) -> dict[str, ToolResult]:
    """Dispatch `calls`; their results by call id."""
    events = [e async for e in dispatch(list(calls), registry, timeout_s=timeout_s)]
    return {e.result.call_id: e.result for e in events if e.type == "tool_result"}


# A tool raising CancelledError gets a result instead of hanging the run
async def test_tool_raising_cancelled_error_gets_a_result_instead_of_hanging() -> None:
    @tool
    async def cancel_tool() -> str:
        """Raises CancelledError itself."""
        raise asyncio.CancelledError()

    registry = ToolRegistry()
    registry.register(cancel_tool)
    results = await asyncio.wait_for(results_of(registry, ToolCall("c", "cancel_tool", "{}")), 60)
    assert results["c"].output == "Error: cancel_tool raised CancelledError"


# A tool raising SystemExit or KeyboardInterrupt gets a result
@pytest.mark.parametrize("exc", [SystemExit(3), KeyboardInterrupt()])
async def test_tool_raising_base_exceptions_gets_a_result(exc: BaseException) -> None:
    def bad() -> str:
        """Exits."""
        raise exc

    registry = ToolRegistry()
    registry.register(tool(bad))
    results = await results_of(registry, ToolCall("c", "bad", "{}"))
    assert results["c"].output.startswith(f"Error: bad raised {type(exc).__name__}")


# A tool's own TimeoutError is not reported as crow's timeout
async def test_a_tools_own_timeout_error_is_not_reported_as_ours() -> None:
    @tool
    async def own_timeout() -> str:
        """Upstream timeout."""
        raise TimeoutError("upstream socket timed out")

    registry = ToolRegistry()
    registry.register(own_timeout)
    results = await results_of(registry, ToolCall("c", "own_timeout", "{}"))
    assert results["c"].output == "Error: own_timeout raised TimeoutError: upstream socket timed out"


# Undecodable text in a tool's output is made sendable
async def test_undecodable_text_in_tool_output_is_made_sendable() -> None:
    @tool
    def listing() -> str:
        """A file name that was not UTF-8."""
        return "bad\udcff.txt"

    registry = ToolRegistry()
    registry.register(listing)
    results = await results_of(registry, ToolCall("c", "listing", "{}"))
    assert results["c"].output == "bad\ufffd.txt"
    results["c"].output.encode("utf-8")


# A sync tool past its timeout does not keep crow alive
def test_sync_tool_past_its_timeout_does_not_keep_crow_alive(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "hang.py").write_text(textwrap.dedent('''
        import time
        from crow_cli.tools import tool

        @tool
        def hang() -> str:
            """Never returns in time."""
            time.sleep(3600)
            return "late"
    '''))
    config = tmp_path / "c.toml"
    config.write_text("tool_timeout = 1\n")
    call = sse(chunk({"tool_calls": [tool_delta(0, "h1", "hang", "{}")]}), chunk({}, "tool_calls"))
    # it used to wait for the thread: the hour-long nap, cut by the subprocess timeout (a hang bound), fails it
    proc, requests = run_against([{"sse": call}, {"sse": text_sse("gave up")}], "--config", str(config),
                                 "--tools-dir", str(plugins), "go", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0 and proc.stdout == "gave up\n"
    assert "timed out after 1 s" in requests[1]["messages"][2]["content"]


# A command the sandbox stopped is reported to the model with the reason, and the user may run it
# once outside the sandbox (an escalation question); where nobody can answer, that is a denial
@needs_sandbox()
@pytest.mark.parametrize("answer", ["yes", "no", None])
async def test_a_command_the_sandbox_stopped_runs_outside_it_only_with_a_yes(tmp_path: Path,
                                                                              answer: str | None) -> None:
    from crow_cli.tools.approval import UNCONFINED_MARK, make_approver
    from crow_cli.tools.builtin.shell import run_shell
    from crow_cli.tools.context import ToolContext
    from crow_cli.tools.sandbox import Sandbox

    (tmp_path / "ws").mkdir()
    asked: list[str] = []

    async def ask(question: Any) -> str:
        asked.append(question.preview)
        return str(answer)

    registry = ToolRegistry()
    registry.register(run_shell)
    context = ToolContext(tmp_path / "ws", sandbox=Sandbox("workspace-write", temp_dir=str(tmp_path / "ws")))
    approve = make_approver("yolo", ask=None if answer is None else ask)  # type: ignore[arg-type]
    call = ToolCall("c", "run_shell", json.dumps({"command": f"echo out > {tmp_path}/outside"}))
    events = [e async for e in dispatch([call], registry, approve=approve, context=context)]
    result = next(e.result for e in events if e.type == "tool_result")
    assert (tmp_path / "outside").exists() == (answer == "yes")
    if answer == "yes":
        assert result.output == "[exit code 0] (no output)"
        assert asked[0].startswith(f"{UNCONFINED_MARK}[the sandbox (workspace-write) refused a write outside")
        assert asked[0].endswith(f"$ echo out > {tmp_path}/outside")
    else:
        assert "Read-only file system" in result.output and not result.ok
        assert result.output.endswith("the sandbox (workspace-write) refused a write outside the workspace and the "
                                      "temp dir, or to what stays read-only in it (.git, PATH folders, crow's "
                                      "install, a home folder's dot-folders): read-only file system. It was not "
                                      "run outside the sandbox. Do not retry it unchanged; work inside the "
                                      "workspace]")
        # the person reads why, not only "✗ run_shell · exit code 1"
        assert result.display is not None and result.display.status is not None
        assert "the sandbox (workspace-write) refused a write" in result.display.status
        assert result.display.status.endswith("not run outside it")
    assert len(asked) == (0 if answer is None else 1)


# A tool result records how it ended as a field, so no surface matches result strings
async def test_every_result_records_its_outcome() -> None:
    from crow_cli.errors import ToolDenied, ToolError, ToolFailed

    @tool(timeout_s=0.01)
    async def hangs() -> str:
        """Never returns."""
        await asyncio.Event().wait()
        return ""

    @tool
    def fails() -> str:
        """Fails."""
        raise ToolError("broken")

    @tool
    def refuses() -> str:
        """Refused by its own check."""
        raise ToolDenied("not here")

    @tool(needs_approval=True)
    def guarded() -> str:
        """Needs approval."""
        return "ran"

    @tool
    def fine() -> str:
        """Works."""
        return "yes"

    @tool
    def exits() -> str:
        """Ran and failed, as run_shell exiting non-zero: an error outcome, not ok."""
        raise ToolFailed("exit code 3", "[exit code 3]\nnope\n")

    registry = ToolRegistry()
    for t in (hangs, fails, refuses, guarded, fine, exits):
        registry.register(t)
    calls = [ToolCall(name, name, "{}", n) for n, name in enumerate(("hangs", "fails", "refuses", "guarded", "fine",
                                                                      "nope", "exits"))]
    calls.append(ToolCall("cut", "fine", "{}", 7, cut_off=True))
    results = await results_of(registry, *calls)
    assert {k: (r.outcome, r.ok) for k, r in results.items()} == {
        "hangs": ("timeout", False), "fails": ("error", False), "refuses": ("denied", False),
        "guarded": ("denied", False), "fine": ("ok", True), "nope": ("unknown_tool", False), "cut": ("error", False),
        "exits": ("error", False)}
    assert results["exits"].output == "[exit code 3]\nnope\n"  # the model reads it as it is, no "Error:"


# Every tool's output is masked in one place, not only run_shell's: a .env holding the OpenAI key, read with
# read_file, search_files, MCP or a plugin while talking to another server, never sends the key to it
async def test_every_tools_output_is_masked_in_one_place(tmp_path: Path) -> None:
    from crow_cli.tools.builtin import BUILTIN_TOOLS
    from crow_cli.tools.context import ToolContext

    key = "sk-proj-openai-key-123456"
    (tmp_path / ".env").write_text(f"OPENAI_API_KEY={key}\n")

    @tool
    def plugin() -> str:
        """Leaks."""
        return f"found {key}"

    registry = ToolRegistry()
    for t in (*BUILTIN_TOOLS, plugin):
        registry.register(t)
    calls = [ToolCall("read", "read_file", json.dumps({"path": ".env"}), 0),
             ToolCall("search", "search_files", json.dumps({"pattern": "OPENAI"}), 1),
             ToolCall("plugin", "plugin", "{}", 2)]
    events = [e async for e in dispatch(calls, registry, context=ToolContext(tmp_path, (key,)))]
    outputs = {e.result.call_id: e.result.output for e in events if e.type == "tool_result"}
    assert all(key not in out and "[REDACTED]" in out for out in outputs.values()), outputs


# provenance: a mutation check (w5) — dispatch catching only ToolError, or results losing their call index,
# passed every test of this file
async def test_every_call_gets_one_result_with_its_id_and_index() -> None:
    from crow_cli.errors import ToolError

    @tool
    def fine() -> str:
        """Works."""
        return "yes"

    @tool
    def fails() -> str:
        """Fails as tools should."""
        raise ToolError("broken")

    @tool
    def crashes() -> str:
        """A plugin's bug: any exception."""
        raise ValueError("bad value")

    registry = ToolRegistry()
    for t in (fine, fails, crashes):
        registry.register(t)
    calls = [ToolCall(f"id_{n}", name, "{}", n) for n, name in enumerate(("crashes", "fine", "nope", "fails", "fine"))]
    events = [e async for e in dispatch(calls, registry)]
    results = [e.result for e in events if e.type == "tool_result"]
    assert sorted((r.index, r.call_id) for r in results) == [(c.index, c.id) for c in calls]
    by_id = {r.call_id: r for r in results}
    assert by_id["id_0"].output == "Error: crashes raised ValueError: bad value" and not by_id["id_0"].ok
    assert by_id["id_3"].output == "Error: broken" and by_id["id_1"].output == by_id["id_4"].output == "yes"


# provenance: a mutation check (w5) — skipping the schema check passed every test of this file
async def test_arguments_failing_the_schema_are_answered_without_running_the_tool() -> None:
    ran: list[int] = []

    @tool
    def count(n: int) -> str:
        """Takes a number."""
        ran.append(n)
        return str(n)

    registry = ToolRegistry()
    registry.register(count)
    results = await results_of(registry, ToolCall("c", "count", json.dumps({"m": 1})))
    assert results["c"].output == "Error: invalid arguments for count: 'n' is required" and ran == []


async def test_a_coercion_the_schema_allows_runs_the_tool_and_is_noted_in_its_result() -> None:
    ran: list[int] = []

    @tool
    def count(n: int) -> str:
        """Takes a number."""
        ran.append(n)
        return f"counted {n}"

    registry = ToolRegistry()
    registry.register(count)
    results = await results_of(registry, ToolCall("c", "count", json.dumps({"n": "3"})))
    assert results["c"].output == "counted 3\n[crow read the arguments so: 'n': read \"3\" as the integer 3]"
    assert ran == [3]


async def test_an_unknown_tool_gets_the_closest_names_offered() -> None:
    registry = ToolRegistry()
    registry.register(tool(lambda path: path, name="read_file", description="Reads."))
    results = await results_of(registry, ToolCall("c", "read", "{}"))
    assert "unknown tool 'read'; tools with a similar name: read_file" in results["c"].output


async def test_without_the_schema_check_a_call_meets_only_the_tools_own_validation() -> None:
    """`check_schema=False` (`repair_tool_calls = false`, the bench's baseline): no coercion note, no similar
    names; what the tool's own validation takes still runs."""
    ran: list[int] = []

    @tool
    def count(n: int) -> str:
        """Takes a number."""
        ran.append(n)
        return f"counted {n}"

    registry = ToolRegistry()
    registry.register(count)
    calls = [ToolCall("c", "count", json.dumps({"n": "3"})), ToolCall("u", "Count", "{}", index=1)]
    events = [e async for e in dispatch(calls, registry, check_schema=False)]
    results = {e.result.call_id: e.result for e in events if isinstance(e, ToolResultReady)}
    assert results["c"].output == "counted 3" and ran == [3]
    assert results["u"].output == "Error: unknown tool 'Count'; available tools: count"


async def test_a_custom_tool_call_is_answered_and_never_runs_a_tool_of_its_name() -> None:
    """crow offers no custom (freeform) tools: a custom call named like a crow tool still does not run it."""
    ran: list[str] = []

    @tool
    def count(input: str) -> str:
        """Takes text."""
        ran.append(input)
        return input

    registry = ToolRegistry()
    registry.register(count)
    results = await results_of(registry, ToolCall("c", "count", json.dumps({"input": "x"}), custom=True))
    assert "crow offers no custom tools" in results["c"].output and results["c"].outcome == "unknown_tool"
    assert ran == []


# provenance: a mutation check (w5) — an approver's "no" ignored passed every test of this file
async def test_a_tool_needing_approval_runs_only_on_a_yes() -> None:
    ran: list[str] = []

    @tool(needs_approval=True)
    def guarded(label: str) -> str:
        """Needs approval."""
        ran.append(label)
        return label

    async def ask(question: Any) -> str:
        return "yes" if json.loads(question.call.arguments)["label"] == "yes" else "no"

    from crow_cli.tools.approval import make_approver

    approve = make_approver("ask", ask=ask)  # type: ignore[arg-type]

    registry = ToolRegistry()
    registry.register(guarded)
    calls = [ToolCall(label, "guarded", json.dumps({"label": label}), n) for n, label in enumerate(("yes", "no"))]
    events = [e async for e in dispatch(calls, registry, approve=approve)]
    results = {e.result.call_id: e.result for e in events if e.type == "tool_result"}
    assert (results["yes"].output, results["no"].outcome, ran) == ("yes", "denied", ["yes"])


# provenance: a mutation check (w5) — a tool's own timeout_s ignored (dispatch's used) passed every test of this
# file, only slower
async def test_a_tools_own_timeout_cuts_it_short_of_dispatchs() -> None:
    @tool(timeout_s=0.01)
    async def hangs() -> str:
        """Never returns."""
        await asyncio.Event().wait()
        return ""

    registry = ToolRegistry()
    registry.register(hangs)
    async with asyncio.timeout(60):  # a hang bound: dispatch's own limit is an hour
        results = await results_of(registry, ToolCall("c", "hangs", "{}"), timeout_s=3600)
    assert results["c"].outcome == "timeout"


# provenance: a mutation check (w5) — no cap on a result's text, no masking of what the person is shown, and no
# cap on the images each passed every test of this file
async def test_a_results_text_is_capped_its_display_masked_and_its_images_counted() -> None:
    from crow_cli.history import ToolDisplay
    from crow_cli.images import Image
    from crow_cli.tools.context import ToolContext
    from crow_cli.tools.dispatch import MAX_IMAGES
    from crow_cli.tools.tool import ToolOutput

    key = "sk-proj-openai-key-123456"
    images = tuple(Image(b"\x89PNG\r\n\x1a\n%d" % n, "image/png") for n in range(MAX_IMAGES + 2))

    @tool
    def big() -> ToolOutput:
        """Long output, a secret on show, many images."""
        return ToolOutput("x" * 500, ToolDisplay(output=f"out {key}", status=f"ended {key}"), images)

    registry = ToolRegistry()
    registry.register(big)
    events = [e async for e in dispatch([ToolCall("c", "big", "{}")], registry, max_output_chars=100,
                                        context=ToolContext(secrets=(key,)))]
    result = next(e.result for e in events if e.type == "tool_result")
    assert result.output.startswith("x" * 100 + "\n[output truncated: 400 of 500 characters not shown]")
    assert result.output.endswith(f"[2 images not shown to the model (more than {MAX_IMAGES}, larger than 10 MiB, or "
                                  "not PNG, JPEG, GIF or WebP): [image: image/png, 9 B], [image: image/png, 9 B]]")
    assert result.images == images[:MAX_IMAGES]
    assert result.display == ToolDisplay(output="out [REDACTED]", status="ended [REDACTED]")

def _calls(*names: str) -> list[ToolCall]:
    return [ToolCall(f"call_{i}", n, json.dumps({"label": f"{n}{i}"}), i) for i, n in enumerate(names)]


async def _results(calls: list[ToolCall], registry: ToolRegistry, approve=None) -> dict[int, str]:
    out = {}
    async with asyncio.timeout(60):  # a scheduling bug shows as a deadlock: fail instead of hanging
        async for event in dispatch(calls, registry, approve=approve):
            if isinstance(event, ToolResultReady):
                out[event.result.index] = event.result.output
    return out


async def test_exclusive_calls_overlap_nothing() -> None:
    active: list[str] = []
    overlaps: list[tuple[str, list[str]]] = []

    def make(name: str, parallel: bool) -> Tool:
        async def body(label: str) -> str:
            active.append(label)
            for _ in range(5):  # give every other task a chance to start while this one runs
                if not parallel and len(active) > 1:
                    overlaps.append((label, list(active)))
                await asyncio.sleep(0.001)
            active.remove(label)
            return label
        return tool(body, name=name, parallel=parallel)

    registry = ToolRegistry()
    registry.register(make("reader", True))
    registry.register(make("writer", False))
    calls = _calls("reader", "writer", "reader", "writer", "writer", "reader", "reader")
    results = await _results(calls, registry)
    assert results == {c.index: json.loads(c.arguments)["label"] for c in calls}
    assert overlaps == []


async def test_parallel_calls_run_together() -> None:
    started = 0
    all_started = asyncio.Event()

    @tool
    async def reader(label: str) -> str:
        """Waits until all three readers are running at once."""
        nonlocal started
        started += 1
        if started == 3:
            all_started.set()
        await all_started.wait()
        return label

    registry = ToolRegistry()
    registry.register(reader)
    assert await _results(_calls("reader", "reader", "reader"), registry) == {0: "reader0", 1: "reader1",
                                                                             2: "reader2"}


async def test_parallel_calls_keep_running_while_a_prompt_waits() -> None:
    reader_done = asyncio.Event()
    asked: list[str] = []

    @tool
    async def reader(label: str) -> str:
        """Read-only."""
        reader_done.set()
        return label

    @tool(needs_approval=True, parallel=False)
    async def writer(label: str) -> str:
        """Needs approval."""
        return label

    async def ask(question: Question) -> Answer:
        asked.append(question.call.name)
        await reader_done.wait()  # the prompt is answered only after the reader has finished
        return Answer("yes")

    approve = Approvals(ApprovalPolicy("ask"), ask)

    registry = ToolRegistry()
    registry.register(reader)
    registry.register(writer)
    assert await _results(_calls("writer", "reader"), registry, approve) == {0: "writer0", 1: "reader1"}
    assert asked == ["writer"]


async def test_a_writer_waiting_for_approval_does_not_block_other_writers() -> None:
    second_done = asyncio.Event()

    @tool(needs_approval=True, parallel=False)
    async def writer(label: str) -> str:
        """Needs approval."""
        if label == "writer1":
            second_done.set()
        return label

    async def before(call: ToolCall, t: Tool) -> None:  # what a surface fetches before the decision
        if call.index == 0:
            await second_done.wait()

    approve = Approvals(ApprovalPolicy("yolo"), before=before)

    registry = ToolRegistry()
    registry.register(writer)
    assert await _results(_calls("writer", "writer"), registry, approve) == {0: "writer0", 1: "writer1"}
