"""Entry point: run the registrar consumer (`python -m mnemo_registrar`)."""

from mnemo.entrypoints.consumer_main import main

if __name__ == "__main__":
    main("registrar")
