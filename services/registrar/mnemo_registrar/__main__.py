"""Entry point: run the registrar consumer (`python -m mnemo_registrar`)
(generated from mnemo.handlers.registry by `make consumer-services`)."""

from mnemo.entrypoints.consumer_main import main

if __name__ == "__main__":
    main("registrar")
