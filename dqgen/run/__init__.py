"""Running: the one compile-and-load path of every kernel family (loader), the CUDA driver API (device), the
callable Kernel (runtime, torch_op), launch-variant tuning (tune), timing shared by tune and the bench (timing),
GPU checks against the reference (gpucheck). Imports everything below; never tools, io or the CLI."""
