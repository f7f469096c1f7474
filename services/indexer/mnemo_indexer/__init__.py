"""Mnemo's indexer service
(generated from mnemo.handlers.registry by `make consumer-services`)."""
