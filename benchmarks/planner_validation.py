"""Does the planner predict what this machine measures? (planner issue, validation)

    python benchmarks/planner_validation.py --target zoo/target \
        --drafter draft-model:zoo/draft --drafter ngram --out runs/planner-validation

1. `draftwise profile` of the target on a grid (batch 1, 2, 3, 4, 8, 16 × D 0 … 8 × both
   contexts, six passes of five rounds, each round every D once in a random order) and of one
   draft-model token, right after a target forward, at the same batch sizes: the only timing the
   planner sees (OUT/profile.json). Every batch size measured, and 3: on this CPU a step's time
   is not smooth in its rows (2 rows cost 1.5× one, 4 barely more than 3), so batch 2
   interpolated between 1 and 4 came out ~10 % cheap, and static batches of 4 need 3 (the batch
   once a row is done);
2. the measured sweep, `draftwise bench` with the built-in engine: plain decoding and D = 1 … 8 per
   drafter, plus run-time adaptive D, at batch 1, 2, 4, 8, 16, on two throughput sets (prompt
   lengths 256 and 1k tokens), greedy, fixed output length (OUT/sweep; rerunning resumes);
   `--repeats N` runs the whole sweep N times (OUT/sweep-2 …), so that drifts of the machine hit
   different cells in each pass; a cell's throughput is the median over passes and its noise the
   spread between them;
3. per drafter and context, the per-position conditional acceptance of the largest-D run: the
   planner's acceptance input (the benchmark issue's metric); for a drafter whose proposals follow
   from the row's own tokens (prompt lookup, the draft model), that run's outputs walked at each
   D give each D's own (`draftwise.planner.trace`; `--no-trace`: every D priced with the largest
   D's — prompt lookup's small D then came out 10–13 % slow at batch 1);
4. `draftwise.planner.predict(...)` for every cell (drafter, batch, D, context);
5. comparison: best D (argmax of throughput, D = 0 included; where the profile's passes met two
   prices of width, the D that loses least at either, as `plan` picks it) predicted vs measured,
   predicted vs measured speedup over plain decoding (wall clock, and step-priced: each step at its shape's
   median over the pass, `step_priced_throughput`, which leaves out the machine's drift between
   the runs of plain decoding and of each D), adaptive D vs the best fixed D (both ways); a plot and
   OUT/summary.json + OUT/summary.md. The planner models draftwise's static batches (a batch ends
   with its slowest row, from per-request acceptance); `--batching continuous` writes
   OUT/summary_continuous.* with the continuous-batching model a vLLM-style server would follow;
6. the same prediction again with other step prices: where the profile met two prices of width,
   its median alone (the summary's `median_only`); OUT/profile_spread.json, each point the
   median of the profile and of slices re-timed during the sweep (one before each dataset × batch
   size group of every pass, the group's context only; `--no-slices` leaves them out): this host's
   price of width moves over an hour, and the sweep pays the hour's; and OUT/profile_in_sweep-*.json,
   each drafter's own steps in the sweep (records' `batch_steps`), a diagnostic that splits the
   error into the cost model's and the step prices', not a prediction.

Adaptive D reads the same profile (through the planner's cost model) for its steps/s curve.
The sweep interleaves its configurations (`draftwise bench --interleave`): per dataset and batch
size, each batch of requests goes through plain decoding, every fixed D and adaptive D before the
next batch, so that ratios between them are measured side by side rather than minutes apart.

Throughput here is decode throughput: generated tokens after each row's first step over the time
from the batch's first step to its last token, so the prefill (one pass, the same for every D)
does not dilute the per-step costs the planner models.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Optional

from _common import steady_malloc

steady_malloc()

DATASETS = {"throughput-256": 256, "throughput-1k": 1024}


def batches(records: list[dict]) -> list[list[dict]]:
    """The records' turn outputs grouped by the batch (window) that generated them."""
    windows = defaultdict(list)
    for r in records:
        for o in r["outputs"]:
            windows[o["window"]].append(o)
    return list(windows.values())


def decode_throughput(records: list[dict]) -> float:
    """Σ tokens after the first step / Σ over batches (last token time − first step time)."""
    tokens, span = 0, 0.0
    for outs in batches(records):
        firsts = [o["chunk_times"][0] for o in outs if o["chunk_times"]]
        lasts = [o["chunk_times"][-1] for o in outs if o["chunk_times"]]
        if not firsts:
            continue
        tokens += sum(o["num_tokens"] - (o["step_lengths"][0] if o["step_lengths"] else 0) for o in outs)
        span += max(lasts) - min(firsts)
    return tokens / span if span > 0 else float("nan")


def step_priced_throughput(records: list[dict], price: dict[tuple[int, int], float]) -> float:
    """`decode_throughput` with every step after a batch's first priced at `price[(rows, width)]`
    (the median target seconds of that shape over every configuration of the pass) plus its own
    drafter and other seconds: what a configuration decides — which steps, what drafting and
    scheduling cost — without the target's speed in the minutes it happened to run. Interleaved
    per batch, a configuration still has the same neighbours in every batch when a group has two
    batches: run-time D with the draft model at batch 8 ran 192 plain steps, the same as plain
    decoding, 3 % slower (session 20)."""
    tokens, span = 0, 0.0
    for outs in batches(records):
        steps = next((o["batch_steps"] for o in outs if "batch_steps" in o), None)
        if not steps:
            return float("nan")
        tokens += sum(o["num_tokens"] - (o["step_lengths"][0] if o["step_lengths"] else 0) for o in outs)
        span += sum(price[(int(rows), int(width))] + t_drafter + t_other
                    for rows, width, _, t_drafter, t_other in steps[1:])
    return tokens / span if span > 0 else float("nan")


def traced_acceptance(target, drafter: str, dataset: str, records: list[dict], D: int, args) -> Optional[Acceptance]:
    """`Acceptance` for every draft length 1 … D from the greedy outputs of one run, each walked at
    that D; None where the drafter's proposals depend on more than the row's own tokens."""
    import draftwise as dw
    from draftwise.bench.datasets import load_dataset
    from draftwise.planner.trace import acceptance_by_draft_length, trace_request

    dr = dw.build_drafter(drafter, target)
    if not getattr(dr, "from_prefix", False):
        return None
    # a throughput set's prompt is fixed by its id: a larger selection holds the sweep's
    prompts = {r.question_id: r.prompt_token_ids
               for r in load_dataset(dataset, target.tokenizer, num_requests=3 * max(len(records), args.num_requests))}
    missing = [r["question_id"] for r in records if prompts.get(r["question_id"]) is None]
    if missing:
        raise SystemExit(f"--trace: no prompt token ids for {missing[:3]} in {dataset}; rerun with --no-trace")
    t0 = time.time()
    traces = [trace_request(dr, prompts[r["question_id"]], r["outputs"][0]["token_ids"], D) for r in records]
    print(f"traced {drafter} on {dataset}: {len(traces)} requests in {time.time() - t0:.0f} s", flush=True)
    return acceptance_by_draft_length(traces, D, args.max_new_tokens, name=drafter, shrink=not args.no_shrink)


def step_samples(records: list[dict]) -> dict[tuple[int, int], list[float]]:
    """{(rows, width): [target seconds, …]} of the steps these records' batches ran (`batch_steps`:
    the target's forward and rollback, what the profile times for B rows × width new tokens)."""
    out = defaultdict(list)
    for r in records:
        for o in r["outputs"]:
            for rows, width, t_target, *_ in o.get("batch_steps", []):
                out[(int(rows), int(width) + 1)].append(float(t_target))
    return out


def one_price(point: dict) -> dict:
    """A profile point without its per-pass times: one price, which `planner.levels` cannot split."""
    return {k: v for k, v in point.items() if not k.startswith("pass_")}


def in_sweep_prices(profile: dict, samples: dict, ctx: dict[str, int], drafter: str, min_samples: int = 5):
    """The profile with each (B, D, L) step time that `drafter`'s runs in the sweep took often enough
    replaced by their median (D = 0: its steps without a proposal; plain decoding's own steps for
    "plain_run_seconds"), and per point the price of width over plain decoding in both."""
    from draftwise.bench.runner import BASELINE

    by_L = {L: ds for ds, L in ctx.items()}
    rows, times = [], []
    for m in profile["step_times"]:
        B, D, L = int(m["B"]), int(m["D"]), int(m["L"])
        ds = by_L.get(L)
        new = one_price(m)      # the sweep's
        for field, who, width in (("seconds", drafter, D + 1), ("plain_run_seconds", BASELINE, 1)):
            ts = samples.get((ds, who, B, width), [])
            if field in m and len(ts) >= min_samples:
                new[field] = statistics.median(ts)
            elif field in m:
                new[f"{field}_from_profile"] = True
        times.append(new)
    plain = {(m["B"], m["L"]): m for m in times if m["D"] == 0}
    base = {(m["B"], m["L"]): m for m in profile["step_times"] if m["D"] == 0}
    for m, p in zip(times, profile["step_times"]):
        z, zp = plain[(m["B"], m["L"])], base[(p["B"], p["L"])]
        measured = not m.get("seconds_from_profile") and not z.get("plain_run_seconds_from_profile")
        rows.append({"B": m["B"], "D": m["D"], "L": m["L"],
                     "profile": p["seconds"] / zp.get("plain_run_seconds", zp["seconds"]),
                     "sweep": m["seconds"] / z.get("plain_run_seconds", z["seconds"]) if measured else None})
    return rows, {**profile, "step_times": times, "notes": f"step times from {drafter}'s steps in a benchmark run"}


def spread_profile(profile: dict, slices: list[dict]) -> dict:
    """The profile with each point the median of its value and of the slices timed during the sweep:
    the host's price of width moves over an hour (9 tokens at batch 1 from 1.4 to 1.9 plain steps
    in session 17), and the sweep pays the hour's, not the profile's minute."""
    from draftwise.planner.profile import sps_curves

    def merged(key: str, ident) -> list[dict]:
        vals = defaultdict(list)
        for m in [*(profile.get(key) or []), *(m for sl in slices for m in sl.get(key, []))]:
            for field in ("seconds", "plain_run_seconds"):
                if field in m:
                    vals[(ident(m), field)].append(float(m[field]))
        return [{**one_price(m),     # the hour's
                 **{f: statistics.median(vals[(ident(m), f)]) for f in ("seconds", "plain_run_seconds") if f in m}}
                for m in profile.get(key) or []]
    steps = merged("step_times", lambda m: (int(m["B"]), int(m["D"]), int(m["L"])))
    return {**profile, "step_times": steps, "sps_curves": sps_curves(steps),
            "draft_step_times": merged("draft_step_times", lambda m: (int(m["B"]), int(m["L"]))),
            "notes": f"{profile.get('notes', '')}; each point the median with {len(slices)} slices "
                     "timed during the sweep"}


def headline(cells: list[dict]) -> dict:
    n = len(cells)
    return {"best_D_within_1": sum(c["best_D_hit"] for c in cells) / n,
            "best_D_within_1_or_tied": sum(c["best_D_hit_or_tied"] for c in cells) / n,
            "speedup_within_tolerance_at_predicted_D": sum(c["speedup_hit"] for c in cells) / n,
            "mean_throughput_loss_of_predicted_D": sum(c["throughput_loss_of_predicted_D"] for c in cells) / n,
            "best_D_predicted": {f"{c['context']}/{c['drafter']}/{c['batch_size']}": c["best_D_predicted"]
                                 for c in cells},
            "speedup_predicted": {f"{c['context']}/{c['drafter']}/{c['batch_size']}": c["speedup_predicted"]
                                  for c in cells}}


def render_prices(by_drafter: dict[str, list[dict]]) -> str:
    """Price of width over plain decoding: the profile's, then inside each drafter's runs."""
    names = list(by_drafter)
    t = {(d, r["L"], r["B"], r["D"]): r for d, rows in by_drafter.items() for r in rows}
    first = by_drafter[names[0]]
    Ds = sorted({r["D"] for r in first})
    L = ["| context | B | " + " | ".join(f"D={d}" for d in Ds) + " |", "|---|---|" + "---|" * len(Ds)]
    for (ctx_len, B) in sorted({(r["L"], r["B"]) for r in first}):
        def cell(D):
            vals = [t[(names[0], ctx_len, B, D)]["profile"]] + [t[(n, ctx_len, B, D)]["sweep"] for n in names]
            return " / ".join("–" if v is None else f"{v:.2f}" for v in vals)
        L.append(f"| {ctx_len} | {B} | " + " | ".join(cell(D) for D in Ds) + " |")
    return "\n".join(L + ["", "Price of width: a step of B rows × (1 + D) tokens over a step of plain decoding "
                            "at the same B and context, in the profile / inside the sweep's runs of "
                            + " / ".join(names) + " (median target seconds of their steps of that shape; D = 0: "
                            "their steps without a proposal; – where fewer than 5)."])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="zoo/target")
    ap.add_argument("--drafter", action="append", help="drafter spec, repeatable (default: draft-model:zoo/draft, ngram)")
    ap.add_argument("--draft-model", default=None, help="config of the draft model (default: from a draft-model: spec)")
    ap.add_argument("--max-draft", type=int, default=8)
    ap.add_argument("--batch-sizes", default="1,2,4,8,16")
    ap.add_argument("--dataset", action="append", help=f"throughput sets (default: {', '.join(DATASETS)})")
    ap.add_argument("--num-requests", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--min-batches", type=int, default=4,
                    help="at least this many batches of requests per batch size (64 requests at batch 16)")
    ap.add_argument("--profile-batch-sizes", default="1,2,3,4,8,16")
    ap.add_argument("--profile-draft-tokens", default="0,1,2,3,4,5,6,7,8",
                    help="every D: small-row GEMMs on CPUs are not monotone in rows (see BENCHMARKS.md)")
    ap.add_argument("--profile-repeats", type=int, default=5,
                    help="rounds per point and pass of the profile's step grid (each times every width once)")
    ap.add_argument("--profile-passes", type=int, default=6, help="passes over the profile's step grid")
    ap.add_argument("--slices", action=argparse.BooleanOptionalAction, default=True,
                    help="before each (dataset, batch size) group of every pass, re-time that context's step grid "
                         "(--slice-passes × --profile-repeats rounds) and draft token: OUT/profile_spread.json "
                         "takes each point's median with them (default: on)")
    ap.add_argument("--slice-passes", type=int, default=1)
    ap.add_argument("--trace", action=argparse.BooleanOptionalAction, default=True,
                    help="acceptance for each D from the largest-D run's outputs walked at that D (drafters "
                         "whose proposals follow from the row's tokens: prompt lookup, a draft model); "
                         "--no-trace prices every D with the largest D's α_k")
    ap.add_argument("--no-shrink", action="store_true",
                    help="each request's own acceptance as measured (default: shrunk toward the pooled one by "
                         "the share of its spread that is noise)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--min-gain", type=float, default=None,
                    help="the planner's margin for speculating at all (default: the planner's, 0.02)")
    ap.add_argument("--tolerance", type=float, default=0.15, help="speedup error counted as a hit")
    ap.add_argument("--repeats", type=int, default=1, help="passes over the whole sweep (median per cell)")
    ap.add_argument("--batching", choices=["static", "continuous"], default="static",
                    help="the planner's batching model: draftwise's engine runs static batches (a batch ends "
                         "with its slowest row); 'continuous' predicts what a vLLM-style server would bank")
    ap.add_argument("--out", default="runs/planner-validation")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--sequential", action="store_true",
                    help="one configuration after another (default: interleaved per batch of requests, so "
                         "every ratio is measured side by side)")
    args = ap.parse_args()

    import torch

    import draftwise as dw
    from draftwise.bench.runner import ADAPTIVE, BASELINE, BenchConfig, EngineBackend, read_results, run_bench
    from draftwise.planner import pick_num_draft_tokens, predict
    from draftwise.planner.acceptance import Acceptance, full_steps
    from draftwise.planner.hardware import get_hardware
    from draftwise.planner.levels import find_levels, least_regret, level_hardware
    from draftwise.planner.profile import measure_draft_steps, measure_steps, profile, save_profile

    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    drafters = args.drafter or ["draft-model:zoo/draft", "ngram"]
    datasets = args.dataset or list(DATASETS)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    Ds = list(range(1, args.max_draft + 1))
    draft_cfg = args.draft_model or next((d.split(":", 1)[1] for d in drafters if d.startswith("draft-model:")), None)

    # 1. the planner's only timing input: a coarse profile of this machine and target
    prof = out / "profile.json"
    ctx = {ds: DATASETS.get(ds, 512) + args.max_new_tokens // 2 for ds in datasets}
    if not prof.exists():
        hw = profile(args.target, batch_sizes=[int(b) for b in args.profile_batch_sizes.split(",")],
                     draft_tokens=[int(d) for d in args.profile_draft_tokens.split(",")],
                     context_lengths=sorted(set(ctx.values())), draft_model=draft_cfg,
                     repeats=args.profile_repeats, passes=args.profile_passes, log=print)
        save_profile(hw, prof)

    # 2. the measured sweep (resumable), once per pass; with --slices, the profile's grid at the
    # group's context re-timed before each (dataset, batch size) group (OUT/profile_slices.jsonl)
    backend = EngineBackend(args.target)
    pbs, pds = ([int(x) for x in a.split(",")] for a in (args.profile_batch_sizes, args.profile_draft_tokens))
    slices_path = out / "profile_slices.jsonl"
    dmodel = dw.load_target(draft_cfg).model if (args.slices and draft_cfg) else None

    def time_slice(rep: int):
        def before_group(ds: str, bs: int) -> None:
            t0, L = time.time(), ctx[ds]
            st = measure_steps(backend.target.model, pbs, pds, [L], repeats=args.profile_repeats,
                               passes=args.slice_passes)
            dst = ([] if dmodel is None else
                   measure_draft_steps(dmodel, pbs, [L], repeats=max(2 * args.profile_repeats, 10),
                                       target=backend.target.model))
            with slices_path.open("a", encoding="utf-8") as f:
                f.write(json.dumps({"pass": rep, "dataset": ds, "batch_size": bs, "time": t0, "step_times": st,
                                    "draft_step_times": dst}) + "\n")
            print(f"slice before {ds} batch {bs}: {time.time() - t0:.0f} s", flush=True)
        return before_group if args.slices else None

    passes, priced_passes, groups = [], [], None
    in_sweep = defaultdict(list)     # (dataset, drafter, rows, width) → target seconds of the sweep's steps
    for rep in range(max(1, args.repeats)):
        sweep = out / ("sweep" if rep == 0 else f"sweep-{rep + 1}")
        run_bench(BenchConfig(target=args.target, out=str(sweep), drafters=drafters, draft_lengths=Ds,
                              batch_sizes=batch_sizes, datasets=datasets, num_requests=args.num_requests,
                              min_batches=args.min_batches, max_new_tokens=args.max_new_tokens,
                              ignore_eos=True, adaptive=True,
                              interleave=not args.sequential, adaptive_hardware=str(prof),
                              progress=not args.no_progress, plots=False), backend=backend,
                  before_group=time_slice(rep))
        by_cell = defaultdict(list)
        for r in read_results(sweep):
            by_cell[(r["dataset"], r["drafter"], int(r["D"]), int(r["batch_size"]))].append(r)
        for (ds, d, _, _), recs in by_cell.items():
            if not d.endswith(ADAPTIVE):
                for (rows, width), ts in step_samples(recs).items():
                    in_sweep[(ds, d, rows, width)] += ts
        passes.append({k: decode_throughput(v) for k, v in by_cell.items()})
        shapes = defaultdict(list)    # (dataset, rows, width) → target seconds, every configuration
        for (ds, _, _, _), recs in by_cell.items():
            for r in recs:
                for o in r["outputs"]:
                    for rows, width, t_target, *_ in o.get("batch_steps", []):
                        shapes[(ds, int(rows), int(width))].append(float(t_target))
        med = {k: statistics.median(v) for k, v in shapes.items()}
        priced_passes.append({k: step_priced_throughput(v, {(rw, w): t for (ds, rw, w), t in med.items() if ds == k[0]})
                              for k, v in by_cell.items()})
        groups = groups or by_cell    # acceptance: the first pass (the same tokens in every pass)
    thr = {k: statistics.median(p[k] for p in passes) for k in passes[0]}
    thr_priced = {k: statistics.median(p[k] for p in priced_passes) for k in priced_passes[0]}
    spread = ({k: (max(p[k] for p in passes) - min(p[k] for p in passes)) / thr[k] for k in thr}
              if len(passes) > 1 else {})
    noise = statistics.median(spread.values()) if spread else None

    # 3. acceptance per drafter and context, from the largest-D run at batch 1 (and the share of
    # steps with any proposal: without one a step costs a plain step); with --trace, for every D,
    # from that run's outputs walked at D (`draftwise.planner.trace`)
    accs = {}
    for ds in datasets:
        runs = {d: groups[(ds, d, Ds[-1], batch_sizes[0])] for d in drafters}
        accs[ds] = {d: (traced_acceptance(backend.target, d, ds, runs[d], Ds[-1], args) if args.trace else None)
                    or Acceptance.from_records(runs[d], Ds[-1], args.max_new_tokens, name=d, shrink=not args.no_shrink)
                    for d in drafters}

    # tokens per step at batch 1, each D's run against the acceptance the planner priced it with
    # (with --trace, each D's own; the largest D's α_k alongside, what the planner used before)
    per_step = {ds: {d: {str(D): {"measured": round(statistics.fmean(steps), 4),
                                  "priced": round(accs[ds][d].at(D).expected_tokens(D), 4),
                                  "largest_D_alpha": round(accs[ds][d].expected_tokens(D), 4)}
                         for D in Ds for steps in [full_steps(groups[(ds, d, D, batch_sizes[0])], D, args.max_new_tokens)]
                         if steps}
                     for d in drafters} for ds in datasets}

    gain = {} if args.min_gain is None else {"min_gain": args.min_gain}

    def score(hardware, only: Optional[str] = None) -> tuple[list[dict], list[dict]]:
        """4.–5. the planner's prediction for every cell (of drafter `only`) from `hardware`, against
        the sweep; where the profile's passes met two prices of width, the D that loses least at
        either (`planner.levels`, as `plan` picks it)."""
        cells, adaptive_rows = [], []
        at_levels = level_hardware(get_hardware(hardware))
        for ds in datasets:
            L, acc = ctx[ds], accs[ds]

            def predicted(hw) -> dict:
                return {(p["drafter"], p["batch_size"], p["num_draft_tokens"]): p for p in predict(
                    args.target, hw, acceptance=acc, draft_model=draft_cfg, batch_sizes=batch_sizes,
                    draft_tokens=[0] + Ds, context_lengths=[L], batching=args.batching)}
            P = predicted(hardware)
            P_levels = [predicted(hw) for hw in at_levels.values()]
            for d in [only] if only else drafters:
                for B in batch_sizes:
                    fixed = {0: (ds, BASELINE, 0, B), **{D: (ds, d, D, B) for D in Ds}}   # D → cell key
                    base = thr[fixed[0]]
                    meas = {D: thr[k] for D, k in fixed.items()}
                    prd = {D: P[(d, B, D)]["throughput_tok_s"] for D in [0] + Ds}
                    # the planner's own choice from its predictions (`plan` applies the same rule)
                    best_m = max(meas, key=meas.get)
                    best_p = pick_num_draft_tokens([prd[D] for D in [0] + Ds], **gain)
                    if P_levels:
                        by_level = [[Pl[(d, B, D)]["throughput_tok_s"] for D in [0] + Ds] for Pl in P_levels]
                        best_p = least_regret(by_level, [pick_num_draft_tokens(t, **gain) for t in by_level])
                    sp_m = {D: meas[D] / base for D in meas}
                    sp_p = {D: P[(d, B, D)]["speedup"] for D in meas}
                    # the same with every step at its shape's median over the pass: the machine's drift
                    # between plain decoding's runs and the drafter's left out (`step_priced_throughput`)
                    sp_s = {D: thr_priced[k] / thr_priced[fixed[0]] for D, k in fixed.items()}
                    err_at_pred = abs(sp_p[best_p] - sp_m[best_p]) / sp_m[best_p]
                    # statistically tied with the best: within the passes' typical spread of it
                    tied = noise is not None and meas[best_p] >= meas[best_m] * (1 - noise)
                    cells.append({"dataset": ds, "context": L, "drafter": d, "batch_size": B,
                                  "best_D_measured": best_m, "best_D_predicted": best_p,
                                  "best_D_hit": abs(best_m - best_p) <= 1,
                                  "best_D_hit_or_tied": abs(best_m - best_p) <= 1 or tied,
                                  "speedup_measured": {str(k): round(v, 4) for k, v in sp_m.items()},
                                  "speedup_predicted": {str(k): round(v, 4) for k, v in sp_p.items()},
                                  "speedup_measured_step_priced": {str(k): round(v, 4) for k, v in sp_s.items()},
                                  "speedup_error_at_predicted_D": round(err_at_pred, 4),
                                  "speedup_hit": err_at_pred <= args.tolerance,
                                  "throughput_loss_of_predicted_D": round(1 - meas[best_p] / meas[best_m], 4),
                                  "acceptance": [round(a, 4) for a in acc[d].conditional],
                                  "proposal_rate": round(acc[d].proposal_rate, 4)})
                    ad = thr.get((ds, d + ADAPTIVE, Ds[-1], B))
                    if ad is not None:
                        row = {"dataset": ds, "drafter": d, "batch_size": B, "best_fixed_D": best_m,
                               "adaptive_over_best_fixed": round(ad / meas[best_m], 4),
                               "adaptive_speedup": round(ad / base, 4),
                               "per_pass": [round(p[(ds, d + ADAPTIVE, Ds[-1], B)] / max(p[k] for k in fixed.values()), 4)
                                            for p in passes]}
                        # the best of nine noisy measurements is biased upwards (its noise is picked
                        # with it): choose the best fixed D on one pass, compare on another
                        if len(passes) > 1:
                            row["cross_pass"] = round(statistics.median(
                                q[(ds, d + ADAPTIVE, Ds[-1], B)] / q[key]
                                for p in passes for q in passes if q is not p
                                for key in [max(fixed.values(), key=p.get)]), 4)
                        # step-priced (`step_priced_throughput`), the best fixed D chosen by it too
                        sp = {D: thr_priced[k] for D, k in fixed.items()}
                        best_sp = max(sp, key=sp.get)
                        row["step_priced"] = round(thr_priced[(ds, d + ADAPTIVE, Ds[-1], B)] / sp[best_sp], 4)
                        row["step_priced_best_fixed_D"] = best_sp
                        adaptive_rows.append(row)
        return cells, adaptive_rows

    cells, adaptive_rows = score(str(prof))
    variants = {}
    base_hw = json.loads(prof.read_text())
    levels = find_levels(base_hw.get("step_times") or [])
    if levels:      # what the profile's median alone would have picked
        one = {**base_hw, "step_times": [one_price(m) for m in base_hw["step_times"]]}
        variants["median_only"] = {"price_levels": levels, **headline(score(one)[0])}
    slices = ([json.loads(x) for x in slices_path.read_text(encoding="utf-8").splitlines() if x.strip()]
              if slices_path.exists() else [])
    if slices:
        base_hw = spread_profile(base_hw, slices)
        (out / "profile_spread.json").write_text(json.dumps(base_hw, indent=1))
        variants["spread"] = {"slices": len(slices), **headline(score(base_hw)[0])}
    # the same prediction with the sweep's own step prices: what is left is the model's error,
    # what goes away was the machine moving between the profile and the sweep
    # (per drafter: a target step after draft-model forwards costs more than after prompt lookup's)
    prices, cells_in_sweep = {}, []
    for d in drafters:
        prices[d], sweep_hw = in_sweep_prices(base_hw, in_sweep, ctx, d)
        (out / f"profile_in_sweep-{d.split(':')[0]}.json").write_text(json.dumps(sweep_hw, indent=1))
        cells_in_sweep += score(sweep_hw, only=d)[0]
    variants["in_sweep"] = {**headline(cells_in_sweep), "step_prices": prices}

    n = len(cells)
    def errors(key: str) -> list[float]:
        return [abs(float(c["speedup_predicted"][k]) - v) / v for c in cells
                for k, v in ((k, float(v)) for k, v in c[key].items()) if k != "0"]
    all_err, priced_err = errors("speedup_measured"), errors("speedup_measured_step_priced")
    summary = {
        "cells": n,
        "best_D_within_1": sum(c["best_D_hit"] for c in cells) / n,
        "repeats": len(passes),
        "median_pass_spread": noise,
        "best_D_within_1_or_tied": sum(c["best_D_hit_or_tied"] for c in cells) / n if noise is not None else None,
        "speedup_within_tolerance_at_predicted_D": sum(c["speedup_hit"] for c in cells) / n,
        "speedup_mean_abs_rel_error_all_D": sum(all_err) / len(all_err),
        "speedup_within_tolerance_all_D": sum(e <= args.tolerance for e in all_err) / len(all_err),
        "speedup_mean_abs_rel_error_all_D_step_priced": sum(priced_err) / len(priced_err),
        "speedup_within_tolerance_all_D_step_priced": sum(e <= args.tolerance for e in priced_err) / len(priced_err),
        "mean_throughput_loss_of_predicted_D": sum(c["throughput_loss_of_predicted_D"] for c in cells) / n,
        "adaptive_min_over_best_fixed": min((a["adaptive_over_best_fixed"] for a in adaptive_rows), default=None),
        "adaptive_cross_pass_min": min((a["cross_pass"] for a in adaptive_rows if "cross_pass" in a), default=None),
        "adaptive_cross_pass_median": statistics.median(a["cross_pass"] for a in adaptive_rows if "cross_pass" in a)
        if len(passes) > 1 else None,
        "adaptive_step_priced_min": min((a["step_priced"] for a in adaptive_rows), default=None),
        "adaptive_step_priced_median": statistics.median(a["step_priced"] for a in adaptive_rows)
        if adaptive_rows else None,
        "step_prices_from": variants,
        "tokens_per_step_batch1": per_step,
        "tolerance": args.tolerance, "batching": args.batching, "cell_results": cells, "adaptive": adaptive_rows,
        "command": "python benchmarks/planner_validation.py " + " ".join(
            f"--drafter {d}" for d in drafters) + f" --target {args.target} --repeats {args.repeats} --out {args.out}"
        + (f" --batching {args.batching}" if args.batching != "static" else ""),
    }
    tag = "" if args.batching == "static" else f"_{args.batching}"
    (out / f"summary{tag}.json").write_text(json.dumps(summary, indent=1))
    (out / f"summary{tag}.md").write_text(render_markdown(summary, batch_sizes))
    plot(cells, out / f"predicted_vs_measured{tag}.png")
    print(render_markdown(summary, batch_sizes))


def render_markdown(s: dict, batch_sizes: list[int]) -> str:
    L = [f"{s['cells']} cells (drafter × batch × context): predicted best D within ±1 of the measured best in "
         f"**{s['best_D_within_1']:.0%}**; predicted speedup at the predicted D within "
         f"{s['tolerance']:.0%} in **{s['speedup_within_tolerance_at_predicted_D']:.0%}**; over all D "
         f"{s['speedup_within_tolerance_all_D']:.0%} within {s['tolerance']:.0%} (mean error "
         f"{s['speedup_mean_abs_rel_error_all_D']:.1%}"
         + (f"; against step-priced speedups, which leave out the machine's drift between runs, "
            f"{s['speedup_within_tolerance_all_D_step_priced']:.0%}, mean error "
            f"{s['speedup_mean_abs_rel_error_all_D_step_priced']:.1%}"
            if "speedup_within_tolerance_all_D_step_priced" in s else "")
         + "); throughput lost by running the predicted instead of "
         f"the measured best D: {s['mean_throughput_loss_of_predicted_D']:.1%} on average."
         + (f" Over {s['repeats']} passes the median spread of a cell's throughput was "
            f"{s['median_pass_spread']:.1%}; counting a predicted D whose measured throughput is within that "
            f"of the best as a hit too: **{s['best_D_within_1_or_tied']:.0%}**."
            if s.get("median_pass_spread") is not None else ""), "",
         "| context | drafter | " + " | ".join(f"B={b}" for b in batch_sizes) + " |",
         "|---|---|" + "---|" * len(batch_sizes)]
    rows = defaultdict(dict)
    for c in s["cell_results"]:
        rows[(c["context"], c["drafter"])][c["batch_size"]] = c
    for (ctx, d), by_b in rows.items():
        def fmt(c):
            m, p = c["best_D_measured"], c["best_D_predicted"]
            return (f"D {m}/{p}, {float(c['speedup_measured'][str(m)]):.2f}×/"
                    f"{float(c['speedup_predicted'][str(p)]):.2f}×" + ("" if c["best_D_hit"] else " ✗"))
        L.append(f"| {ctx} | {d} | " + " | ".join(fmt(by_b[b]) if b in by_b else "" for b in batch_sizes) + " |")
    L += ["", "Cells: best D measured/predicted, speedup measured at the measured best / predicted at the "
          "predicted best; ✗ = best D off by more than 1.", ""]
    if s["adaptive"]:
        L += ["| context | drafter | " + " | ".join(f"B={b}" for b in batch_sizes) + " |",
              "|---|---|" + "---|" * len(batch_sizes)]
        arows = defaultdict(dict)
        for a in s["adaptive"]:
            arows[(a["dataset"], a["drafter"])][a["batch_size"]] = a
        def afmt(a):
            cell = f"{a['adaptive_over_best_fixed']:.2f} (D {a['best_fixed_D']})"
            if "cross_pass" in a:
                cell += f"; passes {' / '.join(f'{x:.2f}' for x in a['per_pass'])}; cross {a['cross_pass']:.2f}"
            if "step_priced" in a:
                cell += f"; step-priced {a['step_priced']:.2f} (D {a['step_priced_best_fixed_D']})"
            return cell
        for (ds, d), by_b in arows.items():
            L.append(f"| {ds} | {d} | " + " | ".join(afmt(by_b[b]) if b in by_b else "" for b in batch_sizes) + " |")
        L += ["", "Adaptive D throughput / best fixed D throughput: over the median of the passes (the best fixed "
              "D in brackets); within each pass; cross = best fixed D chosen on one pass, both measured on "
              "another (median over pairs of passes); step-priced = every step priced at the median target "
              "seconds of its shape in its pass, over all configurations, plus its own drafter and other "
              "seconds (median of passes; the best fixed D by that measure in brackets).", ""]
    v = s.get("step_prices_from")
    if v:
        names = {"median_only": "the profile's median alone, its two prices of width not told apart (each "
                                "point over every pass; planner.levels)",
                 "spread": f"the profile spread over the sweep (profile_spread.json: each point's median with "
                           f"{v.get('spread', {}).get('slices', 0)} slices, one before each group)",
                 "in_sweep": "each drafter's own steps in the sweep (profile_in_sweep-*.json; a diagnostic, "
                             "not a prediction)"}
        tied = s.get("best_D_within_1_or_tied") is not None
        L += ["| step prices from | best D within ±1 | " + ("… or tied | " if tied else "")
              + f"speedup within {s['tolerance']:.0%} at the predicted D | throughput lost to the predicted D |",
              "|---|---|" + ("---|" if tied else "") + "---|---|"]
        rows = [("the profile taken before the sweep (profile.json)", s)] + [(names[k], v[k]) for k in names if k in v]
        for name, h in rows:
            L.append(f"| {name} | {h['best_D_within_1']:.0%} | "
                     + (f"{h['best_D_within_1_or_tied']:.0%} | " if tied else "")
                     + f"{h['speedup_within_tolerance_at_predicted_D']:.0%} | "
                     f"{h['mean_throughput_loss_of_predicted_D']:.1%} |")
        for k in names:
            if k in v:
                L += ["", f"Predicted best D with step prices from {names[k].split(' (')[0]}: " + ", ".join(
                    f"{cell} D={d}" for cell, d in v[k]["best_D_predicted"].items()) + "."]
        L += ["", render_prices(v["in_sweep"]["step_prices"]), ""]
    if s.get("tokens_per_step_batch1"):
        L += ["Tokens per step at batch 1, measured / priced / with the largest D's α_k for every D:", "",
              "| context | drafter | " + " | ".join(f"D={D}" for D in next(iter(next(iter(
                  s["tokens_per_step_batch1"].values())).values()))) + " |"]
        L.append("|---|---|" + "---|" * len(next(iter(next(iter(s["tokens_per_step_batch1"].values())).values()))))
        for ds, by_d in s["tokens_per_step_batch1"].items():
            for d, row in by_d.items():
                L.append(f"| {ds} | {d} | " + " | ".join(
                    f"{r['measured']:.2f} / {r['priced']:.2f} / {r['largest_D_alpha']:.2f}" for r in row.values()) + " |")
        L.append("")
    return "\n".join(L)


def plot(cells: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 5))
    points = defaultdict(lambda: ([], []))
    for c in cells:
        xs, ys = points[(c["drafter"], c["context"])]
        for k, v in c["speedup_measured"].items():
            if k != "0":
                xs.append(float(v))
                ys.append(float(c["speedup_predicted"][k]))
    for i, ((d, ctx), (xs, ys)) in enumerate(points.items()):
        a.scatter(xs, ys, s=10, marker="osv^D<>p"[i % 8], alpha=0.6, label=f"{d} L={ctx}")
    lim = [0, max(1.5, max(float(v) for c in cells for v in c["speedup_measured"].values()) * 1.1)]
    a.plot(lim, lim, "k-", lw=0.8)
    a.fill_between(lim, [x * 0.85 for x in lim], [x * 1.15 for x in lim], color="gray", alpha=0.15)
    a.set(xlabel="measured speedup over plain decoding", ylabel="predicted speedup",
          title="every (drafter, batch, D, context); band = ±15 %")
    a.legend(fontsize=7)
    by = defaultdict(list)
    for c in cells:
        by[(c["drafter"], c["context"])].append(c)
    for i, (key, cs) in enumerate(by.items()):
        cs = sorted(cs, key=lambda c: c["batch_size"])
        bs = [c["batch_size"] for c in cs]
        line, = b.plot(bs, [c["best_D_measured"] for c in cs], "-o", label=f"{key[0]} L={key[1]} measured")
        b.plot(bs, [c["best_D_predicted"] for c in cs], "--x", color=line.get_color(), label="predicted")
    b.set(xscale="log", xlabel="batch size", ylabel="best D", title="best number of drafted tokens")
    b.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
