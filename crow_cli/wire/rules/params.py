"""Request-parameter rules: a parameter dropped, set, renamed or capped where a server refuses it as sent.

Each rule's docstring names the server wording it answers; `wire.change` reads a refusal into them, and
`decides()` says which parameter name or value a rule settles (so a profile never holds two that contradict).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

from ..profiles import REQUEST_CORE
from .base import Rule, is_size

__all__ = ["CORE", "OUTPUT_CAPS", "CapParam", "DropParam", "RenameParam", "SetParam"]

CORE = REQUEST_CORE
"""Body fields no parameter rule touches (the request itself: `profiles.REQUEST_CORE`)."""
OUTPUT_CAPS = ("max_tokens", "max_completion_tokens")
"""The parameters that cap a reply's tokens, under either name (a `rename_param` rule may turn one into the
other)."""


def _param_present(request: dict[str, Any], name: str) -> bool:
    return name not in CORE and name in request


@dataclass(frozen=True)
class DropParam(Rule):
    """Drop the request parameter `target` (vLLM "Extra inputs are not permitted", OpenAI "Unrecognized
    request argument supplied")."""

    op: ClassVar[str] = "drop_param"
    target: str

    def apply(self, request: dict[str, Any]) -> dict[str, Any]:
        if not _param_present(request, self.target):
            return request
        return {k: v for k, v in request.items() if k != self.target}

    def describe(self, before: Any = None) -> str:
        return f"dropped parameter {self.target}"

    def decides(self) -> frozenset[str]:
        """The parameter's name and value: a dropped parameter has neither."""
        return frozenset({f"name {self.target}", f"value {self.target}"})


@dataclass(frozen=True)
class SetParam(Rule):
    """Set the parameter `target`, where the request has it, to `value` (OpenAI "Only the default (1) value is
    supported")."""

    op: ClassVar[str] = "set_param"
    target: str
    value: Any

    def apply(self, request: dict[str, Any]) -> dict[str, Any]:
        if not _param_present(request, self.target):
            return request
        return {**request, self.target: self.value}

    def describe(self, before: Any = None) -> str:
        return f"set parameter {self.target} to {json.dumps(self.value)}"

    def decides(self) -> frozenset[str]:
        """The parameter's value."""
        return frozenset({f"value {self.target}"})


@dataclass(frozen=True)
class RenameParam(Rule):
    """Send the parameter `target` under the name `value` (OpenAI "Use 'max_completion_tokens' instead"); its
    place in the body is kept."""

    op: ClassVar[str] = "rename_param"
    target: str
    value: Any

    def apply(self, request: dict[str, Any]) -> dict[str, Any]:
        if not _param_present(request, self.target) or not isinstance(self.value, str) or self.value in CORE:
            return request
        return {(self.value if k == self.target else k): v for k, v in request.items()}

    def describe(self, before: Any = None) -> str:
        return f"renamed parameter {self.target} to {self.value}"

    def decides(self) -> frozenset[str]:
        """Both names: `max_tokens` → `max_completion_tokens` and back are one decision."""
        return frozenset({f"name {self.target}", f"name {self.value}"})


@dataclass(frozen=True)
class CapParam(Rule):
    """Lower the integer parameter `target` to `value` where it is above it; a reply cap (`OUTPUT_CAPS`) is
    capped under either name (OpenAI "supports at most 16384 completion tokens")."""

    op: ClassVar[str] = "cap_param"
    sized: ClassVar[bool] = True
    target: str
    value: Any

    def apply(self, request: dict[str, Any]) -> dict[str, Any]:
        if not is_size(self.value):
            return request
        out = request
        for name in OUTPUT_CAPS if self.target in OUTPUT_CAPS else (self.target,):
            if name not in CORE and type(out.get(name)) is int and out[name] > self.value:
                out = {**out, name: self.value}
        return out

    def describe(self, before: Any = None) -> str:
        was = f" from {before}" if type(before) is int else ""
        return f"lowered parameter {self.target}{was} to {self.value}"

    def decides(self) -> frozenset[str]:
        """The parameter's value; the reply cap under either name of `OUTPUT_CAPS` is one value (both are capped)."""
        return frozenset({f"value {OUTPUT_CAPS[0] if self.target in OUTPUT_CAPS else self.target}"})
