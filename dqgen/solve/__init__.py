"""Solving: the strategies that build candidate Plans (solver, solver_float) and their shared builders
(common); the cheapest proven one wins. Imports core, ir and check (to pick proven plans)."""
