"""Registered studies: the mechanism lab, its theorem ladder, probe and verdicts."""
