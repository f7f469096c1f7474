"""Mnemo: durable, governed, shared memory for AI agents."""

__version__ = "0.1.0"
