"""Long conversations: the valid outgoing history, the context budget and compaction.

    normalise.py  the copy of the history that is sent: valid whatever was stored
    budget.py     the context window and the prompt size (usage, else an estimate)
    compact.py    shortening old tool outputs and summarising old exchanges; the checkpoint
    send.py       what the loop calls per request: normalise, compact when near the window or
                  after a `ContextOverflow`, retry once
"""
