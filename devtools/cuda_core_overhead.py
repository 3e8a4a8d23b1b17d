"""Host cost of a dqgen call and of every way to launch its kernel, side by side (issue 10 item 3, issue 12 item 5),
as JSON on stdout; needs a GPU, torch and cuda-core.

All figures are host microseconds per call of the same awq_int4_fp16 kernel on a 128x64 problem (the GPU work is
far below the host time), each the median of 10^4 calls taken by ``dqgen.tools.bench.host_median_us`` (the helper
the bench's "Call overhead" figure uses), on torch's default stream (``_default``, what a plain call uses) and on a
non-blocking stream made torch's current stream (``_side``). The whole list is timed ROUNDS times, in turn (this
host's figures move by tens of percent from one round to the next); every round is kept, with the median and the
minimum over rounds:
- ``torch_mul``: ``torch.mul(a, 2, out=b)`` on the same shape (the bar: a torch op);
- ``dqgen_call``: the whole call ``k(q, s, z, out=w)`` (signature key, one dict lookup, the pre-packed launch);
- ``dqgen_bound_launch``: dqgen's BoundLaunch (cuda.core ParamHolder packed once, cuda-bindings cuLaunchKernel);
- ``cuda_bindings_direct``: ``driver.cuLaunchKernel`` with all eleven arguments spelled out per call;
- ``cuda_core_launch``: cuda.core ``launch(stream, config, kernel, *args)`` (it packs the arguments every call);
- ``ctypes_cdll_prebound`` / ``ctypes_pydll_prebound``: libcuda's cuLaunchKernel through ctypes, every argument a
  ready ctypes object (CDLL releases the GIL around the call, PyDLL does not); ``key_lookup_ctypes_launch``: the
  call's fast path (signature key, dict lookup) with that launch;
- ``part_*``: pieces of the fast path alone: the signature key as Kernel.__call__ builds it, single tensor
  accessors, torch.compiler.is_compiling, torch's raw-stream accessor, an empty lambda (the timer's own cost);
- ``cuda_bindings_custream_object``: the same with the stream as a ready CUstream object (no conversion per call);
- ``c_floor_*``: cuLaunchKernel from C (nvcc; same cubin, grid and argument sizes), the floor no Python path beats;
  ``c_loop_in_this_process_*``: that C loop inside this process, on dqgen's loaded function and packed arguments.
Each launch path's output is compared with the dqgen call's, so a wrong packing cannot pass as fast.
Then what a first call per tensor signature pays (tensor views, argument packing, the whole check), the import time
of cuda.core, NVRTC through cuda.core's Program against dqgen.emit.nvrtc, and the bench's own call-overhead figures
(``bench_call_overhead``: tiny-shape host time, and the 4096x4096 call vs the prepared launch after an L2 flush)."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

ROUNDS = 5

C_FLOOR = r"""
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static int cmp(const void *a, const void *b) {
  long x = *(const long *)a, y = *(const long *)b; return (x > y) - (x < y);
}
static long now(void) {
  struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000L + t.tv_nsec;
}
int main(int argc, char **argv) {  /* cubin name grid block nptr rows cols group side-stream */
  CUdevice d; CUcontext c; CUmodule m; CUfunction f; CUdeviceptr base; CUstream st = 0;
  if (cuInit(0) || cuDeviceGet(&d, 0) || cuDevicePrimaryCtxRetain(&c, d) || cuCtxSetCurrent(c)) return 1;
  FILE *fp = fopen(argv[1], "rb"); fseek(fp, 0, SEEK_END); long n = ftell(fp); rewind(fp);
  char *img = malloc(n); if (fread(img, 1, n, fp) != (size_t)n) return 2; fclose(fp);
  if (cuModuleLoadData(&m, img) || cuModuleGetFunction(&f, m, argv[2]) || cuMemAlloc(&base, 1 << 22)) return 3;
  unsigned grid = atoi(argv[3]), block = atoi(argv[4]); int nptr = atoi(argv[5]);
  if (atoi(argv[9]) && cuStreamCreate(&st, CU_STREAM_NON_BLOCKING)) return 5;
  uint64_t ptrs[8]; int64_t ints[3] = {atoll(argv[6]), atoll(argv[7]), atoll(argv[8])}; void *params[11];
  for (int i = 0; i < nptr; i++) { ptrs[i] = i == 3 ? 0 : base + ((uint64_t)i << 19); params[i] = &ptrs[i]; }
  for (int i = 0; i < 3; i++) params[nptr + i] = &ints[i];
  enum { N = 10000 }; static long ns[N];
  for (int i = 0; i < 100; i++) cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, st, params, 0);
  cuCtxSynchronize();
  for (int i = 0; i < N; i++) {
    long t0 = now();
    if (cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, st, params, 0)) return 4;
    ns[i] = now() - t0;
    if (i % 1000 == 999) cuCtxSynchronize();
  }
  cuCtxSynchronize();
  qsort(ns, N, sizeof(long), cmp);
  printf("%.3f\n", ns[N / 2] / 1000.0);
  return 0;
}
"""


def c_floor(bound: Any, nargs: int) -> dict[str, float]:
    """cuLaunchKernel's own host time from C: same cubin, grid and argument sizes (pointers into one buffer), on
    the legacy default stream and on a non-blocking stream."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise RuntimeError("no nvcc")
    slots = (ctypes.c_void_p * nargs).from_address(bound.params)
    rows, cols, group = (ctypes.c_int64.from_address(slots[i]).value for i in range(nargs - 3, nargs))
    res: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        cubin, src, exe = (os.path.join(tmp, n) for n in ("k.cubin", "floor.c", "floor"))
        with open(cubin, "wb") as f:
            f.write(bound.kernel._image)
        with open(src, "w") as f:
            f.write(C_FLOOR)
        subprocess.run([nvcc, "-O2", "-o", exe, src, "-lcuda"], check=True, capture_output=True)
        for label, side in (("default_stream", 0), ("side_stream", 1)):
            args = [cubin, bound.kernel.name, bound.grid[0], bound.block[0], nargs - 3, rows, cols, group, side]
            r = subprocess.run([exe, *map(str, args)], capture_output=True, text=True, timeout=60)
            if r.returncode:
                raise RuntimeError(f"floor exited {r.returncode}: {r.stderr.strip()}")
            res[f"c_floor_{label}"] = float(r.stdout)
    return res


C_LOOP = r"""
#include <cuda.h>
#include <stdlib.h>
#include <time.h>
static int cmp(const void *a, const void *b) {
  long x = *(const long *)a, y = *(const long *)b; return (x > y) - (x < y);
}
double launch_loop(CUfunction f, unsigned grid, unsigned block, CUstream st, void **params, int n) {
  long *ns = malloc(n * sizeof(long)); struct timespec t0, t1;
  for (int i = 0; i < n; i++) {
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, st, params, 0)) { free(ns); return -1; }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ns[i] = (t1.tv_sec - t0.tv_sec) * 1000000000L + (t1.tv_nsec - t0.tv_nsec);
    if (i % 1000 == 999) cuCtxSynchronize();
  }
  cuCtxSynchronize(); qsort(ns, n, sizeof(long), cmp); double m = ns[n / 2] / 1000.0; free(ns); return m;
}
"""


def _key(q: Any, s: Any, z: Any, w: Any) -> tuple:
    """The signature key Kernel.__call__ builds inline for ``k(q, s, z, out=w)`` (a function here: one more call)."""
    return (
        q.data_ptr(), q.shape, q.is_contiguous(), q.dtype,
        s.data_ptr(), s.shape, s.is_contiguous(), s.dtype,
        (z.data_ptr(), z.shape, z.is_contiguous(), z.dtype), None, None,
        w.data_ptr(), w.shape, w.is_contiguous(), w.dtype, None,
    )  # fmt: skip


def c_loop_in_process(bound: Any, stream: int) -> float:
    """The same C loop of cuLaunchKernel, run inside this Python process (torch loaded, its context and streams
    live) on dqgen's own loaded function and packed arguments: the driver's cost here, without Python's."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise RuntimeError("no nvcc")
    tmp = tempfile.mkdtemp()
    src, lib = os.path.join(tmp, "loop.c"), os.path.join(tmp, "libloop.so")
    with open(src, "w") as f:
        f.write(C_LOOP)
    subprocess.run([nvcc, "-O2", "-shared", "-Xcompiler", "-fPIC", "-o", lib, src, "-lcuda"], check=True)
    loop = ctypes.CDLL(lib).launch_loop
    loop.restype = ctypes.c_double
    loop.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    loop(int(bound.kernel._function), bound.grid[0], bound.block[0], stream, bound.params, 200)  # warm-up
    return round(loop(int(bound.kernel._function), bound.grid[0], bound.block[0], stream, bound.params, 10_000), 3)


def main() -> dict:
    import numpy as np
    import torch
    from cuda.bindings import driver
    from cuda.core import Device, LaunchConfig, ObjectCode, launch
    from cuda.core import __version__ as cuda_core_version
    from cuda.core._kernel_arg_handler import ParamHolder
    from cuda.core.utils import StridedMemoryView

    import dqgen
    from dqgen.core.spec import load_spec
    from dqgen.run import device as dev
    from dqgen.run.inputs import make_inputs
    from dqgen.tools.bench import call_overhead, host_median_us

    res: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(0),
        "cuda_core": cuda_core_version,
        "torch": torch.__version__,
        "python": sys.version.split()[0],
    }
    device = Device(0)
    device.set_current()
    cstream = device.create_stream()
    handle = int(cstream.handle)
    cuda_core_stream = type(cstream)

    k = dqgen.compile("awq_int4_fp16")
    q, s, z = make_inputs(k.spec, 128, 64, 0)
    w = torch.zeros((128, 64), dtype=torch.float16, device="cuda")
    a, b = torch.ones_like(w), torch.empty_like(w)
    k(q, s, z, out=w)
    torch.cuda.synchronize()
    want = w.clone()
    (hit,) = k._signatures.values()
    bound = hit.fn
    assert bound is not None
    nargs = 8  # awq_int4_fp16: qweight, scales, zeros, g_idx, out pointers; rows, cols, group size
    slots = (ctypes.c_void_p * nargs).from_address(bound.params)
    values = [ctypes.c_uint64.from_address(slots[i]).value for i in range(5)]
    values += [ctypes.c_int64.from_address(slots[i]).value for i in range(5, nargs)]
    fn, grid, block, params = bound.kernel._function, bound.grid, bound.block, bound.params
    ckernel = ObjectCode.from_cubin(bound.kernel._image).get_kernel(bound.kernel.name)
    config = LaunchConfig(grid=grid, block=block)
    raw_stream = torch._C._cuda_getCurrentRawStream

    default = torch.cuda.default_stream()
    side = torch.cuda.ExternalStream(handle)
    try:
        core_default: Any = cuda_core_stream.from_handle(0)
    except Exception as e:  # an API this cuda.core may lack: the side-stream figure stands alone
        core_default, res["cuda_core_default_stream_error"] = None, repr(e)

    paths: dict[str, tuple[Any, Callable[[], object]]] = {}
    cu_streams = {h: driver.CUstream(h) for h in (0, handle)}
    for label, tstream, h, cs in (("default", default, 0, core_default), ("side", side, handle, cstream)):
        paths |= {
            f"torch_mul_{label}": (tstream, lambda: torch.mul(a, 2, out=b)),
            f"dqgen_call_{label}": (tstream, lambda: k(q, s, z, out=w)),
            f"dqgen_bound_launch_{label}": (tstream, lambda h=h: bound(h)),
            f"cuda_bindings_direct_{label}": (
                tstream,
                lambda h=h: driver.cuLaunchKernel(fn, *grid, *block, 0, h, params, 0),
            ),
            f"cuda_bindings_custream_object_{label}": (
                tstream,
                lambda cu=cu_streams[h]: driver.cuLaunchKernel(fn, *grid, *block, 0, cu, params, 0),
            ),
        }
        if cs is not None:
            paths[f"cuda_core_launch_{label}"] = (tstream, lambda cs=cs: launch(cs, config, ckernel, *values))
        # libcuda's cuLaunchKernel through ctypes with every argument a ready ctypes object (no conversion per call):
        # CDLL releases the GIL around the call, PyDLL keeps it
        cargs = (
            ctypes.c_void_p(int(fn)),
            *(ctypes.c_uint(v) for v in (*grid, *block)),
            ctypes.c_uint(0),
            ctypes.c_void_p(h),
            ctypes.c_void_p(params),
            ctypes.c_void_p(0),
        )
        for lib_name, lib_type in (("cdll", ctypes.CDLL), ("pydll", ctypes.PyDLL)):
            cu_launch = lib_type("libcuda.so.1").cuLaunchKernel
            cu_launch.restype = ctypes.c_int
            paths[f"ctypes_{lib_name}_prebound_{label}"] = (tstream, lambda f=cu_launch, a=cargs: f(*a))
        # the call's whole fast path with that launch: the signature key, one dict lookup, the ctypes launch
        table = {_key(q, s, z, w): cargs}
        cdll_launch = ctypes.CDLL("libcuda.so.1").cuLaunchKernel
        cdll_launch.restype = ctypes.c_int
        paths[f"key_lookup_ctypes_launch_{label}"] = (
            tstream,
            lambda f=cdll_launch, t=table: f(*t[_key(q, s, z, w)]),
        )
    # the parts of the fast path, timed alone (each includes the timer's own cost: part_empty_lambda)
    qs, ss, zs, ws = q, s, z, w
    paths |= {
        "part_signature_key": (
            default,
            lambda: (
                qs.data_ptr(),
                qs.shape,
                qs.is_contiguous(),
                qs.dtype,
                ss.data_ptr(),
                ss.shape,
                ss.is_contiguous(),
                ss.dtype,
                (zs.data_ptr(), zs.shape, zs.is_contiguous(), zs.dtype),
                None,
                None,
                ws.data_ptr(),
                ws.shape,
                ws.is_contiguous(),
                ws.dtype,
                None,
            ),
        ),
        "part_one_stride": (default, lambda: qs.stride()),
        "part_one_is_contiguous": (default, lambda: qs.is_contiguous()),
        "part_one_shape": (default, lambda: qs.shape),
        "part_one_data_ptr": (default, lambda: qs.data_ptr()),
        "part_is_compiling": (default, torch.compiler.is_compiling),
        "part_raw_stream": (default, lambda: raw_stream(0)),
        "part_empty_lambda": (default, lambda: None),
    }
    for name, (tstream, path) in paths.items():  # every launch path writes what the dqgen call wrote
        if name.startswith(("torch", "part")):
            continue
        torch.cuda.set_stream(tstream)
        w.zero_()
        torch.cuda.synchronize()
        path()
        torch.cuda.synchronize()
        res[f"{name}_output_matches"] = bool(torch.equal(w, want))
    rounds: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(ROUNDS):
        for name, (tstream, path) in paths.items():
            torch.cuda.set_stream(tstream)
            rounds[name].append(round(host_median_us(path), 3))
    torch.cuda.set_stream(default)
    res["host_us_rounds"] = rounds
    res["host_us_median_of_rounds"] = {name: statistics.median(r) for name, r in rounds.items()}
    res["host_us_min_of_rounds"] = {name: min(r) for name, r in rounds.items()}
    try:
        res.update(c_floor(bound, nargs))
        for label, h in (("default_stream", 0), ("side_stream", handle)):
            res[f"c_loop_in_this_process_{label}"] = c_loop_in_process(bound, h)
    except Exception as e:  # no compiler: the Python figures stand on their own
        res["c_floor_error"] = repr(e)

    def timed(fn: Callable[[], object], n: int = 2000) -> float:
        for _ in range(50):
            fn()
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        return round((time.perf_counter_ns() - t0) / n / 1e3, 3)

    args_np = [*(np.uint64(v) for v in values[:5]), *(np.int64(v) for v in values[5:])]

    def new_signature() -> None:
        k._signatures.clear()
        k(q, s, z, out=w)

    res["first_call_us"] = {
        "dqgen_as_device_array": timed(lambda: dev.as_device_array(q, "qweight")),
        "cuda_core_strided_memory_view_dlpack": timed(lambda: StridedMemoryView.from_dlpack(q, stream_ptr=-1)),
        "cuda_core_strided_memory_view_cai": timed(
            lambda: StridedMemoryView.from_cuda_array_interface(q, stream_ptr=-1)
        ),
        "dqgen_pack_args": timed(lambda: dev.pack_args(args_np)),
        "cuda_core_param_holder": timed(lambda: ParamHolder(args_np)),
        "dqgen_bind": timed(lambda: bound.kernel.bind(grid, block, args_np)),
        "dqgen_new_signature_call": timed(new_signature, 500),
    }
    torch.cuda.synchronize()
    imp = subprocess.run(
        [sys.executable, "-c", "import time; t = time.perf_counter(); import cuda.core; print(time.perf_counter()-t)"],
        capture_output=True,
        text=True,
    )
    res["cuda_core_import_s"] = round(float(imp.stdout), 3) if imp.returncode == 0 else imp.stderr[-300:]
    try:
        res.update(nvrtc_times(k, dev))
    except Exception as e:
        res["nvrtc_error"] = repr(e)
    res["bench_call_overhead"] = {
        key: round(v, 3) if isinstance(v, float) else v for key, v in call_overhead(load_spec("awq_int4_fp16")).items()
    }
    return res


def nvrtc_times(k: Any, dev: Any) -> dict:
    """NVRTC on the same variant source, uncached, through dqgen.emit.nvrtc and through cuda.core's Program."""
    from cuda.core import Program, ProgramOptions

    from dqgen.emit.nvrtc import compile_source
    from dqgen.kernels.dequant import variants

    res: dict = {}
    source = k.variant_source(variants(k.spec)[0])
    arch = dev.device_arch(0)
    t0 = time.perf_counter()
    compile_source(source, arch=arch, want="cubin", use_cache=False)
    res["dqgen_nvrtc_cubin_s"] = round(time.perf_counter() - t0, 3)
    t0 = time.perf_counter()
    Program(source, "c++", ProgramOptions(arch=arch, std="c++17")).compile("cubin")
    res["cuda_core_program_cubin_s"] = round(time.perf_counter() - t0, 3)
    return res


if __name__ == "__main__":
    print(json.dumps(main(), indent=1))
