"""The rendered s8 converters on the GPU (issue 24, W4A8): every code and zero point at every lane plus random words,
converted by the device and compared with the spec's values (``code_values & 0xFF``) — the check that the PTX the
prover emulates does on the device what the emulator says. CPU counterpart: tests/test_s8_target.py."""

from __future__ import annotations

import numpy as np
import pytest

from dqgen.check.prove import code_values, lane_cases
from dqgen.core.spec import Spec, load_spec, w4a8_specs, with_group_size
from dqgen.emit.nvrtc import compile_source
from dqgen.emit.pipeline import compile_artifact
from dqgen.layout.w4a8 import w4a8_converter_spec

pytestmark = pytest.mark.gpu


def _specs() -> list[Spec]:
    out = []
    for name in sorted(w4a8_specs()):
        spec = with_group_size(load_spec(name), 128)
        out += [spec, w4a8_converter_spec(spec)]  # the checkpoint word and the prepacked W4A8 word
    return out


SPECS = _specs()


def _kernel_source(spec: Spec, header: str) -> str:
    ns = f"dqgen::{spec.name}"
    prep = f"unsigned zr[{ns}::kZeroRegs]; {ns}::prepare_zeros(z[i], zr);" if spec.zeros.packed else ""
    zr = "zr, " if spec.zeros.packed else ""
    return (
        header
        + f"""
extern "C" __global__ void s8_convert(const unsigned* w, const unsigned* z, unsigned* out, int n) {{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    (void)z;
    {prep}
    {ns}::convert(w[i], {zr}out + i * {ns}::kRegs);
}}
"""
    )


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_s8_converter_on_the_device(spec: Spec) -> None:
    torch = pytest.importorskip("torch")
    from dqgen.run.device import LoadedKernel, device_arch

    art = compile_artifact(spec)
    rng = np.random.default_rng(0)
    words, zeros = lane_cases(spec, rng)
    extra = rng.integers(0, 2**32, 1 << 20, dtype=np.uint64).astype(np.uint32)
    words = np.concatenate([words, extra])
    if zeros is not None:
        zeros = np.concatenate([zeros, rng.integers(0, 2**32, extra.size, dtype=np.uint64).astype(np.uint32)])
    want = (code_values(spec, words, zeros) & 0xFF).astype(np.uint8)  # [n, 8] element order

    arch = device_arch()
    cubin = compile_source(_kernel_source(spec, art.header), arch=arch, want="cubin", name=f"{spec.name}_s8.cu").cubin
    assert cubin is not None
    kernel = LoadedKernel(cubin, "s8_convert")
    n = words.size
    w_dev = torch.from_numpy(words.view(np.int32)).cuda()
    z_dev = torch.from_numpy((zeros if zeros is not None else np.zeros(1, np.uint32)).view(np.int32)).cuda()
    out = torch.zeros(n * 2, dtype=torch.int32, device="cuda")
    kernel(
        ((n + 255) // 256,),
        (256,),
        [np.uint64(w_dev.data_ptr()), np.uint64(z_dev.data_ptr()), np.uint64(out.data_ptr()), np.int32(n)],
    )
    torch.cuda.synchronize()
    got = out.cpu().numpy().view(np.uint8).reshape(n, 8)  # register r's bytes 0..3 = elements 4r..4r+3
    bad = np.argwhere(got != want)
    assert bad.size == 0, f"{len(bad)} lanes differ; first: word 0x{int(words[bad[0][0]]):08X}, element {bad[0][1]}"
