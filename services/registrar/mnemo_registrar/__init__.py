"""Mnemo's registrar service."""
