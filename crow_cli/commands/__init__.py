"""One module per `crow` subcommand; each defines a function that `crow_cli.cli` registers."""
