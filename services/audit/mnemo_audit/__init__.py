"""Mnemo's audit service."""
