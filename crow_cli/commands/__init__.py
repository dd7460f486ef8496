"""One module per `crow` subcommand; each defines a function that `crow_cli.cli` registers.

`crow_cli.cli` imports every command module to build its help, so a command imports the rest of crow inside
its function: `crow --version`, `crow tools` and `crow sessions` start in well under 0.2 s only because
none of them loads the surfaces, the SDK or httpx (`tests/test_layers.py::test_package_import_is_cheap`,
`bench/startup.py`).
"""
