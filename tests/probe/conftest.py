"""Shared by the probe tests: each corpus case's quirk, and a replay script in the probe's request order."""

from __future__ import annotations

from typing import Any

from tests.replay_server import text_stream

# case id -> the finding codes its first streamed response must be named with
QUIRKS: dict[str, set[str]] = {
    "damaged-event-glued-to-next-frame": {"bad-event"},
    "deepseek-thinking-reasoning-echo-required": {"reasoning_content"},
    "deepseek-thinking-tool-turn-without-reasoning": set(),  # its quirk is in the request crow sends back
    # refusals of a part of the request (wire.change): the quirk is in what crow sends, not in the stream
    "adapt-requests-off-ends-at-the-first-refusal": set(),
    "tool-image-follows-the-tool-results-and-a-text-only-model-refuses-it": set(),
    "anthropic-compat-blank-tool-result": set(),
    "gemini-unknown-name-default-in-tool-schemas": set(),
    "moonshot-ref-and-anyof-type-in-plugin-schema": set(),
    "ollama-assistant-tool-call-content-nil": set(),
    "openai-max-tokens-use-max-completion-tokens": set(),
    "openai-temperature-only-default-value": set(),
    "vllm-extra-forbidden-seed-param": set(),
    "openai-configured-max-tokens-above-the-models-limit-lowered-and-remembered": set(),
    "deepseek-max-tokens-outside-the-valid-range-lowered-and-remembered": set(),
    "vllm-max-tokens-above-the-room-left-lowered-for-that-request-only": set(),
    "openai-tool-result-above-the-string-limit-cut-to-fit": set(),
    "gemini-refusal-that-teaches-nothing-new-ends-the-run": set(),
    "vllm-gaudi-several-params-named-at-once": set(),
    "dashscope-enable-thinking-must-be-false": set(),
    "openai-plugin-tool-name-outside-pattern": set(),
    "vllm-gemma-system-role-not-supported": set(),
    "gemini-tool-name-must-start-with-a-letter": set(),
    "hostile-name-pattern-in-a-refusal-is-never-compiled": set(),
    "switch-model-drops-the-other-models-signed-thinking": set(),  # its quirk is in what the next model is sent
    "switch-model-maps-kimi-ids-for-a-mistral-reader": set(),
    "switch-model-maps-kimi-ids-for-an-anthropic-reader": set(),
    "groq-tool-use-failed-asked-again": set(),
    "vllm-extra-forbidden-stream-options-remembered": set(),
    "vllm-nemotron-answer-only-in-reasoning": set(),
    "azure-content-filter-mid-answer-exits-non-zero": set(),  # how crow ends the run is the point
    "llamacpp-gpt-oss-template-refuses-content-beside-thinking": {"reasoning_content"},
    # a small model's mistakes (tools/arguments.py, tools/repeats.py): in the calls, not the stream's shape
    "small-model-integer-sent-as-string-coerced-and-noted": set(),
    "small-model-required-argument-missing-named-and-retried": set(),
    "small-model-same-call-three-turns-in-a-row-is-told-so": set(),
    "small-model-tool-name-in-another-case-runs-the-tool": set(),
    "small-model-unknown-tool-name-gets-the-closest-names": set(),
    "small-model-array-sent-as-a-string-of-json-coerced-and-noted": set(),
    "small-model-boolean-sent-as-string-coerced-and-noted": set(),
    "small-model-functions-prefix-name-runs-the-tool": set(),
    "small-model-object-sent-as-a-string-of-json-coerced-and-noted": set(),
    "small-model-same-call-four-turns-in-a-row-ends-the-run": set(),
    "small-model-single-value-where-an-array-is-asked-coerced-and-noted": set(),
    "small-model-wrong-type-refused-named-and-retried": set(),
    # calls left in the text (wire.textcalls): the stream is text only
    "local-bare-json-tool-call-as-text-recovered": set(),
    "local-gpt-oss-harmony-channel-leak-recovered": set(),
    "local-llama3-python-tag-as-text-recovered": set(),
    "local-mistral-tool-calls-token-as-text-recovered": set(),
    "local-qwen-hermes-tool-call-as-text-recovered": set(),
    "local-recovered-tool-call-obeys-a-deny-rule": set(),  # the answer comes as reasoning: what crow shows and keeps
    "openai-custom-tool-call-never-offered-is-answered": set(),  # the quirk is the answer crow sends
    "local-tool-call-block-followed-by-text-is-not-run": set(),  # text that only shows markup: no quirk
    "local-tool-call-after-a-quoting-lead-in-is-not-run": set(),
    "local-tool-call-in-a-code-fence-is-not-run": set(),
    "local-recover-tool-calls-off-leaves-the-text": set(),
    "leaked-template-token-in-tool-name": {"name-leaked-tokens"},
    "leaked-whitespace-and-constrain-suffix-in-tool-names": {"name-leaked-tokens"},
    "split-index-arguments-before-header": {"calls-interleaved", "index-starts-at-1"},
    "split-index-header-at-tool-index": {"arguments-empty"},
    "anthropic-compat-error-only-stream": {"error-in-stream"},
    "azure-choice-without-delta": {"choice-without-delta"},
    "azure-empty-choices-prelude": {"empty-choices"},
    "azure-type-empty-string": {"type-empty"},
    "cloudflare-content-between-tool-calls": {"text-between-calls"},
    "commandcode-truncated-no-done": {"arguments-cut", "finish-missing", "done-missing"},
    "dashscope-empty-function-delta": {"empty-function-delta"},
    "dashscope-empty-id-continuation": {"ids-empty-on-continuation"},
    "evolink-deepseek-no-finish-reason": {"finish-missing"},
    "fireworks-usage-only-chunk": {"usage-only-chunk"},
    "gemini-missing-index": {"index-missing", "calls-in-one-delta", "finish-stop-after-calls"},
    "groq-parallel-whole-call-per-chunk": {"arguments-whole"},
    "kimi-k2-functions-colon-ids": {"reasoning_content"},
    "litellm-bedrock-index-starts-at-1": {"index-starts-at-1", "text-before-calls"},
    "litellm-cohere-stop-after-tool-calls": {"finish-stop-after-calls"},
    "litellm-oci-fresh-id-every-fragment": {"ids-fresh-on-fragments"},
    "llama-cpp-python-crlf-ping": {"sse-comments", "crlf"},
    "llamacpp-lone-brace-arguments-history": {"arguments-cut"},
    "minimax-args-object": {"arguments-object"},
    "mistral-native-id-kept-verbatim": {"type-missing", "arguments-whole"},
    "mistral-parallel-calls-one-delta": {"calls-in-one-delta", "type-missing"},
    "mistral-reasoning-content-forbidden": {"reasoning_content"},
    "nim-glm-no-finish-reason": {"finish-missing", "reasoning_content"},
    "ollama-empty-content-with-tool-calls-array": {"text-before-calls", "calls-in-one-delta"},
    "ollama-identical-parallel-calls": {"identical-calls"},
    "ollama-index-always-zero": {"index-always-0"},
    "openclaw-surrogate-split": {"lone-surrogates"},
    "openrouter-processing-comments": {"sse-comments"},
    "retry-500-then-ok": {"arguments-fragmented", "finish-tool-calls"},
    "sglang-assistant-content-key-required": {"finish-tool-calls"},
    "sglang-gemma4-same-index-fragmented": {"index-always-0"},
    "sglang-null-id-second-call": {"id-missing"},
    "three-parallel-interleaved": {"calls-interleaved"},
    "vllm-command-a-name-after-args": {"name-after-arguments"},
    "vllm-empty-tool-calls-array": {"empty-tool-calls-array"},
    "vllm-glm-final-chunk-metadata": {"ids-repeated", "name-repeated"},
    "vllm-inband-error-event": {"error-in-stream"},
    "vllm-reasoning-before-tool-calls": {"reasoning_content"},
    "vllm-spec-decode-same-index-twice-in-delta": {"same-index-twice"},
    "vllm-truncated-args-tool-calls-finish": {"arguments-cut"},
    "vllm-xlam-args-sent-twice": {"arguments-repeated"},
    "vllm-zero-arg-empty-arguments": {"arguments-empty"},
    "openrouter-reasoning-details-blocks-round-trip": {"reasoning-details", "reasoning"},
    "deepseek-reasoning-content-on-every-message-of-a-tool-exchange": {"reasoning_content"},
    "ollama-reasoning-field-name-kept": {"reasoning"},
    "minimax-think-tags-in-content-kept": {"think-in-content", "text-before-calls"},
    "gemini-extra-content-thought-signature-per-call": {"tool-call-fields"},
    "gemini-tool-message-name-required": set(),  # its quirk is in the request crow sends back
    "strict-gateway-refuses-reasoning-details": {"reasoning-details"},
    "local-runtime-null-name-and-counting-choice-index": {"choice-index-varies", "name-null"},
    "litellm-anthropic-thinking-blocks-round-trip": {"reasoning-details", "reasoning_content"},
    "mistral-thinking-chunks-in-content-round-trip": {"content-parts", "type-missing"},
}


def script_for(tool_stream: str) -> list[dict[str, Any]]:
    """The probe's requests answered: text, then `tool_stream` for the three tool requests, then text."""
    tools = {"sse": tool_stream, "keep_crlf": "\r\n" in tool_stream}  # served byte for byte
    return [{"sse": text_stream("Hello there, how are you today?")}, tools, tools, tools,
            {"sse": text_stream("It is sunny.")}, {"sse": text_stream("Sunny in Paris.")},
            {"sse": text_stream("Sunny.")}]
