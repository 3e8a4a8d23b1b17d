"""The commands on top of the pipeline: build, explain, bench (and its Triton baseline). Imported by the CLI."""
