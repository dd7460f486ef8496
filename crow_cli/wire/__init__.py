"""The wire layer: SDK stream → raw chunk dicts → typed events and an assembled turn."""
