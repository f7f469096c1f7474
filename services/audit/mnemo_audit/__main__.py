"""Entry point: run the audit consumer (`python -m mnemo_audit`)."""

from mnemo.service.consumer_main import main

if __name__ == "__main__":
    main("audit")
