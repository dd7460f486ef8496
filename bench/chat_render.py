"""Chat rendering cost per token: a 1 KB answer against a 200 KB one, side by side.

`TurnView` freezes finished Markdown blocks and re-renders only the live tail, so the cost of a
token should not grow with the answer's length (ratio ~1). For contrast, the naive way (re-render
the whole answer on every refresh) is measured on 1 KB against 5 KB (200 KB would take hours).

Rendering goes to an in-memory terminal (force_terminal, 100 columns, no colour) and the live area
is redrawn every REFRESH_EVERY tokens (the chat redraws at 10 Hz; at ~50 tokens/s that is one
redraw per 5 tokens; this is more often).

    .venv/bin/python bench/chat_render.py
"""

from __future__ import annotations

import io
import statistics
import time

from rich.console import Console
from rich.markdown import Markdown

from crow_cli.surfaces.render import TurnView

TOKEN = 4  # characters per streamed delta
REFRESH_EVERY = 4  # tokens per redraw of the live area


def answer(size: int) -> str:
    """A Markdown answer of about `size` characters: paragraphs, lists and code blocks."""
    parts, n = [], 0
    while n < size:
        k = len(parts)
        part = (f"## Step {k}\n\nThis paragraph explains step {k} with **bold** and `code` words, "
                f"and it goes on for a little while so that it wraps.\n\n"
                f"- point {k}.a\n- point {k}.b\n\n```python\ndef step_{k}(x):\n    return x + {k}\n```\n\n")
        parts.append(part)
        n += len(part)
    return "".join(parts)[:size]


def per_token_ours(text: str) -> float:
    console = Console(file=io.StringIO(), width=100, force_terminal=True, color_system=None)
    view = TurnView(console, plain=False)
    view._refresh = lambda: None  # type: ignore[method-assign]  # redraw on our schedule below
    tokens = [text[i : i + TOKEN] for i in range(0, len(text), TOKEN)]
    started = time.perf_counter()
    for i, token in enumerate(tokens):
        view.text(token)
        if i % REFRESH_EVERY == 0 and view._live is not None:
            view._live.refresh()
    view.end_answer()
    view.stop()
    return (time.perf_counter() - started) / len(tokens)


def per_token_naive(text: str) -> float:
    from rich.live import Live

    console = Console(file=io.StringIO(), width=100, force_terminal=True, color_system=None)
    tokens = [text[i : i + TOKEN] for i in range(0, len(text), TOKEN)]
    shown = ""
    started = time.perf_counter()
    with Live(console=console, auto_refresh=False, transient=True) as live:
        for i, token in enumerate(tokens):
            shown += token
            if i % REFRESH_EVERY == 0:
                live.update(Markdown(shown), refresh=True)
    console.print(Markdown(shown))
    return (time.perf_counter() - started) / len(tokens)


def main() -> None:
    small, large = answer(1_000), answer(200_000)
    per_token_ours(small)  # warm up imports and caches
    ours_small = statistics.median(per_token_ours(small) for _ in range(5))  # short: noisy alone
    ours_large = per_token_ours(large)
    naive_small, naive_large = per_token_naive(small), per_token_naive(answer(5_000))
    print(f"{'renderer':<28}{'1 KB':>14}{'large':>14}{'ratio':>8}")
    print(f"{'frozen blocks + live tail':<28}{ours_small * 1e6:>11.0f} µs{ours_large * 1e6:>11.0f} µs"
          f"{ours_large / ours_small:>8.2f}   (large = 200 KB)")
    print(f"{'naive full re-render':<28}{naive_small * 1e6:>11.0f} µs{naive_large * 1e6:>11.0f} µs"
          f"{naive_large / naive_small:>8.2f}   (large = 5 KB)")


if __name__ == "__main__":
    main()
