"""Mnemo's entry points, the outermost layer: the `mnemo` command line, the MCP server,
the faust workers and the one-consumer mains of the distributed and embedded modes, and
the operators' admin actions. They build a platform (mnemo.bootstrap) and run it; nothing
below them imports them."""
