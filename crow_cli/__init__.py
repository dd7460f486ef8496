"""crow-cli: a react-loop agent CLI for OpenAI-compatible Chat Completions servers.

Nothing is imported eagerly here: `crow --version` must not pay for openai or rich.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
