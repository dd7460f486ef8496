"""Start-up time of the light commands, side by side with a bare interpreter and `import openai`.

    .venv/bin/python bench/startup.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

CROW = str(Path(sys.executable).parent / "crow")
COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "python -c 'import openai'": [sys.executable, "-c", "import openai"],
    "crow --version": [CROW, "--version"],
    "crow tools": [CROW, "tools"],
    "crow run --help": [CROW, "run", "--help"],
}


def measure(argv: list[str], runs: int = 7) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    results = {name: measure(argv) for name, argv in COMMANDS.items()}
    base = results["python -c pass"]
    for name, t in results.items():
        print(f"{name:<28} {t * 1000:7.0f} ms   {t / base:5.1f}× bare python")


if __name__ == "__main__":
    main()
