"""The approval question as the surfaces ask it, and a surface's approver, built from its settings here alone.

The core (`tools.approval`) hands a surface a `Question` and takes back an `Answer`; what a person reads
(`approval_question`, `answer_hint`, `shown_scope`) and how a typed line is read (`parse_answer`) are the
surfaces', here, and every terminal surface asks in one loop (`ask_until_answered`): `crow run` on its
terminal (`terminal_ask`), `crow chat` with prompt-toolkit (`surfaces.ask`) and from piped input. What a
person answers about a plan the model handed over is read here too (`parse_plan_answer`).
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TextIO

from ..text import visible
from ..tools.approval import (
    ASK_CHOICES,
    Answer,
    Approvals,
    AskFn,
    Choice,
    PlanAnswer,
    Policy,
    Question,
    make_approver,
    start_policy,
)

if TYPE_CHECKING:
    from ..config import Settings

__all__ = ["PLAN_HINT", "PLAN_QUESTION", "ReadReply", "answer_hint", "approval_question", "approver_for",
           "ask_until_answered", "parse_answer", "parse_plan_answer", "shown_scope", "start_mode", "terminal_ask"]


def start_mode(settings: Settings, *, yes: bool) -> Policy:
    """The approval policy a surface starts in: the configured one (`ask` when none), `yolo` with `--yes`.

    Raises:
        ConfigError: `yes` with the `read-only` or `plan` policy (`approval.start_policy`: never loosened).
    """
    return start_policy(settings.approval, yes=yes)


def approver_for(settings: Settings, *, yes: bool = False, ask: AskFn | None = None,
                 mode: Policy | None = None) -> Approvals:
    """A surface's approver: the policy it starts in (`start_mode`), the settings' allow and deny rules, and
    its question (`ask`; None: nobody can answer, a call that would ask is refused). Every surface builds
    its approver here, and every command checks its options here before anything slow starts.

    Args:
        mode: the policy to start in instead of the settings' (a `crow mcp` call's own, already settled).

    Raises:
        ConfigError: an unknown policy or an empty or invalid rule; `yes` with the `read-only` or `plan`
            policy.
    """
    return make_approver(settings.approval if mode is None else mode, allow=settings.allow, deny=settings.deny,
                         ask=ask, yes=yes)


_NO_BECAUSE = re.compile(r"(?is)no?(?:[\s,:;]+(.*))?")


def parse_answer(reply: str, scope: tuple[str, ...] = (),
                 choices: tuple[Choice, ...] = ASK_CHOICES) -> Answer | None:
    """The answer a typed line means (any case, outer spaces ignored): `y`/`yes`; `a`/`always` (for the
    command prefixes `scope` when the question offered them, else for the tool); `t`/`tool` (always, for
    the tool); `n`/`no`, or `n REASON` / `no, REASON` (no, and the model reads REASON). An "always" the
    question does not offer (`choices`: the question about running outside the sandbox offers yes and no
    only) is no answer. None for anything else, an empty line (Enter) included: the question is asked
    again. Every terminal surface uses it."""
    text = reply.strip()
    word = text.lower()
    if word in ("y", "yes"):
        return Answer("yes")
    if word in ("a", "always", "t", "tool") and "always" not in choices:
        return None
    if word in ("a", "always"):
        return Answer("always", scope)
    if word in ("t", "tool"):
        return Answer("always")
    matched = _NO_BECAUSE.fullmatch(text)
    if matched is not None:
        return Answer("no", reason=" ".join((matched.group(1) or "").split()))
    return None


def answer_hint(scope: tuple[str, ...] = (), choices: tuple[Choice, ...] = ASK_CHOICES) -> str:
    """The line said when a reply is no answer (`parse_answer` gave None), before the question again."""
    if "always" not in choices:
        return "(answer y or n)"
    always = "a (always for this command), t (always for the tool)" if scope else "a (always)"
    return f"(answer y, n or n REASON, {always})"


def shown_scope(scope: tuple[str, ...]) -> str:
    """`("pytest", "git status")` → `` `pytest …`, `git status …` ``, as every surface's question shows it."""
    return ", ".join(f"`{visible(prefix)} …`" for prefix in scope)


def approval_question(question: Question) -> str:
    """What the terminal surfaces ask about `question`: `Allow NAME? [y]es / [n]o [reason] / [a]lways for
    NAME: `, or, when its "always" is scoped to the call's command prefixes (`Question.scope`), `Allow
    NAME? [y]es / [n]o [reason] / [a]lways for `pytest …` / always for the [t]ool: `. About running a call
    outside the sandbox (`Question.outside`), which any yes approves only once, `Run it outside the
    sandbox this once? [y]es / [n]o: `."""
    name = question.tool.name
    if question.outside:
        return "Run it outside the sandbox this once? [y]es / [n]o: "
    if question.scope:
        shown = shown_scope(question.scope)
        return f"Allow {name}? [y]es / [n]o [reason] / [a]lways for {shown} / always for the [t]ool: "
    return f"Allow {name}? [y]es / [n]o [reason] / [a]lways for {name}: "


ReadReply = Callable[[str, str | None], Awaitable[str | None]]
"""How a surface reads one reply: shown the question's text and, when the last reply was no answer, the hint
before it (`answer_hint`), it returns the line typed, or None at the end of input (a no)."""


async def ask_until_answered(question: Question, read: ReadReply) -> Answer:
    """Ask `question` (`approval_question`) with `read` until a reply is an answer (`parse_answer`); a reply that
    is none (an empty line included) asks again after the hint; the end of input answers "no"."""
    text = approval_question(question)
    hint: str | None = None
    while True:
        reply = await read(text, hint)
        if reply is None:
            return Answer("no")
        answer = parse_answer(reply, question.scope, question.choices)
        if answer is not None:
            return answer
        hint = answer_hint(question.scope, question.choices)


PLAN_QUESTION = "Approve the plan? [a] yes, edits apply / [y] yes, ask first / [n NOTE] keep planning: "
"""What the chat asks about a plan the model handed over (`exit_plan_mode`)."""
PLAN_HINT = "(answer a, y, or n with what to change)"
"""Said when a reply is no answer to `PLAN_QUESTION`, before it is asked again."""
_KEEP = re.compile(r"(?is)(?:n|no|k|keep)(?:[\s,:;]+(.*))?")


def parse_plan_answer(reply: str) -> PlanAnswer | None:
    """The answer a typed line means about a plan (any case, outer spaces ignored): `a` / `approve` /
    `auto-edit` (approve, go on in auto-edit); `y` / `yes` (approve, go on asking); `n` / `no` / `keep`,
    maybe followed by what to change (keep planning). None for anything else, an empty line included."""
    text = reply.strip()
    word = text.lower()
    if word in ("a", "approve", "auto", "auto-edit"):
        return PlanAnswer("auto-edit")
    if word in ("y", "yes", "ask"):
        return PlanAnswer("ask")
    matched = _KEEP.fullmatch(text)
    if matched is not None:
        return PlanAnswer("keep", " ".join((matched.group(1) or "").split()))
    return None


def terminal_ask(stdin: TextIO | None = None, err: TextIO | None = None) -> AskFn | None:
    """An `AskFn` prompting on `err` and reading a line from `stdin`, or None when either is not a terminal.

    The line is read without a thread (the event loop watches stdin), so Ctrl-C and cancellation never
    leave a blocked reader behind. The answer is read as every terminal surface reads it
    (`ask_until_answered`): an empty line (Enter) asks again; end of input answers "no".
    """
    stdin = stdin or sys.stdin
    err = err or sys.stderr
    if stdin is None or err is None or not stdin.isatty() or not err.isatty():
        return None
    fd = stdin.fileno()

    async def read_line() -> str:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[str] = loop.create_future()

        def readable() -> None:
            if not done.done():
                done.set_result(os.read(fd, 4096).decode("utf-8", "replace"))

        loop.add_reader(fd, readable)
        try:
            return await done
        finally:
            loop.remove_reader(fd)

    async def read_reply(text: str, hint: str | None) -> str | None:
        err.write(f"{hint}\n{text}" if hint else text)
        err.flush()
        try:
            line = await read_line()
        except asyncio.CancelledError:  # Ctrl-C or a signal: what follows starts on a line of its own
            err.write("\n")
            err.flush()
            raise
        if line == "":
            err.write("\n")
            return None
        return line

    async def ask(question: Question) -> Answer:
        err.write(f"\n{question.preview}\n")
        return await ask_until_answered(question, read_reply)

    return ask
