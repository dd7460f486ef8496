"""`python -m crow_cli` is `crow`."""

from .cli import main

main()
