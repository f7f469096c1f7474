"""Entry point: run the indexer consumer (`python -m mnemo_indexer`)."""

from mnemo.service.consumer_main import main

if __name__ == "__main__":
    main("indexer")
