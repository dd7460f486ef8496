"""`crow probe`, `crow models` and `--local`."""
