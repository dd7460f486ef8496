"""Example plugin tool: a sync function. Load with `crow run --tools-dir tools …`."""

import random

from crow_cli.tools import tool


@tool
def roll_dice(sides: int = 6, count: int = 1) -> str:
    """Roll dice and report each result and the total.

    Args:
        sides: faces on each die (2 or more).
        count: how many dice to roll (1 to 100).
    """
    if sides < 2 or not 1 <= count <= 100:
        raise ValueError("sides must be >= 2 and count between 1 and 100")
    rolls = [random.randint(1, sides) for _ in range(count)]
    return f"rolls: {rolls}, total: {sum(rolls)}"
