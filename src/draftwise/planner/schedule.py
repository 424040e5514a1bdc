"""`plan()`: the best drafter and number of drafted tokens D per batch size and context length.

Two modes:
- Leviathan: only a constant acceptance α and a cost ratio c (draft step / target step):
  E[τ] = (1 − α^{D+1})/(1 − α), S(D) = E[τ]/(cD + 1), D* = argmax_{0≤D≤max_draft} S (smallest D on
  ties; α = 1 gives E[τ] = D + 1).
- Full: a target model, hardware and acceptance (per drafter). For each batch size B and context L,
  throughput(drafter, D) = B·E[τ](D) / (T_target(B, D, L) + T_drafter(B, D, L)); the speedup is
  against D = 0 (plain decoding, priced as a run of plain steps where the profile timed one:
  `CostModel.plain_time`) at the same B and L. For a fixed B maximising system throughput
  and per-user speed pick the same (drafter, D); a latency target (ms per output token per user)
  additionally picks the operating point: the largest batch that still meets it. A D is only
  chosen over plain decoding when it is predicted to gain at least `min_gain` (default 2 %): a
  smaller predicted gain is inside the cost model's error, and plain decoding risks nothing.
  Where the profile's passes met two prices of width (`planner.levels`), each (drafter, D) is
  priced at both and the D that loses least at either is chosen; the cell says what each level
  alone would have picked.
"""
from __future__ import annotations

from typing import Any, Optional

from . import rules
from .acceptance import Acceptance, leviathan_expected_tokens, load_acceptance, run_contexts
from .cost import CostModel
from .hardware import get_hardware
from .levels import find_levels, least_regret, level_hardware
from .model import DRAFTER_KINDS, DrafterDesc, describe, drafter_desc

DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
DEFAULT_CONTEXT_LENGTHS = (1024, 8192)
DEFAULT_MIN_GAIN = 0.02


def pick_num_draft_tokens(speedup, min_gain: float = DEFAULT_MIN_GAIN) -> int:
    """The D to run, from predicted speedups over plain decoding per D = 0, 1, …: the argmax
    (smallest D on ties), or 0 where even the argmax gains less than `min_gain`. On this CPU the
    step price of a wide batch-1 step moved by ±25 % within an hour (BENCHMARKS §5.0a); a predicted
    0.4 % gain at D = 8 there was a measured 3 % loss. Speculating costs the drafter's memory and
    a wider step whose price is the least certain input; below the margin it is not worth it."""
    speedup = list(speedup)
    best = 0
    for D, s in enumerate(speedup):
        if s > speedup[best] * (1 + 1e-9):
            best = D
    return best if speedup[best] >= speedup[0] * (1 + min_gain) else 0


# --------------------------------------------------------------------------------------------
# Leviathan closed form


def leviathan_speedup(alpha: float, cost_ratio: float, D: int) -> float:
    """S(D) = E[τ](D) / (cD + 1)."""
    return leviathan_expected_tokens(alpha, D) / (cost_ratio * D + 1.0)


def leviathan(alpha: float, cost_ratio: float, max_draft: int = 16) -> dict:
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if cost_ratio < 0:
        raise ValueError(f"cost ratio must be ≥ 0, got {cost_ratio}")
    table = [{"num_draft_tokens": D, "expected_tokens_per_step": leviathan_expected_tokens(alpha, D),
              "speedup": leviathan_speedup(alpha, cost_ratio, D)} for D in range(max_draft + 1)]
    best = 0
    for row in table:
        if row["speedup"] > table[best]["speedup"] * (1 + 1e-12):
            best = row["num_draft_tokens"]
    reasons = []
    if alpha > cost_ratio:
        reasons.append({"rule": "leviathan", "text": f"α = {alpha:g} > c = {cost_ratio:g}: some D > 0 helps (it does iff α > c)"})
    else:
        reasons.append({"rule": "leviathan", "text": f"α = {alpha:g} ≤ c = {cost_ratio:g}: no D helps, D = 0"})
    E = [r["expected_tokens_per_step"] for r in table]
    T = [cost_ratio * D + 1.0 for D in range(max_draft + 1)]
    reasons.append(rules.rule_marginal(best, max_draft, E, T, None))
    return {
        "mode": "leviathan",
        "alpha": alpha,
        "cost_ratio": cost_ratio,
        "max_draft": max_draft,
        "best_num_draft_tokens": best,
        "expected_tokens_per_step": E[best],
        "speedup": table[best]["speedup"],
        "expected_tokens_ceiling": (None if alpha >= 1 else 1.0 / (1.0 - alpha)),  # None: unbounded
        "table": table,
        "reasons": reasons,
    }


# --------------------------------------------------------------------------------------------
# full planner


def _drafter_kind(name: str) -> Optional[str]:
    n = name.lower().replace("-", "_")
    for k in ("dspark", "dflash", "eagle3", "mtp", "suffix", "ngram", "draft_model"):
        if k in n:
            return k
    aliases = {"eagle": "eagle3", "pld": "ngram", "prompt_lookup": "ngram", "nextn": "mtp",
               "draft": "draft_model", "standalone": "draft_model"}
    for a, k in aliases.items():
        if a in n:
            return k
    return None


def _as_list(x: Any, cast=int) -> Optional[list]:
    if x is None:
        return None
    if isinstance(x, str):
        return [cast(v) for v in x.split(",") if v.strip()]
    if isinstance(x, (int, float)):
        return [cast(x)]
    return [cast(v) for v in x]


def _model_in_label(name: str) -> Optional[str]:
    """The model folder a drafter label names ("draft-model:zoo/draft", as `draftwise bench` labels
    its runs), if it exists: the draft model's config where --draft-model is not given."""
    from ..bench.runner import drafter_model_path

    return drafter_model_path(name)


def _traced(source: Any, acc: dict, max_draft: int, category: Optional[str], dataset: Optional[str] = None) -> dict:
    """`acc` with each drafter of a greedy bench run that `planner.trace` can follow (prompt lookup,
    a draft model) priced at every D from the run's outputs; anything else as loaded. A run
    measured at D = 3 then prices D = 8 exactly too, and D = 2 with the steps D = 2 takes."""
    import json
    import os
    from pathlib import Path

    from .trace import acceptance_from_run

    if not isinstance(source, (str, os.PathLike)):
        return acc
    p = Path(source)
    run = p if p.is_dir() else p.parent
    conf = run / "configuration.json"
    if not (conf.is_file() and (run / "prompts.jsonl").is_file()):
        return acc
    if float(json.loads(conf.read_text()).get("settings", {}).get("temperature") or 0.0) != 0.0:
        return acc
    out = dict(acc)
    for name, a in acceptance_from_run(run, max_draft, drafters=list(acc), category=category, dataset=dataset).items():
        a.categories = acc[name].categories
        out[name] = a
    return out


def _select(acc: dict, names: Optional[list], alpha: Optional[float]) -> dict:
    """The drafters asked for, out of loaded acceptance; a constant α for those it lacks."""
    if names and len(names) == 1 and list(acc) == ["default"]:   # one unnamed result: it is that drafter
        acc = {names[0]: acc["default"]}
        acc[names[0]].name = names[0]
    if names:
        keep = {n: a for n, a in acc.items() if n in names or _drafter_kind(n) in names}
        if not keep and alpha is None:
            raise ValueError(f"drafters {names} not in the acceptance data ({sorted(acc)})")
        acc = keep
        for n in names:
            if n not in acc and not any(_drafter_kind(k) == n for k in acc) and alpha is not None:
                acc[n] = Acceptance.constant(float(alpha), name=n)
    return acc


def _acceptance_by_context(acceptance, Ls, *, dataset, category, trace, max_draft, names, alpha, cost_ratio,
                           model) -> tuple[dict, dict]:
    """({L: {drafter: Acceptance}}, {L: (dataset, its mean context)} where a bench run's datasets
    were matched to the context lengths). Acceptance moves with the context — prompt lookup finds
    more to copy in a 1k-token prompt than in a 256-token one — so a run over both should price
    each context with its own."""
    import math

    if acceptance is None:
        if alpha is None:
            raise ValueError("need acceptance data (--acceptance) or a constant --alpha")
        if not names:
            names = ["cost_ratio"] if cost_ratio is not None else (["mtp"] if model.num_mtp_layers else ["eagle3"])
        acc = {n: Acceptance.constant(float(alpha), name=n) for n in names}
        return {L: acc for L in Ls}, {}
    if isinstance(acceptance, Acceptance):
        return {L: _select({acceptance.name: acceptance}, names, alpha) for L in Ls}, {}
    if isinstance(acceptance, dict) and acceptance and all(isinstance(v, Acceptance) for v in acceptance.values()):
        return {L: _select(dict(acceptance), names, alpha) for L in Ls}, {}

    def load(ds):
        acc = load_acceptance(acceptance, category=category, dataset=ds)
        if trace:
            acc = _traced(acceptance, acc, max_draft, category, ds)
        return _select(acc, names, alpha)

    contexts = run_contexts(acceptance) if dataset is None else {}
    if len(contexts) < 2:
        acc = load(dataset)
        return {L: acc for L in Ls}, {}
    loaded: dict[str, dict] = {}      # tracing a draft model runs it: only the datasets some context needs
    by_L, where = {}, {}
    for L in Ls:
        ds = min(contexts, key=lambda d: abs(math.log(max(L, 1)) - math.log(max(contexts[d], 1))))
        if ds not in loaded:
            loaded[ds] = load(ds)
        by_L[L], where[L] = loaded[ds], (ds, contexts[ds])
    return by_L, where


def plan(target: Any = None, hardware: Any = None, *, alpha: Optional[float] = None,
         cost_ratio: Optional[float] = None, acceptance: Any = None, drafters: Any = None,
         draft_model: Any = None, batch_sizes: Any = None, context_lengths: Any = None,
         max_draft: int = 16, latency_target_ms: Optional[float] = None, num_devices: int = 1,
         category: Optional[str] = None, weight_dtype: Any = None, kv_dtype: Any = None,
         check_memory: bool = True, min_gain: float = DEFAULT_MIN_GAIN, trace: bool = True,
         dataset: Optional[str] = None) -> dict:
    """Plan speculative decoding. See the module docstring; returns a JSON-ready dict.

    target:      config / path / bundled name (None with alpha + cost_ratio → Leviathan mode)
    hardware:    datasheet name or profile JSON (default h100-sxm)
    acceptance:  bench run dir / specbench_results.json / {drafter: {conditional: [...]}} / dict of
                 Acceptance; or `alpha` for a constant α for every drafter
    drafters:    drafter names or kinds to consider (default: those in `acceptance`, else MTP when the
                 target has MTP layers, else EAGLE-3); with `cost_ratio` and a target, a drafter whose
                 every drafted token costs c × the plain decode step
    min_gain:    the least predicted speedup over plain decoding worth speculating for (0: plain argmax;
                 Leviathan mode is always the exact argmax)
    trace:       with a greedy bench run as `acceptance`, price prompt lookup and draft models at
                 every D up to `max_draft` from its outputs (`planner.trace.acceptance_from_run`)
                 rather than from the D the run measured
    dataset:     with a bench run over several datasets as `acceptance`, the acceptance of this one for
                 every context; without it, each context length gets the dataset whose mean context
                 (prompt plus half the output) is nearest, on a log scale
    """
    if target is None:
        if alpha is None or cost_ratio is None:
            raise ValueError("give a target (with --hardware and --acceptance/--alpha), or --alpha and --cost-ratio")
        return leviathan(float(alpha), float(cost_ratio), max_draft)

    if min_gain < 0:
        raise ValueError(f"min_gain must be ≥ 0 (a share, 0.02 = 2 %), got {min_gain}")
    hw = get_hardware(hardware)
    if hw.source == "measured" and hw.dtype:  # a measured profile ran the model in its own dtype
        weight_dtype = weight_dtype or hw.dtype
        kv_dtype = kv_dtype or hw.dtype
    cm = CostModel(describe(target, weight_dtype=weight_dtype, kv_dtype=kv_dtype), hw,
                   num_devices=num_devices)
    model = cm.target
    Bs = _as_list(batch_sizes) or list(DEFAULT_BATCH_SIZES)
    Ls = _as_list(context_lengths) or list(DEFAULT_CONTEXT_LENGTHS)
    names = _as_list(drafters, str)

    # acceptance per drafter, and per context where a bench run measured several
    by_L, where = _acceptance_by_context(acceptance, Ls, dataset=dataset, category=category, trace=trace,
                                         max_draft=max_draft, names=names, alpha=alpha, cost_ratio=cost_ratio,
                                         model=model)
    first = {}      # each drafter's acceptance at the first context that has it, for the summary
    for L in Ls:
        for n, a in by_L[L].items():
            first.setdefault(n, a)

    ddesc: dict[str, Optional[DrafterDesc]] = {}
    for n in first:
        kind = _drafter_kind(n)
        if n == "cost_ratio" or (kind is None and cost_ratio is not None):
            ddesc[n] = None  # generic drafter: c × plain decode step per drafted token
        elif kind is None:
            raise ValueError(f"cannot tell which drafter {n!r} is; name it after one of {', '.join(DRAFTER_KINDS)}")
        elif kind == "draft_model":
            ddesc[n] = drafter_desc(kind, model, config=draft_model or _model_in_label(n))
        else:
            ddesc[n] = drafter_desc(kind, model)

    # a profile that met two prices of width: plan for both (`planner.levels`)
    price_levels = find_levels(cm.hw.step_times) if cm.calibrated_by_profile else []
    levels = {lv: CostModel(model, h) for lv, h in level_hardware(cm.hw, price_levels).items()} or None
    cells = []
    for L in Ls:
        for B in Bs:
            cells.append(_plan_cell(cm, B, L, by_L[L], ddesc, cost_ratio, max_draft, latency_target_ms, check_memory,
                                    min_gain, levels))
            if L in where:
                ds, ctx = where[L]
                cells[-1]["acceptance_dataset"] = ds
                cells[-1]["reasons"].append({"rule": "acceptance", "text": (
                    f"acceptance measured on {ds} (mean context {ctx:.0f} tokens), the run's dataset nearest "
                    f"context {L}")})

    break_even = {}
    for L in Ls:
        break_even[str(L)] = _break_even(cm, [c for c in cells if c["context_length"] == L], by_L[L], ddesc,
                                         cost_ratio, max_draft, min_gain, levels)
    out = {
        "mode": "schedule",
        "target": model.summary(),
        "hardware": {k: v for k, v in cm.hw.to_dict().items() if k not in ("step_times", "target_config")},
        "calibration": cm.calibration.to_dict(),
        **({"price_levels": price_levels} if price_levels else {}),
        "drafters": {n: {"acceptance": a.to_dict(),
                         "desc": ddesc[n].summary() if ddesc[n] else {"kind": "cost_ratio", "cost_ratio": cost_ratio}}
                     for n, a in first.items()},
        "batch_sizes": Bs,
        "context_lengths": Ls,
        **({"acceptance_by_context": {str(L): {"dataset": ds, "mean_context": ctx,
                                               "drafters": {n: a.to_dict() for n, a in by_L[L].items()}}
                                      for L, (ds, ctx) in where.items()}} if where else {}),
        "max_draft": max_draft,
        "min_gain": min_gain,
        "schedule": cells,
        "break_even_batch_size": break_even[str(Ls[0])],
        "break_even_by_context": break_even,
    }
    if latency_target_ms is not None:
        out["latency_target_ms"] = latency_target_ms
        out["operating_points"] = {str(L): _operating_point(
            [c for c in cells if c["context_length"] == L], latency_target_ms) for L in Ls}
    out["engine_configs"] = engine_configs(out)
    return out


def predict(target: Any, hardware: Any = None, *, acceptance: Any = None, alpha: Optional[float] = None,
            drafters: Any = None, draft_model: Any = None, batch_sizes: Any = (1, 2, 4, 8, 16),
            draft_tokens: Any = range(9), context_lengths: Any = (128, 1024), num_devices: int = 1,
            cost_ratio: Optional[float] = None, category: Optional[str] = None,
            batching: str = "continuous", dataset: Optional[str] = None) -> list[dict]:
    """The cost model's prediction for every (drafter, B, D, L) cell, for comparing with a measured
    sweep: step time (target + drafter), expected tokens per step, throughput and speedup over D = 0.
    batching="static": the batch ends with its slowest row (`Acceptance.static_shares`, which needs
    per-request acceptance), as in Hugging Face `generate` and draftwise's own engine; the steps
    after its first rows finish are priced at the rows left. expected_tokens_per_step is then per
    step at the full batch's price."""
    if batching not in ("continuous", "static"):
        raise ValueError(f"batching must be 'continuous' or 'static', got {batching!r}")
    hw = get_hardware(hardware)
    wd = hw.dtype if hw.source == "measured" else None
    cm = CostModel(describe(target, weight_dtype=wd, kv_dtype=wd), hw, num_devices=num_devices)
    names = _as_list(drafters, str)
    if acceptance is not None:
        acc = acceptance if isinstance(acceptance, dict) and all(isinstance(v, Acceptance) for v in acceptance.values()) \
            else load_acceptance(acceptance, category=category, dataset=dataset)
        if names:
            acc = {n: a for n, a in acc.items() if n in names or _drafter_kind(n) in names}
    elif alpha is not None:
        acc = {n: Acceptance.constant(float(alpha), name=n) for n in (names or ["eagle3"])}
    else:
        raise ValueError("need acceptance data or a constant alpha")
    out = []
    for n, a in acc.items():
        kind = _drafter_kind(n)
        d = None if kind is None else drafter_desc(kind, cm.target, config=draft_model or _model_in_label(n)) \
            if kind == "draft_model" \
            else drafter_desc(kind, cm.target)
        if d is None and cost_ratio is None:
            raise ValueError(f"cannot tell which drafter {n!r} is")
        for L in _as_list(context_lengths):
            for B in _as_list(batch_sizes):
                plain = cm.plain_time(B, L)
                for D in _as_list(draft_tokens):
                    aD = a.at(D)     # the steps D takes (`Acceptance.by_draft_length`)

                    def target(b: int) -> float:    # a step of b rows (no proposal in any: one token a row)
                        share = aD.verify_share(b)
                        return share * cm.target_time(b, D, L) + (1 - share) * cm.target_time(b, 0, L) if D \
                            else cm.plain_time(b, L)
                    tt, td = target(B), _drafter_time(cm, d, cost_ratio, B, D, L, aD)
                    E = aD.expected_tokens(D)
                    if batching == "static":        # the same tokens over the batch's shrinking steps
                        E *= (tt + td) / sum(w * (target(B - k) + _drafter_time(cm, d, cost_ratio, B - k, D, L, aD))
                                             for k, w in enumerate(aD.static_shares(D, B)) if w)
                    out.append({"drafter": n, "batch_size": B, "num_draft_tokens": D, "context_length": L,
                                "target_time_s": tt, "draft_time_s": td, "step_time_s": tt + td,
                                "expected_tokens_per_step": E, "throughput_tok_s": B * E / (tt + td),
                                "speedup": E * plain / (tt + td)})
    return out


def _drafter_time(cm: CostModel, d: Optional[DrafterDesc], cost_ratio, B: int, D: int, L: int,
                  acceptance: Optional[Acceptance] = None) -> float:
    if d is None:
        return (cost_ratio or 0.0) * D * cm.target_time(B, 0, L)
    return cm.drafter_time(d, B, D, L, all_accepted=acceptance.survival(D) if acceptance is not None and D > 0 else 0.0)


def _rows(cm, B, L, a, d, cost_ratio, max_draft) -> list[tuple[float, float, float]]:
    """(E, T_total, T_draft) per D = 0 … max_draft for one drafter."""
    rows = []
    for D in range(max_draft + 1):
        aD = a.at(D)                 # the steps D takes (`Acceptance.by_draft_length`)
        share = aD.verify_share(B)   # steps where no row has a proposal cost one token a row
        td = _drafter_time(cm, d, cost_ratio, B, D, L, aD)
        tt = share * cm.target_time(B, D, L) + (1 - share) * cm.target_time(B, 0, L) if D else cm.plain_time(B, L)
        rows.append((aD.expected_tokens(D), tt + td, td))
    return rows


def _best_for(cm, B, L, acc, ddesc, cost_ratio, max_draft, min_gain, levels=None, info=None):
    """{drafter: (best D, list of (E, T_total, T_draft) per D)}. With `levels` ({name: CostModel}
    of a profile that met two prices of width, `planner.levels`), the D that loses least at either
    level; `info`, if given, gets {drafter: {level: (its own D, its speedups per D)}}."""
    res = {}
    for n, a in acc.items():
        rows = _rows(cm, B, L, a, ddesc[n], cost_ratio, max_draft)
        if not levels:
            D = pick_num_draft_tokens([E / T for E, T, _ in rows], min_gain)
        else:
            sps = {}
            for lv, lcm in levels.items():
                lrows = _rows(lcm, B, L, a, ddesc[n], cost_ratio, max_draft)
                sps[lv] = [E / T * lcm.plain_time(B, L) for E, T, _ in lrows]
            picks = {lv: pick_num_draft_tokens(s, min_gain) for lv, s in sps.items()}
            D = least_regret(list(sps.values()), list(picks.values()))
            if info is not None:
                info[n] = {lv: (picks[lv], sps[lv]) for lv in sps}
        res[n] = (D, rows)
    return res


def _plan_cell(cm, B, L, acc, ddesc, cost_ratio, max_draft, latency_target_ms, check_memory, min_gain,
               levels=None) -> dict:
    info: dict = {}
    res = _best_for(cm, B, L, acc, ddesc, cost_ratio, max_draft, min_gain, levels, info)
    T0 = cm.plain_time(B, L)        # plain decoding, the baseline
    per = {}
    for n, (D, rows) in res.items():
        E, T, td = rows[D]
        per[n] = {"num_draft_tokens": D, "expected_tokens_per_step": E, "speedup": (E / T) / (1.0 / T0),
                  "draft_overhead": td / T, "step_time_ms": T * 1e3}
    best_name = max(per, key=lambda n: (per[n]["speedup"], -per[n]["num_draft_tokens"]))
    D = per[best_name]["num_draft_tokens"]
    drafter = best_name if D > 0 else "none"
    E, T, td = res[best_name][1][D]
    br = cm.target_breakdown(B, D, L)
    needed = cm.memory_needed(B, D, L, ddesc[best_name] if D > 0 else None)
    fits = needed <= cm.hw.memory

    reasons = []
    m = rules.rule_memory(needed, cm.hw.memory) if check_memory else None
    if m:
        reasons.append(m)
    reasons.append(rules.rule_linear(cm, B, D))
    reasons += rules.rule_attention(cm, B, D, L, br)
    for r in (rules.rule_moe(cm.target, B, max(D, 1) if D == 0 else D), rules.rule_recurrent(cm.target, br, D),
              rules.rule_long_context(cm, B, L, br)):
        if r:
            reasons.append(r)
    E_list = [r[0] for r in res[best_name][1]]
    T_list = [r[1] for r in res[best_name][1]]
    raw = pick_num_draft_tokens([e / t for e, t in zip(E_list, T_list)], 0.0)
    if D == 0 and raw > 0:
        reasons.append(rules.rule_margin(best_name, raw, E_list[raw] / T_list[raw] * T_list[0], min_gain))
    else:
        reasons.append(rules.rule_marginal(D, max_draft, E_list, T_list, None))
    r5 = rules.rule_drafter(best_name, per) if D > 0 else None
    if r5:
        reasons.append(r5)
    r6 = rules.rule_price_levels(D, info[best_name]) if best_name in info else None
    if r6:
        reasons.append(r6)
    a = acc[best_name]
    if a.constant_alpha is None and D > len(a.conditional):
        reasons.append({"rule": "acceptance", "text": (
            f"D = {D} is beyond the {len(a.conditional)} measured draft positions of {best_name}: "
            f"α past position {len(a.conditional)} is extrapolated ({a.alpha(D):.2f}); measure at D ≥ {D} to confirm")})

    cell = {
        "batch_size": B,
        "context_length": L,
        "drafter": drafter,
        "num_draft_tokens": D,
        "expected_tokens_per_step": E,
        "speedup": T0 / T * E,
        "step_time_ms": T * 1e3,
        "draft_time_ms": td * 1e3,
        "baseline_step_time_ms": T0 * 1e3,
        "throughput_tok_s": B * E / T,
        "baseline_throughput_tok_s": B / T0,
        "per_user_tok_s": E / T,
        "ms_per_token": T / E * 1e3,
        "fits_in_memory": fits,
        "memory_gb": needed / 1e9,
        "target_breakdown_ms": {k: v * 1e3 for k, v in br.items()},
        "per_drafter": per,
        "reasons": reasons,
    }
    if best_name in info:
        cell["price_levels"] = {lv: {"num_draft_tokens": d, "speedup": s[d], "speedup_at_planned_D": s[D]}
                                for lv, (d, s) in info[best_name].items()}
    if latency_target_ms is not None:
        cell["meets_latency_target"] = cell["ms_per_token"] <= latency_target_ms
        cell["baseline_meets_latency_target"] = T0 * 1e3 <= latency_target_ms
    return cell


def _best_D(cm, B, L, acc, ddesc, cost_ratio, max_draft, min_gain, levels=None) -> int:
    res = _best_for(cm, B, L, acc, ddesc, cost_ratio, max_draft, min_gain, levels)
    best = max(res.values(), key=lambda v: (v[1][v[0]][0] / v[1][v[0]][1], -v[0]))
    return best[0]


def _break_even(cm, cells, acc, ddesc, cost_ratio, max_draft, min_gain, levels=None) -> Optional[int]:
    """Smallest batch size where the best D is 0: the first grid batch with D = 0, refined by
    bisection between it and the grid batch before it."""
    cells = sorted(cells, key=lambda c: c["batch_size"])
    prev = None
    for c in cells:
        if c["num_draft_tokens"] == 0:
            lo = prev["batch_size"] if prev else 0    # D > 0 at lo (or nothing below)
            hi = c["batch_size"]
            L = c["context_length"]
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if _best_D(cm, mid, L, acc, ddesc, cost_ratio, max_draft, min_gain, levels) == 0:
                    hi = mid
                else:
                    lo = mid
            return hi
        prev = c
    return None


def _operating_point(cells: list[dict], target_ms: float) -> dict:
    ok = [c for c in cells if c["ms_per_token"] <= target_ms and c["fits_in_memory"]]
    base = [c for c in cells if c["baseline_step_time_ms"] <= target_ms and c["fits_in_memory"]]
    op = max(ok, key=lambda c: c["throughput_tok_s"]) if ok else None
    bp = max(base, key=lambda c: c["baseline_throughput_tok_s"]) if base else None
    out = {"batch_size": op["batch_size"] if op else None,
           "drafter": op["drafter"] if op else None,
           "num_draft_tokens": op["num_draft_tokens"] if op else None,
           "throughput_tok_s": op["throughput_tok_s"] if op else None,
           "baseline_batch_size": bp["batch_size"] if bp else None,
           "baseline_throughput_tok_s": bp["baseline_throughput_tok_s"] if bp else None}
    if op and bp:
        out["throughput_gain"] = op["throughput_tok_s"] / bp["baseline_throughput_tok_s"]
    return out


# --------------------------------------------------------------------------------------------
# engine configuration

_VLLM = {"eagle3": "eagle3", "mtp": "mtp", "ngram": "ngram", "suffix": "suffix", "draft_model": "draft_model",
         "dflash": "dflash", "dspark": None}
_SGLANG = {"eagle3": "EAGLE3", "mtp": "EAGLE", "ngram": "NGRAM", "draft_model": "STANDALONE",
           "dflash": None, "dspark": None, "suffix": None}
_TRTLLM = {"eagle3": "Eagle3", "mtp": "MTP", "ngram": "NGram", "draft_model": "DraftTarget",
           "dflash": None, "dspark": None, "suffix": None}


def engine_configs(result: dict) -> dict:
    """Ready-to-paste speculative-decoding settings for vLLM, SGLang and TensorRT-LLM, for the
    first (shortest) context length of the plan. A per-batch entry {B: D} means: for batch sizes
    above the previous grid point and up to B, draft D tokens."""
    L = result["context_lengths"][0]
    cells = sorted((c for c in result["schedule"] if c["context_length"] == L), key=lambda c: c["batch_size"])
    active = [c for c in cells if c["num_draft_tokens"] > 0]
    if not active:
        return {"note": f"speculation does not pay at any batch size at context {L}: leave it off",
                "vllm": None, "sglang": None, "tensorrt_llm": None}
    # the drafter chosen most often (ties: at the smallest batch)
    counts: dict[str, int] = {}
    for c in active:
        counts[c["drafter"]] = counts.get(c["drafter"], 0) + 1
    name = max(counts, key=lambda n: (counts[n], -min(c["batch_size"] for c in active if c["drafter"] == n)))
    kind = _drafter_kind(name) or name
    sched = {}
    for c in cells:
        d = c["per_drafter"].get(name, {}).get("num_draft_tokens", 0) if c["num_draft_tokens"] > 0 else 0
        sched[str(c["batch_size"])] = d
    d_max = max(sched.values())
    # one value for engines without a schedule: the D at the smallest batch that speculates
    d_b1 = next(d for d in sched.values() if d > 0) if any(sched.values()) else 0
    be = result["break_even_by_context"].get(str(L))
    notes = []
    if len(counts) > 1:
        notes.append(f"the plan prefers different drafters at different batch sizes ({', '.join(sorted(counts))}); "
                     f"configs are for {name}, the most frequent")
    vllm = sglang = trt = None
    if _VLLM.get(kind):
        spec = {"method": _VLLM[kind], "num_speculative_tokens": d_b1}
        if kind not in ("ngram", "suffix", "mtp"):
            spec["model"] = "<path to the drafter>"
        if kind == "ngram":
            spec.update(prompt_lookup_max=3, prompt_lookup_min=2)
        if be is not None:
            spec["disable_by_batch_size"] = be
        vllm = {"speculative_config": spec,
                "cli": "--speculative-config '" + _json(spec) + "'",
                "per_batch_size_num_speculative_tokens": sched}
        notes.append("vLLM takes one num_speculative_tokens; the per-batch-size schedule is for an engine "
                     "that supports it (or for choosing the value at your typical load)")
    else:
        notes.append(f"vLLM has no built-in {name} drafter")
    if _SGLANG.get(kind):
        s = {"speculative_algorithm": _SGLANG[kind], "speculative_num_steps": d_b1,
             "speculative_eagle_topk": 1, "speculative_num_draft_tokens": d_b1 + 1}
        if kind not in ("ngram", "mtp"):  # MTP layers ship inside the target checkpoint
            s["speculative_draft_model_path"] = "<path to the drafter>"
        sglang = {**s, "cli": " ".join(f"--{k.replace('_', '-')} {v}" for k, v in s.items()),
                  "per_batch_size_num_steps": sched}
    else:
        notes.append(f"SGLang has no built-in {name} drafter")
    if _TRTLLM.get(kind):
        # TensorRT-LLM: {4: 4, 8: 2, 32: 1} = batch 1–4 → 4, 5–8 → 2, 9–32 → 1, above → 0 (implicit)
        trt_sched = {int(b): d for b, d in sched.items()}
        while trt_sched and trt_sched[max(trt_sched)] == 0:
            del trt_sched[max(trt_sched)]
        t = {"decoding_type": _TRTLLM[kind], "max_draft_len": d_max, "draft_len_schedule": trt_sched}
        if kind == "mtp":
            t["num_nextn_predict_layers"] = d_max
        elif kind != "ngram":
            t["speculative_model_dir"] = "<path to the drafter>"
        trt = {"speculative_config": t}
    else:
        notes.append(f"TensorRT-LLM has no built-in {name} drafter")
    return {"context_length": L, "drafter": name, "vllm": vllm, "sglang": sglang, "tensorrt_llm": trt,
            "notes": notes}


def _json(x) -> str:
    import json
    return json.dumps(x, separators=(", ", ": "))
