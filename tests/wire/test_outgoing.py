"""The outgoing form of a history: what the server attached goes back exactly, minus what it refused.

Properties guarded here:

- reasoning follows `reasoning_echo`: `always` as kept, `never` none (a demanded field included), `auto` for
  exchanges that used tools only; reasoning never goes on a user or tool message unless `always`;
- a refused field is dropped from every message and tool call, a demanded one added to every assistant
  message; the later lesson replaces an earlier contrary one, and `learned()` facts start the next run there;
- tool messages carry `name` as the server demands or refuses;
- each message is shaped once while the policy holds; a growing history is shaped as a fresh policy would;
- another reader's copy drops what is bound to the author, renames reasoning to the reader's field and maps
  tool-call ids it refuses (deterministically, in the call and its tool message); the author's own messages
  and messages without an author go as kept; crow's own keys (author, image names) are never sent.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crow_cli.history import tool_message, user_message
from crow_cli.wire.change import Change, change_for
from crow_cli.wire.outgoing import Outgoing
from crow_cli.wire.rules import FieldRule

BLOCKS = [{"type": "reasoning.text", "text": "t", "signature": "S+/=", "index": 0},
          {"type": "reasoning.encrypted", "data": "E", "index": 0}]
CALL = {"id": "c1", "type": "function", "function": {"name": "get_rate", "arguments": "{}"},
        "extra_content": {"google": {"thought_signature": "G=="}}}


def conversation() -> list[dict]:
    return [
        user_message("rate?"),
        {"role": "assistant", "content": None, "tool_calls": [CALL], "reasoning_details": BLOCKS,
         "reasoning": "r1", "x_vendor": {"k": 1}},
        tool_message("c1", "160"),
        {"role": "assistant", "content": "160 yen.", "reasoning_content": "r2"},
        user_message("hello"),
        {"role": "assistant", "content": "hi", "reasoning_content": "r3"},
        user_message("bye"),
    ]


def refused(out: Outgoing, status: int, text: str, sent: list[dict[str, Any]]) -> tuple[Change, dict[str, Any]] | None:
    """What the client does with a refusal of message fields (`ChatClient._adapt`): the refusal read against the
    policy in force (`change_for`), its field rules added; the change and the facts it changed, or None."""
    change = change_for(status, text, {"model": "m", "messages": sent, "stream": True}, out.policy())
    if change is None or not change.fields:
        return None
    before = out.learned()
    out.add(r for r in change.rules if isinstance(r, FieldRule))
    return change, {k: v for k, v in out.learned().items() if before.get(k) != v}


def test_auto_sends_everything_attached_for_exchanges_that_used_tools_and_no_reasoning_otherwise():
    history = conversation()
    sent = Outgoing("auto").messages(history)
    assert sent[:5] == history[:5]  # the tool exchange goes back exactly, the final answer's reasoning too
    assert sent[1] is history[1] and sent[3] is history[3]  # not copied
    assert sent[5] == {"role": "assistant", "content": "hi"}
    assert history[5]["reasoning_content"] == "r3"  # the history is never changed


def test_never_and_always():
    history = conversation()
    never = Outgoing("never").messages(history)
    assert not any(k in m for m in never for k in ("reasoning", "reasoning_content", "reasoning_details"))
    assert never[1]["tool_calls"] == [CALL] and never[1]["x_vendor"] == {"k": 1}  # not reasoning: kept
    assert Outgoing("always").messages(history) == history


def test_a_refused_field_is_dropped_from_every_message_and_call_and_remembered_as_a_fact():
    out = Outgoing("auto")
    body = json.dumps({"detail": [{"type": "extra_forbidden", "loc": ["body", "messages", 1, "tool_calls", 0,
                                                                      "extra_content"],
                                   "msg": "Extra inputs are not permitted"}]})
    found = refused(out, 422, body, out.messages(conversation()))
    assert found is not None and "extra_content" in found[0].describe()
    sent = out.messages(conversation())
    assert sent[1]["tool_calls"] == [{k: v for k, v in CALL.items() if k != "extra_content"}]
    assert sent[1]["reasoning_details"] == BLOCKS
    assert out.learned()["refused_fields"] == ["extra_content"]
    assert Outgoing("auto", known=out.learned()).messages(conversation()) == sent  # the next run starts there
    assert refused(out, 422, body, sent) is None  # nothing left to drop: the error is final


def test_a_demanded_reasoning_field_is_added_to_every_assistant_message():
    out = Outgoing("auto")
    body = '{"error": {"message": "The reasoning_content in the thinking mode must be passed back to the API."}}'
    history = conversation()
    assert refused(out, 400, body, out.messages(history)) is not None
    sent = out.messages(history)
    assert [m.get("reasoning_content") for m in sent if m["role"] == "assistant"] == ["r1", "r2", "r3"]
    assert out.learned()["required_fields"] == ["reasoning_content"]


def test_tool_messages_get_the_function_name_when_the_server_demands_it_and_lose_it_when_refused():
    history = conversation()
    out = Outgoing("auto")
    gemini = ('[{"error": {"code": 400, "message": "* GenerateContentRequest.contents[2].parts[0].function_response'
              '.name: Name cannot be empty.", "status": "INVALID_ARGUMENT"}}]')
    found = refused(out, 400, gemini, out.messages(history))
    assert found is not None and found[1] == {"tool_message_name": True}
    assert out.messages(history)[2] == {**history[2], "name": "get_rate"}
    refuse = '{"error": {"message": "messages[2]: unknown field \\"name\\""}}'
    assert refused(out, 400, refuse, out.messages(history)) is not None
    assert "name" not in out.messages(history)[2] and out.learned()["tool_message_name"] is False


def test_an_unknown_name_error_about_another_field_is_not_about_name():
    # Gemini words every unknown field as `Unknown name "x"`: that names x, not a tool message's name
    out = Outgoing("auto")
    body = 'Invalid JSON payload received. Unknown name "x_vendor" at \'messages[1]\': Cannot find field.'
    assert refused(out, 400, body, out.messages(conversation())) is not None and out.dropped == ["x_vendor"]


def test_each_message_is_shaped_once_and_kept_while_the_policy_holds():
    out = Outgoing("auto")
    history = conversation()
    first = out.messages(history)
    history.append({"role": "assistant", "content": "ciao", "reasoning_content": "r4"})
    second = out.messages(history)
    assert all(a is b for a, b in zip(first, second, strict=False))  # the earlier copies are reused
    assert second[-1] == {"role": "assistant", "content": "ciao"}


# Start-up and per-turn cost: no turn walks the whole history again (that was a quarter of a 400-round run's
# CPU); only what a turn appended is shaped, and the open exchange once more when it
# has just used tools.
_POOL = [
    {"role": "system", "content": "sys"},
    user_message("u"),
    {"role": "assistant", "content": "a", "reasoning_content": "r"},
    {"role": "assistant", "content": None, "tool_calls": [CALL], "reasoning": "r", "x_vendor": 1},
    {"role": "assistant", "content": None, "reasoning_details": BLOCKS,
     "tool_calls": [CALL, {**CALL, "id": "c2", "function": {"name": "other", "arguments": "{}"}}]},
    tool_message("c1", "out"),
    {"role": "tool", "tool_call_id": "c2", "content": "out", "name": "other"},
]
_POLICIES = [{}, {"tool_message_name": True}, {"tool_message_name": False},
             {"refused_fields": ["x_vendor", "extra_content"], "required_fields": ["reasoning_content"]}]


@given(kinds=st.lists(st.integers(0, len(_POOL) - 1), max_size=30),
       steps=st.lists(st.integers(1, 5), min_size=1, max_size=12),
       echo=st.sampled_from(["auto", "always", "never"]), policy=st.sampled_from(_POLICIES))
def test_a_growing_history_is_sent_as_a_fresh_policy_sends_it(kinds, steps, echo, policy):
    history = [dict(_POOL[k]) for k in kinds]  # distinct objects, as a real history holds
    out = Outgoing(echo, known=policy)
    size = 0
    for step in steps:
        size = min(size + step, len(history))
        assert out.messages(history[:size]) == Outgoing(echo, known=policy).messages(history[:size])
    changed = [user_message("summary"), *history[size // 2:]]  # a compacted view: starts over
    assert out.messages(changed) == Outgoing(echo, known=policy).messages(changed)


class _Counted(dict):
    """A message that counts how often it is read."""

    reads = 0

    def get(self, key, default=None):
        type(self).reads += 1
        return super().get(key, default)

    def __contains__(self, key):
        type(self).reads += 1
        return super().__contains__(key)


def test_a_turn_shapes_only_what_it_appended():
    history = [_Counted(m) for m in conversation()[:3]]  # an exchange that used tools already
    out = Outgoing("auto")
    out.messages(history)
    for n in range(20):
        _Counted.reads = 0
        history += [{"role": "assistant", "content": None, "tool_calls": [{**CALL, "id": f"c{n}"}]},
                    tool_message(f"c{n}", "out")]
        sent = out.messages(history)
        assert _Counted.reads == 0  # the earlier messages are not read again
    assert sent == Outgoing("auto").messages(history)


def test_an_exchange_that_turns_to_tools_is_shaped_again_from_its_start():
    two_calls = _POOL[4]
    cases = [  # (history, appended, policy)
        ([user_message("u"), {"role": "assistant", "content": "a", "reasoning_content": "r"}],
         [_POOL[3], tool_message("c1", "out")], {}),  # the answer's reasoning now goes back
        ([dict(two_calls), tool_message("c1", "out"), user_message("u"), tool_message("c2", "late")],
         [_POOL[3]], {"tool_message_name": True}),  # a late result still named after the call before
    ]
    for history, appended, policy in cases:
        out = Outgoing("auto", known=policy)
        out.messages(history)
        history += appended
        assert out.messages(history) == Outgoing("auto", known=policy).messages(history)


# A Mistral message's thinking parts inside its content follow reasoning_echo as reasoning fields do: "never"
# (and "auto" for an exchange without tools) sends them not
def test_thinking_parts_of_the_content_follow_reasoning_echo_as_reasoning_fields_do():
    thought = {"type": "thinking", "thinking": [{"type": "text", "text": "t"}]}
    history = [
        user_message("rate?"),
        {"role": "assistant", "content": [thought], "tool_calls": [CALL]},
        tool_message("c1", "160"),
        {"role": "assistant", "content": [thought, {"type": "text", "text": "160 yen."}]},
        user_message("hello"),
        {"role": "assistant", "content": [{"type": "text", "text": "h"}, thought, {"type": "text", "text": "i"}]},
        user_message("bye"),
    ]
    never = Outgoing("never").messages(history)
    assert never[1]["content"] is None and never[3]["content"] == "160 yen." and never[5]["content"] == "hi"
    auto = Outgoing("auto").messages(history)
    assert auto[:5] == history[:5] and auto[5] == {"role": "assistant", "content": "hi"}
    image = {"type": "image_url", "image_url": {"url": "data:,"}}
    kept = Outgoing("never").messages([user_message("x"), {"role": "assistant", "content": [thought, image]}])
    assert kept[1]["content"] == [image]  # a part other than text stays a part
    assert history[1]["content"] == [thought]  # the history is never changed


# LiteLLM repeats its thinking blocks inside provider_specific_fields; with reasoning_echo "never" (and "auto"
# for an exchange without tools) those do not go back either
def test_reasoning_blocks_inside_another_attached_field_follow_reasoning_echo():
    block = {"type": "thinking", "thinking": "t", "signature": "S"}
    history = [user_message("hello"),
               {"role": "assistant", "content": "hi", "thinking_blocks": [block],
                "provider_specific_fields": {"thinking_blocks": [block], "citations": ["c"]}},
               user_message("bye")]
    for sent in (Outgoing("never").messages(history), Outgoing("auto").messages(history)):
        assert sent[1] == {"role": "assistant", "content": "hi", "provider_specific_fields": {"citations": ["c"]}}
    assert Outgoing("always").messages(history) == history
    only = [user_message("x"), {"role": "assistant", "content": "hi", "x": {"reasoning_details": [block]}}]
    assert Outgoing("never").messages(only)[1] == {"role": "assistant", "content": "hi"}


# A session moved to another model (`crow run -c --model B`) sends no model A's signed thinking nor Gemini
# thought signatures to B, which refuses them ("Invalid `signature` in `thinking` block")
_A = {"base_url": "http://a.example/v1", "model": "A"}
_B = {"base_url": "http://a.example/v1", "model": "B"}


def _signed_history() -> list[Any]:
    return [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "crow_author": dict(_A),
         "thinking_blocks": [{"type": "thinking", "thinking": "plan it", "signature": "sig-A"}],
         "tool_calls": [{"id": "call_1", "type": "function", "extra_content": {"google": {"thought_signature": "t"}},
                         "function": {"name": "lookup", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
    ]


def test_the_author_record_is_never_sent() -> None:
    sent = Outgoing(author=_A).messages(_signed_history())
    assert all("crow_author" not in m for m in sent)
    assert sent[1]["thinking_blocks"][0]["signature"] == "sig-A"  # the author's own: sent back as kept
    assert sent[1]["tool_calls"][0]["extra_content"] == {"google": {"thought_signature": "t"}}


def test_another_readers_copy_drops_what_is_bound_to_the_author() -> None:
    history = _signed_history()
    sent = Outgoing(author=_B).messages(history)
    assert "thinking_blocks" not in sent[1]
    assert sent[1]["tool_calls"] == [{"id": "call_1", "type": "function",
                                      "function": {"name": "lookup", "arguments": "{}"}}]  # the id is kept
    assert sent[2]["tool_call_id"] == "call_1"
    assert history[1]["thinking_blocks"][0]["signature"] == "sig-A"  # the stored session keeps the originals
    assert "extra_content" in history[1]["tool_calls"][0]


def test_another_reader_that_demands_reasoning_gets_the_blocks_text() -> None:
    sent = Outgoing(author=_B, known={"required_fields": ["reasoning_content"]}).messages(_signed_history())
    assert sent[1]["reasoning_content"] == "plan it"
    assert "thinking_blocks" not in sent[1]


def test_reasoning_text_follows_the_readers_field_name() -> None:
    history = [{"role": "user", "content": "go"},
               {"role": "assistant", "content": None, "crow_author": dict(_A), "reasoning_content": "why",
                "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
               {"role": "tool", "tool_call_id": "c", "content": "ok"}]
    sent = Outgoing(author=_B, reasoning_fields=("reasoning",)).messages(history)
    assert sent[1]["reasoning"] == "why" and "reasoning_content" not in sent[1]
    own = Outgoing(author=_A, reasoning_fields=("reasoning",)).messages(history)
    assert own[1]["reasoning_content"] == "why"


def test_a_message_without_an_author_goes_as_kept() -> None:
    history = _signed_history()
    del history[1]["crow_author"]
    sent = Outgoing(author=_B).messages(history)
    assert sent[1]["thinking_blocks"][0]["signature"] == "sig-A"


# Kimi's ids (`functions.lookup_order:0`) sent on to an Anthropic-compatible reader are refused:
# 'messages.1.content.0.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'' (and Mistral's 9-character rule)
_ANTHROPIC_ID = ('{"type":"error","error":{"type":"invalid_request_error","message":"messages.1.content.0.tool_use.id: '
                 "String should match pattern '^[a-zA-Z0-9_-]+$'\"}}")
_MISTRAL_ID = ('{"object":"error","message":"Tool call id was functions.lookup_order:0 but must be a-z, A-Z, 0-9, with '
               'a length of 9.","type":"invalid_request_message_error","code":3280}')


def _kimi_history(author: dict[str, str]) -> list[Any]:
    return [{"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "crow_author": dict(author),
             "tool_calls": [{"id": "functions.lookup_order:0", "type": "function",
                             "function": {"name": "lookup_order", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "functions.lookup_order:0", "content": "ok"}]


@pytest.mark.parametrize(("body", "shape"), [(_ANTHROPIC_ID, r"call_[A-Za-z0-9]{24}"),
                                             (_MISTRAL_ID, r"[A-Za-z0-9]{9}")])
def test_ids_another_model_wrote_are_mapped_to_the_readers_shape_on_its_refusal(body: str, shape: str) -> None:
    import re

    history = _kimi_history(_A)
    out = Outgoing(author=_B)
    sent = out.messages(history)
    found = refused(out, 400, body, sent)
    assert found is not None and "tool_call_id_rule" in found[1]
    again = out.messages(history)
    new_id = again[1]["tool_calls"][0]["id"]
    assert re.fullmatch(shape, new_id) and again[2]["tool_call_id"] == new_id
    assert out.messages(history)[1]["tool_calls"][0]["id"] == new_id  # derived, not random
    assert history[1]["tool_calls"][0]["id"] == "functions.lookup_order:0"  # the session keeps the original
    later = Outgoing(author=_B, known=out.learned()).messages(history)  # a later run starts with the rule
    assert later[1]["tool_calls"][0]["id"] == new_id


def test_the_authors_own_ids_are_never_mapped() -> None:
    out = Outgoing(author=_A)
    sent = out.messages(_kimi_history(_A))
    assert refused(out, 400, _ANTHROPIC_ID, sent) is None  # nothing another model wrote: the refusal is final
    out = Outgoing(author=_A, known={"tool_call_id_rule": {"chars": "alnum_dash", "length": None}})
    assert out.messages(_kimi_history(_A))[1]["tool_calls"][0]["id"] == "functions.lookup_order:0"


def test_an_image_part_goes_without_the_name_crow_keeps_on_it():
    # the name is crow's (a transcript's `[image: shot.png, 41 KB]`): the server gets the part OpenAI defines
    part = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    history = [{"role": "user", "content": [{"type": "text", "text": "what is it?"},
                                            {**part, "crow_image": {"name": "shot.png"}}]}]
    sent = [{"role": "user", "content": [{"type": "text", "text": "what is it?"}, part]}]
    for echo in ("auto", "always", "never"):
        assert Outgoing(echo).messages(history) == sent
    assert history[0]["content"][1]["crow_image"] == {"name": "shot.png"}  # the history is never changed
    plain = [user_message("hi")]
    assert Outgoing("auto").messages(plain)[0] is plain[0]  # a message without one is not copied


# a tool message's stored outcome is crow's own record: no server gets it, in any echo mode
@pytest.mark.parametrize("echo", ["auto", "never", "always"])
def test_a_tool_messages_outcome_is_never_sent(echo: str) -> None:
    from crow_cli.history import tool_message

    history = [{"role": "user", "content": "go"},
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
               tool_message("c1", "Error: no", "error")]
    sent = Outgoing(echo).messages(history)
    assert sent[-1] == {"role": "tool", "tool_call_id": "c1", "content": "Error: no"}
    assert history[-1]["crow_outcome"] == "error"  # the stored history keeps it


# provenance: a mutation check (w5) — reasoning kept on a tool message under `auto` passed every test of this file
@pytest.mark.parametrize("echo", ["auto", "never", "always"])
def test_reasoning_goes_on_assistant_messages_only_unless_always(echo):
    history = [user_message("go"), {"role": "assistant", "content": None, "tool_calls": [CALL]},
               {**tool_message("c1", "160"), "reasoning_content": "stray"}]
    sent = Outgoing(echo).messages(history)
    assert ("reasoning_content" in sent[2]) == (echo == "always")


# provenance: a mutation check (w5) — `never` sending a demanded reasoning field passed every test of this file
def test_never_sends_no_reasoning_even_where_it_was_demanded():
    sent = Outgoing("never", known={"required_fields": ["reasoning_content"]}).messages(conversation())
    assert not any("reasoning_content" in m for m in sent)


def _refusal(field: str) -> str:
    return json.dumps({"detail": [{"type": "extra_forbidden", "loc": ["body", "messages", 1, field],
                                   "msg": "Extra inputs are not permitted"}]})


# provenance: a mutation check (w5) — a refusal or a demand leaving the contrary fact in place passed every test
# of this file
def test_a_refusal_replaces_a_demand_and_a_demand_a_refusal():
    out = Outgoing("auto", known={"required_fields": ["reasoning_content"]})
    assert refused(out, 422, _refusal("reasoning_content"), out.messages(conversation())) is not None
    assert not any("reasoning_content" in m for m in out.messages(conversation()))
    assert out.learned() == {"refused_fields": ["reasoning_content"], "required_fields": []}
    demand = '{"error": {"message": "The reasoning_content in the thinking mode must be passed back to the API."}}'
    assert refused(out, 400, demand, out.messages(conversation())) is not None
    assert out.learned() == {"refused_fields": [], "required_fields": ["reasoning_content"]}
    assert [m.get("reasoning_content") for m in out.messages(conversation()) if m["role"] == "assistant"] == [
        "r1", "r2", "r3"]


# message-field rules the config gives (`[provider] request_rules`, op drop_field) are the same classes as learned
# ones, applied to the outgoing copy; only what a server taught is remembered
def test_field_rules_the_config_gives_apply_but_are_never_learned() -> None:
    from crow_cli.wire.rules import DropField, RequireField

    history = conversation()
    history[1]["x_vendor"] = 1
    out = Outgoing("auto", known={"refused_fields": ["reasoning_details"]})
    out.add([DropField("x_vendor")], learned=False)
    assert all("x_vendor" not in m for m in out.messages(history)) and history[1]["x_vendor"] == 1
    assert out.learned() == {"refused_fields": ["reasoning_details"], "required_fields": []}
    out.add([RequireField("x_vendor")])  # a server demands what the config dropped: learned, replacing it
    assert out.learned() == {"refused_fields": ["reasoning_details"], "required_fields": ["x_vendor"]}
