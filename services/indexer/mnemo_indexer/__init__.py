"""Mnemo's indexer service."""
