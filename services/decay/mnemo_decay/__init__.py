"""Mnemo's decay service."""
