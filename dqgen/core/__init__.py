"""The resolved description of a format: the spec schema (spec), number-format facts (formats), printing.
Imports nothing of dqgen above core."""
