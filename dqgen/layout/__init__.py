"""Where each code sits in the packed words: the Layout (field positions, blocks, tensor shapes, K / N
inference, the bit movers; layout.py) and packing / unpacking with validation (packing.py). Imports core only."""
