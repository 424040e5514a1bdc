"""Accelerator descriptions: datasheet profiles, and measured profiles written by `draftwise profile`.

A `Hardware` holds peak dense FLOP/s (bf16 for the datasheet profiles), memory bandwidth and
capacity, the fractions of those peaks real kernels reach (assumptions, not datasheet numbers),
the attention kernel's tile height, and a fixed per-step overhead. A measured profile adds the
matmul throughput curve against the number of rows M (`gemm_curve`), and optionally measured step
times of a real target (`step_times`), which the cost model uses to calibrate itself.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

# Datasheet numbers: dense (no sparsity) bf16 tensor FLOP/s, HBM bandwidth, memory capacity.
#   H100 SXM5: 989 TFLOPS bf16 dense, 3.35 TB/s HBM3, 80 GB (NVIDIA H100 datasheet)
#   H200 SXM: 989 TFLOPS bf16 dense, 4.8 TB/s HBM3e, 141 GB (NVIDIA H200 datasheet)
#   B200 (HGX B200): 2.25 PFLOPS bf16 dense (4.5 with sparsity), 8 TB/s HBM3e, 180 GB
#   A100 80GB SXM: 312 TFLOPS bf16 dense, 2,039 GB/s HBM2e, 80 GB
#   L40S: 362 TFLOPS bf16 dense (733 with sparsity), 864 GB/s GDDR6, 48 GB
#   MI300X: 1,307 TFLOPS bf16 dense, 5.3 TB/s HBM3, 192 GB (AMD MI300X datasheet)
_DATASHEET = {
    "h100-sxm": dict(flops=989e12, bandwidth=3.35e12, memory=80e9, interconnect=450e9),
    "h200": dict(flops=989e12, bandwidth=4.8e12, memory=141e9, interconnect=450e9),
    "b200": dict(flops=2.25e15, bandwidth=8.0e12, memory=180e9, interconnect=900e9),
    "a100-80gb": dict(flops=312e12, bandwidth=2.039e12, memory=80e9, interconnect=300e9),
    "l40s": dict(flops=362e12, bandwidth=0.864e12, memory=48e9, interconnect=32e9),
    "mi300x": dict(flops=1307e12, bandwidth=5.3e12, memory=192e9, interconnect=448e9),
}
_ALIASES = {"h100": "h100-sxm", "h100sxm": "h100-sxm", "h200-sxm": "h200", "a100": "a100-80gb",
            "a100-sxm": "a100-80gb", "mi300": "mi300x", "l40": "l40s"}


@dataclass
class Hardware:
    name: str
    flops: float                      # peak dense FLOP/s in the weight dtype
    bandwidth: float                  # bytes/s
    memory: float                     # bytes
    source: str = "datasheet"         # "datasheet" | "measured"
    compute_efficiency: float = 0.7   # fraction of peak FLOP/s big GEMMs reach (assumption)
    bandwidth_efficiency: float = 0.8 # fraction of peak bandwidth streaming kernels reach (assumption)
    attention_tile: int = 128         # query rows per KV head an attention kernel computes at once
    overhead_s: float = 0.5e-3        # fixed per target step (launch, sampling, scheduling)
    draft_step_overhead_s: float = 0.05e-3  # per sequential drafter pass
    interconnect: float = 0.0         # bytes/s per device for tensor-parallel all-reduce
    num_devices: int = 1
    gemm_curve: list = field(default_factory=list)   # [[rows M, FLOP/s measured], ...]
    step_times: list = field(default_factory=list)   # [{"B","D","L","seconds"}, ...] of `target`
    target: Optional[str] = None      # which model step_times were measured on
    target_config: Optional[dict] = None
    # [{"B","L","seconds", "target_factor", "catch_up_seconds"}, ...]: one draft-model token, the
    # target's next step after drafts (× its own), a second token a row in a step's first forward
    draft_step_times: list = field(default_factory=list)
    draft_config: Optional[dict] = None   # the draft model draft_step_times were measured on
    dtype: str = "bfloat16"
    notes: str = ""

    # ---- derived
    @property
    def ridge_intensity(self) -> float:
        """FLOPs per byte where compute time equals memory time."""
        return (self.flops * self.compute_efficiency) / (self.bandwidth * self.bandwidth_efficiency)

    def gemm_throughput(self, rows: float) -> float:
        """FLOP/s of a GEMM with `rows` rows: the measured curve (log-log interpolation, flat
        outside its range) when there is one, else the efficiency-scaled peak."""
        if not self.gemm_curve:
            return self.flops * self.compute_efficiency
        pts = self._monotone_curve()
        x = max(rows, 1e-9)
        if x <= pts[0][0]:
            # below the smallest measured M the time per GEMM stays flat: throughput ∝ rows
            return pts[0][1] * x / pts[0][0]
        if x >= pts[-1][0]:
            return pts[-1][1]
        for (m0, f0), (m1, f1) in zip(pts, pts[1:]):
            if m0 <= x <= m1:
                t = (math.log(x) - math.log(m0)) / (math.log(m1) - math.log(m0))
                return math.exp(math.log(f0) + t * (math.log(f1) - math.log(f0)))
        return pts[-1][1]  # pragma: no cover

    def _monotone_curve(self) -> list[tuple[float, float]]:
        """The measured points with time per GEMM (∝ M / throughput) made non-decreasing in M, so
        measurement noise never makes more rows cheaper (log-log interpolation keeps it monotone)."""
        key = tuple(tuple(p) for p in self.gemm_curve)
        if getattr(self, "_curve_key", None) != key:
            # from the largest M down: a GEMM of M rows takes no longer than one of more rows
            # (interference only ever slows a measurement, so the faster neighbour is trusted)
            pts, t_next = [], float("inf")
            for m, f in sorted(((float(m), float(f)) for m, f in self.gemm_curve), reverse=True):
                t = min(m / f, t_next)
                pts.append((m, m / t))
                t_next = t
            self._curve_cache, self._curve_key = pts[::-1], key
        return self._curve_cache

    def scaled(self, num_devices: int) -> "Hardware":
        """N devices under tensor parallelism, treated as one device with N× compute, bandwidth
        and memory (all-reduce cost is added by the cost model)."""
        if num_devices <= 1:
            return self
        h = Hardware(**{**asdict(self)})
        h.flops *= num_devices
        h.bandwidth *= num_devices
        h.memory *= num_devices
        h.gemm_curve = [[m, f * num_devices] for m, f in self.gemm_curve]
        h.num_devices = num_devices
        h.name = f"{num_devices}x {self.name}"
        return h

    def to_dict(self) -> dict:
        return asdict(self)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1))


def datasheet_names() -> list[str]:
    return sorted(_DATASHEET)


def get_hardware(spec: Any) -> Hardware:
    """A Hardware from a datasheet name ("h100-sxm", "h200", "b200", "a100-80gb", "l40s", "mi300x",
    "cpu"), a profile JSON path written by `draftwise profile`, a dict, or a Hardware."""
    if isinstance(spec, Hardware):
        return spec
    if spec is None:
        spec = "h100-sxm"
    if isinstance(spec, dict):
        return _from_dict(spec)
    s = str(spec)
    p = Path(s)
    if p.is_file():
        return _from_dict(json.loads(p.read_text()))
    key = _ALIASES.get(s.lower(), s.lower())
    if key in _DATASHEET:
        return Hardware(name=key, source="datasheet", **_DATASHEET[key])
    if key in ("cpu", "this-cpu", "cpu-2core"):
        # the development machine, measured by hand (shared/reference/machine.md): fp32 BLAS
        return Hardware(name="cpu-2core-epyc", flops=204e9, bandwidth=40e9, memory=24e9,
                        source="measured", compute_efficiency=1.0, bandwidth_efficiency=1.0,
                        attention_tile=1, overhead_s=1.0e-3, draft_step_overhead_s=0.3e-3,
                        dtype="float32", notes="2-core AMD EPYC, fp32; see machine.md")
    raise FileNotFoundError(f"no hardware {s!r}: not a profile file; datasheet names: "
                            f"{', '.join(datasheet_names())}, cpu")


def _from_dict(d: dict) -> Hardware:
    known = set(Hardware.__dataclass_fields__)
    h = Hardware(**{k: v for k, v in d.items() if k in known})
    return h
