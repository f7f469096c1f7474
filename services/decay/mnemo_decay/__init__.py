"""Mnemo's decay service
(generated from mnemo.handlers.registry by `make consumer-services`)."""
