"""Entry point: run the indexer consumer (`python -m mnemo_indexer`)
(generated from mnemo.handlers.registry by `make consumer-services`)."""

from mnemo.entrypoints.consumer_main import main

if __name__ == "__main__":
    main("indexer")
