"""The reasons behind each planner choice, in words.

Each function looks at one aspect of a (batch size, context, drafter, D) choice and returns a
`{"rule": id, "text": …}` or None. The rules follow methods.md part B: NVIDIA's five rules for D
(compute-starved linear layers → raise D; attention-bound → start at D = tile/G − 1; align G(1+D) to
the tile; grow D only while the acceptance gain pays the step-time cost; pick the drafter by AL vs
overhead), plus MoE expert coverage, recurrent rollback, long context, memory and break-even.
"""
from __future__ import annotations

import math
from typing import Optional

from .cost import CostModel
from .model import ModelDesc, expected_experts


def _ord(n: int) -> str:
    if 10 <= n % 100 <= 20:
        suf = "th"
    else:
        suf = {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suf}"


def ridge_rows(cm: CostModel) -> float:
    """Rows M where a weight GEMM turns compute-bound: measured curve → the smallest M reaching
    80 % of the best measured throughput; datasheet → ridge intensity × bytes/param / 2."""
    hw = cm.hw
    if hw.gemm_curve:
        pts = sorted((float(m), float(f)) for m, f in hw.gemm_curve)
        top = max(f for _, f in pts)
        for m, f in pts:
            if f >= 0.8 * top:
                return m
        return pts[-1][0]
    return hw.ridge_intensity * cm.target.weight_bytes_per_param / 2.0


def rule_linear(cm: CostModel, B: int, D: int) -> dict:
    M = B * (1 + D)
    r = ridge_rows(cm)
    if M < r:
        text = (f"linear layers memory-bound: M = B·(1+D) = {B}·{1 + D} = {M} rows is below the ridge "
                f"≈ {r:.0f} rows, so verified tokens ride along with the weight read "
                f"(rule 1: compute-starved linear layers → raise D)")
    else:
        text = (f"linear layers compute-bound: M = B·(1+D) = {B}·{1 + D} = {M} rows is past the ridge "
                f"≈ {r:.0f} rows, so every verified token costs real compute and rejected ones displace "
                f"other requests (rule 1, batch regime)")
    return {"rule": "1-linear", "text": text}


def rule_attention(cm: CostModel, B: int, D: int, L: int, breakdown: dict) -> list[dict]:
    out = []
    share = breakdown["attention"] / breakdown["total"] if breakdown["total"] else 0.0
    G = cm.target.attention_group_size
    tile = cm.hw.attention_tile
    if G is None or share < 0.25:
        return out
    Gs = f"{G:g}"
    if tile and tile > 1:
        start = max(0, math.ceil(tile / G) - 1)
        mla = any(l.attention and l.attention.kind == "mla" for l in cm.target.layers)
        if start == 0:
            out.append({"rule": "2-attention", "text": (
                f"attention-bound ({share:.0%} of the step) with G = {Gs}{' (MLA: all heads share one latent)' if mla else ''}: "
                f"one verified token already fills a {tile}-row tile, so each drafted token costs attention compute")})
        else:
            tail = "" if D >= start else f"; acceptance stops it at {D}"
            out.append({"rule": "2-attention", "text": (
                f"attention-bound ({share:.0%} of the step) with G = {Gs}: start at D = {tile}/G − 1 = {start}{tail}")})
        rows = G * (1 + D)
        tiles = math.ceil(rows / tile)
        fill = rows / (tiles * tile)
        out.append({"rule": "3-tile", "text": (
            f"G·(1+D) = {Gs}·{1 + D} = {rows:g} query rows per KV head fill {tiles} {tile}-row tile"
            f"{'s' if tiles > 1 else ''} to {fill:.0%}" + (" (aligned)" if abs(fill - 1) < 1e-9 else ""))})
    else:
        out.append({"rule": "2-attention", "text": (
            f"attention is {share:.0%} of the step at context {L}: the KV read is shared by 1 + D = {1 + D} "
            f"queries (intensity ≈ 2G(1+D) = {2 * G * (1 + D):g} FLOPs per KV element)")})
    return out


def rule_marginal(D: int, max_draft: int, E: list[float], T: list[float], survival_next: Optional[float]) -> dict:
    if D >= max_draft:
        return {"rule": "4-marginal", "text": (
            f"D capped at --max-draft {max_draft}: the {_ord(D)} drafted token still paid "
            f"(+{E[D] - E[D - 1]:.3f} expected tokens for +{(T[D] / T[D - 1] - 1) * 100:.1f} % step time)")}
    gain = E[D + 1] - E[D]
    dt = T[D + 1] / T[D] - 1
    if D == 0:
        return {"rule": "4-marginal", "text": (
            f"no D pays: the 1st drafted token adds {gain:.3f} expected tokens (+{gain / E[0] * 100:.1f} %) "
            f"but costs {dt * 100:.1f} % more step time: D = 0 (speculation off)")}
    return {"rule": "4-marginal", "text": (
        f"the {_ord(D + 1)} drafted token adds {gain:.3f} expected tokens (+{gain / E[D] * 100:.1f} %) "
        f"for {dt * 100:.1f} % more step time: stop at {D}")}


def rule_margin(drafter: str, D: int, speedup: float, min_gain: float) -> dict:
    return {"rule": "4-margin", "text": (
        f"the best D for {drafter}, {D}, is predicted {speedup:.3f}× plain decoding: a gain under the "
        f"{min_gain:.0%} margin is inside the cost model's error, so D = 0 (speculation off; --min-gain 0 "
        f"takes the argmax)")}


def rule_drafter(best: str, per: dict) -> Optional[dict]:
    others = [(n, v) for n, v in per.items() if n != best]
    if not others or best == "none":
        return None
    b = per[best]
    n2, v2 = max(others, key=lambda kv: kv[1]["speedup"])
    return {"rule": "5-drafter", "text": (
        f"{best} chosen over {n2}: {b['speedup']:.2f}× vs {v2['speedup']:.2f}× "
        f"(AL {b['expected_tokens_per_step']:.2f} at D = {b['num_draft_tokens']} with draft overhead "
        f"{b['draft_overhead']:.0%} of the step, vs AL {v2['expected_tokens_per_step']:.2f} at "
        f"D = {v2['num_draft_tokens']} with {v2['draft_overhead']:.0%})")}


def rule_moe(model: ModelDesc, B: int, D: int) -> Optional[dict]:
    moe = model.moe
    if moe is None or D <= 0:
        return None
    e0 = expected_experts(moe.n_experts, moe.top_k, B)
    e1 = expected_experts(moe.n_experts, moe.top_k, B * (1 + D))
    return {"rule": "moe", "text": (
        f"MoE: verifying {1 + D} tokens per sequence touches {e1 / e0:.1f}× the experts at batch {B} "
        f"({e1:.1f} vs {e0:.1f} of {moe.n_experts} per layer, top-{moe.top_k})"
        + (": extra tokens pull in new expert weights" if e1 / e0 > 1.5 else ": most experts are already active"))}


def rule_recurrent(model: ModelDesc, breakdown: dict, D: int) -> Optional[dict]:
    n = sum(1 for l in model.layers if l.recurrent)
    if not n:
        return None
    share = breakdown["recurrent"] / breakdown["total"] if breakdown["total"] else 0.0
    kind = next(l.recurrent.kind for l in model.layers if l.recurrent)
    return {"rule": "recurrent", "text": (
        f"{n} {kind} layers: rollback keeps 1 + D = {1 + D} state snapshots per sequence "
        f"({model.state_bytes_per_sequence / 1e6:.1f} MB of state each), {share:.0%} of the step; this cost grows with D")}


def rule_long_context(cm: CostModel, B: int, L: int, breakdown: dict) -> Optional[dict]:
    share = breakdown["attention"] / breakdown["total"] if breakdown["total"] else 0.0
    if share < 0.5 or L < 2048:
        return None
    kv = B * cm.target.kv_bytes_per_sequence(L)
    return {"rule": "long-context", "text": (
        f"long context: KV reads ({kv / 1e9:.2f} GB per step) are {share:.0%} of the step and one read "
        f"serves 1 + D queries, so speculation pays more as L grows (MagicDec)")}


def rule_memory(needed: float, available: float) -> Optional[dict]:
    if needed <= available:
        return None
    return {"rule": "memory", "text": (
        f"does not fit: weights + KV need {needed / 1e9:.1f} GB of {available / 1e9:.0f} GB "
        f"(use more devices, --num-devices, or a smaller batch/context)")}


def rule_price_levels(D: int, by_level: dict) -> Optional[dict]:
    """`by_level`: {level: (its own D, its speedups per D)} from a profile that met two prices of
    width (`planner.levels`); a reason only where the levels disagree."""
    picks = {lv: d for lv, (d, _) in by_level.items()}
    if len(set(picks.values())) == 1:
        return None
    loss = {lv: 1 - s[D] / s[d] for lv, (d, s) in by_level.items()}
    own = " and ".join(f"{d} at the {lv} {'price' if i == 0 else 'one'}" for i, (lv, d) in enumerate(picks.items()))
    worst = " and ".join(f"{d} would lose {1 - by_level[o][1][d] / by_level[o][1][picks[o]]:.1%} at the {o} one"
                         for lv, d in picks.items() for o in picks if o != lv and d != D)
    return {"rule": "price-levels", "text": (
        f"the profile met two prices of width (its passes fall into a cheap and a dear group; see price_levels): "
        f"the best D is {own}; D = {D} loses at most {max(loss.values()):.1%} at either"
        + (f", where {worst}" if worst else ""))}
