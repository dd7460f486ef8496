"""One server's profile: what crow knows of a base URL + model, built from layers, each value with its layer.

`build_profile` is the one place a `ServerProfile` is made, from three layers, later ones overriding earlier
ones key by key: `built-in` (provider knowledge kept as data), `config` (the `[provider]` table) and `learned`
(what the server taught earlier runs). Each value says which layer it came from and what it replaced
(`crow probe --show`, `--debug`). Pure: the caller reads and writes the facts; no I/O here. Built once per
client, never per request.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from ..errors import ProviderError
from ..text import short_text
from .change import Change
from .profiles import PROFILE_FIELDS, REASONING_FIELDS, profile_for
from .refusal import value_refused
from .rules import (
    DropParam,
    FieldRule,
    Rule,
    SetParam,
    field_facts,
    field_rules,
    known_rules,
    rules_from_json,
)

__all__ = ["CALL_FORMATS", "LAYERS", "TOOL_OUTCOMES", "TOOL_POINTS", "Kept", "Layer", "ServerProfile",
           "build_profile", "rule_key", "rule_keys", "tool_probe_words"]

Kept = Literal["once", "run", "remembered"]
"""How long a change `ServerProfile.learn` took holds: this request, this run, or remembered for later runs."""
Layer = Literal["built-in", "config", "learned"]
"""Where a value of a profile came from."""
LAYERS: tuple[Layer, ...] = ("built-in", "config", "learned")
"""The layers, earliest first: a later one overrides an earlier one key by key."""
TOOL_POINTS: dict[str, str] = {"one": "one call", "typed": "typed argument", "two": "two calls"}
"""The points of `crow probe --tools` (`probe.tools`), by the key their outcome is stored under, with their words."""
TOOL_OUTCOMES: dict[str, str] = {"native": "native call", "recovered": "recovered call", "none": "no call",
                                 "malformed": "malformed"}
"""What a point of `crow probe --tools` found, by its stored code, with its words: a call streamed as a call, a
call crow read from the text (`wire.textcalls`), no call, or a call whose arguments fail the tool's schema."""
CALL_FORMATS = ("hermes", "mistral", "llama3", "harmony", "json")
"""The text formats tool calls are recovered from (`wire.textcalls.Recovered.format`)."""


@dataclass(frozen=True)
class ServerProfile:
    """What crow knows of one server and model before sending it anything, each value from its layer.

    Attributes:
        name: the built-in provider profile matched by host (`profiles.PROFILES`), "generic" for any other.
        needs_key: the API refuses every request without a key.
        reasoning_fields: delta fields that carry reasoning text.
        tool_message_name: True: tool messages carry the function `name`; False: never; None: as stored.
        refused_fields: message / tool-call fields the server refuses (never sent).
        required_fields: reasoning fields wanted on every assistant message.
        tool_call_id_rule: the tool-call id shape the server demands of ids other models wrote
            (`{"chars": …, "length": …}`, `wire.outgoing`), or None.
        request_rules: the rules applied to every request (`wire.rules`), in order.
        recover_tool_calls: tool calls left in a turn's text are recovered (`wire.textcalls`).
        wire_api: the endpoint turns go to: `chat` or `responses` (`profiles.WIRE_APIS`).
        tool_probe: what `crow probe --tools` found, per point (`TOOL_POINTS` key -> `TOOL_OUTCOMES` code), or
            None: never probed. Learned only.
        text_call_format: the text format (`CALL_FORMATS`) this model's tool calls were last recovered from
            (`crow probe --tools`, or a run that recovered calls), or None: none recovered. Learned only.
        sources: the layer of each value, by key: a field name, or `rule_key(rule)` for a request rule.
        replaced: what each value replaced, by the same key: (layer, the earlier value or `Rule`) pairs, earliest
            first; a key whose value no later layer changed is absent.
    """

    name: str = "generic"
    needs_key: bool = False
    reasoning_fields: tuple[str, ...] = REASONING_FIELDS
    tool_message_name: bool | None = None
    refused_fields: tuple[str, ...] = ()
    required_fields: tuple[str, ...] = ()
    tool_call_id_rule: Mapping[str, Any] | None = None
    request_rules: tuple[Rule, ...] = ()
    recover_tool_calls: bool = True
    wire_api: str = "chat"
    tool_probe: Mapping[str, str] | None = None
    text_call_format: str | None = None
    sources: Mapping[str, Layer] = field(default_factory=dict)
    replaced: Mapping[str, tuple[tuple[Layer, Any], ...]] = field(default_factory=dict)
    _run: _Run = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_run", _Run([r for r in self.request_rules if not isinstance(r, FieldRule)]))

    @property
    def rules(self) -> list[Rule]:
        """The request rules applied to the body of the request being sent, in order: those of every request
        (known before the run, then learned in it), a configured value set for this run, this request's."""
        run = self._run
        return [*run.rules, *run.run_only, *run.once]

    @property
    def every_request(self) -> list[Rule]:
        """The request rules of every request: known before the run, then learned in it."""
        return list(self._run.rules)

    @property
    def unsaved(self) -> bool:
        """Whether a change learned in this run is still to be remembered (once a request with it is accepted)."""
        return self._run.unsaved

    @property
    def why(self) -> str:
        """The last refusal that taught this profile something (stored as the facts' `why`)."""
        return self._run.why

    def new_request(self) -> None:
        """Forget the changes that held for the last request only (`Change.once`)."""
        self._run.once = []

    def learn(self, change: Change, *, status: int, text: str, params: Mapping[str, Any],
              params_from: str | None = None) -> Kept | None:
        """Take `change`, read from a refusal (`status`, its body `text`) of a request sent with `params` (the
        user's): how long it holds (`Kept`: a value the user configured, or a change never `learned`, this run
        only), or None when it teaches nothing new. A message-field change is the caller's to apply.

        Raises:
            ProviderError: the change would drop a value the user configured, refused for its value (out of
                range, a typo): theirs to fix (`params_from` names where it is set), never dropped on a
                server's word.
        """
        run = self._run
        if change.fields:
            if change.learned:
                new = [r for r in change.rules if isinstance(r, FieldRule)]
                run.fields = [r for r in run.fields if r.slot not in {n.slot for n in new}] + new
            kept: list[Rule] = []
        else:
            _refused_value(status, text, change, params, params_from)
            configured = all(isinstance(r, SetParam) and r.target in params for r in change.rules)
            kept = run.once if change.once else run.run_only if configured or not change.learned else run.rules
            if all(r in kept for r in change.rules):
                return None
            kept += [r for r in change.rules if r not in kept]
        if not change.learned:  # adapting is off: crow's own `stream_options` just goes unsent, never remembered
            return "run"
        run.why = f"{status}: {short_text(' '.join(text.split()), 200)}"
        if change.once:
            return "once"
        if kept is run.run_only:
            return "run"
        run.unsaved = True
        return "remembered"

    def learned(self) -> list[Rule]:
        """The rules learned in this run to remember, in order: request rules, then message-field rules."""
        return [*self._run.rules[self._run.known:], *self._run.fields]

    def remembered(self, stored: Mapping[str, Any]) -> dict[str, Any]:
        """The facts to store (`wire.facts.learn`) for what this run learned, given the endpoint's `stored` facts
        (`wire.facts.recall`): every rule as a request rule, message-field rules too; a stored rule deciding
        what a new one decides is replaced; message facts of the old form (`refused_fields` …) become rules,
        their lists emptied, their other keys None (`wire.facts.learn` removes them). Marks the profile saved."""
        self._run.unsaved = False
        new = self.learned()
        decided = set().union(*(_decides(r) for r in new))
        old = [*field_rules(stored), *rules_from_json(stored.get("request_rules"))]
        rules = [r for r in old if not _decides(r) & decided] + new
        out: dict[str, Any] = {"request_rules": [r.to_json() for i, r in enumerate(rules) if r not in rules[:i]]}
        if stored.get("refused_fields") or stored.get("required_fields"):
            out |= {"refused_fields": [], "required_fields": []}
        out |= {key: None for key in ("tool_message_name", "tool_call_id_rule") if key in stored}  # now rules
        return out

    def source(self, key: str) -> Layer:
        """The layer the value of `key` (a field name or a `rule_key`) came from; "built-in" for a default."""
        return self.sources.get(key, "built-in")

    def runs_no_tool_call(self) -> bool:
        """Whether the stored tool probe says no call of this model would run: every point came back with no call
        or a malformed one (False when never probed)."""
        return bool(self.tool_probe) and all(v in ("none", "malformed") for v in (self.tool_probe or {}).values())

    def message_facts(self) -> dict[str, Any]:
        """The message policy, in `wire.outgoing.Outgoing(known=…)` form."""
        facts: dict[str, Any] = {"refused_fields": list(self.refused_fields),
                                 "required_fields": list(self.required_fields)}
        if self.tool_message_name is not None:
            facts["tool_message_name"] = self.tool_message_name
        if self.tool_call_id_rule is not None:
            facts["tool_call_id_rule"] = dict(self.tool_call_id_rule)
        return facts

    def entries(self) -> list[dict[str, Any]]:
        """Each value of the profile as `{"key", "value", "text", "layer", "replaced"}`, fields first, then the
        request rules in order: what `crow probe --show` prints, and `--json` as it is. `value` is JSON (a
        rule's stored form, `Rule.to_json`), `text` the same in words, `replaced` the earlier layers' values it
        replaced (`{"layer", "value", "text"}`). A field no layer set to anything (no names, None) is left out;
        one a layer set is shown, an empty list too."""
        out: list[dict[str, Any]] = []
        for f in fields(self):
            if f.name not in ("request_rules", "sources", "replaced", "_run") and _shown(getattr(self, f.name),
                                                                                self.source(f.name)):
                out.append(self._entry(f.name, getattr(self, f.name)))
        out += [self._entry(rule_key(rule), rule) for rule in self.request_rules]
        return out

    def _entry(self, key: str, value: Any) -> dict[str, Any]:
        return {"key": key, **_value(value), "layer": self.source(key),
                "replaced": [{"layer": layer, **_value(old)} for layer, old in self.replaced.get(key, ())]}

    def described(self) -> list[tuple[str, str, str]]:
        """Each value as (key, value in words, where it came from in words: its layer, and what of an earlier
        layer it replaced), as `entries` orders them: what `crow probe --show` and `--debug` print."""
        out = []
        for entry in self.entries():
            came = entry["layer"] + "".join(f", replacing {old['layer']}: {old['text']}" for old in entry["replaced"])
            out.append((entry["key"], entry["text"], came))
        return out


@dataclass
class _Run:
    """What a client learned of its server in this run (`ServerProfile.learn`)."""

    rules: list[Rule]
    """The request rules of every request: known before the run (the first `known`), then learned."""
    known: int = -1
    run_only: list[Rule] = field(default_factory=list)
    """A value the user configured, set to the one the server names: this run only, never stored."""
    once: list[Rule] = field(default_factory=list)
    """Changed in the request being sent only (the room its prompt leaves)."""
    fields: list[FieldRule] = field(default_factory=list)
    """Message-field rules learned in this run."""
    unsaved: bool = False
    why: str = ""

    def __post_init__(self) -> None:
        if self.known < 0:
            self.known = len(self.rules)


def _decides(rule: Rule) -> frozenset[str]:
    """What a stored rule decides (`rule_keys`; a message-field rule's `slot` too): a newer one replaces it."""
    return rule_keys(rule) | ({rule.slot} if isinstance(rule, FieldRule) else set())


def _refused_value(status: int, text: str, change: Change, params: Mapping[str, Any], where: str | None) -> None:
    """Raise the one-line error for a change that would drop a value the user configured for its value."""
    for rule in change.rules:
        if isinstance(rule, DropParam) and rule.target in params and value_refused(text, rule.target,
                                                                                   params[rule.target]):
            where = where or "[params] or [profiles.NAME.params] of your config, or the flag that sets it"
            raise ProviderError(
                f"the server refused {rule.target} = "
                f"{short_text(json.dumps(params[rule.target], ensure_ascii=False), 40)} ({status}): {change.why}; "
                f"fix it in {where}", status=status)


def _shown(value: Any, layer: Layer) -> bool:
    """Whether a field's value says something: any value a layer set, a built-in one unless empty."""
    return layer != "built-in" or value not in ((), None)


def _value(value: Any) -> dict[str, Any]:
    """A field value or rule as `{"value": JSON, "text": words}`."""
    if isinstance(value, Mapping) and value and set(value) <= set(TOOL_POINTS):  # a tool probe: in words
        return {"value": dict(value), "text": tool_probe_words(value)}
    if isinstance(value, Rule):
        return {"value": value.to_json(), "text": f"{value.describe()} ({type(value).__name__})"}
    shown = list(value) if isinstance(value, tuple) else dict(value) if isinstance(value, Mapping) else value
    return {"value": shown, "text": json.dumps(shown)}


def tool_probe_words(outcomes: Mapping[str, Any]) -> str:
    """A stored tool probe in words, point by point: `one call: native call; typed argument: no call; …`."""
    return "; ".join(f"{TOOL_POINTS[p]}: {TOOL_OUTCOMES.get(str(outcomes[p]), str(outcomes[p]))}"
                     for p in TOOL_POINTS if p in outcomes)


def rule_key(rule: Rule) -> str:
    """The key of a request rule among a profile's values (`sources`, `replaced`): its kind and target
    (`rule drop_param seed`)."""
    return rule.key


def rule_keys(rule: Rule) -> frozenset[str]:
    """What a request rule decides: a later layer's rule replaces every earlier rule sharing one of these, so
    that no two rules of a profile contradict each other. A parameter's name (`name P`) is decided by dropping
    or renaming it (both names of a rename: `max_tokens` → `max_completion_tokens` and back are one
    decision), its value (`value P`) by dropping, setting or capping it, the reply cap under either name of
    `rules.OUTPUT_CAPS` being one value (`CapParam` caps both), a message field (`field F`) by dropping or
    requiring it; any other rule decides its own `rule_key`. Each rule class says so itself (`Rule.decides`)."""
    return rule.decides()


def _builtin(base_url: str, model: str) -> dict[str, Any]:
    known = profile_for(base_url)
    values: dict[str, Any] = {f.name: getattr(known, f.name) for f in fields(known) if f.name != "hosts"}
    values["request_rules"] = known_rules(base_url, model)
    return values


def _configured(table: Mapping[str, Any]) -> dict[str, Any]:
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in table.items() if k in PROFILE_FIELDS}
    if "request_rules" in table:
        values["request_rules"] = rules_from_json(table["request_rules"])
    return values


def _learned(facts: Mapping[str, Any]) -> dict[str, Any]:
    """The profile's keys among learned facts (`wire.facts` form; already checked when read). An empty list
    learned nothing (every adapted run stores its lists): it never replaces a configured one."""
    stored = rules_from_json(facts.get("request_rules"))
    slots: dict[str, FieldRule] = {}  # the old form first, the rules after: a later rule of a slot wins
    for rule in [*field_rules(facts), *(r for r in stored if isinstance(r, FieldRule))]:
        slots.pop(rule.slot, None)
        slots[rule.slot] = rule
    fields_of = field_facts(slots.values())
    values: dict[str, Any] = {}
    for key in ("refused_fields", "required_fields"):
        if fields_of[key]:
            values[key] = tuple(fields_of[key])
    for key in ("tool_message_name", "tool_call_id_rule"):
        if key in fields_of:
            values[key] = fields_of[key]
    rules = [r for r in stored if not isinstance(r, FieldRule)]
    if isinstance(facts.get("tool_probe"), Mapping) and facts["tool_probe"]:
        values["tool_probe"] = dict(facts["tool_probe"])
    if facts.get("text_call_format") in CALL_FORMATS:
        values["text_call_format"] = facts["text_call_format"]
    if facts.get("usage_option_refused") is True:  # what `crow probe` found: no stream_options to send
        rules.append(DropParam("stream_options"))
    if rules:
        values["request_rules"] = rules
    return values


def build_profile(base_url: str, model: str, provider: Mapping[str, Any] | None = None,
                  learned: Mapping[str, Any] | None = None, *, rules: bool = True) -> ServerProfile:
    """The profile of the server at `base_url` for `model`: the built-in layer, the config's `[provider]` table
    (`provider`), then the `learned` facts (`wire.facts.recall`), later layers overriding earlier ones key by
    key (module docstring; a request rule replaces the earlier ones that decide the same, `rule_keys`, in the
    place of the first). `rules=False` (`adapt_requests = false`): no built-in or learned request rule; the
    configured ones are the user's and always apply.

    The layers:

    1. `built-in`: `profiles.PROFILES` (by the base URL's host) and `profiles.KNOWN_REQUEST_RULES` (by host, or
       `:PORT`, and model-name prefix);
    2. `config`: the config's `[provider]` table, request rules included (checked when the config is read:
       `profiles.check_overrides`, `rules_problem`);
    3. `learned`: what the server taught earlier runs and `crow probe` (`wire.facts.recall`).

    A key is a field of `ServerProfile` (`refused_fields`, `tool_message_name` …) or one request rule, keyed by
    what it decides (`rule_keys`): a learned `CapParam("max_tokens", 4096)` replaces a built-in or configured
    reply cap (under either name), a configured `DropParam("max_tokens")` replaces a built-in
    `RenameParam("max_tokens", …)`, a learned `DropParam("seed")` joins the built-in rules; no two rules of a
    profile decide the same thing. `ServerProfile.sources` says which layer each value came from and
    `ServerProfile.replaced` what it replaced. The configured rules are the user's: they apply whether or not
    crow adapts requests (`adapt_requests`). A learned message-field rule becomes the profile's field it decides
    (`refused_fields` …). `ServerProfile.learn` keeps what a client learns in its run and `remembered` says what
    to store.
    """
    values: dict[str, Any] = {}
    sources: dict[str, Layer] = {}
    replaced: dict[str, tuple[tuple[Layer, Any], ...]] = {}
    kept: list[tuple[Rule, Layer]] = []
    layers: tuple[tuple[Layer, dict[str, Any]], ...] = (
        ("built-in", _builtin(base_url, model)), ("config", _configured(provider or {})),
        ("learned", _learned(learned or {})))
    for layer, entries in layers:
        for key, value in entries.items():
            if key == "request_rules":
                for rule in value if rules or layer == "config" else ():
                    kept = _merged(kept, rule, layer, replaced)
                continue
            if key in values and values[key] != value and _shown(values[key], sources[key]):
                replaced[key] = (*replaced.get(key, ()), (sources[key], values[key]))
            values[key], sources[key] = value, layer
    sources |= {rule_key(rule): layer for rule, layer in kept}
    return ServerProfile(**values, request_rules=tuple(rule for rule, _ in kept), sources=sources,
                         replaced=replaced)


def _merged(kept: list[tuple[Rule, Layer]], rule: Rule, layer: Layer,
            replaced: dict[str, tuple[tuple[Layer, Any], ...]]) -> list[tuple[Rule, Layer]]:
    """`kept` with `rule` of `layer` in the place of the first earlier rule deciding the same (`rule_keys`), those
    rules gone; what it replaced (other than itself) noted in `replaced`."""
    decides = rule_keys(rule)
    at = next((i for i, (old, _) in enumerate(kept) if rule_keys(old) & decides), len(kept))
    gone = [(old, where) for old, where in kept if rule_keys(old) & decides]
    earlier = tuple(item for old, where in gone for item in (*replaced.pop(rule_key(old), ()), (where, old))
                    if item[1] != rule)
    if earlier:
        replaced[rule_key(rule)] = earlier
    rest = [(old, where) for old, where in kept if not rule_keys(old) & decides]
    return [*rest[:at], (rule, layer), *rest[at:]]
