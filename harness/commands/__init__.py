"""CLI sub-commands of the core."""
