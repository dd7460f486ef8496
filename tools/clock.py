"""Example plugin tool: an async function with an optional argument."""

import asyncio
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from crow_cli.tools import tool


@tool
async def current_time(timezone: str = "UTC") -> str:
    """Tell the current date and time in a timezone.

    Args:
        timezone: an IANA timezone name, such as "Europe/Paris".
    """
    await asyncio.sleep(0)  # async tools run on the event loop; sync ones in a worker thread
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown timezone {timezone!r}") from exc
    return datetime.now(zone).isoformat(timespec="seconds")
