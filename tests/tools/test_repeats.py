"""tools/repeats.py: the same calls turn after turn.

Properties guarded here:
- only a turn whose calls equal the previous turn's extends the streak; any other turn starts a new one, and
  identical calls within one turn are one turn;
- on the limit-th turn in a row each call is answered without running, quoting what it returned last; one turn
  more sets `stopped`; a limit of 0 never counts;
- arguments are compared as parsed JSON (key order and spacing aside).
"""

from __future__ import annotations

from crow_cli.history import ToolCall
from crow_cli.tools.repeats import RepeatGuard


def turn(guard: RepeatGuard, *calls: ToolCall) -> dict[int, str]:
    verdicts = guard.admit(calls)
    for call in calls:
        if call.index not in verdicts:
            guard.record(call, f"output of {call.id}")
    return verdicts


def test_the_third_turn_in_a_row_is_answered_and_the_fourth_stops() -> None:
    guard = RepeatGuard(3)
    assert turn(guard, ToolCall("a", "read_file", '{"path": "x", "n": 1}')) == {}
    assert turn(guard, ToolCall("b", "read_file", '{"n":1,"path":"x"}')) == {}  # the same, as JSON
    third = turn(guard, ToolCall("c", "read_file", '{"path": "x", "n": 1}'))
    assert "3rd turn in a row calling read_file" in third[0] and "output of b" in third[0]
    assert not guard.stopped
    turn(guard, ToolCall("d", "read_file", '{"path": "x", "n": 1}'))
    assert guard.stopped and "4 turns in a row" in guard.reason()


def test_calls_that_differ_never_count_and_one_turns_twins_are_one_turn() -> None:
    guard = RepeatGuard(3)
    for n in range(6):
        assert turn(guard, ToolCall(str(n), "read_file", f'{{"path": "{n % 2}"}}')) == {}
    twins = [ToolCall("x", "roll", "{}", index=0), ToolCall("y", "roll", "{}", index=1)]
    assert turn(guard, *twins) == {} and turn(guard, *twins) == {}
    assert set(turn(guard, *twins)) == {0, 1}  # the third such turn: both calls answered
    off = RepeatGuard(0)
    assert all(turn(off, ToolCall(str(n), "f", "{}")) == {} for n in range(5)) and not off.stopped


def test_a_call_answered_without_running_keeps_the_last_real_result_quoted() -> None:
    # the dispatcher records every call's result, those the guard answered too: the fourth turn's answer still
    # quotes what the call returned when it last ran, not the third turn's "not run again"
    guard = RepeatGuard(3)
    for n, verdict_expected in enumerate((False, False, True, True)):
        call = ToolCall(str(n), "read_file", '{"path": "x"}')
        verdicts = guard.admit([call])
        assert bool(verdicts) is verdict_expected
        guard.record(call, verdicts.get(call.index, f"output of {n}"))
    assert "returned:\noutput of 1\n" in verdicts[0] and verdicts[0].count("turn in a row") == 1, verdicts[0]
