"""Entry point: run the audit consumer (`python -m mnemo_audit`)
(generated from mnemo.handlers.registry by `make consumer-services`)."""

from mnemo.entrypoints.consumer_main import main

if __name__ == "__main__":
    main("audit")
