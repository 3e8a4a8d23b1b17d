"""A quantized nn.GRU of any shape: ``num_layers`` layers of one or two directions, each layer/direction its own
calibrated single-direction integer cell (QuantGRUParams), saved together in one .npz file.

Cell ``layer * D + direction`` (D = 2 when bidirectional) is the order of nn.GRU's h_n. Layer 0 reads the input
(``input_size`` wide); layer l > 0 reads the previous layer's outputs, the D directions concatenated
(``D * hidden_size`` wide).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from .params import ARRAYS, FORMAT, QuantGRUParams

STACK_FORMAT = "dqgen-quant-gru-stack-1"


class QuantGRUStack(BaseModel):
    model_config = ConfigDict(frozen=True)

    num_layers: int = Field(ge=1)
    bidirectional: bool = False
    batch_first: bool = False  # the layout of the nn.GRU it came from (QuantGRU.load's default)
    cells: list[QuantGRUParams]

    @model_validator(mode="after")
    def _shapes_chain(self) -> QuantGRUStack:
        d = self.directions
        if len(self.cells) != self.num_layers * d:
            raise ValueError(
                f"cells: expected num_layers * directions = {self.num_layers * d} cells, got {len(self.cells)}"
            )
        hsz = self.cells[0].hidden_size
        for i, p in enumerate(self.cells):
            layer = i // d
            want_in = self.cells[0].input_size if layer == 0 else d * hsz
            if p.hidden_size != hsz or p.input_size != want_in:
                raise ValueError(
                    f"cells[{i}] (layer {layer}, {self.direction_name(i % d)}): expected input {want_in} and hidden"
                    f" {hsz}, got input {p.input_size} and hidden {p.hidden_size}"
                )
        return self

    @property
    def directions(self) -> int:
        return 2 if self.bidirectional else 1

    @property
    def input_size(self) -> int:
        return self.cells[0].input_size

    @property
    def hidden_size(self) -> int:
        return self.cells[0].hidden_size

    @staticmethod
    def direction_name(direction: int) -> str:
        return "reverse" if direction else "forward"

    def cell(self, layer: int, direction: int = 0) -> QuantGRUParams:
        return self.cells[layer * self.directions + direction]

    def label(self, index: int) -> str:
        """'layer 1, reverse' for cell 3 of a bidirectional stack."""
        return f"layer {index // self.directions}, {self.direction_name(index % self.directions)}"

    @classmethod
    def single(cls, p: QuantGRUParams, batch_first: bool = False) -> QuantGRUStack:
        return cls(num_layers=1, bidirectional=False, batch_first=batch_first, cells=[p])

    def save(self, path: str | Path) -> None:
        metas = []
        arrays: dict[str, np.ndarray] = {}
        for i, p in enumerate(self.cells):
            meta, arr = p.parts()
            metas.append(meta)
            arrays.update({f"c{i}.{name}": a for name, a in arr.items()})
        head = {
            "format": STACK_FORMAT,
            "num_layers": self.num_layers,
            "bidirectional": self.bidirectional,
            "batch_first": self.batch_first,
            "cells": metas,
        }
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp.npz")
        contents: dict[str, Any] = {"meta": np.array(json.dumps(head)), **arrays}
        np.savez(tmp, **contents)
        tmp.replace(path)  # never a partial file under the real name

    @classmethod
    def load(cls, path: str | Path) -> QuantGRUStack:
        """A stack file, or a single-cell file of QuantGRUParams.save (one layer, unidirectional, batch_first
        False)."""
        path = Path(path)
        try:
            with np.load(path, allow_pickle=False) as f:
                head: Any = json.loads(str(f["meta"]))
                fmt = head.get("format") if isinstance(head, dict) else None
                if fmt == FORMAT:
                    return cls.single(QuantGRUParams.load(path))
                if fmt != STACK_FORMAT:
                    raise ValueError(f"expected format {STACK_FORMAT!r} or {FORMAT!r}, got {fmt!r}")
                cells = [
                    QuantGRUParams.from_parts(meta, {name: f[f"c{i}.{name}"] for name in ARRAYS})
                    for i, meta in enumerate(head["cells"])
                ]
            return cls(
                num_layers=head["num_layers"],
                bidirectional=head["bidirectional"],
                batch_first=head.get("batch_first", False),
                cells=cells,
            )
        except (OSError, KeyError, TypeError, ValueError) as e:
            why = str(e).replace("\n", "; ")  # pydantic's errors span lines: the error stays one line
            raise ValueError(f"{path}: not a dqgen quantized GRU file ({why})") from None
