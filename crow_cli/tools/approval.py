"""Approval of tool calls: one decision per call (`decide`), and the surface's `ask` callback.

Policy only: what a tool is (`Tool.kind`), what its approval question shows (`Tool.preview`) and what
command line a rule matches (`Tool.subject`) come from the tool; no built-in tool is named here, and
command lines are matched by `tools.shellrules`. Only tools with `needs_approval` are checked
(dispatch runs the others straight away). `decide` turns a call into `Allow | Ask(preview) | Deny(reason)`
(its docstring gives the order); `Approvals` asks the person. `tools.orchestrator` is the one caller of
`Approvals`; surfaces only answer questions and report. Rules are strings: a tool name (`"write_file"`,
`"docs_search"`) or `NAME:PREFIX` for a tool with a subject (`"run_shell:git status"`), a command prefix
compared as `shellrules` says. docs/approvals.md tells the policies to users.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, cast

from ..errors import ConfigError, ToolDenied, ToolError
from ..history import Message, ToolCall
from ..modes import APPROVAL_MODES, SENTENCES, ApprovalMode, mode_note, told_mode
from ..paths import resolve_path
from ..text import strip_controls, visible
from .clip import clip_middle
from .context import ToolContext, current_context
from .sandbox import backend, is_guarded, unavailable_reason
from .shellrules import allow_matches, command_prefixes, deny_matches, rule_words
from .tool import Tool

__all__ = [
    "ASK_CHOICES",
    "OUTSIDE_CHOICES",
    "POLICIES",
    "PREVIEW_CHARS",
    "PREVIEW_LINES",
    "REVIEW_CHARS",
    "REVIEW_LINES",
    "UNCONFINED_MARK",
    "Allow",
    "Answer",
    "ApprovalPolicy",
    "Approvals",
    "AskFn",
    "Choice",
    "Deny",
    "PlanAnswer",
    "Policy",
    "Question",
    "ReviewFn",
    "always_scope",
    "check_rule_names",
    "describe_call",
    "make_approver",
    "may_write",
    "read_only_command",
    "start_policy",
]

Policy = ApprovalMode
POLICIES: tuple[Policy, ...] = APPROVAL_MODES
"""Approval policies (`modes.ApprovalMode`), the same values for `crow run --approval`, `crow chat` and the
editor's session modes: `ask` the user, `auto-edit` (built-in file edits approved), `yolo` (all approved),
`read-only` (every call that needs approval refused), `plan` (reads and read-only commands only)."""
Choice = Literal["yes", "no", "always", "never"]
"""What a person chose about one call: run it, refuse it, run it and later ones like it, or refuse it and
every later call of its tool (an editor's "reject always")."""


@dataclass(frozen=True, slots=True)
class Answer:
    """A person's answer about one call waiting for approval."""

    choice: Choice
    scope: tuple[str, ...] = ()
    """For "always": the command prefixes it approves (`("pytest", "git status")`, each in shell words, as
    `always_scope` offers them); () approves every later call of the tool."""
    reason: str = ""
    """For "no": what the user tells the model instead ("run the tests first"); its tool result says it."""


ASK_CHOICES: tuple[Choice, ...] = ("yes", "no", "always", "never")
"""What may be answered about running a call (a terminal offers no key for "never": it asks every run anew)."""
OUTSIDE_CHOICES: tuple[Choice, ...] = ("yes", "no")
"""What may be answered about running a call once outside the sandbox: a yes is for this call only."""


@dataclass(frozen=True, slots=True)
class Question:
    """One question about a call that needs approval, as every surface is handed it."""

    call: ToolCall
    tool: Tool
    preview: str
    """What the question shows of the call (`describe_call`: clipped, no control characters)."""
    choices: tuple[Choice, ...] = ASK_CHOICES
    """The answers it offers, in order (`ASK_CHOICES`, or `OUTSIDE_CHOICES` when `outside`)."""
    scope: tuple[str, ...] = ()
    """The command prefixes an "always" is scoped to (`always_scope`: `("pytest",)`); (): the whole tool."""
    outside: bool = False
    """Whether it asks to run the call outside any sandbox (one stopped it, or none is on this machine):
    no policy answers it by itself, and any yes is for this call only."""


@dataclass(frozen=True, slots=True)
class PlanAnswer:
    """What the person answered about a plan the model handed over (`exit_plan_mode`)."""

    choice: Literal["auto-edit", "ask", "keep"]
    """Approve it and go on in `auto-edit` or in `ask`, or `keep` planning."""
    note: str = ""
    """For `keep`: what the person tells the model to change."""


ReviewFn = Callable[[str], Awaitable[PlanAnswer]]
"""A surface's plan review: shown the plan (Markdown, from the model), returns the person's `PlanAnswer`."""

AskFn = Callable[[Question], Awaitable[Answer | Choice]]
"""A surface's prompt: shown a `Question`, returns the person's answer among its `choices` (a bare
`Choice` is that choice, unscoped, no reason)."""
PREVIEW_CHARS = 4000
"""Characters of a preview shown at most; a longer one keeps its head and tail around a marker."""
PREVIEW_LINES = 60
"""Lines of a preview shown at most (head and tail, as for characters)."""

UNCONFINED_MARK = "⚠ outside the sandbox "
"""How the preview of a question about running a command unconfined starts (`Question.outside`: no
sandbox here, or one the sandbox stopped), so that the person reads it first."""

REVIEW_LINES = 400
"""Lines of a command (a tool of kind `shell`) shown at most: it is shown whole, and a longer one is
denied without asking (too long to review)."""
HEAD_LINES = 40
"""A command of more lines is headed by its line count, and its first lines are repeated at the end of
the preview (where the question is: a terminal scrolls the start away)."""
REVIEW_CHARS = 40_000
"""Characters of a command shown at most (as for lines)."""

def always_scope(call: ToolCall, tool: Tool, arguments: dict[str, Any] | None = None) -> tuple[str, ...]:
    """The command prefixes an "always" about `call` can be scoped to (`pytest -k x` → `("pytest",)`, see
    `shellrules.command_prefixes`), each as shell words; () when the tool has no subject or the line has
    no prefix that stands for it. `arguments`: the call's validated arguments (None: validated here)."""
    subject = _subject(tool, arguments if arguments is not None else _arguments(call, tool))
    prefixes = command_prefixes(subject) if subject is not None else None
    return tuple(shlex.join(words) for words in prefixes or ())


def check_rule_names(allow: Iterable[str], deny: Iterable[str], names: Iterable[str]) -> None:
    """Refuse rules that name no tool of the run: a misspelt deny rule would never match (fail open).

    Called by the surfaces once the registry is complete (plugins and MCP tools loaded); `names` are
    every tool's name, unusable ones included.

    Raises:
        ConfigError: the first rule naming an unknown tool, one line, with the closest name if any.
    """
    import difflib

    known = set(names)
    for kind, rules in (("--allow", allow), ("--deny", deny)):
        for rule in rules:
            name = _split_rule(rule)[0].strip()
            if name in known:
                continue
            # `NAME(PREFIX)` (`Bash(git status:*)` elsewhere) means crow's `NAME:PREFIX`: the hint keeps the prefix,
            # never the bare name, which would allow (or deny) every call of the tool
            matched = _PARENTHESISED.fullmatch(rule.strip())
            if matched is not None:
                name, prefix = matched.group(1).strip(), _STAR_END.sub("", matched.group(2)).strip()
            else:
                name, _, prefix = rule.partition(":")
                name = name.strip()
            lowered = {n.lower().replace("-", "_"): n for n in known}
            close = lowered.get(name.lower().replace("-", "_")) or next(
                iter(difflib.get_close_matches(name, sorted(known), n=1)), None)
            if close and prefix:
                close = f"{close}:{prefix}"
            hint = f"; did you mean {close!r}?" if close else " (crow tools lists them)"
            raise ConfigError(f"the {kind} rule {strip_controls(rule)!r} names no tool of this run{hint}")


_PARENTHESISED = re.compile(r"([^():]+)\((.*)\)", re.DOTALL)
"""A rule written `NAME(PREFIX)`, as other agents write theirs."""
_STAR_END = re.compile(r"\s*:?\s*\*\s*$")
"""The `*`, ` *` or `:*` a prefix ends with in such a rule (crow's prefix needs none)."""


def _split_rule(rule: str) -> tuple[str, list[str] | None]:
    """`NAME` → (NAME, None); `NAME:PREFIX` → (NAME, the prefix's words)."""
    name, colon, prefix = rule.partition(":")
    return (name, rule_words(prefix)) if colon else (rule, None)


@dataclass(frozen=True)
class ApprovalPolicy:
    """What to do with calls that need approval, before anyone is asked."""

    mode: Policy = "ask"
    """`ask`, `auto-edit` (built-in file edits approved; shell and others ask), `yolo` (all approved) or
    `read-only` (all refused)."""
    allow: tuple[str, ...] = ()
    """Rules that approve without asking: tool names or `NAME:PREFIX` (`run_shell:git status`)."""
    deny: tuple[str, ...] = ()
    """Rules that refuse, whatever the mode: tool names or `NAME:PREFIX`."""

    def __post_init__(self) -> None:
        if self.mode not in POLICIES:
            raise ConfigError(f"unknown approval policy {self.mode!r} (choose from {', '.join(POLICIES)})")
        for rule in (*self.allow, *self.deny):
            if not isinstance(rule, str) or not rule.strip() or _split_rule(rule)[1] == [] or not (
                    _split_rule(rule)[0].strip()):
                raise ConfigError(f"invalid approval rule {rule!r}: a tool name or 'TOOL:COMMAND PREFIX' "
                                  "(e.g. 'run_shell:git status')")

    def denied_by(self, tool: Tool, subject: str | None) -> str | None:
        """The deny rule matching a call of `tool` whose subject (command line) is `subject`, or None."""
        for rule in self.deny:
            name, words = _split_rule(rule)
            if name == tool.name and (words is None or (subject is not None and deny_matches(subject, words))):
                return rule
        return None

    def allowed_by(self, tool: Tool, subject: str | None) -> str | None:
        """The allow rule (or policy) approving a call of `tool` with `subject` without asking, or None."""
        if self.mode == "read-only":
            return None
        if self.mode == "yolo":
            return "policy yolo"
        if self.mode == "plan":  # `decide` lets only read-only commands through in plan mode
            return "policy plan"
        if self.mode == "auto-edit" and _auto_edit(tool):
            return "policy auto-edit"
        return _rules_allow(self.allow, tool, subject, "allow rules")

    def ways_to_allow(self, tool: Tool) -> str:
        """What would approve `tool`, for the text of a denied call, in terms every surface shares (policy
        names and rules, never a command-line flag: an editor has none)."""
        ways = ["the yolo policy"]
        if self.mode in ("ask", "read-only") and _auto_edit(tool):
            ways.append("the auto-edit policy")
        scope = " (or for this host)" if tool.kind == "fetch" else " (or for this command's prefix)"
        ways.append(f"an allow rule for {tool.name}" + (scope if tool.subject else ""))
        if tool.preapproved is not None and tool.kind == "fetch":
            ways.append("[web] allow_hosts in the config")
        return ", ".join(ways[:-1]) + " or " + ways[-1]


def _rules_allow(rules: Iterable[str], tool: Tool, subject: str | None, why: str) -> str | None:
    """What approves a call of `tool` with `subject` among `rules` (tool names or `NAME:PREFIX`): the
    tool's name, `why` when every command of `subject` starts with one of the tool's prefixes, or None."""
    rules = tuple(rules)
    if tool.name in rules:
        return tool.name
    prefixes = [w for name, w in map(_split_rule, rules) if name == tool.name and w]
    if subject is not None and allow_matches(subject, prefixes):
        return why
    return None


_READ_ONLY: list[list[str]] = [[word] for word in (
    "ls", "cat", "head", "tail", "wc", "grep", "egrep", "fgrep", "rg", "pwd", "echo", "printf", "find", "sort",
    "cut", "tr", "nl", "stat", "du", "df", "which", "basename", "dirname", "realpath", "readlink", "true", "diff",
    "cmp", "date", "whoami", "uname", "printenv")]
"""Commands plan mode runs (every command of the line one of these, no output redirection, no substitution)."""
_READ_ONLY_CONFINED: list[list[str]] = [["git", sub] for sub in (
    "status", "log", "diff", "show", "blame", "ls-files", "grep", "rev-parse", "branch", "remote")]
"""... and these too when the command runs confined (git reads the repository's config, which can name
programs it runs: the read-only sandbox keeps them from writing)."""
_WRITING: list[list[str]] = [
    *(["find", flag] for flag in ("-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0",
                                  "-fprintf", "-fls")),
    ["rg", "--pre"], ["sort", "-o"], ["sort", "--output"], ["git", "--output"],
    ["git", "branch", "-d"], ["git", "branch", "-D"], ["git", "branch", "-m"], ["git", "branch", "-M"],
    ["git", "branch", "-c"], ["git", "branch", "-C"], ["git", "branch", "-u"], ["git", "branch", "--set-upstream-to"],
    ["git", "remote", "add"], ["git", "remote", "remove"], ["git", "remote", "rm"], ["git", "remote", "rename"],
    ["git", "remote", "set-url"], ["git", "remote", "prune"], ["git", "remote", "update"]]
"""Options and subcommands of those commands that write or run something else: such a line is no read."""


def read_only_command(line: str | None, confined: bool = False) -> bool:
    """Whether the command line `line` only reads, as plan mode runs it: every simple command one of a short
    list (`ls`, `cat`, `grep`, `find` without `-exec` or `-delete` …; `git status`, `git diff` … only when
    `confined`), with no output redirection and no command substitution (`shellrules.allow_matches`).
    False for None (no command line: not a command). Never raises."""
    if line is None:
        return False
    prefixes = _READ_ONLY + (_READ_ONLY_CONFINED if confined else [])
    if not allow_matches(line, prefixes):
        return False
    return not any(deny_matches(line, option) for option in _WRITING)


def may_write(tool: Tool, arguments: dict[str, Any] | None, context: ToolContext) -> bool:
    """Whether a call of `tool` with `arguments` may change files, so a snapshot is taken around it
    (`crow_cli.rewind`): a `write` tool; a `shell` tool unless the sandbox is read-only or the command only
    reads (`read_only_command`); an `other` tool that needs approval (an MCP tool not marked read-only, a
    plugin's). Reads, searches, fetches and plans never write. Never raises."""
    if tool.kind == "write":
        return True
    if tool.kind == "shell":
        sandbox = context.sandbox
        if sandbox.confines and sandbox.mode == "read-only":
            return False
        return not read_only_command(_subject(tool, arguments), sandbox.confines)
    return tool.kind == "other" and tool.needs_approval


def _auto_edit(tool: Tool) -> bool:
    """What `auto-edit` approves: built-in tools that only change files of the workspace."""
    return tool.kind == "write" and tool.source == "builtin"


def _unconfined_shell(tool: Tool, context: ToolContext) -> str | None:
    """Why a command of `tool` would run unconfined although the run asked for a sandbox (no sandbox on
    this machine), or None: then no rule, policy or earlier "always" approves it without asking."""
    sandbox = context.sandbox
    if tool.kind != "shell" or not sandbox.confines or backend() is not None:
        return None
    return f"no sandbox is available ({unavailable_reason()})"


def _guarded_write(tool: Tool, arguments: dict[str, Any] | None, context: ToolContext) -> bool:
    """Whether a call of `tool` with `arguments` is a file edit (a tool of kind `write`) of one of
    `sandbox.guarded_paths()` (crow's config, the shell start-up files, ~/.ssh …), or, confined, of what the
    sandbox keeps from commands in the workspace (`sandbox.kept_from_commands`: a home folder's dot-folders,
    PATH folders, crow's install): asked about whatever
    rule, policy (but yolo) or "always" answer, since what is written there runs or instructs later,
    outside this run."""
    path = arguments.get("path") if arguments is not None and tool.kind == "write" else None
    if not isinstance(path, str):
        return False
    raw = Path(path).expanduser()
    try:
        return is_guarded(resolve_path(raw if raw.is_absolute() else context.workspace / raw),
                          context.workspace if context.sandbox.confines else None)
    except OSError:
        return False


def _arguments(call: ToolCall, tool: Tool) -> dict[str, Any] | None:
    """The validated arguments of `call`, for a caller that has not validated them (the orchestrator has)."""
    try:
        return tool.validate(json.loads(call.arguments))
    except (ValueError, ToolError):
        return None


def _subject(tool: Tool, arguments: dict[str, Any] | None) -> str | None:
    if tool.subject is None or arguments is None:
        return None
    try:
        subject = tool.subject(arguments)
    except Exception:  # a plugin's subject function failed: no rule about its command applies
        return None
    return subject if isinstance(subject, str) else None


def describe_call(call: ToolCall, tool: Tool, context: ToolContext | None = None, *,
                  arguments: dict[str, Any] | None = None) -> str:
    """What an approval question shows about `call`: the tool's preview (the command, the diff of an edit)
    or the arguments as JSON, clipped to `PREVIEW_LINES` / `PREVIEW_CHARS` (head and tail kept, the cut
    marked) and without terminal control characters (the model wrote them). A command (a tool of kind
    `shell`) is never clipped: one over `REVIEW_LINES` / `REVIEW_CHARS` is denied instead.

    Args:
        call: the call waiting for approval.
        tool: its tool.
        context: the run's context (default: the current one, as dispatch sets it for the call).
        arguments: the call's validated arguments (None: validated here; not valid, the raw text is shown).

    Raises:
        ToolError: the tool's pre-check found the call cannot work (the message is the call's result).
        ToolDenied: a command too long to review.
    """
    arguments = arguments if arguments is not None else _arguments(call, tool)
    if arguments is None:
        text = call.arguments
    else:
        try:
            text = tool.describe(arguments, context if context is not None else current_context())
        except ToolError:
            raise
        except Exception:  # a broken preview must not block the question: show the arguments
            text = json.dumps(arguments, ensure_ascii=False, default=str)
    if tool.kind == "shell":  # what will run is shown whole: a cut could hide the one dangerous line
        lines = text.count("\n") + 1
        if lines > REVIEW_LINES or len(text) > REVIEW_CHARS:
            raise ToolDenied(f"the command is too long to review ({lines} lines, {len(text)} characters); it "
                             "was not run. Split it into shorter commands or write a script file and run that")
        text = visible(text)
        if lines > HEAD_LINES:  # its start would scroll away above the question: at both ends, counted
            first = "\n".join(text.split("\n")[:3])
            text = f"[a command of {lines} lines]\n{text.rstrip()}\n[{lines} lines; it begins with:]\n{first}"
        return text
    return visible(clip_middle(text, PREVIEW_CHARS, PREVIEW_LINES))


@dataclass(frozen=True, slots=True)
class Allow:
    """Run the call without asking."""

    why: str
    """What approved it: `policy yolo`, a rule, `always` (an earlier answer)."""
    sandboxed: bool = False
    """Whether it runs confined (a command under the run's sandbox)."""


@dataclass(frozen=True, slots=True)
class Ask:
    """Ask the user, showing `preview`."""

    preview: str
    sandboxed: bool = False
    unconfined: str | None = None
    """Why a command would run outside any sandbox (then no rule, policy or "always" spares the question)."""


@dataclass(frozen=True, slots=True)
class Deny:
    """Refuse the call; `reason` is what the model reads (no command-line flags: every surface shows it),
    `shown` what the person reads of it (the refusal, without the advice to the model). False as a truth
    value (an `Allow` is true): `if await approvals(call, tool)` reads "if it may run"."""

    reason: str
    shown: str = ""

    def __bool__(self) -> bool:
        return False


Decision = Allow | Ask | Deny
"""What approval decides about one call (`decide`)."""


def decide(call: ToolCall, tool: Tool, policy: ApprovalPolicy, *, arguments: dict[str, Any] | None = None,
           always: frozenset[str] | set[str] = frozenset(), never: frozenset[str] | set[str] = frozenset(),
           can_ask: bool = True, context: ToolContext | None = None) -> Decision:
    """The one approval decision for a call of a tool that needs approval: from the tool, its validated
    arguments (its `subject`, the command line rules match), the policy and rules, the "always" and "never"
    answers (`always`: rules as allow rules are written, tool names or `NAME:PREFIX`; `never`: tool names),
    and the run's sandbox (`context`, default the current one).

    Order: a deny rule refuses (whatever the policy); `read-only` refuses, `plan` all but a command that only
    reads (`read_only_command`), and so does a "never" answer and a read-only sandbox a file edit (a tool of
    kind `write`); a command that would run
    unconfined although a sandbox was asked for, and (but under yolo) a file edit of crow's own config or
    the user's start-up files (`sandbox.guarded_paths`), are asked about (never approved by a rule, policy
    or "always"); an allow rule, the policy or "always" approves; otherwise the preview is made and the user
    asked, or, when nobody can answer (`can_ask` False), the call is refused.

    From the call, the policy, the rules, the earlier "always" answers and the run's sandbox, in this order:

    1. a **deny** rule that matches refuses it (whatever the policy, even `yolo`); what the configuration
       approves by itself (`Tool.preapproved`: `web_fetch` of a host `[web] allow_hosts` names) runs; `read-only`
       and an earlier "never" answer about the tool (an editor's "reject always") refuse it, and `plan` every call
       but a command that only reads (`read_only_command`), saying the session is planning;
    2. a command that would run unconfined although a sandbox was asked for (none on this machine) is
       always asked about;
    3. an **allow** rule that matches, an earlier "always" answer (for the tool, or for command prefixes
       the call's every command starts with), the `yolo` policy, or the `auto-edit` policy for a built-in
       tool of kind `write` (`write_file`, `edit_file`) approves it;
    4. otherwise the tool's preview is made; a preview that finds the call cannot work (an `edit_file`
       whose `old_string` is not in the file) answers it with that error, nobody is asked;
    5. `Approvals` asks (see there).

    A refused call is not run; the model gets a tool result saying why (the orchestrator makes it of the `Deny`
    returned, outcome `denied`); the text names policies and rules, never a command-line flag.

    Args:
        arguments: the call's validated arguments (the orchestrator validates once); None: validated here.

    Raises:
        ToolError: the tool's pre-check found the call cannot work (its message answers the call).
    """
    context = context if context is not None else current_context()
    arguments = arguments if arguments is not None else _arguments(call, tool)
    subject = _subject(tool, arguments)
    sandboxed = tool.kind == "shell" and context.sandbox.confines and backend() is not None
    rule = policy.denied_by(tool, subject)
    if rule is not None:
        return Deny(f"{tool.name} was denied by the rule {rule!r}; it was not run. Do not retry it; find another "
                    "way or ask the user", f"by the rule {rule!r}")
    configured = (tool.preapproved(arguments, context) if tool.preapproved is not None and arguments is not None
                  else None)
    if configured is not None:  # the person's own configuration (`[web] allow_hosts`), whatever the policy
        return Allow(configured)
    if policy.mode == "read-only":
        return Deny(f"{tool.name} was not run: the approval policy is read-only (no tool that changes files or "
                    "runs commands). Do not retry it; say what you would do instead",
                    "by the read-only approval policy")
    if policy.mode == "plan" and not read_only_command(subject if tool.kind == "shell" else None, sandboxed):
        return Deny(f"{tool.name} was not run: the session is planning (plan mode: only reads and read-only "
                    "commands run). Do not retry it; go on planning, and hand the plan over with exit_plan_mode",
                    "the session is planning")
    if tool.name in never:
        return Deny(f"the user rejected {tool.name} for this session; it was not run. Do not retry it",
                    "rejected for this session")
    if tool.kind == "write" and context.sandbox.mode == "read-only":  # what commands may not write, edits neither
        return Deny(f"{tool.name} was not run: the sandbox is read-only (nothing in the workspace is written). Do "
                    "not retry it; say what you would change instead", "by the read-only sandbox")
    unconfined = _unconfined_shell(tool, context)
    guarded = _guarded_write(tool, arguments, context) and policy.mode != "yolo"
    if unconfined is None and not guarded:
        why = policy.allowed_by(tool, subject) or (
            "always" if _rules_allow(always, tool, subject, "always") is not None else None)
        if why is not None:
            return Allow(why, sandboxed)
    try:
        preview = describe_call(call, tool, context, arguments=arguments)
    except ToolDenied as exc:
        return Deny(f"{exc}. The user can approve such calls with {policy.ways_to_allow(tool)}")
    if not can_ask:
        if unconfined is not None:
            return Deny(f"{tool.name} was not run: {unconfined}, so every command needs the user's yes, and "
                        "nobody can answer here", f"{unconfined}, and nobody can answer here")
        if guarded:  # no rule or "always" approves these: only a yes or yolo
            return Deny(f"{tool.name} was not run: it writes crow's own files or the user's start-up files, which "
                        "only the user's yes or the yolo policy approves, and nobody can answer here",
                        "it writes crow's own or your start-up files: only a yes or yolo approves that")
        return Deny(f"{tool.name} needs approval and nobody can approve it here; it was not run. The user can "
                    f"approve such calls with {policy.ways_to_allow(tool)}",
                    f"it needs approval and nobody can answer here ({policy.ways_to_allow(tool)} approves it)")
    if unconfined is not None:
        preview = f"{UNCONFINED_MARK}[{unconfined}: this command would run with all your rights]\n{preview}"
    return Ask(preview, sandboxed, unconfined)


@dataclass
class Approvals:
    """The approval of one surface's calls: the policy, the answers remembered, and the surface's `ask`.

    `tools.orchestrator` is its one caller in crow (`approve` before a call that needs approval runs,
    `escalate` when the sandbox stopped one); a surface builds it (`make_approver`) and answers its
    questions. Answers of "always" are remembered for this object's life as allow rules (the tool's name,
    or `NAME:PREFIX` for each prefix it was scoped to), answers of "never" as the tool's refusal. A "no"
    with a reason is refused with a result that gives the model the user's words.

    It hands the surface's `ask` a `Question` (the preview, the choices it offers, the command prefixes an
    "always" is scoped to, whether it asks to run outside the sandbox) and awaits an `Answer` (one prompt at a
    time): yes; always, for the tool or for the command prefixes of the call (`always_scope`: `run_shell:pytest`,
    remembered as allow rules are written); never (the tool, for the rest of the session); no, with what the user
    tells the model instead, if anything. With no `ask` (nobody can answer: `crow run` without a terminal) it is
    denied. The orchestrator calls it before a call runs, and `escalate` when the sandbox stopped one.
    """

    policy: ApprovalPolicy = field(default_factory=ApprovalPolicy)
    """The policy and rules; a surface may replace it (an editor's mode switch): the next decision uses it."""
    ask: AskFn | None = None
    """The surface's prompt; None when nobody can answer (then calls that would ask are denied)."""
    always: set[str] = field(default_factory=set)
    """What the person approved for the rest of the session: tool names and `NAME:PREFIX` rules."""
    never: set[str] = field(default_factory=set)
    """The tools the person refused for the rest of the session (an editor's "reject always")."""
    typed: bool = False
    """The calls are the person's own (chat's `!COMMAND`, see `typed_by_person`)."""
    before: Callable[[ToolCall, Tool], Awaitable[None]] | None = None
    """Awaited before each decision about a call that needs approval, to fetch what the surface shows of
    it (the editor's buffer an edit changes, for its diff); it decides nothing, but may raise the tool's
    own `ToolError` (the edit cannot be made in that buffer), which answers the call unasked."""
    allowed: Callable[[ToolCall], None] | None = None
    """Told that a call needing approval was allowed and runs now (an editor shows it in progress)."""
    review: ReviewFn | None = None
    """The surface's review of a plan `exit_plan_mode` hands over (chat, an editor); None: nobody reviews it,
    and the run ends with the plan as its answer (`crow run`, `crow mcp`'s calls)."""
    mode_changed: Callable[[Policy], None] | None = None
    """Told the new mode when `set_mode` changes it (an editor shows its mode selector)."""
    prompt_mode: Policy | None = None
    """The mode the system prompt states (default: the policy's at the start); a later one gets a note."""
    handed_plan: str | None = None
    """The plan handed over with nobody to review it: the run ends with it (`take_plan`)."""
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    def __post_init__(self) -> None:
        if self.prompt_mode is None:
            self.prompt_mode = self.policy.mode

    def set_mode(self, mode: Policy) -> None:
        """Switch the approval mode from the next decision on ("always" and "never" answers stay); the model is
        told in its next request (`mode_note`).

        Raises:
            ConfigError: an unknown mode.
        """
        self.policy = replace(self.policy, mode=mode)
        if self.mode_changed is not None:
            self.mode_changed(mode)

    def mode_note(self, history: list[Message]) -> Message | None:
        """The note to append before the next request when the mode changed since the model was last told
        (`modes.mode_note`), or None."""
        told = told_mode(history) or self.prompt_mode
        if told == self.policy.mode:
            return None
        return cast(Message, mode_note(self.policy.mode))

    async def exit_plan(self, plan: str) -> str:
        """The plan `exit_plan_mode` hands over: the person reviews it (`review`) and the mode follows their
        answer; with nobody to review it, it is kept (`take_plan`) and the run ends with it. Returns the
        tool result's text.

        Raises:
            ToolDenied: not in plan mode, or the person wants the model to keep planning.
        """
        if self.policy.mode != "plan":
            raise ToolDenied(f"the session is not planning (the approval mode is {self.policy.mode}): there is no "
                             "plan to hand over; go on with the task", "not planning")
        if self.review is None:
            self.handed_plan = plan
            return "The plan is handed to the user, who reads it as this run's answer. Stop here."
        async with self._lock:  # one question at a time, approval questions included
            answer = await self.review(plan)
        if answer.choice == "keep":
            note = strip_controls(answer.note).strip()
            said = f": {note}" if note else ""
            raise ToolDenied(f"The user read the plan and wants you to keep planning{said}. Revise the plan "
                             "(still in plan mode) and hand it over again with exit_plan_mode",
                             f"keep planning{said}")
        self.set_mode(answer.choice)
        return (f"The user approved the plan; the approval mode is now {answer.choice} "
                f"({SENTENCES[answer.choice]}). Carry out the plan now.")

    def take_plan(self) -> str | None:
        """The plan handed over with nobody to review it, once (None when there is none): the run ends with it."""
        plan, self.handed_plan = self.handed_plan, None
        return plan

    async def __call__(self, call: ToolCall, tool: Tool, arguments: dict[str, Any] | None = None) -> Allow | Deny:
        """Whether `call` may run, as a value: `Allow`, or `Deny` with the reason the model will read (a "no",
        a rule, the policy, nobody to ask, a question the surface failed to ask). Raises only the tool's
        pre-check `ToolError` (`before`).

        A question waits for the one before it (one prompt at a time); what changed meanwhile (an answer
        of "always" or "never", a new policy) decides it without asking.

        Args:
            arguments: the call's validated arguments (None: validated here).
        """
        if self.before is not None:
            await self.before(call, tool)
        seen = self._state()
        decision = self._decide(call, tool, arguments)
        if isinstance(decision, Ask):
            async with self._lock:  # one prompt at a time
                if self._state() != seen:  # answered or switched while this call waited: decided again
                    decision = self._decide(call, tool, arguments)
                if isinstance(decision, Ask):
                    assert self.ask is not None  # decide asks only when someone can answer
                    outside = decision.unconfined is not None
                    question = Question(call, tool, decision.preview, OUTSIDE_CHOICES if outside else ASK_CHOICES,
                                        () if outside else always_scope(call, tool, arguments), outside)
                    try:
                        reply = await self.ask(question)
                    except ToolDenied as exc:  # the question failed (an editor's error): nobody said yes
                        return Deny(str(exc), exc.shown)
                    decision = self._answered(tool, _answer(reply))
        assert not isinstance(decision, Ask)  # answered above
        if isinstance(decision, Allow) and self.allowed is not None:
            self.allowed(call)
        return decision

    def _state(self) -> tuple[ApprovalPolicy, frozenset[str], frozenset[str]]:
        return self.policy, frozenset(self.always), frozenset(self.never)

    def _decide(self, call: ToolCall, tool: Tool, arguments: dict[str, Any] | None) -> Decision:
        def decided(can_ask: bool) -> Decision:
            return decide(call, tool, self.policy, arguments=arguments, always=self.always, never=self.never,
                          can_ask=can_ask)

        decision = decided(self.ask is not None or self.typed)
        if self.typed and isinstance(decision, Ask):
            if decision.unconfined is None:
                return Allow("typed by the person")  # having typed it is their yes; leaving the sandbox is not
            if self.ask is None:
                return decided(False)  # nobody to ask about leaving the sandbox
        return decision

    def _answered(self, tool: Tool, answer: Answer) -> Allow | Deny:
        """The decision an answer makes, remembered for later calls when it says "always" or "never"."""
        if answer.choice == "always":
            self.always.update([f"{tool.name}:{prefix}" for prefix in answer.scope] or [tool.name])
            return Allow("always")
        if answer.choice == "yes":
            return Allow("yes")
        if answer.choice == "never":
            self.never.add(tool.name)
        if answer.reason:
            return Deny(f"The user denied this call: {strip_controls(answer.reason)} ({tool.name} was not run)",
                        f"by you: {strip_controls(answer.reason)}")
        return Deny(f"the user declined {tool.name}; it was not run. Do not retry it unchanged", "by you")

    def typed_by_person(self) -> Approvals:
        """These approvals for calls the person typed themselves (chat's `!COMMAND`): having typed it is
        their yes, so a call the policy would ask about runs without a question; what the policy and rules
        refuse (a deny rule, `read-only`) stays refused, and a command that would run unconfined although a
        sandbox was asked for is still asked about (typing a command is no yes to leaving the sandbox).
        The answers remembered and the one-prompt-at-a-time order are shared with these approvals."""
        return replace(self, typed=True, before=None, allowed=None)

    def _stays_inside(self, tool: Tool) -> bool:
        """Whether no answer may run a call of `tool` outside the sandbox: read-only, or refused for good."""
        return self.policy.mode in ("read-only", "plan") or tool.name in self.never

    async def escalate(self, call: ToolCall, tool: Tool, reason: str, arguments: dict[str, Any] | None = None
                       ) -> bool:
        """Whether `call`, which the sandbox stopped for `reason`, may run once outside it: the user is asked
        (an answer of "always" approves this once, not every later command); nobody to ask, the read-only
        policy or a "never" answer about the tool means no."""
        if self.ask is None or self._stays_inside(tool):
            return False
        try:
            preview = describe_call(call, tool, arguments=arguments)
        except ToolError:
            return False
        preview = (f"{UNCONFINED_MARK}[{reason}]\nRun it once more OUTSIDE the sandbox, with all your rights "
                   f"(files anywhere, network)?\n{preview}")
        async with self._lock:
            if self._stays_inside(tool):  # switched or answered while this call waited
                return False
            try:
                answer = _answer(await self.ask(Question(call, tool, preview, OUTSIDE_CHOICES, outside=True)))
            except ToolDenied:  # the question failed (an editor's error): nobody said yes
                return False
        if answer.choice == "never":
            self.never.add(tool.name)
        return answer.choice in ("yes", "always")


def _answer(reply: Answer | Choice) -> Answer:
    return reply if isinstance(reply, Answer) else Answer(reply)


def start_policy(mode: Policy | None, *, yes: bool = False) -> Policy:
    """The policy a surface starts in from the configured `mode` (None: `ask`) and `--yes` (`yolo`): the one
    decision of whether `--yes` goes with `mode`, which every surface (run, chat, acp, mcp) makes through here.

    Raises:
        ConfigError: `yes` with the `read-only` or `plan` policy (the stricter one is never silently loosened).
    """
    if yes and mode in ("read-only", "plan"):
        raise ConfigError(f"--yes conflicts with the approval policy {mode!r} (it never runs a change): "
                          "drop one of them")
    return "yolo" if yes else (mode or "ask")


def make_approver(mode: Policy | None = None, *, allow: Iterable[str] = (), deny: Iterable[str] = (),
                  ask: AskFn | None = None, yes: bool = False) -> Approvals:
    """The `Approver` for a surface: `mode` (default `ask`; `yes=True` means `yolo`), rules, and `ask`.

    Typical use: `make_approver(settings.approval, allow=settings.allow, deny=settings.deny, ask=prompt)`.

    Raises:
        ConfigError: an unknown policy or an empty/invalid rule; `yes` with the `read-only` or `plan` policy
            (the stricter one is never silently loosened).
    """
    policy = ApprovalPolicy(start_policy(mode, yes=yes), tuple(allow), tuple(deny))
    return Approvals(policy, ask)
