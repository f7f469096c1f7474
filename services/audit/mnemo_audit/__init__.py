"""Mnemo's audit service
(generated from mnemo.handlers.registry by `make consumer-services`)."""
