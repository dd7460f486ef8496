"""Surfaces: the ways a person or a script drives the loop (run, chat, JSONL). Each only reads events."""
