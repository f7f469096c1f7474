"""`python -m mnemo`: the `mnemo` command line (mnemo.entrypoints.cli)."""

from mnemo.entrypoints.cli import main

if __name__ == "__main__":
    main()
