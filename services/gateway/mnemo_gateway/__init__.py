"""Mnemo's HTTP gateway."""
