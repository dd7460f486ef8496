"""Surfaces: the ways a person, a script, an editor or another agent drives the loop (run, chat, JSONL, ACP,
MCP). Each only reads events."""
