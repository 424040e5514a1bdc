"""Step time T(B, D, L): one target forward verifying 1 + D tokens for each of B sequences at
context L, plus the drafter's cost for proposing D tokens, from per-component roofline terms.

Components (per layer, summed):
- linear layers (projections, dense MLP, shared experts, router, LM head): weights read once per
  step, 2·params FLOPs per token; time = max(compute at the GEMM's rows→throughput, weight bytes /
  bandwidth). All of a step's GEMMs have the same M = B(1+D) rows, so they share one roofline.
- MoE experts: expected distinct experts E = n(1 − (1 − k/n)^T) for T = B(1+D) tokens; E experts'
  weights read, each a GEMM of k·T/E rows.
- attention: KV bytes read ∝ B·L (sliding windows capped, MLA's latent), FLOPs ∝ B(1+D)·L; the
  kernel computes G(1+D) query rows per KV head padded to the hardware's tile (128 on GPUs), so
  intensity ≈ 2G(1+D) FLOPs per KV element and drafted tokens are ~free until G(1+D) fills a tile.
- recurrent layers: state read + one state written per verified token (the per-token snapshots
  that rollback needs), so the traffic grows with D, plus the state-update FLOPs.
- tensor-parallel all-reduces (2 per layer) when the hardware stands for several devices.
- a fixed per-step overhead.
Drafters: autoregressive (draft model, EAGLE-3, MTP) pay D sequential passes; parallel ones (DFlash,
DSpark) one pass over a block of 1 + D positions; n-gram / suffix a small host-side constant.

With a measured profile of the same target the model is calibrated: measured step times are fitted
as a·(weight-side time) + b·(attention time) + c by non-negative least squares.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from .hardware import Hardware, get_hardware
from .model import DrafterDesc, LayerDesc, ModelDesc, describe


def _interp(xs: list, x: float, f, log: bool = False) -> float:
    """Piecewise-linear interpolation of f over the sorted grid xs at x (xs[0] ≤ x ≤ xs[-1])."""
    for x0, x1 in zip(xs, xs[1:]):
        if x0 <= x <= x1:
            t = (math.log(x / x0) / math.log(x1 / x0)) if log else (x - x0) / (x1 - x0)
            return f(x0) + t * (f(x1) - f(x0))
    return f(xs[0])


@dataclass
class Calibration:
    linear_scale: float = 1.0
    attention_scale: float = 1.0
    overhead_s: Optional[float] = None    # replaces the hardware's overhead when fitted
    points: int = 0
    mean_abs_rel_error: Optional[float] = None
    source: str = "none"

    def to_dict(self) -> dict:
        return dict(linear_scale=self.linear_scale, attention_scale=self.attention_scale,
                    overhead_s=self.overhead_s, points=self.points,
                    mean_abs_rel_error=self.mean_abs_rel_error, source=self.source)


class CostModel:
    def __init__(self, target, hardware=None, *, num_devices: int = 1, calibrate: bool = True):
        self.target: ModelDesc = describe(target)
        base = get_hardware(hardware)
        self.hw: Hardware = base.scaled(num_devices)
        self.calibration = Calibration()
        self._grid = self._plain = None
        if calibrate and self.hw.step_times and self._profile_matches():
            self.fit(self.hw.step_times)
            self._grid = self._measured_grid()
            self._plain = self._plain_ratios()

    @property
    def calibrated_by_profile(self) -> bool:
        """Whether target steps are priced from a profile of this very target's step grid."""
        return self._grid is not None

    # ------------------------------------------------------------------ primitives
    def gemm_time(self, params: float, rows: float, wbytes: float) -> float:
        if params <= 0 or rows <= 0:
            return 0.0
        compute = 2.0 * params * rows / self.hw.gemm_throughput(rows)
        memory = params * wbytes / (self.hw.bandwidth * self.hw.bandwidth_efficiency)
        return max(compute, memory)

    def _attention_time(self, layer: LayerDesc, B: int, q: int, L: int, kvb: float) -> float:
        a = layer.attention
        ctx = a.context(L)
        bytes_ = B * (ctx + q) * a.kv_elems_per_token * kvb
        rows = a.group_size * q                 # query rows per KV head
        flops = 2.0 * B * q * ctx * a.num_heads * (a.qk_dim + a.v_dim)
        tile = self.hw.attention_tile
        if tile and tile > 1:
            flops *= math.ceil(rows / tile) * tile / rows
        compute = flops / self.hw.gemm_throughput(max(rows, 1))
        return max(compute, bytes_ / (self.hw.bandwidth * self.hw.bandwidth_efficiency))

    def _recurrent_time(self, layer: LayerDesc, B: int, q: int, sb: float) -> float:
        r = layer.recurrent
        bytes_ = B * r.state_elems * sb * (1 + q)   # read once, write a snapshot per verified token
        flops = B * q * r.flops_per_token
        return max(flops / self.hw.gemm_throughput(B * q),
                   bytes_ / (self.hw.bandwidth * self.hw.bandwidth_efficiency))

    def forward_breakdown(self, model: ModelDesc | None, B: int, q: int, L: int, *,
                          layers: Optional[list[LayerDesc]] = None, head_params: Optional[float] = None,
                          head_rows: Optional[float] = None) -> dict:
        """Uncalibrated seconds per component of one forward of q tokens for B sequences."""
        m = model or self.target
        layers = m.layers if layers is None else layers
        wb, kvb, sb = m.weight_bytes_per_param, m.kv_bytes_per_elem, m.state_bytes_per_elem
        rows = B * q
        dense = sum(l.dense_params for l in layers)
        out = {"linear": self.gemm_time(dense, rows, wb), "moe": 0.0, "attention": 0.0,
               "recurrent": 0.0, "head": 0.0, "comm": 0.0}
        for l in layers:
            if l.mlp is not None and l.mlp.kind == "moe":
                e = l.mlp.expected_experts(rows)
                out["moe"] += self.gemm_time(e * l.mlp.expert_params, l.mlp.top_k * rows / e, wb)
            if l.attention is not None:
                out["attention"] += self._attention_time(l, B, q, L, kvb)
            if l.recurrent is not None:
                out["recurrent"] += self._recurrent_time(l, B, q, sb)
        hp = m.head_params if head_params is None else head_params
        out["head"] = self.gemm_time(hp, rows if head_rows is None else head_rows, wb)
        if self.hw.num_devices > 1:
            n = self.hw.num_devices
            msg = rows * m.hidden_size * 2
            per = 8e-6 + (2 * (n - 1) / n * msg / self.hw.interconnect if self.hw.interconnect else 0.0)
            out["comm"] = 2 * len(layers) * per
        return out

    # ------------------------------------------------------------------ target
    def target_breakdown(self, B: int, D: int, L: int) -> dict:
        """Calibrated seconds per component of the verification step (q = 1 + D)."""
        raw = self.forward_breakdown(None, B, 1 + D, L)
        c = self.calibration
        out = {k: v * (c.attention_scale if k == "attention" else c.linear_scale) for k, v in raw.items()}
        out["overhead"] = self.hw.overhead_s if c.overhead_s is None else c.overhead_s
        out["total"] = sum(out.values())
        return out

    def target_time(self, B: int, D: int, L: int) -> float:
        """Seconds per verification step. With a profile of this very target, the measured step
        times interpolated over the profiled grid (log-linear in B, linear in D and L); outside the
        grid, the nearest grid point scaled by the model's ratio. Otherwise the calibrated model."""
        model = self.target_breakdown(B, D, L)["total"]
        if not self._grid:
            return model
        Bs, Ds, Ls, T = self._grid
        Bc, Dc, Lc = min(max(B, Bs[0]), Bs[-1]), min(max(D, Ds[0]), Ds[-1]), min(max(L, Ls[0]), Ls[-1])
        measured = _interp(Ls, Lc, lambda l: _interp(Bs, Bc, lambda b: _interp(Ds, Dc, lambda d: T[(b, d, l)]),
                                                    log=True))
        if (Bc, Dc, Lc) == (B, D, L):
            return measured
        return measured * model / self.target_breakdown(Bc, Dc, Lc)["total"]

    def plain_time(self, B: int, L: int) -> float:
        """A step of plain decoding. Where the profile timed one in a run of plain steps, it costs
        less than `target_time(B, 0, L)`, one token a row amid wider steps (a speculative run's
        steps without a proposal), by the ratio measured at the nearest (B, L) of the profile."""
        t = self.target_time(B, 0, L)
        if not self._plain:
            return t
        Bs, Ls, R = self._plain
        Bc, Lc = min(max(B, Bs[0]), Bs[-1]), min(max(L, Ls[0]), Ls[-1])
        return t * _interp(Ls, Lc, lambda l: _interp(Bs, Bc, lambda b: R[(b, l)], log=True))

    def _plain_ratios(self):
        """(Bs, Ls, {(B, L): plain-run seconds / seconds}) when every D = 0 point has both."""
        pts = [m for m in self.hw.step_times if int(m["D"]) == 0]
        if not pts or any("plain_run_seconds" not in m for m in pts):
            return None
        R = {(int(m["B"]), int(m["L"])): float(m["plain_run_seconds"]) / float(m["seconds"]) for m in pts}
        return sorted({b for b, _ in R}), sorted({l for _, l in R}), R

    def _measured_grid(self):
        """(Bs, Ds, Ls, {(B, D, L): s}) when the profile's step times form a full grid."""
        pts = {(int(m["B"]), int(m["D"]), int(m["L"])): float(m["seconds"]) for m in self.hw.step_times}
        Bs, Ds, Ls = (sorted({k[i] for k in pts}) for i in range(3))
        if len(pts) != len(Bs) * len(Ds) * len(Ls):
            return None
        return Bs, Ds, Ls, pts

    # ------------------------------------------------------------------ drafters
    def drafter_time(self, drafter: Optional[DrafterDesc], B: int, D: int, L: int, all_accepted: float = 0.0) -> float:
        """Seconds a step spends drafting D tokens for B rows at context L. `all_accepted`: the
        chance that a row accepted every draft of the step before (`Acceptance.survival(D)`); a
        draft model then feeds that row two tokens in its first forward, its last draft and the
        target's bonus token, and the whole batch's forward is that wide (`catch_up_seconds`)."""
        if drafter is None or D <= 0:
            return 0.0
        if drafter.free:
            return drafter.host_seconds
        s = self.calibration.linear_scale
        hw = self.hw
        wb = self.target.weight_bytes_per_param
        n_layers = len(drafter.model.layers) if drafter.model is not None else len(drafter.layers)
        per_pass = self._pass_overhead(n_layers)
        if drafter.model is not None:   # a standalone draft model: D sequential single-token steps
            wide = 1.0 - (1.0 - min(max(all_accepted, 0.0), 1.0)) ** B     # the first forward feeds two a row
            measured = self.measured_draft_token(drafter, B, L)
            if measured is not None:    # its tokens, and the target's verification they slowed
                catch_up = self._draft_profile(drafter, B, L, "catch_up_seconds", per_row_beyond=True) or 0.0
                return D * measured + wide * catch_up \
                    + (self.measured_target_factor(drafter, B, L) - 1.0) * self.target_time(B, D, L)
            one = sum(self.forward_breakdown(drafter.model, B, 1, L).values())
            two = sum(self.forward_breakdown(drafter.model, B, 2, L).values())
            return D * (s * one + per_pass) + wide * s * (two - one)
        pseudo = self.target
        once = self.gemm_time(drafter.once_params, B, wb)
        if drafter.parallel:            # one pass over a block of 1 + D positions
            br = self.forward_breakdown(pseudo, B, 1 + D, L, layers=drafter.layers,
                                        head_params=drafter.head_params, head_rows=B * D)
            extra = drafter.per_token_head_flops * B * D / hw.gemm_throughput(B * D)
            return s * (once + sum(br.values()) + extra) + per_pass
        br = self.forward_breakdown(pseudo, B, 1, L, layers=drafter.layers, head_params=drafter.head_params)
        extra = drafter.per_token_head_flops * B / hw.gemm_throughput(B)
        return s * (once + D * (sum(br.values()) + extra)) + D * per_pass

    def measured_draft_token(self, drafter: DrafterDesc, B: int, L: int) -> Optional[float]:
        """One draft-model token from the profile's draft_step_times when they were measured on this
        draft model: nearest context, then log-linear in B (linear per row beyond the largest B)."""
        return self._draft_profile(drafter, B, L, "seconds", per_row_beyond=True)

    def measured_target_factor(self, drafter: DrafterDesc, B: int, L: int) -> float:
        """How much dearer the target's verification is right after this draft model's tokens than
        after a target step (`draftwise profile`'s target_factor; 1 where it was not measured)."""
        f = self._draft_profile(drafter, B, L, "target_factor", per_row_beyond=False)
        return 1.0 if f is None else f

    def _draft_profile(self, drafter: DrafterDesc, B: int, L: int, key: str, per_row_beyond: bool) -> Optional[float]:
        """A draft_step_times field at (B, L), only for the draft model the profile measured."""
        pts, cfg = [p for p in self.hw.draft_step_times if key in p], self.hw.draft_config
        if not pts or not cfg or drafter.model is None:
            return None
        try:
            if describe(cfg).total_params != drafter.model.total_params:
                return None
        except Exception:
            return None
        Lc = min({p["L"] for p in pts}, key=lambda x: abs(math.log(max(x, 1) / max(L, 1))))
        by_b = sorted((p["B"], p[key]) for p in pts if p["L"] == Lc)
        if B <= by_b[0][0]:
            return by_b[0][1]
        if B >= by_b[-1][0]:
            b, t = by_b[-1]
            if len(by_b) == 1 or not per_row_beyond:
                return t
            b0, t0 = by_b[-2]
            return t + max(0.0, (t - t0) / (b - b0)) * (B - b)
        for (b0, t0), (b1, t1) in zip(by_b, by_b[1:]):
            if b0 <= B <= b1:
                f = math.log(B / b0) / math.log(b1 / b0)
                return t0 + f * (t1 - t0)
        return by_b[-1][1]  # pragma: no cover

    def _pass_overhead(self, n_layers: int) -> float:
        """Fixed cost of one drafter pass: the hardware's figure, or — when the target's overhead
        was fitted on measured steps (eager frameworks pay per layer) — that overhead scaled by
        layer count, whichever is larger."""
        c = self.calibration.overhead_s
        if c is None:
            return self.hw.draft_step_overhead_s
        return max(self.hw.draft_step_overhead_s, c * (n_layers + 1) / (len(self.target.layers) + 1))

    def step_time(self, B: int, D: int, L: int, drafter: Optional[DrafterDesc] = None) -> float:
        return self.target_time(B, D, L) + self.drafter_time(drafter, B, D, L)

    # ------------------------------------------------------------------ memory
    def memory_needed(self, B: int, D: int, L: int, drafter: Optional[DrafterDesc] = None) -> float:
        m = self.target
        extra = 0.0
        if drafter is not None:
            extra = drafter.extra_weight_params * m.weight_bytes_per_param
            if drafter.model is not None:
                extra += B * drafter.model.kv_bytes_per_sequence(L + 1 + D)
        return m.weight_bytes + extra + B * m.kv_bytes_per_sequence(L + 1 + D)

    # ------------------------------------------------------------------ calibration
    def _profile_matches(self) -> bool:
        cfg = self.hw.target_config
        if cfg:
            try:
                return describe(cfg).total_params == self.target.total_params
            except Exception:
                return False
        return bool(self.hw.target) and self.hw.target == self.target.name

    def fit(self, measurements: list[dict]) -> Calibration:
        """Fit measured target step times [{"B","D","L","seconds"}] as
        a·(weight-side time) + b·(attention time) + c with a, b, c ≥ 0 (exhaustive NNLS)."""
        rows, y = [], []
        for m in measurements:
            br = self.forward_breakdown(None, int(m["B"]), 1 + int(m["D"]), int(m["L"]))
            w = br["linear"] + br["moe"] + br["recurrent"] + br["head"] + br["comm"]
            rows.append([w, br["attention"], 1.0])
            y.append(float(m["seconds"]))
        if not rows:
            return self.calibration
        X, Y = np.asarray(rows), np.asarray(y)
        Wt = 1.0 / np.maximum(Y, 1e-12)          # relative error

        def nnls(A):
            """Exhaustive non-negative least squares over column subsets (≤ 3 columns)."""
            best, best_err = None, math.inf
            k = A.shape[1]
            for active in itertools.product([True, False], repeat=k):
                idx = [i for i in range(k) if active[i]]
                if not idx:
                    continue
                coef, *_ = np.linalg.lstsq(A[:, idx] * Wt[:, None], Y * Wt, rcond=None)
                if np.any(coef < 0):
                    continue
                full = np.zeros(k)
                full[idx] = coef
                err = float(np.mean(np.abs(A @ full - Y) / Y))
                if err < best_err - 1e-15:
                    best, best_err = full, err
            return best, best_err

        # parsimonious first: one scale for all modelled time + overhead; separate scales for the
        # weight side and attention only when both are positive and clearly better (the weight-side
        # time is often nearly constant over a small grid, which makes it collinear with the overhead)
        shared = np.stack([X[:, 0] + X[:, 1], X[:, 2]], axis=1)
        c1, e1 = nnls(shared)
        c2, e2 = nnls(X)
        if c2 is not None and c2[0] > 0 and c2[1] > 0 and (c1 is None or c1[0] <= 0 or e2 < 0.8 * e1):
            a, b, c, err = float(c2[0]), float(c2[1]), float(c2[2]), e2
            source = "profile step times"
        elif c1 is not None and c1[0] > 0:
            a = b = float(c1[0])
            c, err = float(c1[1]), e1
            source = "profile step times"
        else:
            # the steps are overhead-bound (or too noisy to resolve the work term, as on a tiny model
            # of a busy machine): keep the hardware model's work time, fit only the overhead
            base = X[:, 0] + X[:, 1]
            a = b = 1.0
            c = max(0.0, float(np.sum(Wt ** 2 * (Y - base)) / np.sum(Wt ** 2)))
            err = float(np.mean(np.abs(base + c - Y) / Y))
            source = "profile step times (overhead only)"
        self.calibration = Calibration(linear_scale=a, attention_scale=b, overhead_s=c, points=len(y),
                                       mean_abs_rel_error=err, source=source)
        return self.calibration

    def sps_curve(self, batch_size: int, context_length: int):
        """Steps per second against the number of verified tokens N (for the run-time scheduler):
        N tokens over `batch_size` rows, attention at `context_length`."""
        def sps(n: float) -> float:
            d = max(float(n), float(batch_size)) / batch_size - 1.0
            d0 = int(math.floor(d))
            t0 = self.target_time(batch_size, d0, context_length)
            if d == d0:
                return 1.0 / t0
            t1 = self.target_time(batch_size, d0 + 1, context_length)
            return 1.0 / (t0 + (d - d0) * (t1 - t0))
        return sps
