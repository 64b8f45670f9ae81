"""Helpers shared by test folders (job targets for the sweep layer)."""
