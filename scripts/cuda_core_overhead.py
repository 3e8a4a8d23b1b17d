"""cuda.core against dqgen's own driver-API code (issue 12 item 5), as JSON on stdout; needs a GPU, torch and
cuda-core.

Host microseconds per launch of the same prepared dqgen kernel (awq_int4_fp16, 128x64: the GPU work is far below
the host time), median of 10^4 calls (the lower of two such rounds), a synchronize every 32 calls (untimed) so
the launch queue never fills:
- dqgen's BoundLaunch (arguments packed once, ctypes cuLaunchKernel);
- cuda.core ``launch(stream, config, kernel, *args)`` (it packs the arguments on every call);
- cuda-bindings' ``driver.cuLaunchKernel`` with the packed arguments (dqgen's fallback without ctypes);
- the whole torch call ``k(q, s, z, out=w)`` for scale.
Then what a first call per tensor signature pays: dqgen's tensor view and argument packing against cuda.core's
StridedMemoryView and ParamHolder; and NVRTC through cuda.core's Program against dqgen.emit.nvrtc (uncached).
Each cuda.core launch's output is compared with dqgen's, so a wrong argument packing cannot pass as fast."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable


def per_call_us(fn: Callable[[], object], sync: Callable[[], None], n: int = 20_000) -> float:
    """Median host us of one call, the lower of two rounds (the first path timed should not pay for clocks
    that are still ramping up)."""
    rounds = []
    for _ in range(2):
        for _ in range(300):
            fn()
        ts = []
        for i in range(n // 2):
            if i % 32 == 0:
                sync()
            t0 = time.perf_counter_ns()
            fn()
            ts.append(time.perf_counter_ns() - t0)
        sync()
        rounds.append(statistics.median(ts) / 1e3)
    return min(rounds)


def main() -> dict:
    import torch
    from cuda.bindings import driver
    from cuda.core import Device, LaunchConfig, ObjectCode, Program, ProgramOptions, launch
    from cuda.core import __version__ as cuda_core_version
    from cuda.core._kernel_arg_handler import ParamHolder

    try:
        from cuda.core import StridedMemoryView
    except ImportError:  # cuda.core before 1.2.2 keeps it in utils
        from cuda.core.utils import StridedMemoryView

    import dqgen
    from dqgen.emit.nvrtc import compile_source
    from dqgen.run import device as dev
    from dqgen.run.inputs import make_inputs

    res: dict = {"gpu": torch.cuda.get_device_name(0), "cuda_core": cuda_core_version, "torch": torch.__version__}
    k = dqgen.compile("awq_int4_fp16")
    q, s, z = make_inputs(k.spec, 128, 64, 0)
    w = torch.zeros((128, 64), dtype=torch.float16, device="cuda")
    device = Device(0)
    device.set_current()
    stream = device.create_stream()
    handle = int(stream.handle)
    prepared = k.prepare(q, s, z, out=w, stream=handle)
    bound = prepared.fn
    assert bound is not None
    prepared()
    stream.sync()
    want = w.clone()

    def sync() -> None:
        stream.sync()

    res["dqgen_bound_launch_us"] = per_call_us(lambda: bound(handle), sync)
    kernel = ObjectCode.from_cubin(bound.kernel._image).get_kernel(bound.kernel.name)
    config = LaunchConfig(grid=bound.grid, block=bound.block)
    args_np = [h[()] for h in bound._holders]  # the same numpy scalars (uint64 pointers, int64 sizes)
    for label, args in (("numpy_scalars", args_np), ("python_ints", [int(a) for a in args_np])):
        try:
            w.zero_()
            torch.cuda.synchronize()
            launch(stream, config, kernel, *args)
            stream.sync()
            same = bool(torch.equal(w, want))
            res[f"cuda_core_launch_{label}_output_matches"] = same
            if same:
                res[f"cuda_core_launch_{label}_us"] = per_call_us(
                    lambda a=args: launch(stream, config, kernel, *a), sync
                )
        except Exception as e:  # one API difference must not lose the other figures
            res[f"cuda_core_launch_{label}_error"] = repr(e)
    fn, grid, block, params = bound.kernel._function, bound.grid, bound.block, bound._params
    res["cuda_bindings_cuLaunchKernel_us"] = per_call_us(
        lambda: driver.cuLaunchKernel(fn, *grid, *block, 0, handle, params, 0), sync
    )
    res["dqgen_torch_call_out_us"] = per_call_us(lambda: k(q, s, z, out=w), torch.cuda.synchronize)

    try:
        res.update(first_call_costs(q, bound, args_np, StridedMemoryView, ParamHolder, dev))
    except Exception as e:  # one missing API must not lose the launch figures
        res["first_call_error"] = repr(e)
    try:
        res.update(nvrtc_times(k, dev, Program, ProgramOptions, compile_source))
    except Exception as e:
        res["nvrtc_error"] = repr(e)
    return {key: round(v, 3) if isinstance(v, float) else v for key, v in res.items()}


def first_call_costs(q, bound, args_np, StridedMemoryView, ParamHolder, dev) -> dict:
    """What a first call per tensor signature pays: a tensor view and the argument packing, both ways."""
    res: dict = {}
    grid, block = bound.grid, bound.block

    def timed(fn: Callable[[], object], n: int = 5000) -> float:
        for _ in range(100):
            fn()
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        return (time.perf_counter_ns() - t0) / n / 1e3

    res["dqgen_as_device_array_us"] = timed(lambda: dev.as_device_array(q, "qweight"))
    res["cuda_core_strided_memory_view_dlpack_us"] = timed(lambda: StridedMemoryView.from_dlpack(q, stream_ptr=-1))
    res["cuda_core_strided_memory_view_cai_us"] = timed(
        lambda: StridedMemoryView.from_cuda_array_interface(q, stream_ptr=-1)
    )
    res["dqgen_bind_packing_us"] = timed(lambda: bound.kernel.bind(grid, block, args_np))
    res["cuda_core_param_holder_us"] = timed(lambda: ParamHolder(args_np))
    return res


def nvrtc_times(k, dev, Program, ProgramOptions, compile_source) -> dict:
    """NVRTC on the same variant source, uncached, through dqgen.emit.nvrtc and through cuda.core's Program."""
    res: dict = {}
    source = k.variant_source(next(iter(k.artifact.variants)))
    arch = dev.device_arch(0)
    t0 = time.perf_counter()
    compile_source(source, arch=arch, want="cubin", use_cache=False)
    res["dqgen_nvrtc_cubin_s"] = round(time.perf_counter() - t0, 3)
    t0 = time.perf_counter()
    opts = ProgramOptions(arch=arch, std="c++17")
    Program(source, "c++", opts).compile("cubin")
    res["cuda_core_program_cubin_s"] = round(time.perf_counter() - t0, 3)
    return res


if __name__ == "__main__":
    print(json.dumps(main(), indent=1))
