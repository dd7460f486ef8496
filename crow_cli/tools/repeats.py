"""A model that makes the same call again and again: told so on the third time, stopped on the fourth.

Small local models loop: `read_file {"path": "a.py"}`, the same result, the same call. A turn whose calls
are the same as the previous turn's (same names, same arguments, arguments compared as parsed JSON) extends
a streak; any other turn starts a new one. On the `limit`-th turn in a row (3 by default) its calls are not
run: each gets a result saying so, with what the call returned the last time, so the model can act on it.
One turn more and `stopped` is set: the loop ends the run with one line to the person. Calls that differ are
never counted; identical calls within one turn (two dice rolls) are one turn's business, not a loop.
Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..history import ToolCall
from ..text import truncate_output

__all__ = ["RepeatGuard"]

_SHOWN = 1500
"""Characters of the last result quoted back to the model."""


def _signature(call: ToolCall) -> tuple[str, str]:
    try:
        arguments: Any = json.loads(call.arguments)
    except ValueError:
        arguments = call.arguments
    return call.name, json.dumps(arguments, sort_keys=True, ensure_ascii=False)


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


@dataclass
class RepeatGuard:
    """The run's streak of identical tool turns (see the module). One per run, fed every turn in order."""

    limit: int = 3
    """The turn in a row whose calls are answered without running; 0 turns the guard off."""
    stopped: bool = False
    """A turn went past `limit`: the run should end (the loop says so)."""
    _last: tuple[tuple[str, str], ...] | None = None
    _streak: int = 0
    _outputs: dict[tuple[str, str], str] = field(default_factory=dict)
    _not_run: frozenset[int] = frozenset()

    def admit(self, calls: Iterable[ToolCall]) -> dict[int, str]:
        """Count one turn's calls; return, by call index, the result text of each call not to run (none when
        the streak is below the limit)."""
        calls = list(calls)
        self._not_run = frozenset()
        signatures = tuple(dict.fromkeys(_signature(c) for c in calls))
        if not self.limit or not signatures:
            return {}
        self._streak = self._streak + 1 if signatures == self._last else 1
        if signatures != self._last:
            self._outputs = {}
        self._last = signatures
        if self._streak < self.limit:
            return {}
        if self._streak > self.limit:
            self.stopped = True
        verdicts = {}
        for call in calls:
            last = self._outputs.get(_signature(call))
            got = f" The last time it returned:\n{truncate_output(last, _SHOWN)}" if last is not None else ""
            verdicts[call.index] = (f"this is the {_ordinal(self._streak)} turn in a row calling {call.name} with "
                                    f"the same arguments, so it was not run again.{got}\nUse that result, change "
                                    "the arguments, or answer without this call.")
        self._not_run = frozenset(verdicts)
        return verdicts

    def record(self, call: ToolCall, output: str) -> None:
        """Keep what `call` returned, to quote it back when the call is repeated. A call of this turn that
        `admit` answered without running keeps the result it had when it last ran."""
        if self.limit and call.index not in self._not_run:
            self._outputs[_signature(call)] = output

    def reason(self) -> str:
        """The one line the person reads when the guard stopped the run."""
        return (f"stopped: the model made the same tool call {self._streak} turns in a row (--max-repeats "
                f"{self.limit}); it is stuck in a loop")
