"""The probe's stream classifier on the conformance corpus: replaying a case's stream names its quirk.

Every classification is tested on the conformance corpus. Cases not (yet) copied into
tests/cases from ../shared/conformance/cases are skipped with the reason.
"""

from __future__ import annotations

import json

import pytest

from crow_cli.probe.classify import classify, parse_sse
from tests.probe.conftest import QUIRKS
from tests.support import CASES_DIR, ROOT, calls_in_text, chunk, expected_sse, first_sse, load_cases, sse, tool_delta

# Codes that name a quirk: a plain stream (the well-behaved cases) must carry none of them.
QUIRK_CODES = set().union(*QUIRKS.values()) - {"arguments-whole", "arguments-fragmented", "finish-tool-calls"}


@pytest.mark.parametrize("case_id", sorted(QUIRKS))
def test_replaying_a_case_names_its_quirk(case_id: str) -> None:
    path = CASES_DIR / f"{case_id}.json"
    if not path.exists():
        pytest.skip(f"{case_id} is not in tests/cases yet (../shared/conformance/cases has it)")
    shape = classify(parse_sse(first_sse(json.loads(path.read_text()))))
    assert QUIRKS[case_id] <= set(shape.codes()), shape.codes()


@pytest.mark.parametrize("case", [c for c in load_cases() if "sse" in c or any("sse" in r for r in c["responses"])],
                         ids=lambda c: c["id"])
def test_every_stream_case_has_a_verdict_and_assembles_its_calls(case: dict) -> None:
    assert case["id"] in QUIRKS, "a new corpus case needs its quirk named in QUIRKS"
    shape = classify(parse_sse(expected_sse(case)))  # the stream of the turn `expected` describes
    expected = case.get("expected", {}).get("tool_calls")
    if expected and "error-in-stream" not in shape.codes() and not calls_in_text(case):
        assert [c.id for c in shape.calls] == [c["id"] for c in expected]


def test_a_well_behaved_stream_has_no_quirk() -> None:
    body = sse(chunk({"role": "assistant", "content": None}),
               chunk({"tool_calls": [tool_delta(0, "call_1", "get_weather", "")]}),
               chunk({"tool_calls": [tool_delta(0, arguments='{"city": ')]}),
               chunk({"tool_calls": [tool_delta(0, arguments='"Paris"}')]}), chunk({}, "tool_calls"))
    shape = classify(parse_sse(body))
    assert not set(shape.codes()) & QUIRK_CODES, shape.codes()
    assert shape.codes() == ["arguments-fragmented", "finish-tool-calls"]
    assert [(c.id, c.name, json.loads(c.arguments)) for c in shape.calls] == [("call_1", "get_weather",
                                                                               {"city": "Paris"})]


def test_the_real_llama_cpp_recording() -> None:
    case = json.loads((ROOT / "tests" / "cases_real" / "llama-cpp-smollm2-roll-dice.json").read_text())
    shape = classify(parse_sse(first_sse(case)))
    assert {"usage-only-chunk", "arguments-fragmented", "finish-tool-calls"} <= set(shape.codes())
    assert shape.calls and shape.calls[0].name == "roll_dice"


def test_a_body_that_is_not_sse_json_is_named_not_raised() -> None:
    shape = classify(parse_sse("data: {not json\n\ndata: [DONE]\n\n"))
    assert "bad-event" in shape.codes()
