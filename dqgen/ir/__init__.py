"""The Plan IR: the PTX ops and their bit-exact emulation (isa), the Plan (plan), derived constants (magic).
Imports core only."""
