"""Issue 26: QuantGRU given a CPU tensor says so in one line naming the argument, before it reaches torch.cuda."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def _module() -> object:
    from dqgen.gru.module import quantize

    torch.manual_seed(0)
    gru = torch.nn.GRU(8, 8)
    return quantize(gru, [torch.randn(4, 2, 8)])


def _one_line(exc: pytest.ExceptionInfo[ValueError]) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_cpu_input_is_refused_naming_the_input() -> None:
    q = _module()
    with pytest.raises(ValueError) as exc:
        q(torch.randn(4, 2, 8))  # type: ignore[operator]
    msg = _one_line(exc)
    assert msg.startswith("input: expected a tensor on a CUDA device") and "got one on cpu" in msg


def test_cpu_int8_input_is_refused_by_forward_int() -> None:
    q = _module()
    with pytest.raises(ValueError) as exc:
        q.forward_int(torch.zeros(4, 2, 8, dtype=torch.int8), torch.zeros(2, 8, dtype=torch.int8))  # type: ignore[attr-defined]
    assert _one_line(exc).startswith("x_q: expected a tensor on a CUDA device")


@pytest.mark.gpu
def test_cpu_hidden_state_beside_a_gpu_input_is_refused() -> None:
    q = _module()
    with pytest.raises(ValueError) as exc:
        q(torch.randn(4, 2, 8, device="cuda"), torch.zeros(1, 2, 8))  # type: ignore[operator]
    assert _one_line(exc).startswith("hx: expected a tensor on a CUDA device")
    with pytest.raises(ValueError) as exc:
        q.forward_int(  # type: ignore[attr-defined]
            torch.zeros(4, 2, 8, dtype=torch.int8, device="cuda"), torch.zeros(2, 8, dtype=torch.int8)
        )
    assert _one_line(exc).startswith("h0_q: expected a tensor on a CUDA device")


@pytest.mark.gpu
def test_gpu_input_still_runs() -> None:
    q = _module().cuda()  # type: ignore[attr-defined]
    out, h_n = q(torch.randn(4, 2, 8, device="cuda"))
    assert out.shape == (4, 2, 8) and h_n.shape == (1, 2, 8) and out.is_cuda
