"""Adapters: one module per technology, each implementing a port from mnemo.ports."""
