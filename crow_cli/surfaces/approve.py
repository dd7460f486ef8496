"""A surface's approver, built from its settings here alone, and asking a person on the terminal whether a
tool call may run (yes / no, maybe saying why / always, for the command's prefix or the tool), and what they
answer about a plan the model handed over."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from typing import TYPE_CHECKING, TextIO

from ..tools.approval import (
    Answer,
    Approvals,
    AskFn,
    PlanAnswer,
    Policy,
    Question,
    answer_hint,
    approval_question,
    make_approver,
    parse_answer,
    start_policy,
)

if TYPE_CHECKING:
    from ..config import Settings

__all__ = ["PLAN_HINT", "PLAN_QUESTION", "approver_for", "parse_plan_answer", "start_mode", "terminal_ask"]


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
    leave a blocked reader behind. The answer is read with `tools.approval.parse_answer` (as `crow chat`
    reads it): an empty line (Enter) asks again; end of input answers "no".
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

    async def ask(question: Question) -> Answer:
        err.write(f"\n{question.preview}\n")
        scope = question.scope
        while True:
            err.write(approval_question(question))
            err.flush()
            try:
                line = await read_line()
            except asyncio.CancelledError:  # Ctrl-C or a signal: what follows starts on a line of its own
                err.write("\n")
                err.flush()
                raise
            if line == "":
                err.write("\n")
                return Answer("no")
            answer = parse_answer(line, scope, question.choices)
            if answer is not None:
                return answer
            err.write(answer_hint(scope, question.choices) + "\n")

    return ask
