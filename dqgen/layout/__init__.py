"""Where each code sits in the packed words: packing and unpacking (packing). Imports core only."""
