"""A scripted MCP stdio server that misbehaves on purpose (standard library only: it starts at once).

Run: `python mcp_fault_server.py FAULT[,FAULT…]`. It speaks the legacy handshake (`initialize`; any
other unknown method, `server/discover` included, is answered -32601) and offers the tools `echo`
(read-only: returns its `text`), `app_error` (answers a JSON-RPC error with code -32000, as many
servers do for an ordinary failure), `crash` (exits mid-call, never answering) and `quit` (answers,
then exits: a server gone between turns). Faults:

    hang_list     never answer tools/list
    bad_tool      also list a tool whose inputSchema is not an object, one whose inputSchema is {}, one
                  whose outputSchema is {}, and one without a name
    noise         write a line that is not JSON to stdout before each answer
    chatty        write 64 KiB to stderr on every request
    many          also list 140 tools `t0` … `t139`
    endless       answer tools/list with a next cursor, forever
    read_file     also list a tool named `read_file` (a built-in's name)
    bloated       also list a tool whose description is 2 MB, and one whose inputSchema holds 40,000 characters

`$FAULT_PID_FILE`, when set, gets one line with this process's pid at each start.
"""

from __future__ import annotations

import json
import os
import sys

FAULTS = set(sys.argv[1].split(",")) if len(sys.argv) > 1 else set()
TOOLS = [
    {"name": "echo", "description": "Echo text.", "annotations": {"readOnlyHint": True},
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}},
    {"name": "app_error", "description": "Fails with -32000.", "inputSchema": {"type": "object"}},
    {"name": "crash", "description": "Exits mid-call.", "inputSchema": {"type": "object"}},
    {"name": "quit", "description": "Answers, then exits.", "inputSchema": {"type": "object"}},
]
if "bad_tool" in FAULTS:
    TOOLS += [{"name": "broken", "description": "Bad schema.", "inputSchema": "not an object"},
              {"name": "empty", "description": "Empty schema.", "inputSchema": {}},
              {"name": "no_output_type", "inputSchema": {"type": "object"}, "outputSchema": {}},
              {"description": "No name.", "inputSchema": {"type": "object"}}]
if "many" in FAULTS:
    TOOLS += [{"name": f"t{n}", "inputSchema": {"type": "object"}} for n in range(140)]
if "bloated" in FAULTS:
    TOOLS += [{"name": "long_doc", "description": "x" * 2_000_000, "inputSchema": {"type": "object"}},
              {"name": "big_schema", "inputSchema": {"type": "object", "properties": {
                  "mode": {"type": "string", "enum": [f"value{n:05}" for n in range(4000)]}}}}]
if "read_file" in FAULTS:
    TOOLS.append({"name": "read_file", "description": "Collides.", "inputSchema": {"type": "object"}})


def send(message: dict[str, object]) -> None:
    if "noise" in FAULTS:
        sys.stdout.write("this line is not JSON\n")
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    sys.stdout.flush()


def answer(request: dict[str, object]) -> bool:
    """Answer one request; False when the server must exit."""
    method, rid = request.get("method"), request.get("id")
    params = request.get("params") or {}
    assert isinstance(params, dict)
    if "chatty" in FAULTS:
        sys.stderr.write("x" * 65535 + "\n")
        sys.stderr.flush()
    if rid is None:  # a notification
        return True
    if method == "initialize":
        send({"id": rid, "result": {"protocolVersion": params.get("protocolVersion", "2025-06-18"),
                                    "capabilities": {"tools": {}}, "serverInfo": {"name": "fault", "version": "1"}}})
    elif method == "tools/list":
        if "hang_list" in FAULTS:
            return True
        result: dict[str, object] = {"tools": TOOLS}
        if "endless" in FAULTS:
            result["nextCursor"] = str(int(str(params.get("cursor") or 0)) + 1)
        send({"id": rid, "result": result})
    elif method == "tools/call":
        name, arguments = params.get("name"), params.get("arguments") or {}
        assert isinstance(arguments, dict)
        if name == "crash":
            os._exit(3)
        if name == "app_error":
            send({"id": rid, "error": {"code": -32000, "message": "the database is locked"}})
            return True
        send({"id": rid, "result": {"content": [{"type": "text", "text": str(arguments.get("text", "bye"))}]}})
        return name != "quit"
    elif method == "ping":
        send({"id": rid, "result": {}})
    else:
        send({"id": rid, "error": {"code": -32601, "message": f"Method not found: {method}"}})
    return True


def main() -> None:
    if os.environ.get("FAULT_PID_FILE"):
        with open(os.environ["FAULT_PID_FILE"], "a") as f:
            f.write(f"{os.getpid()}\n")
    for line in sys.stdin:
        if line.strip() and not answer(json.loads(line)):
            return


if __name__ == "__main__":
    main()
