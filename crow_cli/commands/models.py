"""`crow models`: the server's models, with context length where the server gives it."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from ..errors import CrowError
from .options import ApiKeyOpt, BaseUrlOpt, ConfigOpt, DebugOpt, ProfileOpt, fail

__all__ = ["models"]


def models(
    base_url: BaseUrlOpt = None,
    api_key: ApiKeyOpt = None,
    profile: ProfileOpt = None,
    config: ConfigOpt = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON array of {id, owned_by, context_length}.")]
    = False,
    debug: DebugOpt = False,
) -> None:
    """List the server's models (GET /models), with context length where the server gives it."""
    from dataclasses import asdict

    from ..config import load_settings, require_api_key
    from ..probe.models import fetch_models
    from ..probe.report import shown

    try:
        settings = load_settings({"base_url": base_url, "api_key": api_key}, config_path=config, profile=profile)
        require_api_key(settings)  # a hosted API without a key would only answer 401, or not be reachable
        found = fetch_models(settings)
    except CrowError as exc:
        raise fail(exc, debug=debug) from None
    if json_out:
        print(json.dumps([{k: v for k, v in asdict(m).items() if k != "context_source"} for m in found], indent=2))
        return
    if not found:
        print("the server lists no models")
        return
    width = max(len(shown(m.id)) for m in found)
    for m in found:
        context = f"{m.context_length} tokens" if m.context_length else "context length not given"
        print(f"{shown(m.id).ljust(width)}  {context}")
