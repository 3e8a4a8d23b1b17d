"""The haste GRU in float64 numpy (gate order z, r, g; br inside the reset product), recording every
intermediate that the integer cell quantizes, and the conversion from torch.nn.GRU's (r, z, n) layout."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


def torch_to_haste(a: np.ndarray, hidden_size: int) -> np.ndarray:
    """torch stacks gates r, z, n along axis 0; haste wants z, r, g."""
    r, z, n = a[:hidden_size], a[hidden_size : 2 * hidden_size], a[2 * hidden_size :]
    return np.concatenate([z, r, n], axis=0)


def haste_to_torch(a: np.ndarray, hidden_size: int) -> np.ndarray:
    z, r, g = a[:hidden_size], a[hidden_size : 2 * hidden_size], a[2 * hidden_size :]
    return np.concatenate([r, z, g], axis=0)


@dataclass
class Trace:
    """Per-tensor lists of every step's values (for calibration); empty when not recording."""

    tensors: dict[str, list[np.ndarray]] = field(default_factory=dict)

    def add(self, name: str, value: np.ndarray) -> None:
        self.tensors.setdefault(name, []).append(value)


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-v))


def gru_float(
    x: np.ndarray,
    h0: np.ndarray,
    w: np.ndarray,
    r: np.ndarray,
    bx: np.ndarray,
    br: np.ndarray,
    trace: Trace | None = None,
) -> np.ndarray:
    """x [T, N, C], h0 [N, H], W [3H, C], R [3H, H] (haste order) -> h [T, N, H]."""
    hsz = h0.shape[1]
    x = np.asarray(x, dtype=np.float64)
    wx_all = np.einsum("tnc,gc->tng", x, w) + bx
    h = np.asarray(h0, dtype=np.float64)
    out = np.empty((x.shape[0], *h.shape))
    for t in range(x.shape[0]):
        wx = wx_all[t]
        rh = h @ r.T + br
        pre_z = wx[:, :hsz] + rh[:, :hsz]
        pre_r = wx[:, hsz : 2 * hsz] + rh[:, hsz : 2 * hsz]
        z, rg = _sigmoid(pre_z), _sigmoid(pre_r)
        rrh = rg * rh[:, 2 * hsz :]
        pre_g = wx[:, 2 * hsz :] + rrh
        g = np.tanh(pre_g)
        old, new = z * h, (1.0 - z) * g
        if trace is not None:
            for gi, name in enumerate("zrg"):
                trace.add(f"wx_{name}", wx[:, gi * hsz : (gi + 1) * hsz])
                trace.add(f"rh_{name}", rh[:, gi * hsz : (gi + 1) * hsz])
            trace.add("pre_z", pre_z)
            trace.add("pre_r", pre_r)
            trace.add("pre_g", pre_g)
            trace.add("rrh", rrh)
            trace.add("old", old)
            trace.add("new", new)
            trace.add("h", h)
        h = old + new
        out[t] = h
    return out
