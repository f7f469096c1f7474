"""Entry point: run the decay consumer (`python -m mnemo_decay`)."""

from mnemo.entrypoints.consumer_main import main

if __name__ == "__main__":
    main("decay")
