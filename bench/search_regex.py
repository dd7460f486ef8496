"""search_files (regex package: a released GIL, a time budget, a whole-file pre-search) against the
`re` line-by-line scan it replaced, side by side on the same synthetic tree.

The baseline is the same search_files with `regex` swapped for a shim over `re` and no pre-search:
file discovery and output are shared, only the matching differs. Builds 200 files x 2 000 lines in
a temporary folder and prints, per pattern, the best of 3 seconds of each and the ratio
search_files / re. Patterns with lookarounds skip the pre-search: they show the cost of matching
line by line with `regex` (GIL released, timeout checked).

    .venv/bin/python bench/search_regex.py
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import time
from pathlib import Path

from crow_cli.tools.builtin import search
from crow_cli.tools.builtin.search import search_files

PATTERNS = [r"def \w+\(", "TODO", r"^\s*$", r"(?<=def )zzzq"]


def build(root: Path) -> None:
    for n in range(200):
        body = "".join(f"    value_{i} = compute({i}, name='x{n}')  # note\n" if i % 40 else f"def f_{i}(x):\n"
                       for i in range(2000))
        (root / f"m{n:03d}.py").write_text(body + ("# TODO: tidy\n" if n % 10 == 0 else ""))


class _RePattern:
    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.pattern = re.compile(pattern, flags)

    def search(self, text: str, pos: int = 0, concurrent: object = None, timeout: object = None) -> object:
        return self.pattern.search(text, pos)


class _ReShim:
    """What search_files uses of `regex`, done by `re` (the code before the change)."""

    error = re.error
    MULTILINE = re.MULTILINE
    compile = _RePattern


def with_re(pattern: str) -> str:
    saved, safe = sys.modules["regex"], search.whole_file_safe
    sys.modules["regex"], search.whole_file_safe = _ReShim, lambda _: False  # type: ignore[assignment]
    try:
        return search_files(pattern=pattern)
    finally:
        sys.modules["regex"], search.whole_file_safe = saved, safe


def best(fn, runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        build(root)
        import regex  # noqa: F401  (loaded once, outside the timings)
        os.chdir(root)  # outside a tool call the workspace is the working directory
        print(f"{'pattern':<18} {'re s':>7} {'search_files s':>15} {'ratio':>6}")
        for pattern in PATTERNS:
            assert with_re(pattern) == search_files(pattern=pattern)
            base = best(lambda p=pattern: with_re(p))
            ours = best(lambda p=pattern: search_files(pattern=p))
            print(f"{pattern:<18} {base:7.3f} {ours:15.3f} {ours / base:6.2f}")


if __name__ == "__main__":
    main()
