"""Entry point: run the decay consumer (`python -m mnemo_decay`)
(generated from mnemo.handlers.registry by `make consumer-services`)."""

from mnemo.entrypoints.consumer_main import main

if __name__ == "__main__":
    main("decay")
