"""Kernel families: one typed, frozen config per family of generated kernels, the config being the render and the
compile cache key, and the entry point's name derived from it in one place.

- family: the protocol every config satisfies (``KernelConfig``) and the value types of the parts that vary
  (``Mainloop``, ``SplitK``, ``Epilogue``);
- dequant: the standalone dequantize kernel (``DequantConfig``, its launch variants);
- gemv: the fused GEMV (``GemvConfig``, its entry points and code-shape ``Tuning``);
- gemm: the tensor-core GEMM (``GemmKernelConfig``, its tiles and entry points);
- gemm90: the Hopper GEMM (``Gemm90KernelConfig``, its token tiles); gather_x: the gather of x into a gathered
  weight's slot order in front of it (``GatherXConfig``);
- w8a8_gemm: the W8A8 int8 / fp8 GEMM (``W8A8GemmConfig`` and the tile choice);
- act_quant: the activation quantizer (``ActQuantConfig`` and its choice);
- gru_cell: the int8 GRU's per-step cell and persistent kernels (``GruCellConfig``).

Rendering only: no device, no NVRTC (dqgen.run.loader compiles and loads a config). Imports core, ir, layout,
check, solve and emit."""
