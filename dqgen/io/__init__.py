"""Reading and writing users' files: quantized safetensors checkpoints (checkpoint). Imports core, layout,
check.reference and run (lazily)."""
