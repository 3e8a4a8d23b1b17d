"""Checking: the CPU proof of a Plan (prove), the independent numba reference (reference), published
anchors (anchors). Imports core and ir; the reference imports nothing of dqgen but core, so a bug shared
with the solver cannot hide."""
