"""Loading a quantized checkpoint into a ``transformers`` model: ``from_pretrained`` builds the model from its
config.json (parameters on the meta device, so nothing is initialized or allocated twice) and ``replace_linears``
puts a ``QuantLinear`` wherever the checkpoint holds a quantized layer (AWQ, GPTQ, compressed-tensors
pack-quantized, ModelOpt FP8 / NVFP4; the spec inferred by ``dqgen.io``, as ``dqgen dequant`` infers it). Every
other tensor loads as it is, cast to the model's dtype like ``transformers`` does."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import torch

from ..io.model_layers import LinearCheckpoint, checkpoint_quant_config, read_linear_layers
from ..io.safetensors_io import BF16, Tensors, safetensors_files
from .linear import QuantLinear

#: The model dtypes a QuantLinear computes in (its spec's target), by the names transformers uses.
_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16"}
_DTYPE_NAMES = {
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
}
_E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)


def _to_torch(a: np.ndarray, device: torch.device) -> torch.Tensor:
    a = np.ascontiguousarray(a)
    if a.dtype == BF16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16).to(device)
    if a.dtype == _E4M3:
        return torch.from_numpy(a.view(np.uint8).copy()).view(torch.float8_e4m3fn).to(device)
    return torch.from_numpy(a.copy()).to(device)


def _to_numpy(t: Any) -> np.ndarray:
    if not isinstance(t, torch.Tensor):
        return np.asarray(t)
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(BF16)
    if t.dtype == torch.float8_e4m3fn:
        return t.view(torch.uint8).numpy().view(_E4M3)
    return t.numpy()


def _arch(device: torch.device) -> str:
    """The float formats' spec architecture: fp8 converts in hardware from sm_90 on. The GPU the layers go to, or
    for layers loaded on the CPU the one torch sees (where a later .cuda() takes them); sm_80 without a GPU."""
    if not torch.cuda.is_available():
        return "sm_80"
    gpu = device if device.type == "cuda" else torch.device("cuda", torch.cuda.current_device())
    return "sm_90" if torch.cuda.get_device_capability(gpu) >= (9, 0) else "sm_80"


def _dtype(value: Any, field: str) -> torch.dtype | None:
    """A torch dtype from what transformers takes (a torch.dtype, its name, 'auto' or None: None)."""
    if value is None or value == "auto":
        return None
    dt = _DTYPE_NAMES.get(value) if isinstance(value, str) else value
    if dt not in _DTYPES:
        raise ValueError(f"[{field}] got {value!r}; expected torch.float16 or torch.bfloat16 (a QuantLinear's dtype)")
    return dt


def _one_device(value: Any, fieldname: str) -> torch.device:
    if isinstance(value, Mapping) and set(value) == {""}:  # transformers' {"": device}: the whole model on one
        value = value[""]
    if isinstance(value, bool) or not isinstance(value, str | torch.device | int):
        raise ValueError(
            f"[{fieldname}] got a {type(value).__name__}; expected one device ('cuda', 'cuda:1', 'cpu', 'auto' or "
            '{"": device}): dqgen puts the whole model on one device'
        )
    if value == "auto":
        value = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(f"cuda:{value}" if isinstance(value, int) else value)
    except RuntimeError:
        raise ValueError(f"[{fieldname}] got {value!r}; expected a device such as 'cuda', 'cuda:1' or 'cpu'") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"[{fieldname}] {value!r}: torch sees no CUDA GPU here")
    return dev


def _device(device: Any, device_map: Any) -> torch.device:
    given = [(f, _one_device(v, f)) for f, v in (("device_map", device_map), ("device", device)) if v is not None]

    def index(d: torch.device) -> tuple[str, int | None]:
        # "cuda" is the current CUDA device: the same as "cuda:<current>" (torch.device compares them unequal)
        if d.type == "cuda" and d.index is None and torch.cuda.is_available():
            return d.type, torch.cuda.current_device()
        return d.type, d.index

    if len(given) == 2 and index(given[0][1]) != index(given[1][1]):
        raise ValueError(f"[device_map] {device_map!r} disagrees with [device] {device!r}; give one of them")
    return given[-1][1] if given else torch.device("cpu")


@contextlib.contextmanager
def _parameters_on_meta() -> Iterator[None]:
    """Every parameter registered inside goes to the meta device (initializing it costs nothing, and the checkpoint
    replaces it); buffers stay real, since the ones a model computes (rotary inv_freq) are not in checkpoints. It
    patches ``torch.nn.Module.register_parameter`` while the model is built (as accelerate's init_empty_weights
    does): a module built meanwhile in another thread would get meta parameters too."""
    register = torch.nn.Module.register_parameter

    def on_meta(module: torch.nn.Module, name: str, param: torch.nn.Parameter | None) -> None:
        register(module, name, param)
        if param is not None and param.device.type != "meta":
            p = module._parameters[name]
            assert p is not None
            module._parameters[name] = torch.nn.Parameter(p.to("meta"), requires_grad=p.requires_grad)

    setattr(torch.nn.Module, "register_parameter", on_meta)  # noqa: B010 (a method patched for the block's length)
    try:
        yield
    finally:
        setattr(torch.nn.Module, "register_parameter", register)  # noqa: B010


class _Source:
    """The checkpoint's tensors by name, as torch tensors: a folder's safetensors (opened once each) or a dict."""

    def __init__(self, checkpoint: Path | Mapping[str, Any]) -> None:
        self._dict = checkpoint if isinstance(checkpoint, Mapping) else None
        self._where: dict[str, Path] = {}
        self._open: dict[Path, Any] = {}
        if not isinstance(checkpoint, Mapping):
            from safetensors import safe_open

            for f in safetensors_files(Path(checkpoint)):
                with safe_open(str(f), framework="pt") as h:
                    for k in h.keys():  # noqa: SIM118 - safe_open has no __iter__
                        self._where[k] = f

    def names(self) -> list[str]:
        return list(self._dict) if self._dict is not None else list(self._where)

    def __contains__(self, name: str) -> bool:
        return name in (self._dict if self._dict is not None else self._where)

    def get(self, name: str) -> torch.Tensor:
        if self._dict is not None:
            t = self._dict[name]
            return t if isinstance(t, torch.Tensor) else _to_torch(np.asarray(t), torch.device("cpu"))
        from safetensors import safe_open

        f = self._where[name]
        if f not in self._open:
            self._open[f] = safe_open(str(f), framework="pt")
        return self._open[f].get_tensor(name)

    def close(self) -> None:
        self._open.clear()  # the files' handles and maps go with them


def _quant_linear(lay: LinearCheckpoint, bias: torch.Tensor | None, device: torch.device) -> QuantLinear:
    def up(a: np.ndarray | None) -> torch.Tensor | None:
        return None if a is None else _to_torch(a, device)

    qweight, scales = up(lay.qweight), up(lay.scales)
    assert qweight is not None and scales is not None
    return QuantLinear.from_checkpoint(
        lay.spec, qweight, scales, up(lay.zeros), g_idx=up(lay.g_idx), bias=bias, global_scale=up(lay.global_scale)
    )


def _swap(
    model: torch.nn.Module, layers: dict[str, LinearCheckpoint], source: _Source, device: torch.device
) -> dict[str, Any]:
    """Replace each quantized layer's nn.Linear by its QuantLinear; checked for every layer before any swap."""
    modules = dict(model.named_modules())
    for name, lay in layers.items():
        mod = modules.get(name)
        if mod is None:
            raise ValueError(f"layer {name} ({lay.fmt}): the model ({type(model).__name__}) has no module of that name")
        if not isinstance(mod, torch.nn.Linear):
            raise ValueError(f"layer {name} ({lay.fmt}): the model's module is a {type(mod).__name__}, not nn.Linear")
        if (mod.in_features, mod.out_features) != (lay.in_features, lay.out_features):
            raise ValueError(
                f"layer {name} ({lay.fmt}): the checkpoint holds in_features x out_features = {lay.in_features} x "
                f"{lay.out_features}, the model's nn.Linear {mod.in_features} x {mod.out_features}"
            )
        if mod.bias is not None and mod.bias.is_meta and f"{name}.bias" not in source:
            raise ValueError(
                f"layer {name} ({lay.fmt}): the model's nn.Linear has a bias; the checkpoint has no {name}.bias"
            )
    specs = {}
    for name, lay in layers.items():
        mod = modules[name]
        assert isinstance(mod, torch.nn.Linear)
        tdt = torch.float16 if lay.spec.target.value == "fp16" else torch.bfloat16
        bias = None
        if f"{name}.bias" in source:
            bias = source.get(f"{name}.bias")
        elif mod.bias is not None:
            bias = mod.bias.detach()
        if bias is not None:
            if tuple(bias.shape) != (lay.out_features,):
                raise ValueError(f"layer {name}, bias: expected [{lay.out_features}], got {list(bias.shape)}")
            bias = bias.to(device=device, dtype=tdt).clone()
        parent_name, _, attr = name.rpartition(".")
        parent = modules[parent_name] if parent_name else model
        setattr(parent, attr, _quant_linear(lay, bias, device))
        specs[name] = lay.spec
    return specs


def _default_target(model: torch.nn.Module) -> str:
    for p in model.parameters():
        if p.is_floating_point() and p.dtype in _DTYPES:
            return _DTYPES[p.dtype]
    return "fp16"


def replace_linears(
    model: torch.nn.Module,
    checkpoint: str | Path | Mapping[str, Any],
    *,
    quantization_config: Mapping[str, Any] | None = None,
    torch_dtype: torch.dtype | str | None = None,
    device: str | torch.device | None = None,
) -> tuple[torch.nn.Module, dict[str, Any]]:
    """Put a ``QuantLinear`` in ``model`` wherever ``checkpoint`` holds a quantized layer of the same name.

    ``checkpoint``: a model folder (safetensors, sharded with an index or not, and its quantization config), or a
    dict of tensor names to torch tensors / numpy arrays with ``quantization_config`` (config.json's
    ``quantization_config``). ``torch_dtype``: the layers' dtype (float16 / bfloat16; default the model's);
    ``device``: where the layers go (default: where the model's parameters are, cpu for meta ones). Only the
    quantized linears change; every module is checked (present, an nn.Linear of the checkpoint's shape) before
    any is replaced. Returns the model and ``{module name: dqgen Spec}`` of what was replaced."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    dt = _dtype(torch_dtype, "torch_dtype")
    target = _DTYPES[dt] if dt is not None else _default_target(model)
    if device is None:
        p = next(iter(model.parameters()), None)
        dev = torch.device("cpu") if p is None or p.is_meta else p.device
    else:
        dev = _device(device, None)
    if isinstance(checkpoint, Mapping):
        tensors = {k: _to_numpy(v) for k, v in checkpoint.items()}
        layers = read_linear_layers(tensors, target, quantization_config, arch=_arch(dev))
        source = _Source(checkpoint)
    else:
        layers = read_linear_layers(Path(checkpoint), target, quantization_config, arch=_arch(dev))
        source = _Source(Path(checkpoint))
    try:
        return model, _swap(model, layers, source, dev)
    finally:
        source.close()


def _scales_dtype(folder: Path) -> torch.dtype | None:
    """The dtype of the first quantized layer's 16-bit scales (the checkpoint's compute dtype), from the headers."""
    with Tensors(safetensors_files(folder)) as tensors:
        for name in sorted(tensors):
            if name.endswith((".scales", ".weight_scale")):
                dt = tensors.meta(name)[0]
                if dt in ("F16", "BF16"):
                    return torch.float16 if dt == "F16" else torch.bfloat16
    return None


def from_pretrained(
    pretrained_model_name_or_path: str | Path,
    *,
    torch_dtype: torch.dtype | str | None = None,
    dtype: torch.dtype | str | None = None,
    device_map: str | torch.device | int | None = None,
    device: str | torch.device | int | None = None,
    trust_remote_code: bool = False,
    output_loading_info: bool = False,
    **kwargs: Any,
) -> Any:
    """A ``transformers`` causal LM from a quantized checkpoint folder, with a ``QuantLinear`` for every quantized
    layer (AWQ, GPTQ v1/v2 with act-order, compressed-tensors pack-quantized int4/int8, ModelOpt FP8/NVFP4).

    The model is built from config.json (``AutoModelForCausalLM.from_config``, parameters on the meta device) with
    its ``quantization_config`` removed (transformers' own quantizers are not involved); every other tensor of the
    checkpoint (sharded with ``model.safetensors.index.json`` or not) is loaded in the model's dtype on the device.
    ``torch_dtype`` / ``dtype``: float16 or bfloat16 (default, "auto": the checkpoint's scales dtype, else
    config.json's torch_dtype, else float16); ``device_map`` / ``device``: one device ("cuda", "cuda:0", "cpu",
    "auto"; default cpu, where a QuantLinear holds its tensors but cannot run); other keyword arguments go to
    ``from_config`` (``attn_implementation``, ...). ``output_loading_info``: also return ``{"quantized": {name:
    spec}, "notes": {name: [...]}, "unexpected_keys": [...]}``. The folder must be local."""
    try:
        import transformers
        from transformers import AutoConfig, AutoModelForCausalLM
    except ImportError:
        raise ImportError("dqgen.from_pretrained needs transformers: pip install transformers") from None
    folder = Path(pretrained_model_name_or_path)
    if not folder.is_dir():
        raise ValueError(
            f"{folder}: no such folder (dqgen loads a local model folder; download a Hub model first, e.g. with "
            "huggingface_hub.snapshot_download)"
        )
    if torch_dtype is not None and dtype is not None and _dtype(torch_dtype, "torch_dtype") != _dtype(dtype, "dtype"):
        raise ValueError(f"[dtype] {dtype!r} disagrees with [torch_dtype] {torch_dtype!r}; give one of them")
    dev = _device(device, device_map)
    kwargs.pop("low_cpu_mem_usage", None)  # always: parameters are built on the meta device
    config = AutoConfig.from_pretrained(str(folder), trust_remote_code=trust_remote_code)
    qc = checkpoint_quant_config(folder)
    # transformers would build its own quantizer (and its own layers) from this: dqgen's layers replace them
    if getattr(config, "quantization_config", None) is not None:
        delattr(config, "quantization_config")
    dt = _dtype(torch_dtype, "torch_dtype") if torch_dtype is not None else _dtype(dtype, "dtype")
    if dt is None:
        dt = _scales_dtype(folder)
    if dt is None:
        cfg_dt = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
        dt = cfg_dt if cfg_dt in _DTYPES else torch.float16
    layers = read_linear_layers(folder, _DTYPES[dt], qc, arch=_arch(dev))
    # transformers 4.56 renamed from_config's torch_dtype to dtype (the old name warns from then on)
    major, minor = (int(v) for v in transformers.__version__.split(".")[:2])
    dtype_kw = {"dtype" if (major, minor) >= (4, 56) else "torch_dtype": dt}
    with _parameters_on_meta():
        model = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code, **dtype_kw, **kwargs)
    source = _Source(folder)
    specs = _swap(model, layers, source, dev)
    consumed = {n for lay in layers.values() for n in lay.consumed}
    consumed |= {f"{n}.bias" for n in layers}
    wanted = {k: v for k, v in model.state_dict(keep_vars=True).items() if v.is_meta}
    state: dict[str, torch.Tensor] = {}
    unexpected = []
    for name in source.names():
        if name in consumed:
            continue
        if name not in wanted:
            unexpected.append(name)
            continue
        t, want = source.get(name), wanted[name]
        if t.shape != want.shape:
            raise ValueError(f"{name}: the checkpoint holds {list(t.shape)}, the model expects {list(want.shape)}")
        state[name] = t.to(device=dev, dtype=want.dtype if want.is_floating_point() else t.dtype)
    source.close()
    model.load_state_dict(state, strict=False, assign=True)
    model.tie_weights()
    missing = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if missing:
        raise ValueError(
            f"{missing[0]}: not in the checkpoint ({len(missing)} tensors of the model are missing"
            + (f": {', '.join(missing[:4])}, ..." if len(missing) > 1 else "")
            + ")"
        )
    # buffers the model computed on the CPU (rotary inv_freq) follow; the QuantLinears are already there (a
    # .to() would pack them again)
    for mod in model.modules():
        if not isinstance(mod, QuantLinear):
            for bname, b in mod._buffers.items():
                if b is not None and b.device != dev:
                    mod._buffers[bname] = b.to(dev)
    model.eval()
    if unexpected:
        warnings.warn(
            f"{len(unexpected)} checkpoint tensors are not used by the model: {', '.join(sorted(unexpected)[:5])}"
            + (", ..." if len(unexpected) > 5 else ""),
            stacklevel=2,
        )
    if output_loading_info:
        info = {
            "quantized": specs,
            "notes": {n: lay.notes for n, lay in layers.items() if lay.notes},
            "unexpected_keys": sorted(unexpected),
        }
        return model, info
    return model
