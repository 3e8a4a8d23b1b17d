"""dqgen.nn.quantize_model: which Linears it replaces and why it skips the others (CPU), the replaced layers' tensors
are dqgen.quantize's of the transposed weight; on a GPU the quantized model's forward is x @ dequant(W) and the
layouts packed on the device are the numpy packers' bytes."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from dqgen.check.reference import dequantize_reference  # noqa: E402
from dqgen.nn import QuantLinear, quantize, quantize_model  # noqa: E402
from dqgen.nn.model_quantize import QuantizeReport  # noqa: E402


class _Sub(torch.nn.Linear):
    pass


class _Block(torch.nn.Module):
    def __init__(self, shared: torch.nn.Linear) -> None:
        super().__init__()
        self.q_proj = torch.nn.Linear(128, 256, bias=False)
        self.down_proj = torch.nn.Linear(256, 128, bias=True)
        self.odd = torch.nn.Linear(100, 64)  # in_features 100: no whole group of 128 / of the 8 codes a word packs
        self.narrow = torch.nn.Linear(128, 60)  # out_features 60: not whole words of 8 codes (AWQ packs along N)
        self.sub = _Sub(128, 128)
        self.shared = shared

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.q_proj(x)) + self.shared(x)


class _Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        shared = torch.nn.Linear(128, 128, bias=False)
        self.layers = torch.nn.ModuleList([_Block(shared), _Block(shared)])
        self.lm_head = torch.nn.Linear(128, 512, bias=False)
        self.half()


def test_replaces_eligible_and_reports_the_rest() -> None:
    model = _Model()
    w_q0 = model.layers[0].q_proj.weight.detach().clone()
    bias = model.layers[0].down_proj.bias.detach().clone()
    rep = quantize_model(model, "awq_int4_fp16", skip=["layers.1.down_proj"])
    assert isinstance(rep, QuantizeReport)
    assert rep.spec == "awq_int4_fp16"
    assert set(rep.replaced) == {
        "layers.0.q_proj",
        "layers.0.down_proj",
        "layers.0.shared",
        "layers.1.q_proj",
        "layers.1.shared",
    }
    assert rep.skipped["layers.1.down_proj"] == "skip pattern 'layers.1.down_proj'"
    assert rep.skipped["lm_head"].startswith("lm_head: skipped by default")
    assert rep.skipped["layers.0.odd"].startswith("in_features=100, out_features=64: group_size:")
    assert "N = 60" in rep.skipped["layers.0.narrow"]
    assert rep.skipped["layers.0.sub"].startswith("a _Sub (a subclass of nn.Linear")
    assert rep.seconds > 0
    # the modules themselves
    b0, b1 = model.layers
    assert isinstance(b0.q_proj, QuantLinear) and isinstance(b1.q_proj, QuantLinear)
    assert type(b1.down_proj) is torch.nn.Linear and type(model.lm_head) is torch.nn.Linear
    assert b0.shared is b1.shared and isinstance(b0.shared, QuantLinear)  # a shared Linear: one QuantLinear
    # the tensors are dqgen.quantize's of W[K, N] (the numpy path, an independent computation)
    ref = quantize("awq_int4_fp16", w_q0.t().float().numpy())
    for name, a in ref.items():
        got = getattr(b0.q_proj, name)
        assert np.array_equal(got.numpy().view(np.uint8), np.ascontiguousarray(a).view(np.uint8)), name
    assert torch.equal(b0.down_proj.bias, bias)


def test_lm_head_when_asked_and_patterns() -> None:
    model = _Model()
    rep = quantize_model(model, "gptq_int4_fp16", skip=("*.q_proj", "shared"), quantize_lm_head=True)
    assert "lm_head" in rep.replaced and isinstance(model.lm_head, QuantLinear)
    assert rep.skipped["layers.0.q_proj"] == "skip pattern '*.q_proj'"
    assert rep.skipped["layers.1.shared"] == "skip pattern 'shared'"
    assert "layers.0.narrow" in rep.replaced  # GPTQ packs along K: any N


def test_meta_and_bad_arguments() -> None:
    with torch.device("meta"):
        model = torch.nn.Sequential(torch.nn.Linear(128, 128))
    rep = quantize_model(model, "awq_int4_fp16")
    assert rep.replaced == [] and rep.skipped == {"0": "its weight is on the meta device (no values to quantize)"}
    with pytest.raises(TypeError, match=r"^model: expected a torch.nn.Module, got list$"):
        quantize_model([], "awq_int4_fp16")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^skip: expected module names or patterns \(non-empty strings\), got ''$"):
        quantize_model(torch.nn.Sequential(), "awq_int4_fp16", skip=[""])


def test_dtype_note() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(128, 64))  # fp32
    rep = quantize_model(model, "awq_int4_fp16")
    assert rep.replaced == ["0"]
    assert rep.notes == ["0: weight torch.float32; the QuantLinear takes torch.float16 inputs"]


# -------------------------------------------------------------------------------------------------------- GPU


def _cuda() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")


@pytest.mark.gpu
@pytest.mark.parametrize("spec", ["awq_int4_fp16", "gptq_int4_fp16", "int8_fp16", "gptq_int3_fp16", "int8_bf16"])
def test_gpu_model_forward_is_x_at_dequant(spec: str) -> None:
    _cuda()
    from dqgen.core.spec import load_spec

    sp = load_spec(spec)
    dt = torch.bfloat16 if sp.target.value == "bf16" else torch.float16
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(512, 384, bias=True), torch.nn.Linear(384, 256)).to("cuda", dt)
    rep = quantize_model(model, sp)
    assert rep.replaced == ["0", "1"], rep.skipped
    x = torch.randn(64, 512, device="cuda", dtype=dt)
    ref = x.double()
    for layer in model:
        z = layer.zeros.cpu().numpy() if layer.zeros is not None else None
        W = dequantize_reference(sp, layer.qweight.cpu().numpy(), _np_scales(layer.scales), z, None)
        ref = ref @ torch.from_numpy(np.asarray(W, dtype=np.float64)).cuda() + layer.bias.double()
    for m in (1, 5, 16, 64):  # the GEMV, and the GEMM where the spec has one
        y = model(x[:m])
        err = (y.double() - ref[:m]).abs().max().item() / ref[:m].abs().max().item()
        assert err < 2e-2, (spec, m, err)


def _np_scales(t: torch.Tensor) -> np.ndarray:
    import ml_dtypes

    if t.dtype == torch.bfloat16:
        return t.cpu().view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.cpu().numpy()


@pytest.mark.gpu
@pytest.mark.parametrize(
    "spec,group,act",
    [
        ("awq_int4_fp16", 128, False),
        ("awq_int4_fp16", 32, False),
        ("gptq_int4_asym_act_order_fp16", 128, True),
        ("int8_fp16", -1, False),
        ("gptq_int3_fp16", 128, False),
        ("nvfp4_fp16", None, False),
    ],
)
def test_gpu_packed_layouts_equal_host_packers(spec: str, group: int | None, act: bool) -> None:
    """pack_gemv / pack_gemm on the GPU (the torch path) against the same calls through the numpy packer."""
    _cuda()
    from dqgen.core.spec import load_spec
    from dqgen.emit.pipeline import compile_artifact
    from dqgen.kernels.gemm import supports
    from dqgen.nn.quantize_torch import quantize_tensors
    from dqgen.run.gemm import pack_gemm
    from dqgen.run.matmul import pack_gemv

    sp = load_spec(spec)
    w = torch.randn(1024, 688, device="cuda", dtype=torch.float16) * 0.02
    ck = quantize_tensors(sp, w, group_size=group, act_order=act)
    assert all(t.device.type == "cuda" for t in ck.values())
    art = compile_artifact(sp)
    args = (ck["qweight"], ck["scales"], ck.get("zeros"))
    kw = {"g_idx": ck.get("g_idx"), "global_scale": ck.get("global_scale")}
    dev_w, host_w = pack_gemv(art, *args, **kw), pack_gemv(art, *args, **kw, host_pack=True)
    for name in ("wq", "scales", "zeros", "perm", "block_group"):
        a, b = getattr(dev_w, name), getattr(host_w, name)
        assert (a is None) == (b is None), name
        if a is not None:
            assert a.dtype == b.dtype and torch.equal(a, b), name
    if supports(sp):
        g1, g2 = pack_gemm(sp, *args, g_idx=kw["g_idx"]), pack_gemm(sp, *args, g_idx=kw["g_idx"], host_pack=True)
        for name in ("wq", "scales", "zeros", "perm", "tile_group"):
            a, b = getattr(g1, name), getattr(g2, name)
            assert (a is None) == (b is None), name
            if a is not None:
                assert a.dtype == b.dtype and torch.equal(a, b), name


@pytest.mark.gpu
def test_gpu_quantize_equals_cpu() -> None:
    """The GPU's float64 gives the CPU's tensors bit for bit."""
    _cuda()
    from dqgen.nn.quantize_torch import quantize_tensors

    w = torch.randn(768, 512, dtype=torch.float16) * 0.03
    for spec in ("awq_int4_fp16", "gptq_int4_asym_act_order_fp16", "int8_bf16", "gptq_int3_fp16"):
        act = spec.startswith("gptq_int4_asym")
        cpu = quantize_tensors(spec, w, act_order=act)
        gpu = quantize_tensors(spec, w.cuda(), act_order=act)
        for name, t in cpu.items():
            assert torch.equal(gpu[name].cpu(), t), (spec, name)


def test_timing_script_smoke_on_cpu() -> None:
    """devtools/quantize_model_time.py (the lead's H100 run) on a shrunken model on the CPU: its JSON counts the
    seven linears of a Llama layer and leaves lm_head."""
    import json
    import subprocess
    import sys

    from .conftest import ROOT

    args = ["--device", "cpu", "--shrink", "16", "--layers", "1", "--vocab", "256"]
    r = subprocess.run(
        [sys.executable, "devtools/quantize_model_time.py", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["linears_replaced"] == 7 and list(data["skipped"]) == ["lm_head"]
    assert data["meets_bound"] is False and data["seconds"] > 0  # no bound off the GPU
