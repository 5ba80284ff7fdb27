"""Helpers of scripts/bench: processes and /proc figures, loads, reporting."""
