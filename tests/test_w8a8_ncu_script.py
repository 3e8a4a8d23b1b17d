"""devtools/w8a8_ncu.py's CPU parts (the profile itself needs a GPU and ncu: the lead runs it there): the main loop
found in SASS text and in a compiled W8A8 kernel, the --metrics list kept to what ncu lists, and ncu's CSV rows
matched to the cases by kernel name."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _script():
    spec = importlib.util.spec_from_file_location("w8a8_ncu", ROOT / "devtools" / "w8a8_ncu.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["w8a8_ncu"] = mod  # dataclasses resolve the module of their annotations
    spec.loader.exec_module(mod)
    return mod


nc = _script()

# A prologue, a wait loop without a GMMA, and a main loop whose second half a predicated forward branch may skip.
SASS = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
.L_x_1:
        /*0010*/                   SYNCS.PHASECHK.TRANS64 P0, [R2], R3 ;
        /*0020*/              @!P0 BRA `(.L_x_1) ;
.L_x_2:
        /*0030*/                   IGMMA.64x8x32.S8.S8 R24, gdesc[UR20], R24 ;
        /*0040*/                   IGMMA.64x8x32.S8.S8 R28, gdesc[UR24], R28, gsb0 ;
        /*0050*/                   I2F.S32 R4, R24 ;
        /*0060*/               @P1 BRA `(.L_x_3) ;
        /*0070*/                   FMUL R5, R4, R6 ;
        /*0080*/                   FADD R7, R7, R5 ;
.L_x_3:
        /*0090*/                   NOP ;
        /*00a0*/               @P2 BRA `(.L_x_2) ;
        /*00b0*/                   EXIT ;
"""


def test_main_loop_is_the_smallest_loop_with_a_gmma_and_its_skippable_part() -> None:
    body, cond = nc.main_loop(SASS)
    assert body == {"IGMMA.64": 2, "I2F.S32": 1, "BRA": 2, "FMUL": 1, "FADD": 1}
    assert cond == {"FMUL": 1, "FADD": 1}  # what @P1 BRA .L_x_3 jumps over
    assert nc.main_loop(SASS.replace("IGMMA", "IMAD")) == ({}, {})  # no loop holds a GMMA


def test_sass_row_of_a_compiled_decode_kernel() -> None:
    from dqgen.kernels.w8a8_gemm90 import W8A8Gemm90Config

    cfg = W8A8Gemm90Config("s8", "f16", True, 8, 1, 2, 6, 2)  # M = 1: 128 channels, two m64 blocks a warpgroup
    row = nc.sass_row(cfg, cfg.mw)
    # one 128-k tile an iteration: 4 k32 IGMMAs for each of the two m64 blocks; no spills, no conversions
    assert row["gmma_op"] == ["IGMMA.64"] and row["loop_k_tiles"] == 1.0
    assert row["per_k_tile"]["GMMA"] == 8.0 and "I2F" not in row["per_k_tile"]
    assert row["spill_bytes"] == 0 and row["registers"] > 0


def test_metrics_keep_what_ncu_lists() -> None:
    query = "\n".join(
        [
            "Device NVIDIA H100 (GH100)",
            "Metric Name                         Metric Description",
            "dram__throughput                    DRAM throughput",
            "dram__bytes_read                    bytes read",
            "sm__pipe_tensor_op_gmma_cycles_active   cycles the gmma pipe was active",
            "sm__pipe_fma_cycles_active          cycles the fma pipe was active",
            "sm__inst_executed_pipe_alu          ALU instructions",
            "sm__pipe_fp64_cycles_active         fp64 pipe",
        ]
    )
    got = nc.ncu_metrics(query)
    assert got[: len(nc.BASE_METRICS)] == list(nc.BASE_METRICS)
    assert "dram__throughput.avg.pct_of_peak_sustained_elapsed" in got and "dram__bytes_read.sum" in got
    assert "lts__t_sector_hit_rate.pct" not in got  # not listed by this ncu
    pipes = {m for m in got if "pipe" in m}
    assert pipes == {
        "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
        "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
        "sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active",
    }  # fp64 is not one the misses need


def test_rows_match_cases_by_kernel_name_in_run_order() -> None:
    order = nc.run_order(nc.CASES)
    assert {c.tag for c in order} == {c.tag for c in nc.CASES} and len(order) == len(nc.CASES)
    shapes = [nc.BIG, nc.TALL, (4096, 28672)]
    assert [(c.k, c.n) for c in order] == sorted(((c.k, c.n) for c in order), key=shapes.index)
    names = {
        "dqgen int8": "dqgen_w8a8_s8_f16_swap_128x8_c1_s6_b2_wgmma",
        "dqgen fp8": "dqgen_w8a8_e4m3_f16_tiles_128x192_c2_s5_b1_wgmma",
        "dqgen w4a8": "dqgen_w4a8_awq_int4_s8_f16_n128c2m1s8b1",
        "torch._int_mm": "sm90_xmma_gemm_s8s8_s32",
        "torch._scaled_mm": "cutlass3x_sm90_tensorop_gemm_e4m3",
        "read weight": "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<long>>",
    }
    rows = []
    for c in order:
        if c.impl == "torch._int_mm":
            rows.append({"Kernel Name": names[c.impl], "ID": c.tag})
            rows.append({"Kernel Name": "splitKreduce_kernel", "ID": "helper"})  # a cuBLAS helper after the GEMM
        else:
            rows.append({"Kernel Name": names[c.impl], "ID": c.tag})
    matched = nc.match_rows(rows)
    assert [case.tag for case, _, _ in matched] == [c.tag for c in order]
    assert all(row is not None and row["ID"] == case.tag for case, row, _ in matched)
    helpers = [skipped for _, _, skipped in matched if skipped]
    assert helpers and all(s == ["splitKreduce_kernel"] for s in helpers)


def test_saved_rows_carry_the_case_and_drop_device_columns(tmp_path: Path) -> None:
    header = ["ID", "device__attribute_l2_cache_size", "Kernel Name", "dram__bytes_read.sum"]
    units = ["", "byte", "", "Gbyte"]
    order = nc.run_order(nc.CASES)
    rows = [
        {
            "ID": "0",
            "device__attribute_l2_cache_size": "52",
            "Kernel Name": "dqgen_w8a8_s8_x",
            "dram__bytes_read.sum": "0.235",
        }
    ]
    rows.append(
        {"ID": "1", "device__attribute_l2_cache_size": "52", "Kernel Name": "sm90_gemm", "dram__bytes_read.sum": "0.1"}
    )
    out = tmp_path / "ncu.csv"
    nc.save_rows(str(out), header, units, rows)
    lines = out.read_text().splitlines()
    assert lines[0] == "case,ID,Kernel Name,dram__bytes_read.sum" and lines[1] == ",,,Gbyte"
    assert lines[2] == f"{order[0].tag},0,dqgen_w8a8_s8_x,0.235"  # the first case is dqgen int8
    assert lines[3].startswith("helper kernel")  # the second case (dqgen int8 M = 16) is not a cuBLAS kernel
