"""Mnemo's registrar service
(generated from mnemo.handlers.registry by `make consumer-services`)."""
