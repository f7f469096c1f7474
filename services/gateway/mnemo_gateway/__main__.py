"""Entry point: run the gateway with the embedded consumers (`python -m mnemo_gateway`)."""

from mnemo.entrypoints.cli import main

if __name__ == "__main__":
    main(["serve"])
