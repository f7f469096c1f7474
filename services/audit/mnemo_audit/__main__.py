"""Entry point: run the audit consumer (`python -m mnemo_audit`)."""

from mnemo.entrypoints.consumer_main import main

if __name__ == "__main__":
    main("audit")
