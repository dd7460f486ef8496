"""The words of a refusal, read in one place (`wire.refusal`).

Properties guarded here:

- a notice's reason is the server's words once, on one line: no " | " joins of the body's strings, no braces of a
  serialised object, a pydantic error list read as "msg at loc";
- a refused value is told from a refused parameter: "Unsupported value" and out-of-range words refuse the value
  (the user's to fix), "Unsupported parameter" and "Extra inputs" the parameter (dropped);
- a field is refused or demanded by the words beside its name.
"""

from __future__ import annotations

import json

import pytest

from crow_cli.wire.refusal import field_demanded, field_refused, readable, reason, value_refused

# vLLM (modelscope/ms-agent#489)
VLLM_SEED = json.dumps({"object": "error", "message": "[{'type': 'extra_forbidden', 'loc': ('body', 'seed'), 'msg': "
                        "'Extra inputs are not permitted', 'input': 7}]", "type": "BadRequestError", "param": None,
                        "code": 400})
# OpenAI (the platform's answer for a temperature above 2)
OPENAI_RANGE = json.dumps({"error": {"message": "Invalid 'temperature': decimal above maximum value. Expected a value "
                                                "<= 2, but got 5 instead.", "type": "invalid_request_error",
                                     "param": "temperature", "code": "decimal_above_max_value"}})


# the notice of a refusal is the server's words, not "(400: [{'type': 'extra_forbidden', 'loc': ('body', 'seed'),
# … }])" nor "… whereas you provided 100000. | max_tokens | invalid_value"
@pytest.mark.parametrize(("body", "said"), [
    (VLLM_SEED, "Extra inputs are not permitted at body.seed"),
    (OPENAI_RANGE, "Invalid 'temperature': decimal above maximum value. Expected a value <= 2, but got 5 instead"),
    (json.dumps({"detail": [{"type": "missing", "loc": ["body", "messages", 1, "name"], "msg": "Field required"}]}),
     "Field required at body.messages.1.name"),
    (json.dumps({"code": 400, "reason": "bad thing", "hint": "do that"}), "bad thing; do that"),
    ("plain text refusal.", "plain text refusal"),
])
def test_the_reason_is_the_servers_words_once_on_one_line(body: str, said: str) -> None:
    assert reason(body) == said
    assert " | " in readable(OPENAI_RANGE)  # what the finders read joins every string; the reason does not


@pytest.mark.parametrize(("text", "value"), [
    (OPENAI_RANGE, True),
    ("temperature must be in [0, 2], got 5.0.", True),  # vLLM
    ("Unsupported value: 'temperature' does not support 5 with this model.", True),  # OpenAI, without a default
    ("Unsupported parameter: 'temperature' is not supported with this model.", False),  # OpenAI
    (VLLM_SEED.replace("seed", "temperature"), False),
])
def test_a_refused_value_is_told_from_a_refused_parameter(text: str, value: bool) -> None:
    assert value_refused(text, "temperature", 5) is value


def test_a_field_is_refused_or_demanded_by_the_words_beside_it() -> None:
    mistral = '{"detail": [{"type": "extra_forbidden", "loc": ["body", "messages", 1, "reasoning_content"]}]}'
    assert field_refused(422, mistral, ["name", "reasoning_content"]) == "reasoning_content"
    assert field_demanded(422, mistral, ["reasoning_content"]) is None
    deepseek = "The reasoning_content in the thinking mode must be passed back to the API."
    assert field_demanded(400, deepseek, ["reasoning_content"]) == "reasoning_content"
    assert field_refused(400, deepseek, ["reasoning_content"]) is None
    assert field_refused(500, mistral, ["reasoning_content"]) is None  # only a 400 or 422 is read
