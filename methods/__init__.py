"""methods package."""
