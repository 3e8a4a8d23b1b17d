"""Read AWQ and GPTQ safetensors checkpoints and dequantize them to dense fp16 / bf16 weights.

Formats (the layouts every loader agrees on; K = in_features, N = out_features, P = 32 // bits):

- AWQ ``gemm`` (casper-hansen/AutoAWQ ``awq/modules/linear/gemm.py``, ``awq/utils/packing_utils.py``):
  ``<prefix>.qweight`` int32 ``[K, N/8]`` packed along N in AWQ order ``[0,2,4,6,1,3,5,7]``,
  ``<prefix>.qzeros`` int32 ``[K/G, N/8]`` packed the same way, ``<prefix>.scales`` fp16 ``[K/G, N]``;
  value ``(q - z) * s``. Config: ``quant_config.json`` (``w_bit``, ``q_group_size``, ``zero_point``,
  ``version``) or ``config.json`` ``quantization_config`` (``quant_method: awq``, ``bits``, ``group_size``).
  dqgen spec: ``u4``, packing ``{axis: N, order: awq}``, zeros ``integer``.
- GPTQ (AutoGPTQ ``auto_gptq/nn_modules/qlinear/qlinear_cuda_old.py``; GPTQModel's ``checkpoint_format``):
  ``<prefix>.qweight`` int32 ``[K/P, N]`` packed along K sequentially, ``<prefix>.qzeros`` int32
  ``[G, N/P]`` packed along N sequentially, ``<prefix>.scales`` fp16 ``[G, N]``, ``<prefix>.g_idx``
  int32 ``[K]`` (optional). Config: ``quantize_config.json`` or ``config.json`` ``quantization_config``
  (``quant_method: gptq``): ``bits``, ``group_size`` (-1: one group), ``desc_act``, ``sym``,
  ``checkpoint_format`` (``gptq`` = v1, stored zero = z - 1, the default; ``gptq_v2``: stored = z).
  dqgen spec: ``sym: true`` -> ``u{bits}b{2^(bits-1)}`` (value q - 2^(bits-1)), zeros ``none`` (a
  ``qzeros`` tensor, if any, is ignored, with a note); ``sym: false`` -> ``u{bits}`` with zeros
  ``gptq_v1`` / ``gptq_v2``. ``act_order`` when ``desc_act`` is true and ``g_idx`` is not the trivial
  ``arange(K) // G`` (a trivial g_idx takes the plain path).

Every disagreement between the config and the tensors (bits or group size against the shapes, a
missing tensor, unpacked float zeros, a g_idx of the wrong length or with group ids out of range,
a v1 zero point of 0 that wrapped to 2^bits - 1, qzeros that vary in a ``sym: true`` file, a ``bits``
that the model's other sizes contradict when no qzeros, g_idx or group size pins the code width)
raises ``ValueError`` naming the layer and the tensor or config field: a file that would dequantize to
silent garbage is refused instead. So are index files whose ``weight_map`` names a file outside the
model's folder.

``dequantize_file`` writes ``<prefix>.weight`` as ``[N, K]`` (``torch.nn.Linear``'s
``[out_features, in_features]``; dqgen's kernels produce ``W[K, N]``, which is transposed) in the
target dtype, drops the layer's ``qweight``, ``qzeros``, ``scales`` and ``g_idx``, and copies every
other tensor (biases, embeddings, norms) byte for byte, in natural order (``layers.9`` before ``layers.23``).
An ``out`` that is no ``.safetensors`` file is a dense model folder as ``save_pretrained`` writes one (shards of
at most ``shard_size`` with ``model.safetensors.index.json``, ``config.json`` without ``quantization_config``,
the tokenizer files), which ``transformers``' ``from_pretrained`` loads as it is.

Values: each element is ``round_target((q - z) * s)``, one rounding, with the scales as stored. When
the scales' dtype differs from the target they are converted first if that is exact. Scales the target
cannot hold exactly (fp16 scales into bf16, say) are not rounded, which would round twice: the kernel
(an fp16 spec) runs with unit scales and gives ``q - z`` exactly, the product with the stored scales is
formed exactly (fp32 on the GPU for 16-bit scales, float64 on the CPU) and rounded once (the note says
so). Overflow is counted in the dtype written.

Input files are validated by the ``safetensors`` package; their tensors are then read over ``mmap``
from the byte ranges of the header. The output is written here (an 8-byte little-endian header length,
a JSON header ``{name: {dtype, shape, data_offsets}}``, the raw little-endian bytes), streamed tensor
by tensor so that a model larger than memory can be dequantized, into a temporary file (or folder) of its
own that replaces ``out`` when complete; a later run removes those a killed run left.

The code lives in four modules: ``safetensors_io`` (reading and writing the files), ``hf_config`` (the
quantization config), ``infer`` (spec inference from the config and the tensor shapes) and ``dequant_file``
(dequantizing, and writing the output file atomically). This module is their public face.
"""

from .dequant_file import dequantize_file, dequantize_layer
from .hf_config import read_config
from .infer import QuantLayer, infer_spec, read_layers, spec_summary
from .safetensors_io import read_safetensors, write_safetensors

__all__ = [
    "QuantLayer",
    "dequantize_file",
    "dequantize_layer",
    "infer_spec",
    "read_config",
    "read_layers",
    "read_safetensors",
    "spec_summary",
    "write_safetensors",
]
