"""The error tree. Every expected failure is a `CrowError` with a one-line message.

    CrowError              .exit_code; one-line message for users
    ├─ ConfigError         bad flags, config file or missing model (exit 2)
    ├─ ProviderError       .status, .code, .retry_after (exit 1)
    │  ├─ AuthError        401/403: final, never retried
    │  ├─ RateLimited      429
    │  ├─ QuotaExceeded    no credit or quota left (429 insufficient_quota, 402): a billing state, never retried
    │  ├─ ServerError      5xx, or an error object inside the stream
    │  │  └─ BodyTooLarge  a body or event larger than crow reads (`crow_cli.wire.body`)
    │  ├─ StreamCut        the stream broke or went idle mid-way
    │  ├─ ContextOverflow  the request is longer than the model's context window (.n_ctx, .prompt_tokens)
    │  ├─ ContentFiltered  the server's content filter stopped the answer mid-way (exit 3)
    │  └─ ImagesRefused    the model takes no images: refused image parts, or known text-only (`crow_cli.wire.vision`)
    ├─ MaxTurnsExceeded    the loop hit --max-turns (exit 1)
    ├─ ToolError           raised by tools; dispatch turns it into a tool result
    │  └─ ToolDenied  OutsideWorkspace  ToolFailed (.output: it ran and failed, e.g. exit code 3)
    ├─ SessionError        the session store could not be read or written
    │  ├─ SessionInUse         another crow process has the session open (`crow_cli.sessions`)
    │  ├─ SessionStoreDamaged  sessions.db is not a usable database (`crow_cli.sessions`)
    │  └─ SessionDamaged       a stored session's rows are not valid messages (`crow_cli.sessions`)
    └─ LocalError          `--local`: the llama.cpp server could not be prepared or started (`crow_cli.local`)

Those naming a module live beside what raises them; `cli.py` prints any `CrowError` as one line and exits
with its `exit_code`. Foreign exceptions (openai, httpx) are mapped once, in `crow_cli.wire.client`.
"""

from __future__ import annotations

__all__ = [
    "AuthError",
    "ConfigError",
    "ContentFiltered",
    "ContextOverflow",
    "CrowError",
    "MaxTurnsExceeded",
    "OutsideWorkspace",
    "ProviderError",
    "QuotaExceeded",
    "RateLimited",
    "ServerError",
    "SessionError",
    "StreamCut",
    "ToolDenied",
    "ToolError",
    "ToolFailed",
]


class CrowError(Exception):
    """Base of every expected failure; `str(err)` is the one line shown to users."""

    exit_code: int = 1


class ConfigError(CrowError):
    """A usage or configuration problem (bad flag value, unreadable config, no model)."""

    exit_code = 2


class ProviderError(CrowError):
    """The server refused or failed a request.

    Attributes:
        status: HTTP status, or None for transport errors and in-stream errors without one.
        code: the provider's error code (string or int) when it sent one.
        retry_after: seconds the server asked us to wait, when it said so.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.retry_after = retry_after


class AuthError(ProviderError):
    """401/403: the API key is missing, wrong or lacks access. Never retried."""


class RateLimited(ProviderError):
    """429 after the client's own retries were spent."""


class QuotaExceeded(ProviderError):
    """The account has no credit or quota left: OpenAI's 429 with `insufficient_quota`, a 402 (DeepSeek's
    "Insufficient Balance", OpenRouter's "more credits"). A billing state, not a rate: never retried."""


class ContentFiltered(ProviderError):
    """The server's content filter stopped the answer (`finish_reason: "content_filter"`, Azure AI Foundry
    among others): what streamed is partial. Exit 3, so a script tells it from a complete answer."""

    exit_code = 3


class ServerError(ProviderError):
    """5xx, or an `{"error": …}` object sent inside a 200 stream."""


class StreamCut(ProviderError):
    """The stream broke (connection reset, incomplete body) or went idle mid-turn."""


class ContextOverflow(ProviderError):
    """The server refused the request as longer than the model's context window (OpenAI
    `context_length_exceeded`, vLLM, llama.cpp `exceed_context_size_error`, LiteLLM
    `ContextWindowExceededError`, Anthropic-style "prompt is too long", DeepSeek, Mistral, Gemini).

    Attributes:
        n_ctx: the context window in tokens, when the server said.
        prompt_tokens: the tokens the request needed, when the server said.
    """

    def __init__(self, message: str, *, n_ctx: int | None = None, prompt_tokens: int | None = None,
                 status: int | None = None, code: str | int | None = None) -> None:
        super().__init__(message, status=status, code=code)
        self.n_ctx = n_ctx
        self.prompt_tokens = prompt_tokens


class MaxTurnsExceeded(CrowError):
    """The react loop reached its turn limit before a non-tool turn.

    Attributes:
        max_turns: the limit that was hit.
    """

    def __init__(self, max_turns: int) -> None:
        turns = f"{max_turns} turn" + ("s" if max_turns != 1 else "")
        super().__init__(f"stopped after {turns} (--max-turns {max_turns}); the model kept calling tools")
        self.max_turns = max_turns


class ToolError(CrowError):
    """A tool failed in a way the model should be told about; never leaves dispatch."""


class ToolDenied(ToolError):
    """Approval was refused (by policy, by the user, or because nobody could be asked).

    The message is what the model reads (with what to do instead); `shown` is what the person is shown of
    it, the refusal alone (`by the rule 'run_shell:rm'`), else the message.
    """

    def __init__(self, message: str, shown: str | None = None) -> None:
        super().__init__(message)
        self.shown = shown or message


class OutsideWorkspace(ToolError):
    """A path resolved outside the workspace root (`..`, absolute path or symlink escape)."""


class ToolFailed(ToolError):
    """The tool ran and failed (a command exiting non-zero): its result is `output`, sent to the model as it
    is (no `Error:` prefix), and the call's outcome is `error`, so every surface shows it failed.

    Attributes:
        output: the whole result text, as the model reads it (`message` when none is given).
        display: what the person is shown of the failed call (a `history.ToolDisplay`: the command's
            output and exit code), or None.
    """

    def __init__(self, message: str, output: str | None = None, *, display: object | None = None) -> None:
        super().__init__(message)
        self.output = message if output is None else output
        self.display = display


class SessionError(CrowError):
    """The session store could not be opened, read or written."""
