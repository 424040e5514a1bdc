"""Reports of a `draftwise bench` run directory, computed from ``results.jsonl``.

Files written into the run directory:

* ``specbench_results.json`` – specdec_bench's six acceptance keys for every configuration, nested
  ``{dataset: {drafter: {"D=<d>": {"bs=<b>": {Request_AL, Category_AL, Average_AL,
  Acceptance_Length_Histogram, Conditional_Acceptance_Rate, Joint_Acceptance_Rate}}}}}``; the plain
  baseline is ``drafter "none"`` / ``"D=0"``. Histogram and rate keys are L / k as JSON strings.
* ``timing.json`` – same nesting; per configuration: ``timing`` (TTFT, E2E, step time, per-user
  tokens/s as {min, max, mean, std, 0.25, 0.5, 0.75}; system tokens/s), ``speedup``
  ({user, system} vs the baseline at the same batch size), ``aiperf`` (token-weighted AL, draft
  acceptance rate, per category), ``lossless`` (greedy runs: share of requests whose tokens equal
  the baseline's at the same batch size), and ``break_even`` per dataset / drafter / D.
* ``acceptance_length.csv`` / ``acceptance_rate.csv`` – aiperf ``speed-bench-report`` style:
  header ``Model,<categories…>,Overall``, one row per (drafter, D) (Model = ``"<drafter> D=<d>"``,
  pooled over batch sizes; per dataset prefix ``<dataset>:`` when the run has several datasets),
  values ``%.2f``, empty cell when missing, Overall = unweighted mean of the category cells.
* ``throughput.csv`` – ``Model,Batch_Size,User_TPS,System_TPS,TTFT_ms,Speedup_User,Speedup_System``
  per configuration (``%.2f``).
* ``specbench_responses.jsonl`` – ``{question_id, category, turns, choices: [{index, turns}]}`` plus
  ``config`` per (configuration, request).
* ``report.md`` and PNG plots per dataset: ``al_by_category-<ds>.png``,
  ``conditional_acceptance-<ds>.png``, ``speedup_vs_batch-<ds>.png``, ``pareto-<ds>.png`` and
  ``specbench_summary-<ds>.png`` (specdec_bench's 3 panels: AL by category ± std, AL by response
  length, histogram of per-request AL).
"""
from __future__ import annotations

import csv
import io
import json
import math
import re
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Optional

from draftwise.bench.metrics import (
    ACCEPTANCE_KEYS,
    acceptance_metrics,
    aiperf_acceptance,
    break_even,
    category_order,
    pareto_frontier,
    speedup,
    summary_stats,
    timing_metrics,
)

BASELINE = "none"


def slug(name: str) -> str:
    base = Path(name).name if ("/" in name or "\\" in name) else name
    base = re.sub(r"\.(parquet|jsonl)$", "", base) or "dataset"
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", base)


def _nest(d: dict, *keys):
    for k in keys:
        d = d.setdefault(k, {})
    return d


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float) and (math.isnan(obj) or math.isinf(obj)):
        return None
    return obj


def model_name(drafter: str, D: int) -> str:
    return f"{drafter} D={D}"


# ----------------------------------------------------------------------------------- analysis

def analyse(records: list[dict[str, Any]], greedy: bool = True) -> dict[str, Any]:
    """Per-configuration metrics from result records (engine runs or server runs)."""
    groups: dict[tuple, list] = defaultdict(list)
    for r in records:
        groups[(r["dataset"], r["drafter"], int(r["D"]), int(r["batch_size"]))].append(r)
    configs: dict[tuple, dict[str, Any]] = {}
    for (ds, dr, D, bs), recs in groups.items():
        acc_in = []
        timing_in = []
        for r in recs:
            steps: list[int] = []
            drafted: list[int] = []
            have_drafted = True
            lc = None
            for o in r["outputs"]:
                if o.get("step_lengths") is not None:
                    steps += list(o["step_lengths"])
                elif o.get("length_counts") is not None:
                    lc = lc or defaultdict(int)
                    for k, v in o["length_counts"].items():
                        lc[int(k)] += int(v)
                if o.get("drafted") is None:
                    have_drafted = False
                else:
                    d = o["drafted"]
                    drafted += list(d) if isinstance(d, list) else [int(d)]
                if o.get("t0") is not None and o.get("chunk_times") is not None:
                    timing_in.append(o)
            entry = {"question_id": r["question_id"], "category": r["category"]}
            if lc is not None and not steps:
                entry["length_counts"] = dict(lc)
            else:
                entry["step_lengths"] = steps
            if have_drafted:
                entry["drafted"] = drafted
            acc_in.append(entry)
        configs[(ds, dr, D, bs)] = {
            "acceptance": acceptance_metrics(acc_in),
            "aiperf": aiperf_acceptance(acc_in),
            "timing": timing_metrics(timing_in),
            "num_requests": len(recs),
            "num_failed": sum(1 for r in recs if r.get("error")),
            "records": recs,
        }
    # speedup, losslessness
    for (ds, dr, D, bs), c in configs.items():
        base = configs.get((ds, BASELINE, 0, bs))
        c["speedup"] = speedup(c["timing"], base["timing"]) if base and dr != BASELINE else None
        c["lossless"] = None
        if greedy and base is not None and dr != BASELINE:
            btoks = {r["question_id"]: [o.get("token_ids") for o in r["outputs"]] for r in base["records"]
                     if not r.get("error")}
            same = total = 0
            mismatches = []
            for r in c["records"]:
                if r.get("error") or r["question_id"] not in btoks:
                    continue
                mine = [o.get("token_ids") for o in r["outputs"]]
                if any(t is None for t in mine) or any(t is None for t in btoks[r["question_id"]]):
                    continue
                total += 1
                if mine == btoks[r["question_id"]]:
                    same += 1
                else:
                    mismatches.append(r["question_id"])
            if total:
                c["lossless"] = {"identical": same, "compared": total, "share": same / total,
                                 "mismatched_question_ids": mismatches[:20]}
    return configs


def break_evens(configs: dict[tuple, dict]) -> dict[tuple, dict[str, Optional[int]]]:
    """{(dataset, drafter, D): {"system": bs or None, "user": bs or None, "batch_sizes": [...]}}"""
    by: dict[tuple, dict[int, dict]] = defaultdict(dict)
    for (ds, dr, D, bs), c in configs.items():
        if dr != BASELINE and c["speedup"]:
            by[(ds, dr, D)][bs] = c["speedup"]
    out = {}
    for k, m in by.items():
        out[k] = {"system": break_even({b: s["system"] for b, s in m.items()}),
                  "user": break_even({b: s["user"] for b, s in m.items()}),
                  "batch_sizes": sorted(m)}
    return out


# -------------------------------------------------------------------------------------- writers

def specbench_results(configs: dict[tuple, dict]) -> dict:
    out: dict = {}
    for (ds, dr, D, bs), c in sorted(configs.items(), key=lambda kv: (kv[0][0], kv[0][1] != BASELINE, kv[0][1:])):
        _nest(out, ds, dr, f"D={D}")[f"bs={bs}"] = {k: c["acceptance"][k] for k in ACCEPTANCE_KEYS}
    return _jsonable(out)


def timing_json(configs: dict[tuple, dict], bevens: dict) -> dict:
    out: dict = {"format": "draftwise timing/1: {dataset: {drafter: {D=d: {bs=b: …}}}}; times in seconds",
                 "results": {}, "break_even": {}}
    for (ds, dr, D, bs), c in sorted(configs.items(), key=lambda kv: (kv[0][0], kv[0][1] != BASELINE, kv[0][1:])):
        _nest(out["results"], ds, dr, f"D={D}")[f"bs={bs}"] = {
            "num_requests": c["num_requests"], "num_failed": c["num_failed"],
            "timing": c["timing"], "speedup": c["speedup"], "aiperf": c["aiperf"], "lossless": c["lossless"],
            **({"server_acceptance": c["server_acceptance"]} if c.get("server_acceptance") else {}),
        }
    for (ds, dr, D), b in sorted(bevens.items()):
        _nest(out["break_even"], ds, dr)[f"D={D}"] = b
    return _jsonable(out)


def _models(configs) -> list[tuple[str, str, int]]:
    return sorted({(ds, dr, D) for (ds, dr, D, bs) in configs if dr != BASELINE})


def _pooled(configs, ds, dr, D, what: str) -> dict[str, Optional[float]]:
    """Per-category value of (dataset, drafter, D) pooled over batch sizes."""
    recs = [r for (d, r_, D_, bs), c in configs.items() if (d, r_, D_) == (ds, dr, D) for r in c["records"]]
    sub = analyse([{**r, "batch_size": 0} for r in recs], greedy=False)
    c = next(iter(sub.values()))
    if what == "al":
        return dict(c["acceptance"]["Category_AL"])
    return dict(c["aiperf"]["Category_Draft_Acceptance_Rate"])


def csv_table(configs, what: str = "al") -> str:
    models = _models(configs)
    multi = len({m[0] for m in models}) > 1
    rows = []
    cats: set[str] = set()
    for ds, dr, D in models:
        vals = _pooled(configs, ds, dr, D, what)
        cats.update(vals)
        rows.append(((f"{ds}:" if multi else "") + model_name(dr, D), vals))
    order = category_order(cats)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["Model", *order, "Overall"])
    for name, vals in rows:
        cells = [vals.get(c) for c in order]
        cells = [v if v is not None and not (isinstance(v, float) and math.isnan(v)) else None for v in cells]
        present = [v for v in cells if v is not None]
        overall = sum(present) / len(present) if present else None
        w.writerow([name, *["" if v is None else "%.2f" % v for v in cells],
                    "" if overall is None else "%.2f" % overall])
    return buf.getvalue()


def throughput_csv(configs) -> str:
    """aiperf-style throughput report: one row per configuration (baseline included)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    multi = len({k[0] for k in configs}) > 1
    w.writerow(["Model", "Batch_Size", "User_TPS", "System_TPS", "TTFT_ms", "Speedup_User", "Speedup_System"])
    for (ds, dr, D, bs), c in sorted(configs.items(), key=lambda kv: (kv[0][0], kv[0][1] != BASELINE, kv[0][1:])):
        t = c["timing"]
        sp = c["speedup"] or {}
        ttft = (t.get("ttft") or {}).get("mean")
        cells = [(t.get("user_tps") or {}).get("mean"), t.get("system_tps"),
                 None if ttft is None else 1000 * ttft, sp.get("user"), sp.get("system")]
        w.writerow([(f"{ds}:" if multi else "") + model_name(dr, D), bs,
                    *["" if v is None else "%.2f" % v for v in cells]])
    return buf.getvalue()


def responses_lines(configs) -> Iterable[str]:
    for (ds, dr, D, bs), c in sorted(configs.items()):
        for r in c["records"]:
            yield json.dumps({
                "question_id": r["question_id"], "category": r["category"], "turns": r.get("turns", []),
                "choices": [{"index": 0, "turns": [o.get("text", "") for o in r["outputs"]]}],
                "config": {"dataset": ds, "drafter": dr, "D": D, "batch_size": bs},
                **({"error": r["error"]} if r.get("error") else {}),
            }, ensure_ascii=False)


# ---------------------------------------------------------------------------------------- plots

def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


MARKERS, HATCHES = "o^sDvP*", ("", "//", "..", "xx", "\\\\", "++", "oo")


def _color_of(configs, ds: str, dr: str, D: int):
    """One colour per drafter in every plot of a dataset (the baseline grey); its D values differ
    by marker (`_marker_of`) or hatch (`_hatch_of`) — one colour per (drafter, D) ran out of
    distinguishable colours at seven drafters × two D."""
    if dr == BASELINE:
        return "dimgray"
    drafters = list(dict.fromkeys(d_ for (d, d_, _) in _models(configs) if d == ds))
    plt = _plt()
    cmap = plt.get_cmap("tab10" if len(drafters) <= 10 else "tab20")
    return cmap(drafters.index(dr) % cmap.N)


def _d_index(configs, ds: str, dr: str, D: int) -> int:
    return sorted(D_ for (d, d_, D_) in _models(configs) if (d, d_) == (ds, dr)).index(D)


def _marker_of(configs, ds: str, dr: str, D: int) -> str:
    return "s" if dr == BASELINE else MARKERS[_d_index(configs, ds, dr, D) % len(MARKERS)]


def _hatch_of(configs, ds: str, dr: str, D: int) -> str:
    return HATCHES[_d_index(configs, ds, dr, D) % len(HATCHES)]


def plot_al_by_category(configs, ds: str, path: Path) -> Optional[Path]:
    plt = _plt()
    models = [(dr, D) for (d, dr, D) in _models(configs) if d == ds]
    if not models:
        return None
    series = []
    cats: set[str] = set()
    for dr, D in models:
        recs = [r for (d, r_, D_, bs), c in configs.items() if (d, r_, D_) == (ds, dr, D) for r in c["records"]]
        c = next(iter(analyse([{**r, "batch_size": 0} for r in recs], greedy=False).values()))
        req_al = c["acceptance"]["Request_AL"]
        per_cat: dict[str, list] = defaultdict(list)
        for r in recs:
            if r["question_id"] in req_al:
                per_cat[r["category"]].append(req_al[r["question_id"]])
        cats.update(per_cat)
        series.append((model_name(dr, D), c["acceptance"]["Category_AL"], per_cat, c["acceptance"]["Average_AL"]))
    order = category_order(cats)
    n = len(series)
    width = 0.8 / n
    fig, ax = plt.subplots(figsize=(min(16, max(8, 0.75 * len(order) + 2 + 0.25 * n * len(order) / 4)), 5.5))
    styles = [(_color_of(configs, ds, dr, D), _hatch_of(configs, ds, dr, D)) for dr, D in models]
    top = 1.0
    for i, ((name, cat_al, per_cat, avg), (col, hatch)) in enumerate(zip(series, styles)):
        xs = [j - 0.4 + width * (i + 0.5) for j in range(len(order))]
        ys = [cat_al.get(c, float("nan")) for c in order]
        errs = [summary_stats(per_cat[c])["std"] if per_cat.get(c) else 0 for c in order]
        ax.bar(xs, ys, width=width * 0.95, yerr=errs, capsize=1.5, color=col, hatch=hatch, edgecolor="white",
               lw=0, error_kw=dict(ecolor="0.35", lw=0.7), label=f"{name} (avg {avg:.2f})")
        top = max([top] + [y + e for y, e in zip(ys, errs) if not math.isnan(y)])
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_ylim(0, top * 1.08)
    ax.set_xticks(range(len(order)))
    ax.set_xticklabels(order, rotation=30, ha="right")
    ax.set_ylabel("acceptance length (tokens per step)")
    ax.set_title(f"Acceptance length by category — {ds}\n(mean of per-request AL, error bar ± std; 1.0 = plain decoding)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_conditional_heatmap(configs, ds: str, path: Path) -> Optional[Path]:
    plt = _plt()
    models = [(dr, D) for (d, dr, D) in _models(configs) if d == ds]
    if not models:
        return None
    import numpy as np

    n = len(models)
    ncols = min(n, 3)
    nrows = -(-n // ncols)
    panels = []
    for dr, D in models:
        recs = [r for (d, r_, D_, bs), c in configs.items() if (d, r_, D_) == (ds, dr, D) for r in c["records"]]
        by_cat: dict[str, list] = defaultdict(list)
        for r in recs:
            by_cat[r["category"]].append(r)
        cats = category_order(by_cat) + (["all"] if len(by_cat) > 1 else [])
        by_cat["all"] = recs
        mat = np.full((len(cats), D), np.nan)
        for i, cat in enumerate(cats):
            sub = analyse([{**r, "batch_size": 0} for r in by_cat[cat]], greedy=False)
            cond = next(iter(sub.values()))["acceptance"]["Conditional_Acceptance_Rate"]
            for k in range(2, D + 2):  # k = L >= k given L >= k-1 -> draft position k-1 (1-based)
                if k - 1 in cond:
                    mat[i, k - 2] = cond.get(k, 0.0)
        panels.append((model_name(dr, D), cats, mat))
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.0 * ncols + 1, 0.42 * max(len(p[1]) for p in panels) * nrows + 1.6),
                             squeeze=False)
    im = None
    cmap = plt.get_cmap("viridis").with_extremes(bad="#dddddd")
    for ax, (name, cats, mat) in zip(axes.flat, panels):
        im = ax.imshow(np.ma.masked_invalid(mat), vmin=0, vmax=1, cmap=cmap, aspect="auto")
        if "all" in cats:
            ax.axhline(len(cats) - 1.5, color="white", lw=2)
        ax.set_yticks(range(len(cats)))
        ax.set_yticklabels(cats, fontsize=8)
        ax.set_xticks(range(mat.shape[1]))
        ax.set_xticklabels([str(k + 1) for k in range(mat.shape[1])], fontsize=8)
        ax.set_xlabel("draft position")
        ax.set_title(name, fontsize=10)
        for i in range(mat.shape[0]):
            for j in range(mat.shape[1]):
                v = mat[i, j]
                ax.text(j, i, "n/a" if np.isnan(v) else f"{v:.2f}", ha="center", va="center", fontsize=7,
                        color="black" if (np.isnan(v) or v > 0.6) else "white")
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(f"Conditional acceptance by draft position — {ds}\n"
                 f"P(draft k accepted | drafts 1…k-1 accepted); n/a: position never reached", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.7 / fig.get_figheight()))   # the two-line title above the panels
    if im is not None:
        cb = fig.colorbar(im, ax=axes, shrink=0.8, pad=0.02)
        cb.set_label("conditional acceptance rate")
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_speedup(configs, bevens, ds: str, path: Path) -> Optional[Path]:
    plt = _plt()
    models = [(dr, D) for (d, dr, D) in _models(configs) if d == ds]
    if not models or not any(c["speedup"] and c["speedup"].get("system") is not None
                             for k, c in configs.items() if k[0] == ds):
        return None  # no baseline run: nothing to compare against
    fig, ax = plt.subplots(figsize=(10, 5))
    all_bs: set[int] = set()
    for idx, (dr, D) in enumerate(models):
        col = _color_of(configs, ds, dr, D)
        pts = sorted((bs, c["speedup"]) for (d, r_, D_, bs), c in configs.items()
                     if (d, r_, D_) == (ds, dr, D) and c["speedup"])
        xs = [b for b, s in pts if s["system"] is not None]
        ys = [s["system"] for b, s in pts if s["system"] is not None]
        uxs = [b for b, s in pts if s["user"] is not None]
        uys = [s["user"] for b, s in pts if s["user"] is not None]
        all_bs.update(xs)
        be = bevens.get((ds, dr, D), {}).get("system")
        label = f"{model_name(dr, D)}: system" + (f" (break-even bs={be})" if be else " (no break-even in sweep)")
        mk = _marker_of(configs, ds, dr, D)
        ax.plot(xs, ys, "-", marker=mk, color=col, label=label)
        if uxs:
            ax.plot(uxs, uys, "--", marker=mk, color=col, alpha=0.5, ms=4, label=f"{model_name(dr, D)}: per-user")
        if be is not None:
            y = dict(zip(xs, ys)).get(be)
            ax.plot([be], [y], marker="X", ms=13, color=col, mec="black", zorder=5)
    ax.axhline(1.0, color="red", lw=1, ls=":", label="no speedup (1.0)")
    ax.set_xscale("log", base=2)
    ticks = sorted(all_bs)
    if ticks:
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(t) for t in ticks])
    ax.set_xlabel("batch size (concurrent requests)")
    ax.set_ylabel("speedup over plain decoding (×)")
    ax.set_title(f"Speedup vs batch size — {ds}\n(colour: drafter, marker: D; solid: system tokens/s, dashed: "
                 f"per-user tokens/s; X: break-even = first batch size with speedup < 1)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_pareto(configs, ds: str, path: Path) -> Optional[Path]:
    plt = _plt()
    pts = []
    for (d, dr, D, bs), c in sorted(configs.items()):
        if d != ds:
            continue
        u = (c["timing"].get("user_tps") or {}).get("mean")
        s = c["timing"].get("system_tps")
        if u is not None and s is not None:
            pts.append((u, s, dr, D, bs))
    if not pts:
        return None
    front = pareto_frontier([(p[0], p[1]) for p in pts])
    fig, ax = plt.subplots(figsize=(8, 6))
    names = sorted({(p[2], p[3]) for p in pts}, key=lambda x: (x[0] != BASELINE, x))
    for dr, D in names:
        col = _color_of(configs, ds, dr, D)
        sel = sorted([p for p in pts if (p[2], p[3]) == (dr, D)], key=lambda p: p[4])
        label = "plain decoding (baseline)" if dr == BASELINE else model_name(dr, D)
        ax.plot([p[0] for p in sel], [p[1] for p in sel], ":", color=col, label=label, alpha=0.85,
                marker=_marker_of(configs, ds, dr, D))
        for p in sel:
            ax.annotate(f"bs{p[4]}", (p[0], p[1]), textcoords="offset points", xytext=(4, 4), fontsize=7, color=col)
    fx = [pts[i][0] for i in front]
    fy = [pts[i][1] for i in front]
    ax.plot(fx, fy, "-", color="black", lw=2, alpha=0.5, label="Pareto frontier", zorder=0)
    ax.scatter(fx, fy, s=140, facecolors="none", edgecolors="black", zorder=4)
    ax.set_xlabel("per-user output tokens/s (mean)")
    ax.set_ylabel("system output tokens/s")
    ax.set_title(f"Per-user vs system throughput across D and batch size — {ds}\n(circled: Pareto-optimal; labels: batch size)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_specbench_summary(configs, ds: str, path: Path) -> Optional[Path]:
    """specdec_bench-style 3 panels: AL by category (± std), AL by response length, per-request AL histogram."""
    plt = _plt()
    models = [(dr, D) for (d, dr, D) in _models(configs) if d == ds]
    if not models:
        return None
    import numpy as np

    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8))
    data = []
    for dr, D in models:
        recs = [r for (d, r_, D_, bs), c in configs.items() if (d, r_, D_) == (ds, dr, D) for r in c["records"]
                if not r.get("error")]
        # per (request, batch size) record: AL and response length (tokens over all turns)
        als, lens, cats = [], [], []
        for r in recs:
            steps = [L for o in r["outputs"] for L in (o.get("step_lengths") or [])]
            if steps:
                als.append(sum(steps) / len(steps))
                lens.append(sum(int(o.get("num_tokens") or 0) for o in r["outputs"]))
                cats.append(r["category"])
        data.append((model_name(dr, D), (_color_of(configs, ds, dr, D), _hatch_of(configs, ds, dr, D),
                                          _marker_of(configs, ds, dr, D)), als, lens, cats))
    order = category_order({c for *_, cats in data for c in cats})
    n = len(data)
    width = 0.8 / n
    ax = axes[0]
    for i, (name, (col, hatch, _), als, lens, cats) in enumerate(data):
        ys = [np.mean([a for a, c in zip(als, cats) if c == cat]) if cat in cats else np.nan for cat in order]
        es = [np.std([a for a, c in zip(als, cats) if c == cat]) if cat in cats else 0 for cat in order]
        ax.bar([j - 0.4 + width * (i + 0.5) for j in range(len(order))], ys, width * 0.95, yerr=es, capsize=1,
               color=col, hatch=hatch, edgecolor="white", lw=0, error_kw=dict(ecolor="0.35", lw=0.6), label=name)
    ax.set_xticks(range(len(order)))
    ax.set_xticklabels(order, rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("acceptance length")
    ax.set_title("AL by category (± std)")
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax = axes[1]
    all_lens = [l for *_, lens, _ in data for l in lens]
    if all_lens and len(set(all_lens)) == 1:
        # every response hit the same length (max_new_tokens): there is nothing to bin
        ax.text(0.5, 0.5, f"every response has {all_lens[0]} tokens\n(length-capped run): no length effect to show",
                ha="center", va="center", transform=ax.transAxes, fontsize=10, color="0.3")
        ax.set_xticks([])
        ax.set_yticks([])
    elif all_lens:
        edges = np.unique(np.quantile(all_lens, np.linspace(0, 1, 6)))
        centers = (edges[:-1] + edges[1:]) / 2
        for name, (col, _, mk), als, lens, _ in data:
            idx = np.clip(np.searchsorted(edges, lens, side="right") - 1, 0, len(edges) - 2)
            ys = [np.mean([a for a, k in zip(als, idx) if k == b]) if (idx == b).any() else np.nan
                  for b in range(len(edges) - 1)]
            ax.plot(centers, ys, "-", marker=mk, color=col, label=name)
    ax.set_xlabel("response length (tokens, all turns)")
    ax.set_ylabel("mean acceptance length")
    ax.set_title("AL by response length (quantile bins)")
    ax = axes[2]
    all_als = [a for _, _, als, _, _ in data for a in als]
    if all_als:
        bins = np.linspace(1.0, max(all_als) + 1e-9, 16)
        for name, (col, _, mk), als, _, _ in data:
            # outlines, not filled bars: a dozen overlapping filled histograms read as one brown block
            ax.hist(als, bins=bins, color=col, histtype="step", lw=1.4, label=name,
                    ls="-" if mk == MARKERS[0] else "--")
    ax.set_xlabel("per-request acceptance length")
    ax.set_ylabel("requests")
    ax.set_title("Distribution of per-request AL")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[2].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.suptitle(f"SPEED-Bench summary — {ds} (all batch sizes pooled)")
    fig.tight_layout()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------------------- report

def _f(v, fmt="%.2f"):
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt % v


def report_markdown(configs, bevens, plots: dict[str, list[str]], settings: dict, csv_text: str,
                    greedy: bool) -> str:
    lines = ["# draftwise bench report", ""]
    if settings:
        lines += ["Settings: " + ", ".join(f"`{k}={v}`" for k, v in settings.items()), ""]
    lines += ["AL = acceptance length (tokens emitted per verification step, accepted drafts + 1; "
              "specdec_bench definition, mean of per-request AL). Acceptance rate = accepted / drafted "
              "(aiperf). Speedups are vs plain decoding at the same batch size. Break-even = the smallest "
              "batch size at which the speedup is below 1.", ""]
    for ds in sorted({k[0] for k in configs}):
        lines += [f"## {ds}", "",
                  "| drafter | D | bs | requests | failed | AL | acc. rate | user tok/s | system tok/s | "
                  "TTFT ms | speedup user | speedup system | identical to baseline |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for (d, dr, D, bs), c in sorted(configs.items(), key=lambda kv: (kv[0][1] != BASELINE, kv[0][1], kv[0][2], kv[0][3])):
            if d != ds:
                continue
            t = c["timing"]
            sp = c["speedup"] or {}
            ll = c["lossless"]
            ident = "–" if ll is None else f"{100 * ll['share']:.1f}% ({ll['identical']}/{ll['compared']})"
            lines.append(
                f"| {dr} | {D} | {bs} | {c['num_requests']} | {c['num_failed']} | "
                f"{_f(c['acceptance']['Average_AL'])} | {_f(c['aiperf']['Draft_Acceptance_Rate'])} | "
                f"{_f((t.get('user_tps') or {}).get('mean'), '%.1f')} | {_f(t.get('system_tps'), '%.1f')} | "
                f"{_f(1000 * (t.get('ttft') or {}).get('mean', float('nan')), '%.1f')} | "
                f"{_f(sp.get('user'))} | {_f(sp.get('system'))} | {ident} |")
        lines.append("")
        bes = {k: v for k, v in bevens.items() if k[0] == ds}
        if bes:
            lines += ["### Break-even batch size", "",
                      "| drafter | D | batch sizes run | break-even (system tok/s) | break-even (per-user tok/s) |",
                      "|---|---|---|---|---|"]
            for (d, dr, D), b in sorted(bes.items()):
                lines.append(f"| {dr} | {D} | {', '.join(map(str, b['batch_sizes']))} | "
                             f"{b['system'] if b['system'] is not None else 'none (speedup ≥ 1 throughout)'} | "
                             f"{b['user'] if b['user'] is not None else 'none'} |")
            lines.append("")
        for p in plots.get(ds, []):
            lines += [f"![{p}]({p})", ""]
    sa = [(k, c["server_acceptance"]) for k, c in sorted(configs.items()) if c.get("server_acceptance")]
    if sa:
        lines += ["## Server-reported acceptance (Prometheus counters, per window)", "",
                  "| dataset | drafter | D | concurrency | AL (1 + accepted/drafts) | acceptance rate |",
                  "|---|---|---|---|---|---|"]
        for (ds, dr, D, bs), v in sa:
            lines.append(f"| {ds} | {dr} | {D} | {bs} | {_f(v.get('Average_AL'))} | {_f(v.get('Draft_Acceptance_Rate'))} |")
        lines.append("")
    if greedy:
        bad = [(k, c["lossless"]) for k, c in configs.items() if c["lossless"] and c["lossless"]["share"] < 1.0]
        lines += ["## Losslessness check (greedy)", ""]
        if bad:
            for (ds, dr, D, bs), ll in sorted(bad):
                lines.append(f"- {ds} {dr} D={D} bs={bs}: {ll['identical']}/{ll['compared']} identical; "
                             f"differing: {', '.join(ll['mismatched_question_ids'][:5])}")
        elif any(c["lossless"] for c in configs.values()):
            lines.append("Every compared request produced exactly the baseline's tokens.")
        else:
            lines.append("No speculative configuration had a baseline to compare with.")
        lines.append("")
    else:
        lines += ["## Losslessness check", "",
                  "Not applicable: sampled runs (temperature > 0) are not expected to match the baseline token "
                  "for token; their losslessness is a distributional property.", ""]
    lines += ["## Acceptance length by category (aiperf CSV)", "", "```", csv_text.rstrip(), "```", ""]
    lines += ["## Files", "",
              "- `specbench_results.json`: specdec_bench's six keys per configuration, nested "
              "`{dataset: {drafter: {\"D=<d>\": {\"bs=<b>\": {...}}}}}` (baseline: drafter `none`, `D=0`).",
              "- `timing.json`: same nesting; TTFT / E2E / step time / per-user tokens/s as "
              "{min, max, mean, std, 0.25, 0.5, 0.75} (seconds), system tokens/s, speedups, aiperf "
              "acceptance, losslessness; `break_even` per dataset / drafter / D.",
              "- `acceptance_length.csv`, `acceptance_rate.csv`: aiperf `speed-bench-report` style "
              "(one row per drafter and D, batch sizes pooled); `throughput.csv`: one row per configuration.",
              "- `specbench_responses.jsonl`: the generated turns; `results.jsonl`: the raw per-request "
              "records (resume state); `configuration.json`: settings, versions, model hashes.", ""]
    return "\n".join(lines)


def write_reports(out: str | Path, records: Optional[list[dict]] = None, settings: Optional[dict] = None,
                  plots: bool = True) -> dict[str, Path]:
    """Compute and write every report file into ``out`` from its results."""
    from draftwise.bench.runner import CONFIG_FILE, read_results

    out = Path(out)
    if records is None:
        records = read_results(out)
    # a failed request superseded by a later success of the same (configuration, request) is dropped;
    # of repeated records the last one wins
    last: dict[tuple, dict] = {}
    for r in records:
        k = (r["key"], r["question_id"])
        if k in last and not last[k].get("error") and r.get("error"):
            continue
        last[k] = r
    records = list(last.values())
    if settings is None and (out / CONFIG_FILE).is_file():
        settings = json.loads((out / CONFIG_FILE).read_text(encoding="utf-8")).get("settings", {})
    settings = settings or {}
    greedy = float(settings.get("temperature") or 0.0) == 0.0
    configs = analyse(records, greedy=greedy)
    sa_path = out / "server_acceptance.json"
    if sa_path.is_file():
        sa = json.loads(sa_path.read_text(encoding="utf-8"))
        for (ds, dr, D, bs), c in configs.items():
            v = sa.get(f"{ds}|{dr}|D={D}|bs={bs}")
            if v:
                c["server_acceptance"] = v
    bevens = break_evens(configs)
    written: dict[str, Path] = {}

    def dump(name, text):
        p = out / name
        p.write_text(text, encoding="utf-8")
        written[name] = p

    dump("specbench_results.json", json.dumps(specbench_results(configs), indent=2) + "\n")
    dump("timing.json", json.dumps(timing_json(configs, bevens), indent=2) + "\n")
    csv_al = csv_table(configs, "al")
    dump("acceptance_length.csv", csv_al)
    dump("acceptance_rate.csv", csv_table(configs, "rate"))
    dump("throughput.csv", throughput_csv(configs))
    dump("specbench_responses.jsonl", "".join(l + "\n" for l in responses_lines(configs)))
    plot_files: dict[str, list[str]] = defaultdict(list)
    if plots:
        for ds in sorted({k[0] for k in configs}):
            s = slug(ds)
            for fn, name in ((lambda p: plot_al_by_category(configs, ds, p), f"al_by_category-{s}.png"),
                             (lambda p: plot_conditional_heatmap(configs, ds, p), f"conditional_acceptance-{s}.png"),
                             (lambda p: plot_speedup(configs, bevens, ds, p), f"speedup_vs_batch-{s}.png"),
                             (lambda p: plot_pareto(configs, ds, p), f"pareto-{s}.png"),
                             (lambda p: plot_specbench_summary(configs, ds, p), f"specbench_summary-{s}.png")):
                if fn(out / name) is not None:
                    plot_files[ds].append(name)
                    written[name] = out / name
    dump("report.md", report_markdown(configs, bevens, plot_files, settings, csv_al, greedy))
    return written
