"""The base of every request rule: a frozen value with `apply(request)`, `describe()` and `decides()`.

A rule is one change to every request a server gets, the same class whether it is known in advance, configured
or learned (`wire.profile` layers them); its stored form is `{"op", "target", "value"}` (`to_json`,
`rules.rule_from_json`). The families live beside this module: parameters, tools, messages, message fields.
"""

from __future__ import annotations

import operator
from typing import Any, ClassVar

__all__ = ["Rule", "is_size", "with_items"]


class Rule:
    """One change to every request: a small class per kind, the same for rules known in advance, configured
    and learned. A rule is a frozen value (compared and hashed by kind and fields); `op` names its kind in the
    stored form `{"op": …, "target": …, "value": …}` (`to_json`, `rule_from_json`).

    Subclasses set `op`, hold `target` (a parameter, keyword or role name) and/or `value` (the value set, the
    new name, the content used, a size) and implement `apply` and `describe`.
    """

    op: ClassVar[str] = ""
    sized: ClassVar[bool] = False
    """Whether `value` is a size (`is_size`): a stored rule with any other value is left out."""
    target: str = ""
    value: Any = None

    def apply(self, request: dict[str, Any]) -> dict[str, Any]:
        """`request` (a Chat Completions body) as sent under this rule: a new dict where anything changed
        (only what changes is copied), `request` itself when the rule does not apply to it."""
        raise NotImplementedError

    def describe(self, before: Any = None) -> str:
        """What the rule does, in words for a notice ("dropped parameter seed"); `before`: the value the
        rule's target had in the refused request, where the words name it (`CapParam`)."""
        raise NotImplementedError

    def valid(self) -> bool:
        """Whether the rule's fields are of a kind it can apply (a rule read back that is not: left out)."""
        return True

    def to_json(self) -> dict[str, Any]:
        """The rule as stored in the learned facts (`wire.facts`, `request_rules`)."""
        return {"op": self.op, "target": self.target, "value": self.value}

    @property
    def key(self) -> str:
        """The rule's key among a profile's values (`ServerProfile.sources`): its kind and target
        (`rule drop_param seed`)."""
        return f"rule {self.op} {self.target}".rstrip()

    def decides(self) -> frozenset[str]:
        """What the rule decides: a later layer's rule replaces every earlier one sharing one of these, so that no
        two rules of a profile contradict each other (`wire.profile.rule_keys`). A rule that decides nothing
        another kind decides: its own `key`."""
        return frozenset({self.key})


def with_items(request: dict[str, Any], key: str, old: list[Any], new: list[Any]) -> dict[str, Any]:
    """`request` with `new` as its `key` list, or `request` itself when every item of `new` is the one of `old`."""
    if len(new) == len(old) and all(map(operator.is_, new, old)):
        return request
    return {**request, key: new}


def is_size(value: Any) -> bool:
    """Whether `value` is a size a rule may hold: an int (no bool) in 1 .. 2**31 - 1."""
    return type(value) is int and 0 < value < 1 << 31

