"""Approval of tool calls: a policy, allow/deny rules, and a surface-supplied `ask` callback.

Only tools with `needs_approval` are checked (dispatch runs the others straight away). For such a call:

1. a **deny** rule that matches refuses it (whatever the policy, even `yolo`);
2. an **allow** rule that matches, an earlier "always" answer for the tool, the `yolo` policy, or the
   `auto-edit` policy for a built-in file edit (`write_file`, `edit_file`) approves it;
3. otherwise the surface's `ask(call, tool)` is awaited ("yes", "no" or "always" for this tool; one
   prompt at a time); with no `ask` (nobody can answer: `crow run` without a terminal) it is denied.

A refused call is not run; the model gets a tool result saying why (dispatch turns `ToolDenied`
into it). Rules are strings: a tool name (`"write_file"`, `"docs_search"`) or `run_shell:PREFIX`, a
shell command prefix compared word by word (`"run_shell:git status"` matches `git status -s`, not
`git statusx`). A deny prefix matches any part of a compound command (`cd x && rm -rf y`), and leans
towards matching: it skips leading `VAR=value` words and shell keywords (`if`, `then`, `do`, `{`, `!`,
...), looks past wrappers (`env`, `sudo`, `xargs`, `nice`, `time`, `exec`, `command`, `nohup`, ...
with their flags), compares the command word by basename (`/bin/rm`) and looks inside scripts given
to a shell (`sh -c '...'`, `bash -c`, `eval`). A deny rule also matches when, after the command
word, its options are among the command's and its other words appear in the command in order:
options are compared as flags, so combined, split, reordered or trailing short flags (`rm -fr`,
`rm -r -f`, `rm x -rf`) and common long spellings (`--recursive`, `--force`; `-R` is `-r` for `rm`
and `cp`, `--recursive` is `-R` for `chmod`/`chown`/`chgrp`) match `rm -rf`; words after `--` are not
options. An allow prefix approves a command only when every part starts with an allow rule word for
word (no wrapper, assignment or `sh -c` unless the rule says so; `ls -al` is not `ls -la`) and it has
no command substitution or output redirection. Rules are guard rails, not a sandbox: a command
spelled through variables, aliases or functions, or the same effect by another program (`find
-delete`, `python -c`), is not recognised.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import ConfigError, ToolDenied
from ..history import ToolCall
from ..text import strip_controls
from .registry import Tool

__all__ = ["POLICIES", "Answer", "ApprovalPolicy", "Approvals", "AskFn", "describe_call", "make_approver"]

POLICIES = ("ask", "auto-edit", "yolo")
Answer = Literal["yes", "no", "always"]
AskFn = Callable[[ToolCall, Tool], Awaitable[Answer]]
"""A surface's prompt: shown a call that needs approval, returns the person's answer."""

_EDIT_TOOLS = frozenset({"write_file", "edit_file"})
_SHELL_TOOL = "run_shell"
_SHELL_PREFIX = "run_shell:"
_SPLIT = re.compile(r"&&|\|\||[;&|\n()`]|\$\(")
_FD_DUP = re.compile(r"[0-9]*>&[0-9]+")
_REDIRECT = re.compile(r"(?<![0-9&])>|[0-9]>(?!&)")


def _words(segment: str) -> list[str]:
    try:
        return shlex.split(segment)
    except ValueError:  # unbalanced quotes: compare plain words
        return segment.split()


def _segments(command: str) -> list[list[str]]:
    command = _FD_DUP.sub(" ", command)  # `2>&1` joins streams; its `&` separates nothing
    return [w for w in (_words(part) for part in _SPLIT.split(command)) if w]


def _starts_with(words: list[str], prefix: list[str]) -> bool:
    return bool(prefix) and words[: len(prefix)] == prefix


_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_KEYWORDS = frozenset({"{", "}", "(", ")", "!", "if", "then", "else", "elif", "fi", "do", "done", "while",
                       "until", "for", "in", "case", "esac", "select"})
# words that run the rest of their arguments as a command (after flags and their values)
_WRAPPERS = frozenset({"time", "exec", "command", "builtin", "env", "nohup", "nice", "ionice", "sudo", "doas",
                       "xargs", "timeout", "setsid", "stdbuf", "chrt", "taskset", "flock", "watch", "strace",
                       "unbuffer", "chroot", "runuser", "su", "parallel", "function"})
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "busybox", "fish", "eval"})
_MAX_NESTING = 4


def _basename(word: str) -> str:
    return word.rstrip("/").rsplit("/", 1)[-1] or word


def _prefix_at(words: list[str], i: int, prefix: list[str]) -> bool:
    """`prefix` at `words[i:]`, the command word compared by basename (`/bin/rm` is `rm`)."""
    head = words[i: i + len(prefix)]
    return (len(head) == len(prefix) and _basename(head[0]) == _basename(prefix[0])
            and head[1:] == prefix[1:])


# Long options with a short spelling, for deny matching ("": any command), and short flags that are
# the same option (GNU coreutils and git).
_LONG_FLAGS: dict[str, dict[str, str]] = {
    "": {"--recursive": "-r", "--force": "-f"},
    **{cmd: {"--recursive": "-R"} for cmd in ("chmod", "chown", "chgrp")},
}
_SAME_FLAGS: dict[str, dict[str, str]] = {"rm": {"-R": "-r"}, "cp": {"-R": "-r"}}


def _options(words: list[str], command: str) -> tuple[set[str], list[str]]:
    """The words after `command`, split into normalised flags (`-rf` → `-r`, `-f`; `--force` → `-f`)
    and the other words in order (everything after `--` is one of those)."""
    longs = {**_LONG_FLAGS[""], **_LONG_FLAGS.get(command, {})}
    same = _SAME_FLAGS.get(command, {})
    flags: set[str] = set()
    others: list[str] = []
    for n, word in enumerate(words):
        if word == "--":
            others += words[n + 1:]
            break
        if word.startswith("--"):
            name = word.split("=", 1)[0]
            flags.add(longs.get(name, name))
        elif word.startswith("-") and len(word) > 1:
            flags.update(same.get(f"-{c}", f"-{c}") for c in word[1:])
        else:
            others.append(word)
    return flags, others


def _in_order(needles: list[str], words: list[str]) -> bool:
    rest = iter(words)
    return all(any(w == n for w in rest) for n in needles)


def _flags_at(words: list[str], i: int, prefix: list[str]) -> bool:
    """`prefix` at `words[i:]` with options compared as flags: the rule's flags are among the command's
    and its other words appear in the command in order."""
    command = _basename(prefix[0])
    if _basename(words[i]) != command:
        return False
    rule_flags, rule_words = _options(prefix[1:], command)
    flags, others = _options(words[i + 1:], command)
    return rule_flags <= flags and _in_order(rule_words, others)


def _deny_matches(command: str, prefix: list[str], depth: int = 0) -> bool:
    """Whether a deny `prefix` matches any simple command in `command`; when unsure, it does.

    Per part: the prefix matches word for word or with options compared as flags (`_flags_at`);
    leading `VAR=value` words and shell keywords are skipped; after a wrapper (`env`, `sudo`,
    `xargs`, `nice`, ...) the prefix may start at any later word; a shell (`sh -c`, `bash`, `eval`)
    has each later word matched as a script of its own.
    """
    if depth > _MAX_NESTING:
        return True
    for words in _segments(command):
        loose = False  # after a wrapper: any later word may be the command
        for i, word in enumerate(words):
            if _prefix_at(words, i, prefix) or _flags_at(words, i, prefix):
                return True
            base = _basename(word)
            scripts = words[i + 1:] if base in _SHELLS else []  # we only get here at a command position
            if any(_deny_matches(s, prefix, depth + 1) for s in scripts) or (
                    base == "eval" and _deny_matches(" ".join(scripts), prefix, depth + 1)):
                return True
            if loose or _ASSIGNMENT.match(word) or word in _KEYWORDS:
                continue
            if base in _WRAPPERS:
                loose = True
                continue
            break
    return False


@dataclass(frozen=True)
class ApprovalPolicy:
    """What to do with calls that need approval, before anyone is asked."""

    mode: str = "ask"
    """`ask`, `auto-edit` (built-in file edits approved; shell and others ask) or `yolo` (all approved)."""
    allow: tuple[str, ...] = ()
    """Rules that approve without asking: tool names or `run_shell:PREFIX`."""
    deny: tuple[str, ...] = ()
    """Rules that refuse, whatever the mode: tool names or `run_shell:PREFIX`."""

    def __post_init__(self) -> None:
        if self.mode not in POLICIES:
            raise ConfigError(f"unknown approval policy {self.mode!r} (choose from {', '.join(POLICIES)})")
        for rule in (*self.allow, *self.deny):
            if not isinstance(rule, str) or not rule.strip() or (
                    rule.startswith(_SHELL_PREFIX) and not _words(rule[len(_SHELL_PREFIX):])):
                raise ConfigError(f"invalid approval rule {rule!r}: a tool name or 'run_shell:COMMAND PREFIX'")

    def denied_by(self, call: ToolCall, tool: Tool) -> str | None:
        """The deny rule matching `call`, or None."""
        command = _command(call) if tool.name == _SHELL_TOOL else None
        for rule in self.deny:
            if rule == tool.name:
                return rule
            if (command is not None and rule.startswith(_SHELL_PREFIX)
                    and _deny_matches(command, _words(rule[len(_SHELL_PREFIX):]))):
                return rule
        return None

    def ways_to_allow(self, tool: Tool) -> str:
        """The `crow run` options that would approve `tool`, for the hint of a denied call (no other)."""
        ways = ["--yes"]
        if self.mode == "ask" and tool.name in _EDIT_TOOLS and tool.source == "builtin":
            ways.append("--approval auto-edit")
        ways.append(f"--allow {tool.name}")
        if tool.name == _SHELL_TOOL:
            ways.append("--allow 'run_shell:COMMAND PREFIX'")
        return ", ".join(ways[:-1]) + " or " + ways[-1]

    def allowed_by(self, call: ToolCall, tool: Tool) -> str | None:
        """The allow rule (or policy) approving `call` without asking, or None."""
        if self.mode == "yolo":
            return "policy yolo"
        if self.mode == "auto-edit" and tool.name in _EDIT_TOOLS and tool.source == "builtin":
            return "policy auto-edit"
        if tool.name in self.allow:
            return tool.name
        command = _command(call) if tool.name == _SHELL_TOOL else None
        if command is None or "$(" in command or "`" in command or _REDIRECT.search(command):
            return None
        prefixes = [_words(r[len(_SHELL_PREFIX):]) for r in self.allow if r.startswith(_SHELL_PREFIX)]
        segments = _segments(command)
        if prefixes and segments and all(any(_starts_with(s, p) for p in prefixes) for s in segments):
            return "allow rules"
        return None


def _command(call: ToolCall) -> str | None:
    try:
        value = json.loads(call.arguments).get("command")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


@dataclass
class Approvals:
    """An `Approver` (see `tools.dispatch`): the policy, plus `ask` for what the policy leaves open.

    Call it as `await approvals(call, tool)`: True to run; raises `ToolDenied` (with the reason the
    model will read) to refuse. Answers of "always" are remembered per tool name for this object's life.
    """

    policy: ApprovalPolicy = field(default_factory=ApprovalPolicy)
    ask: AskFn | None = None
    """The surface's prompt; None when nobody can answer (then calls that would ask are denied)."""
    always: set[str] = field(default_factory=set)
    """Tool names the person approved for the rest of the session."""
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    async def __call__(self, call: ToolCall, tool: Tool) -> bool:
        rule = self.policy.denied_by(call, tool)
        if rule is not None:
            raise ToolDenied(f"{tool.name} was denied by the rule {rule!r}; it was not run. Do not retry it; "
                             "find another way or ask the user")
        if self.policy.allowed_by(call, tool) is not None or tool.name in self.always:
            return True
        if self.ask is None:
            raise ToolDenied(f"{tool.name} needs approval and nobody can approve it here (no terminal); it was "
                             f"not run. The user can allow it with {self.policy.ways_to_allow(tool)}")
        async with self._lock:  # one prompt at a time
            if tool.name in self.always:
                return True
            answer = await self.ask(call, tool)
        if answer == "always":
            self.always.add(tool.name)
            return True
        if answer == "yes":
            return True
        raise ToolDenied(f"the user declined {tool.name}; it was not run. Do not retry it unchanged")


def make_approver(mode: str | None = None, *, allow: Iterable[str] = (), deny: Iterable[str] = (),
                  ask: AskFn | None = None, yes: bool = False) -> Approvals:
    """The `Approver` for a surface: `mode` (default `ask`; `yes=True` means `yolo`), rules, and `ask`.

    Typical use: `make_approver(settings.approval, allow=settings.allow, deny=settings.deny, ask=prompt)`.

    Raises:
        ConfigError: an unknown policy or an empty/invalid rule.
    """
    policy = ApprovalPolicy("yolo" if yes else (mode or "ask"), tuple(allow), tuple(deny))
    return Approvals(policy, ask)


def describe_call(call: ToolCall, limit: int = 4000) -> str:
    """What a prompt should show about a call: the shell command, a diff preview of an edit, or the arguments.

    The one preview of both approval prompts (`crow run`, `crow chat`). At most `limit` characters, without
    terminal control characters (the model wrote them). Reads the file for `edit_file` previews (within the
    workspace); never raises.
    """
    return strip_controls(_describe(call, limit))


def _describe(call: ToolCall, limit: int) -> str:
    try:
        args: Any = json.loads(call.arguments)
    except ValueError:
        args = None
    if not isinstance(args, dict):
        return call.arguments[:limit]
    if call.name == _SHELL_TOOL and isinstance(args.get("command"), str):
        return f"$ {args['command']}"[:limit]
    if call.name == "write_file" and isinstance(args.get("content"), str):
        content = args["content"]
        head = "\n".join(content.splitlines()[:20])
        return f"write {args.get('path')!s} ({len(content.encode())} bytes):\n{head}"[:limit]
    if call.name == "edit_file":
        try:
            from .builtin.edits import unified_diff
            from .workspace import resolve_in_workspace

            file = resolve_in_workspace(str(args["path"]))
            before = file.read_text("utf-8")
            old, new = str(args["old_string"]), str(args["new_string"])
            after = before.replace(old, new) if args.get("replace_all") else before.replace(old, new, 1)
            return unified_diff(before, after, str(args["path"]))[:limit]
        except Exception:
            pass
    return json.dumps(args, ensure_ascii=False)[:limit]
