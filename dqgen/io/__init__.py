"""Reading and writing users' files: quantized safetensors checkpoints. safetensors_io (the files, read with the
safetensors package), hf_config (the quantization config), infer (spec inference from config and shapes),
dequant_file (dequantizing, the output written atomically); checkpoint is their public face. Imports core,
layout, check.reference and run (lazily)."""
