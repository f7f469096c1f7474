"""Mnemo's domain: memories, events and the rules over them. Standard library and pydantic only."""
