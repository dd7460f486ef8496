#!/usr/bin/env python3
"""Turn a `crow run --record DIR` folder into a replayable test case (the conformance case format).

    python3 scripts/recording_to_case.py DIR OUT.json --id ID --provider TEXT [--source TEXT]

The case gets every recorded response as `responses` (in order), every recorded request body as
`recorded_requests`, and `expected` from the first response: the tool calls as the stream assembled
them (id, name, arguments text; concatenated per `index`, which is how llama.cpp and most servers
stream), its text and its finish_reason. Standard library only; check the result by eye before
committing it: `expected` is what the product must reproduce.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def _chunks(sse: str) -> list[dict[str, Any]]:
    out = []
    for line in sse.replace("\r\n", "\n").split("\n"):
        if line.startswith("data:") and line[5:].strip() not in ("", "[DONE]"):
            out.append(json.loads(line[5:].strip()))
    return out


def expected_from(sse: str) -> dict[str, Any]:
    """`expected` (content, tool_calls, finish_reason) of one SSE body."""
    calls: dict[int, dict[str, Any]] = {}
    content, finish = "", None
    for chunk in _chunks(sse):
        for choice in chunk.get("choices") or []:
            finish = choice.get("finish_reason") or finish
            delta = choice.get("delta") or {}
            content += delta.get("content") or ""
            for tc in delta.get("tool_calls") or []:
                call = calls.setdefault(tc.get("index", 0), {"id": "", "type": "function",
                                                              "function": {"name": "", "arguments": ""}})
                call["id"] = tc.get("id") or call["id"]
                fn = tc.get("function") or {}
                call["function"]["name"] = fn.get("name") or call["function"]["name"]
                call["function"]["arguments"] += fn.get("arguments") or ""
    return {"content": content or None, "tool_calls": [calls[i] for i in sorted(calls)], "finish_reason": finish}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--id", required=True)
    parser.add_argument("--provider", required=True)
    parser.add_argument("--source", default="recorded with crow run --record")
    args = parser.parse_args()
    responses, requests = [], []
    for meta_file in sorted(args.folder.glob("[0-9]*-meta.json")):
        meta = json.loads(meta_file.read_text())
        prefix = meta_file.name.split("-")[0]
        requests.append(json.loads((args.folder / f"{prefix}-request.json").read_text()))
        body = (args.folder / meta["response_file"]).read_text() if "response_file" in meta else ""
        if meta.get("status") == 200 and "event-stream" in meta["response_headers"].get("content-type", ""):
            responses.append({"sse": body})
        else:
            responses.append({"status": meta.get("status", 599), "body": body})
    if not responses or "sse" not in responses[0]:
        print(f"recording_to_case: error: no streamed first response in {args.folder}", file=sys.stderr)
        return 2
    case = {"id": args.id, "kind": "real server recording", "provider": args.provider, "source": args.source,
            "responses": responses, "recorded_requests": requests, "expected": expected_from(responses[0]["sse"])}
    args.out.write_text(json.dumps(case, indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
