"""The numpy model of dqgen.nn.W4A8Linear's forward on the host (tests/test_w4a8_module.py, the GPU tests hold the
kernel to it): x quantized per token as the generated quantizer does (dqgen.w8a8.reference, bit-exact with it), the
product as dqgen.check.w4a8_model computes it (the proven s8 Plan on the packed words, the fp32 rescale of each
128-k tile in K order), then + bias in fp32 and one rounding to x's dtype (the kernel's epilogue)."""

from __future__ import annotations

from typing import Any

import torch

from dqgen.check.w4a8_model import w4a8_matmul as model_matmul
from dqgen.emit.pipeline import compile_artifact
from dqgen.layout.w4a8 import w4a8_converter_spec
from dqgen.w8a8.reference import quantize
from dqgen.w8a8.w4a8_op import spec_for


def model_forward(layer: Any, x: torch.Tensor) -> torch.Tensor:
    """W4A8Linear ``layer``'s forward of x [..., K] (float16 / bfloat16) in numpy: a CPU tensor of x's dtype."""
    assert x.dtype in (torch.float16, torch.bfloat16) and x.shape[-1] == layer.in_features
    x2 = x.detach().reshape(-1, layer.in_features).cpu().float().numpy()  # fp16 / bf16 -> fp32: exact
    smooth = None if layer.smooth is None else layer.smooth.detach().cpu().numpy()
    xq, xs = quantize(x2, smooth)
    plan = compile_artifact(w4a8_converter_spec(spec_for(layer.w_zeros is not None))).plan
    out = torch.from_numpy(model_matmul(plan, layer.packed(), xq, xs))
    if layer.bias is not None:
        out = out + layer.bias.detach().cpu().to(x.dtype).float()  # fp32 add, rounded to nearest once
    return out.to(x.dtype).reshape(*x.shape[:-1], layer.out_features)
