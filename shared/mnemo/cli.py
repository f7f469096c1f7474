"""The `mnemo` console script's former path: installs made before the command line moved to
mnemo.entrypoints.cli still start it through here (`mnemo = "mnemo.cli:main"`)."""

from mnemo.entrypoints.cli import main

__all__ = ["main"]
