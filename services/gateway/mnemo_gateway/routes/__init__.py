"""The gateway's routes, one module per area."""
