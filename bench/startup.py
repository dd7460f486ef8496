"""Start-up time of the light commands, side by side with a bare interpreter and `import openai`.

Reports the median wall time and the mean CPU time (user + sys, from getrusage): CPU time is the
steadier number on a busy machine.

    .venv/bin/python bench/startup.py
"""

from __future__ import annotations

import resource
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
    "crow sessions list": [CROW, "sessions", "list"],
    "crow run --help": [CROW, "run", "--help"],
}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(argv: list[str], runs: int = 7) -> tuple[float, float]:
    """(median wall seconds, mean CPU seconds) of `runs` runs."""
    times = []
    cpu_before = _children_cpu()
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times), (_children_cpu() - cpu_before) / runs


def main() -> None:
    results = {name: measure(argv) for name, argv in COMMANDS.items()}
    base_cpu = results["python -c pass"][1]
    print(f"{'command':<28} {'wall':>8} {'cpu':>8}   cpu vs bare python")
    for name, (wall, cpu) in results.items():
        print(f"{name:<28} {wall * 1000:6.0f}ms {cpu * 1000:6.0f}ms   {cpu / base_cpu:5.1f}×")


if __name__ == "__main__":
    main()
