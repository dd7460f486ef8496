"""The approval question as the surfaces ask it and read its answer (`surfaces.approve`), and `crow run`'s on a
terminal (`terminal_ask`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pty

import pytest

from crow_cli.history import ToolCall
from crow_cli.surfaces.approve import answer_hint, approval_question, ask_until_answered, parse_answer
from crow_cli.tools.approval import OUTSIDE_CHOICES, Answer, Question, always_scope
from crow_cli.tools.builtin import BUILTIN_TOOLS
from crow_cli.tools.tool import tool

TOOLS = {t.name: t for t in BUILTIN_TOOLS}


@tool(needs_approval=True)
def guarded(text: str) -> str:
    """Needs approval."""
    return text


# A question cut by a signal (Ctrl-C at `crow run`'s question) ends its line, so the next stderr line
# ("crow: interrupted") starts on a line of its own
async def test_a_question_cut_by_a_signal_ends_its_line() -> None:
    from crow_cli.surfaces.approve import terminal_ask

    master, slave = pty.openpty()
    with os.fdopen(slave, "r", closefd=False) as stdin, os.fdopen(slave, "w", closefd=False) as err:
        ask = terminal_ask(stdin, err)
        assert ask is not None
        call = ToolCall(id="c1", name="guarded", arguments="{}")
        asking = asyncio.ensure_future(ask(Question(call, guarded, "$ go")))
        shown = b""
        while b"Allow guarded?" not in shown:
            shown += await asyncio.to_thread(os.read, master, 4096)
        asking.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asking
        err.write("NEXT LINE")  # what crow prints next
        err.flush()
        while b"NEXT LINE" not in shown:
            shown += await asyncio.to_thread(os.read, master, 4096)
    os.close(slave)
    os.close(master)
    assert shown.endswith(b"for guarded: \r\nNEXT LINE"), shown


async def test_the_terminal_question_offers_the_command_prefix_and_reads_a_reason() -> None:
    from crow_cli.surfaces.approve import terminal_ask
    from crow_cli.tools.approval import Answer
    from crow_cli.tools.builtin import BUILTIN_TOOLS

    shell = next(t for t in BUILTIN_TOOLS if t.name == "run_shell")
    master, slave = pty.openpty()
    with os.fdopen(slave, "r", closefd=False) as stdin, os.fdopen(slave, "w", closefd=False) as err:
        ask = terminal_ask(stdin, err)
        assert ask is not None
        answers = []
        call = ToolCall(id="c1", name="run_shell", arguments='{"command": "pytest -k x"}')
        for typed in (b"a\n", b"n run the tests first\n"):
            asking = asyncio.ensure_future(ask(Question(call, shell, "$ pytest -k x", scope=("pytest",))))
            shown = b""
            while not shown.endswith(b"/ always for the [t]ool: "):
                shown += await asyncio.to_thread(os.read, master, 4096)
            assert b"[a]lways for `pytest \xe2\x80\xa6`" in shown
            os.write(master, typed)
            answers.append(await asking)
        # a reply that is no answer ("nope") is asked again with a hint of the answers it takes
        asking = asyncio.ensure_future(ask(Question(call, shell, "$ pytest -k x", scope=("pytest",))))
        shown = b""
        for typed in (b"nope\n", b"y\n"):
            while not shown.endswith(b"/ always for the [t]ool: "):
                shown += await asyncio.to_thread(os.read, master, 4096)
            os.write(master, typed)
            shown = shown if typed == b"y\n" else b""
        answers.append(await asking)
        hint = b"(answer y, n or n REASON, a (always for this command), t (always for the tool))"
    os.close(slave)
    os.close(master)
    assert answers == [Answer("always", ("pytest",)), Answer("no", reason="run the tests first"), Answer("yes")]
    assert hint in shown


async def test_the_question_about_running_outside_the_sandbox_takes_yes_or_no_only() -> None:
    # `a` at "Run it outside the sandbox this once? [y]es / [n]o:" is no answer: the question is asked again, and
    # only yes or no ends it
    from crow_cli.surfaces.approve import terminal_ask
    from crow_cli.tools.approval import OUTSIDE_CHOICES, Answer

    master, slave = pty.openpty()
    with os.fdopen(slave, "r", closefd=False) as stdin, os.fdopen(slave, "w", closefd=False) as err:
        ask = terminal_ask(stdin, err)
        assert ask is not None
        call = ToolCall(id="c1", name="guarded", arguments="{}")
        asking = asyncio.ensure_future(ask(Question(call, guarded, "$ go", OUTSIDE_CHOICES, outside=True)))
        shown = b""
        for typed in (b"a\n", b"n\n"):
            while not shown.endswith(b": "):
                shown += await asyncio.to_thread(os.read, master, 4096)
            os.write(master, typed)
            shown = b"" if typed == b"n\n" else shown + await asyncio.to_thread(os.read, master, 4096)
        answer = await asking
    os.close(slave)
    os.close(master)
    assert answer == Answer("no")


def test_a_typed_answer_about_a_plan_approves_in_a_mode_or_keeps_planning_with_a_note() -> None:
    from crow_cli.surfaces.approve import parse_plan_answer
    from crow_cli.tools.approval import PlanAnswer

    assert parse_plan_answer(" A ") == parse_plan_answer("auto-edit") == PlanAnswer("auto-edit")
    assert parse_plan_answer("y") == parse_plan_answer("Yes") == PlanAnswer("ask")
    assert parse_plan_answer("n") == PlanAnswer("keep")
    assert parse_plan_answer("no, split  step 2") == parse_plan_answer("n split step 2") == PlanAnswer(
        "keep", "split step 2")
    assert parse_plan_answer("") is None and parse_plan_answer("maybe") is None


@pytest.mark.parametrize(("reply", "answer"), [
    ("y", "yes"), ("YES\n", "yes"), (" n ", "no"), ("No", "no"), ("a", "always"), ("always\n", "always"),
    ("", None), ("\n", None), ("maybe", None), ("ye", None), ("nope", None), ("not now", None),
])
def test_one_answer_parser_and_enter_asks_again(reply: str, answer: str | None) -> None:
    # one answer parser: Enter asks again, in chat as in run
    parsed = parse_answer(reply)
    assert (parsed.choice if parsed is not None else None) == answer
    assert parsed is None or (parsed.scope, parsed.reason) == ((), "")


@pytest.mark.parametrize(("reply", "answer"), [
    ("a", Answer("always", ("pytest",))), ("ALWAYS", Answer("always", ("pytest",))), ("t", Answer("always")),
    ("tool", Answer("always")), ("y", Answer("yes")), ("n", Answer("no")),
    ("n run the tests first", Answer("no", reason="run the tests first")),
    ("No, Run The Tests  first ", Answer("no", reason="Run The Tests first")),
    ("no: use make", Answer("no", reason="use make")), ("n:", Answer("no")),
])
def test_answers_carry_a_scope_and_a_reason(reply: str, answer: Answer) -> None:
    assert parse_answer(reply, ("pytest",)) == answer


@pytest.mark.parametrize("reply", ["a", "always", "t", "tool"])
def test_the_question_about_running_outside_offers_no_always(reply: str) -> None:
    # the question about running outside the sandbox offers no always: `a` is no answer to it
    assert parse_answer(reply, (), OUTSIDE_CHOICES) is None
    assert parse_answer("y", (), OUTSIDE_CHOICES) == Answer("yes")
    assert answer_hint((), OUTSIDE_CHOICES) == "(answer y or n)"


def test_the_question_offers_always_for_the_command_prefix() -> None:
    shell = TOOLS["run_shell"]
    call = ToolCall("c1", "run_shell", '{"command": "pytest -k x"}')
    scope = always_scope(call, shell)
    assert approval_question(Question(call, shell, "$ pytest -k x", scope=scope)) == (
        "Allow run_shell? [y]es / [n]o [reason] / [a]lways for `pytest …` / always for the [t]ool: ")
    assert approval_question(Question(ToolCall("c2", "write_file", "{}"), TOOLS["write_file"], "")) == (
        "Allow write_file? [y]es / [n]o [reason] / [a]lways for write_file: ")


async def test_every_surface_asks_until_a_reply_is_an_answer_and_the_end_of_input_is_a_no() -> None:
    # run's terminal, chat's prompt and chat's piped input read replies in this one loop
    question = Question(ToolCall("c1", "guarded", "{}"), guarded, "$ go")
    replies = ["", "maybe", "n use make"]
    shown: list[tuple[str, str | None]] = []

    async def read(text: str, hint: str | None) -> str | None:
        shown.append((text, hint))
        return replies.pop(0) if replies else None

    assert await ask_until_answered(question, read) == Answer("no", reason="use make")
    asked = "Allow guarded? [y]es / [n]o [reason] / [a]lways for guarded: "
    hint = "(answer y, n or n REASON, a (always))"
    assert shown == [(asked, None), (asked, hint), (asked, hint)]
    assert await ask_until_answered(question, read) == Answer("no")
