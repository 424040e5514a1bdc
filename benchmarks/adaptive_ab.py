"""Adaptive D against fixed D and plain decoding, side by side, with confidence intervals.

    python benchmarks/adaptive_ab.py --batch-size 1 --fixed 4,5 --rounds 4 \
        --adaptive runs/pv-interleaved/profile.json --out runs/ab/ngram-256-b1

A unit is one batch of requests decoded by every configuration in turn (the order rotates from unit
to unit), so the machine's drift falls on all of them alike; `--rounds` repeats the request set.
Each unit is appended to `OUT/units.jsonl` as it finishes, and a rerun with the same `--out`
resumes after the last whole unit (the adaptive scheduler then starts learning afresh).

Two throughputs per configuration, decode tokens over:
- wall: the decode seconds measured (prefill left out);
- step-priced: every step priced at the median target seconds of its shape (rows, verified width)
  over all configurations and units of the run, plus its own drafter and other seconds, plus the
  unit's seconds outside its steps as measured (a drafter's start on the batch). This
  machine's speed drifts by ±10 % from one second to the next; pricing a shape once for all
  configurations takes that drift out of the comparison and leaves what a configuration decides:
  which steps it takes and what its drafting and scheduling cost. It also takes out what a
  scheduler that follows the host gains: a step verified while wide steps were cheap is charged
  the run's median;
- unit-priced: as step-priced, but each shape at what the host charged in the step's own unit
  (the run's median × how dear that unit's plain steps, and its verifying steps, were over every
  configuration of the unit): the host's stretches of seconds to minutes stay in, its
  step-to-step noise mostly out.
Ratios to plain decoding and adaptive / best fixed come with 95 % bootstrap intervals: the rounds
of each batch of requests are resampled (the workload is fixed; the machine's speed is what varies),
so they need `--rounds` ≥ 2. With more than two rounds the summary is printed twice: over all
rounds, and after the first (adaptive D's one-off learning left out, as a server amortises it).
Run it on a quiet machine: another process on the cores distorts every time.

`--pool DIR DIR …` reads repeated runs of one cell (each a fresh process) and prints each run's
adaptive / best fixed D and all of them as one, after round 1: where the host changes speed for
minutes at a time, one run's interval does not cover the next run's. `DIR:versus` pools a run's
versus configuration as its adaptive D (a run where the kept scheduler was the versus).

`--versus PATH` adds a configuration "versus": adaptive D with the `AdaptiveDraftLength` of another
version of `planner/adaptive.py` (e.g. `git show REV:src/draftwise/planner/adaptive.py > old.py`),
built as `generate(adaptive=...)` builds its own, on its own drafter — two scheduler versions
measured side by side in one run instead of in two runs an hour apart. The file is loaded as a
module of this checkout's `draftwise.planner` (its relative imports resolve here), so it must fit
the rest of this checkout.
"""
import inspect
import json
import statistics
from pathlib import Path

import numpy as np

from _common import adaptive_parser, adaptive_workload, steady_malloc

steady_malloc()


def run(args) -> list[dict]:
    import draftwise as dw

    tgt, prompts, adaptive = adaptive_workload(args)
    prompts = prompts[:args.requests]
    configs = ([("plain", 0, False)] + [(f"D={d}", int(d), False) for d in args.fixed.split(",") if d]
               + [("adaptive", args.D, adaptive)])
    versus = None
    if args.versus:
        versus = scheduler_class(args.versus)
        configs.append(("versus", args.D, adaptive))
    drafters = {name: dw.build_drafter(args.drafter, tgt) if D else None for name, D, _ in configs}
    B = args.batch_size
    starts = list(range(0, len(prompts), B))
    setting = {k: getattr(args, k) for k in ("target", "drafter", "dataset", "batch_size", "requests", "D",
                                             "adaptive", "fixed", "max_new_tokens", "versus", "warm")}
    out = Path(args.out) if args.out else None
    units: list[dict] = []
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        meta = out / "setting.json"
        if meta.exists() and json.loads(meta.read_text()) != setting:
            raise SystemExit(f"{out} holds a run with other settings ({meta}); pick another --out")
        meta.write_text(json.dumps(setting, indent=1))
        log = out / "units.jsonl"
        if log.exists():
            units = load_units(log)
            log.write_text("".join(json.dumps(u) + "\n" for u in units))
    if args.warm:
        # what the validation's sweep does before this cell: the same drafters decode another set
        # (another context octave), so their schedulers here start from what they learned there
        from draftwise.bench.datasets import load_dataset
        warm = [tgt.tokenizer.encode(r.turns[0]) for r in load_dataset(args.warm, tgt.tokenizer, num_requests=args.requests)]
        for name, D, ad in configs:
            if ad:
                for j in range(0, len(warm), B):
                    sched = ad if name != "versus" else dw.api._adaptive_scheduler(
                        tgt, adaptive, warm[j:j + B], D, drafters[name], args.max_new_tokens, scheduler_cls=versus)
                    dw.generate(tgt, warm[j:j + B], drafter=drafters[name], num_draft_tokens=D,
                                max_new_tokens=args.max_new_tokens, ignore_eos=True, adaptive=sched)
    for u in range(len(units), args.rounds * len(starts)):
        i = starts[u % len(starts)]
        unit = {"unit": u, "batch": u % len(starts), "configs": {}}
        for name, D, ad in configs[u % len(configs):] + configs[:u % len(configs)]:
            if name == "versus":    # the other version's scheduler, cached as generate caches its own
                ad = dw.api._adaptive_scheduler(tgt, adaptive, prompts[i:i + B], D, drafters[name],
                                                args.max_new_tokens, scheduler_cls=versus)
            res = dw.generate(tgt, prompts[i:i + B], drafter=drafters[name], num_draft_tokens=D,
                              max_new_tokens=args.max_new_tokens, ignore_eos=True, adaptive=ad)
            st = res.stats
            unit["configs"][name] = {
                "tokens": sum(len(o.token_ids) for o in res), "seconds": st.t_total - st.t_prefill,
                "steps": [[len(s.rows), max(s.drafted), s.t_target, s.t_drafter, s.t_other] for s in st.steps]}
        units.append(unit)
        if out is not None:
            with log.open("a") as f:
                f.write(json.dumps(unit) + "\n")
    return units


def scheduler_class(path: str):
    """`AdaptiveDraftLength` from another version of planner/adaptive.py, as a module of this
    checkout's `draftwise.planner` (so `from .acceptance import …` finds this checkout's)."""
    import importlib.util
    import sys

    import draftwise.planner  # noqa: F401  (the parent package must be imported first)

    name = "draftwise.planner._versus"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"--versus {path}: not a Python file")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    if not hasattr(mod, "AdaptiveDraftLength"):
        raise SystemExit(f"--versus {path} defines no AdaptiveDraftLength")
    cls = mod.AdaptiveDraftLength
    if "rows" not in inspect.signature(cls.draft_cap).parameters:     # older than the engine's row ids

        class Versus(cls):
            def draft_cap(self, *a, rows=None, **k):
                return super().draft_cap(*a, **k)
        return Versus
    return cls


def load_units(path: Path) -> list[dict]:
    """The whole units of a `units.jsonl` (a line cut short by a kill ends it: that unit is rerun)."""
    units = []
    for line in path.read_text().splitlines():
        try:
            units.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return units


def ci(values: np.ndarray) -> tuple[float, float]:
    """95 % interval of a statistic from its values on the bootstrap resamples of units."""
    lo, hi = np.percentile(values, [2.5, 97.5])
    return float(lo), float(hi)


def rounds_of(units: list[dict]) -> int:
    """Rounds of the request set a run's units cover (the last maybe in part)."""
    return 1 + max(u["unit"] for u in units) // (1 + max(u["batch"] for u in units))


def after_rounds(units: list[dict], rounds: int) -> list[dict]:
    """The units after the first `rounds` rounds of the request set."""
    per_round = 1 + max(u["batch"] for u in units)
    return [u for u in units if u["unit"] >= rounds * per_round]


def shape_prices(units: list[dict], seconds=lambda step: step[2], min_steps: int = 1) -> dict[tuple[int, int], float]:
    """Median target seconds (or `seconds` of a step record) per step shape (rows, verified width),
    pooled over every configuration and unit: the price `summarise` charges every step of that shape."""
    by_shape: dict[tuple[int, int], list[float]] = {}
    for u in units:
        for c in u["configs"].values():
            for step in c["steps"]:
                by_shape.setdefault((step[0], step[1]), []).append(seconds(step))
    return {k: statistics.median(v) for k, v in by_shape.items() if len(v) >= min_steps}


def unit_shape_prices(units: list[dict], seconds=lambda step: step[2], min_steps: int = 1) -> list[dict]:
    """Per unit: `shape_prices` × how dear the host was in that unit, for plain steps and for steps
    verifying drafts apart (each the median, over the unit's steps of every configuration, of a
    step's seconds over its shape's price). The host moves the price of width far more than a plain
    step's, for stretches of several units (BENCHMARKS, session 43), and every configuration of a
    unit decodes within seconds of the others. Priced at the run's median instead, a step verified
    in a cheap unit is charged as if the host had been dear then."""
    run = shape_prices(units, seconds, min_steps)
    out = []
    for u in units:
        rel: dict[bool, list[float]] = {False: [], True: []}
        for c in u["configs"].values():
            for step in c["steps"]:
                if (step[0], step[1]) in run:
                    rel[step[1] > 0].append(seconds(step) / run[step[0], step[1]])
        plain = statistics.median(rel[False]) if rel[False] else 1.0
        wide = statistics.median(rel[True]) if rel[True] else plain
        out.append({k: v * (wide if k[1] else plain) for k, v in run.items()})
    return out


def outside(config: dict) -> float:
    """A unit's decode seconds outside its steps (a drafter's start on the batch, say): no step's
    shape prices them, so the step-priced throughput counts them as measured."""
    return max(config["seconds"] - sum(tt + td + to for _, _, tt, td, to in config["steps"]), 0.0)


def summarise(units: list[dict], label: str, skip_rounds: int = 0) -> dict:
    """Ratios with their intervals; `skip_rounds` leaves out the first rounds (adaptive D's one-off
    learning: pricing the drafter, its first probes), as a long-running server would amortise them."""
    units = after_rounds(units, skip_rounds)
    names = sorted(units[0]["configs"], key=lambda n: n != "plain")   # plain first (units rotate the order)
    price = shape_prices(units)
    tok = np.array([[u["configs"][n]["tokens"] for n in names] for u in units], float)
    wall = np.array([[u["configs"][n]["seconds"] for n in names] for u in units])
    priced = np.array([[sum(price[(r, w)] + td + to for r, w, _, td, to in u["configs"][n]["steps"]) + outside(u["configs"][n])
                        for n in names] for u in units])
    unit_priced = np.array([[sum(up[(r, w)] + td + to for r, w, _, td, to in u["configs"][n]["steps"]) + outside(u["configs"][n])
                             for n in names] for u, up in zip(units, unit_shape_prices(units))])
    # the request set is fixed, what varies is the machine (and adaptive D's choices): resample the
    # rounds of each batch of requests, so the interval is about this workload, not another sample
    rng = np.random.default_rng(0)
    groups = [[k for k, u in enumerate(units) if u["batch"] == b] for b in sorted({u["batch"] for u in units})]
    idx = np.concatenate([rng.choice(g, size=(4000, len(g))) for g in groups], axis=1)
    report = {"label": label, "units": len(units), "configs": {}}
    fixed = [k for k, n in enumerate(names) if n not in ("adaptive", "versus")]
    a = names.index("adaptive")
    v = names.index("versus") if "versus" in names else None
    for est, sec in (("wall", wall), ("step_priced", priced), ("unit_priced", unit_priced)):
        tps = tok.sum(0) / sec.sum(0)                                       # [configs]
        boot = tok[idx].sum(1) / sec[idx].sum(1)                           # [reps, configs]
        best = max(fixed, key=lambda k: tps[k])
        report["best_fixed_" + est] = names[best]
        for k, n in enumerate(names):
            r = report["configs"].setdefault(n, {})
            r[est + "_tokens_per_s"] = round(float(tps[k]), 2)
            r[est + "_over_plain"] = round(float(tps[k] / tps[0]), 4)
            r[est + "_over_plain_ci"] = [round(x, 4) for x in ci(boot[:, k] / boot[:, 0])]
            r[est + "_over_best_fixed_ci"] = [round(x, 4) for x in ci(boot[:, k] / boot[:, best])]
        report["adaptive_over_best_fixed_" + est] = round(float(tps[a] / tps[best]), 4)
        report["adaptive_over_best_fixed_" + est + "_ci"] = [round(x, 4) for x in ci(boot[:, a] / boot[:, best])]
        if v is not None:
            report["adaptive_over_versus_" + est] = round(float(tps[a] / tps[v]), 4)
            report["adaptive_over_versus_" + est + "_ci"] = [round(x, 4) for x in ci(boot[:, a] / boot[:, v])]
    for k, n in enumerate(names):
        steps = [s for u in units for s in u["configs"][n]["steps"]]
        report["configs"][n].update(
            steps=len(steps), verifying=sum(1 for s in steps if s[1]),
            median_ms=[round(1e3 * statistics.median(s[j] for s in steps), 2) for j in (2, 3, 4)])
    return report


def table(root: Path) -> str:
    """One markdown row per cell folder under `root` (as `adaptive_grid.sh` writes them)."""
    cells = [d for d in root.iterdir() if (d / "units.jsonl").exists()]
    vs = any(json.loads((d / "setting.json").read_text()).get("versus") for d in cells)
    rows = ["| drafter | set | batch | best fixed | adaptive / best fixed, step-priced | wall | "
            "step-priced after round 1 | steps verifying drafts |" + (" adaptive / versus, after round 1 |" if vs else ""),
            "|---|---|---|---|---|---|---|---|" + ("---|" if vs else "")]
    order = lambda d: (lambda s: (s["drafter"], s["dataset"], s["batch_size"]))(json.loads((d / "setting.json").read_text()))
    for d in sorted(cells, key=order):
        st = json.loads((d / "setting.json").read_text())
        units = load_units(d / "units.jsonl")
        rep = summarise(units, d.name)
        warm = summarise(units, d.name, skip_rounds=1) if rounds_of(units) > 2 else None
        a = rep["configs"]["adaptive"]
        g = lambda r: with_interval(r, "adaptive_over_versus_step_priced") if "adaptive_over_versus_step_priced" in r else "–"  # noqa: E731
        rows.append(f"| {st['drafter'].split(':')[0]} | {st['dataset'].split('-')[-1]} | {st['batch_size']} | "
                    f"{rep['best_fixed_step_priced']} | {over_best_fixed(rep, 'step_priced')} | {over_best_fixed(rep, 'wall')} | "
                    f"{over_best_fixed(warm, 'step_priced') if warm else '–'} | {a['verifying']} / {a['steps']} |"
                    + (f" {g(warm or rep)} |" if vs else ""))
    return "\n".join(rows)


def pool(runs_given: list[str]) -> str:
    """Repeated runs of one cell (the same requests, each run a fresh process whose scheduler learns
    from nothing), after round 1 of each: every run's adaptive / best fixed D, and all of them as
    one run. On a host whose speed for wide steps changes for minutes at a time, one run's interval
    covers the drift within it, not from one run to the next (BENCHMARKS, session 36: 0.985 and
    1.039 of D = 3 twenty minutes apart); the runs together are the cell's expectation, and their
    best fixed D is the one fixed D best across the runs — what a user configures ahead, not each
    run's choice in hindsight. The pooled interval resamples the rounds of each batch of requests
    across every run.

    A run given as DIR:CONFIG has its configuration CONFIG stand for adaptive D (e.g. `versus`,
    where the kept scheduler ran as the versus of a candidate), its own adaptive left out."""
    split = [g.partition(":") for g in runs_given]
    folders, stands = [Path(path) for path, _, _ in split], [config or "adaptive" for _, _, config in split]
    cell = ("target", "drafter", "dataset", "batch_size", "requests", "D", "max_new_tokens")
    settings = {d.name: {k: json.loads((d / "setting.json").read_text()).get(k) for k in cell} for d in folders}
    if len({json.dumps(v, sort_keys=True) for v in settings.values()}) > 1:
        raise SystemExit(f"--pool needs runs of one cell (the same {', '.join(cell)}); these differ: {settings}")
    runs = [(d.name, after_rounds(load_units(d / "units.jsonl"), 1)) for d in folders]
    if any(not us for _, us in runs):
        raise SystemExit(f"--pool reads the rounds after the first; these runs have none: "
                         f"{[name for name, us in runs if not us]} (run them with --rounds 3 or more)")
    missing = [f"{name}:{config} (it has {', '.join(sorted(us[0]['configs']))})"
               for (name, us), config in zip(runs, stands) if config not in us[0]["configs"]]
    if missing:
        raise SystemExit(f"--pool: no such configuration in {'; '.join(missing)}")
    runs = [(name, [dict(u, configs=renamed(u["configs"], config)) for u in us]) for (name, us), config in zip(runs, stands)]
    # the configurations every run has: a run's "versus", or a fixed D only some ran, is left out
    common = set.intersection(*(set(us[0]["configs"]) for _, us in runs))
    runs = [(name, [dict(u, configs={n: c for n, c in u["configs"].items() if n in common}) for u in us])
            for name, us in runs]
    lines = ["| run | units | adaptive / best fixed, unit-priced | step-priced | wall |", "|---|---|---|---|---|"]
    for name, units in runs + [("all runs", [u for _, us in runs for u in us])]:
        rep = summarise(units, name)
        lines.append(f"| {name} | {rep['units']} | {over_best_fixed(rep, 'unit_priced')} ({rep['best_fixed_unit_priced']}) | "
                     f"{over_best_fixed(rep, 'step_priced')} ({rep['best_fixed_step_priced']}) | "
                     f"{over_best_fixed(rep, 'wall')} ({rep['best_fixed_wall']}) |")
    return "\n".join(lines)


def renamed(configs: dict, adaptive: str) -> dict:
    """A unit's configurations with `adaptive` standing for adaptive D (`pool`)."""
    if adaptive == "adaptive":
        return configs
    return {("adaptive" if n == adaptive else n): c for n, c in configs.items() if n != "adaptive"}


def over_best_fixed(rep: dict, est: str) -> str:
    """A summary's adaptive / best fixed D by `est` ("wall", "step_priced", "unit_priced"), with its interval."""
    return with_interval(rep, "adaptive_over_best_fixed_" + est)


def with_interval(rep: dict, key: str) -> str:
    """A summary's ratio `key` with its 95 % interval (`key` + "_ci")."""
    lo, hi = rep[key + "_ci"]
    return f"{rep[key]:.3f} [{lo:.3f}, {hi:.3f}]"


def plain_first(names) -> list[str]:
    """Configuration names for a report's rows or columns: plain decoding first, the rest by name."""
    return sorted(names, key=lambda n: (n != "plain", n))


def widths(folder: Path) -> str:
    """Median target ms of a step by configuration and verified width (rows as at the start), to
    compare the steps a configuration takes with another's of the same shape."""
    units = load_units(folder / "units.jsonl")
    B = max(s[0] for u in units for c in u["configs"].values() for s in c["steps"])
    seen: dict[tuple[str, int], list[float]] = {}
    for u in units:
        for n, c in u["configs"].items():
            for rows, width, tt, _, _ in c["steps"]:
                if rows == B:
                    seen.setdefault((n, width), []).append(tt)
    names = plain_first({n for n, _ in seen})
    ws = sorted({w for _, w in seen})
    rows = [f"| config | {' | '.join(f'width {w}' for w in ws)} |", "|---" * (1 + len(ws)) + "|"]
    for n in names:
        cells = [f"{1e3 * statistics.median(seen[(n, w)]):.1f} ({len(seen[(n, w)])})" if (n, w) in seen else "–"
                 for w in ws]
        rows.append(f"| {n} | {' | '.join(cells)} |")
    return f"{folder.name}: median target ms (steps) at {B} rows\n" + "\n".join(rows)


def phases(folder: Path, every: int = 4) -> str:
    """Per block of `every` units, in the order they ran, and configuration: the median target ms
    of its plain steps and of its steps verifying drafts. The machine's speed can change for wide
    steps alone (on session 35's host, steps verifying 4–5 drafts at 1k tokens ran at ~8.5 ms for
    a stretch of units, then at ~12.5 ms for the next fifty, while plain steps stayed at ~6.5 ms):
    the same configuration measures differently from one stretch to the next."""
    units = load_units(folder / "units.jsonl")
    names = plain_first(units[0]["configs"])
    rows = [f"| units | {' | '.join(f'{n}: plain / wide' for n in names)} |", "|---" * (1 + len(names)) + "|"]
    med = lambda xs: f"{1e3 * statistics.median(xs):.1f}" if xs else "–"  # noqa: E731
    for start in range(0, len(units), every):
        block = units[start:start + every]
        cells = []
        for n in names:
            steps = [s for u in block for s in u["configs"][n]["steps"]]
            cells.append(f"{med([s[2] for s in steps if not s[1]])} / {med([s[2] for s in steps if s[1]])}")
        rows.append(f"| {block[0]['unit']}–{block[-1]['unit']} | {' | '.join(cells)} |")
    return f"{folder.name}: median target ms of a step, plain / verifying drafts\n" + "\n".join(rows)


def by_rows(folder: Path) -> str:
    """After round 1, per configuration: steps and target seconds by the rows still in the batch,
    and the drafter and bookkeeping seconds of every step. In a static batch the rows left last
    decode alone: where a configuration's time goes that the others' does not."""
    units = after_rounds(load_units(folder / "units.jsonl"), 1)
    names = plain_first(units[0]["configs"])
    B = max(s[0] for u in units for c in u["configs"].values() for s in c["steps"])
    head = " | ".join(f"{r} rows: steps, target s" for r in range(B, 0, -1))
    rows = [f"| config | {head} | drafter + other s | all s |", "|---" * (B + 3) + "|"]
    for n in names:
        steps = [s for u in units for s in u["configs"][n]["steps"]]
        per = [(sum(1 for s in steps if s[0] == r), sum(s[2] for s in steps if s[0] == r)) for r in range(B, 0, -1)]
        over = sum(s[3] + s[4] for s in steps)
        rows.append(f"| {n} | " + " | ".join(f"{k}, {t:.2f}" for k, t in per)
                    + f" | {over:.3f} | {sum(t for _, t in per) + over:.2f} |")
    return f"{folder.name}, after round 1\n" + "\n".join(rows)


def by_round(folder: Path) -> str:
    """Per round of the request set and configuration: steps, steps verifying, tokens per step,
    ms per step (target priced as in `summarise`, drafter, other) and step-priced tokens/s over the
    best fixed D's — round 1 holds adaptive D's learning from nothing, later rounds what it learned."""
    units = load_units(folder / "units.jsonl")
    per_round = 1 + max(u["batch"] for u in units)
    price = shape_prices(units)
    names = plain_first(units[0]["configs"])
    rows = ["| round | config | steps | verifying | tokens/step | target / drafter / other ms a step | "
            "step-priced over the best fixed |", "|---|---|---|---|---|---|---|"]
    for r in range(len(units) // per_round):
        part = units[r * per_round:(r + 1) * per_round]
        rate = {}
        for n in names:
            steps = [s for u in part for s in u["configs"][n]["steps"]]
            tokens = sum(u["configs"][n]["tokens"] for u in part)
            cols = [sum(price[(s[0], s[1])] for s in steps), sum(s[3] for s in steps), sum(s[4] for s in steps)]
            rate[n] = (tokens / sum(cols), len(steps), sum(1 for s in steps if s[1]), tokens / len(steps),
                       [1e3 * c / len(steps) for c in cols])
        best = max(rate[n][0] for n in names if n not in ("adaptive", "versus"))
        for n in names:
            tps, k, ver, tpst, ms = rate[n]
            rows.append(f"| {r + 1} | {n} | {k} | {ver} | {tpst:.3f} | {' / '.join(f'{m:.3f}' for m in ms)} | "
                        f"{tps / best:.3f} |")
    return f"{folder.name}, step prices pooled over the whole run\n" + "\n".join(rows)


def costs(root: Path) -> str:
    """Per cell under `root` (after round 1), what adaptive D's steps cost over plain decoding's, in
    % of plain decoding's step-priced time: its steps that verify drafts (each priced as in
    `summarise`, less a plain step of as many rows, plus its drafter seconds) and its plain steps'
    drafter and bookkeeping seconds above plain decoding's mean — where plain decoding is best,
    the whole price of being adaptive, in its two parts (probes, the scheduler's Python)."""
    rows = ["| cell | adaptive / plain, step-priced | verifying steps | their extra | plain steps' extra |",
            "|---|---|---|---|---|"]
    for d in sorted(p for p in root.iterdir() if (p / "units.jsonl").exists()):
        units = load_units(d / "units.jsonl")
        units = after_rounds(units, 1) if units else []
        if not units or "adaptive" not in units[0]["configs"]:
            continue
        price = shape_prices(units)
        steps = {n: [s for u in units for s in u["configs"][n]["steps"]] for n in ("plain", "adaptive")}
        total = {n: sum(price[(r, w)] + td + to for r, w, _, td, to in st) for n, st in steps.items()}
        wide = sum(price[(r, w)] - price.get((r, 0), price[(r, w)]) + td
                   for r, w, _, td, _ in steps["adaptive"] if w)
        plain_extra = statistics.mean(td + to for _, _, _, td, to in steps["plain"])
        narrow = [td + to for _, w, _, td, to in steps["adaptive"] if not w]
        extra = (statistics.mean(narrow) - plain_extra) * len(narrow) if narrow else 0.0
        n_wide = sum(1 for s in steps["adaptive"] if s[1])
        rows.append(f"| {d.name} | {total['plain'] / total['adaptive']:.4f} | {n_wide} / {len(steps['adaptive'])} | "
                    f"{100 * wide / total['plain']:.2f} % | {100 * extra / total['plain']:.2f} % |")
    return "\n".join(rows)


def main() -> None:
    ap = adaptive_parser(__doc__, requests=16)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--fixed", default="4", help="comma-separated fixed D to compare with")
    ap.add_argument("--rounds", type=int, default=1, help="times the request set is decoded by every configuration")
    ap.add_argument("--out", default=None, help="a folder for the units (resumable) and the summary")
    ap.add_argument("--table", default=None, metavar="DIR",
                    help="print a markdown table of the runs in DIR's subfolders (nothing is decoded)")
    ap.add_argument("--versus", default=None, metavar="PATH",
                    help="also run adaptive D with the AdaptiveDraftLength of this other version of planner/adaptive.py")
    ap.add_argument("--warm", default=None, metavar="DATASET",
                    help="first let adaptive D's drafters decode this set once (another context length, as a "
                         "validation sweep does before the cell), unmeasured")
    ap.add_argument("--by-round", default=None, metavar="DIR",
                    help="print, per round of the run DIR and configuration, its steps and step-priced throughput")
    ap.add_argument("--costs", default=None, metavar="DIR",
                    help="print, per cell folder in DIR, what adaptive D's steps cost over plain decoding's")
    ap.add_argument("--widths", default=None, metavar="DIR",
                    help="print the median target time of a step by configuration and width in the run DIR")
    ap.add_argument("--phases", default=None, metavar="DIR",
                    help="print, per block of units of the run DIR in the order they ran, the median target ms of "
                         "each configuration's plain steps and of its steps verifying drafts")
    ap.add_argument("--rows", default=None, metavar="DIR",
                    help="print, per configuration of the run DIR, its steps and seconds by the rows left in the batch")
    ap.add_argument("--pool", default=None, metavar="DIR[:CONFIG]", nargs="+",
                    help="print each of these runs of one cell and all of them as one, after round 1; "
                         "DIR:CONFIG has that run's configuration CONFIG stand for adaptive D")
    ap.add_argument("--summary", default=None, metavar="DIR",
                    help="print the summary of the run in DIR again (with every estimate this version computes)")
    args = ap.parse_args()
    if args.pool:
        print(pool(args.pool))
        return
    if args.rows:
        print(by_rows(Path(args.rows)))
        return
    if args.phases:
        print(phases(Path(args.phases)))
        return
    if args.by_round:
        print(by_round(Path(args.by_round)))
        return
    if args.table:
        print(table(Path(args.table)))
        return
    if args.widths:
        print(widths(Path(args.widths)))
        return
    if args.costs:
        print(costs(Path(args.costs)))
        return
    if args.summary:
        folder = Path(args.summary)
        st = json.loads((folder / "setting.json").read_text())
        units = load_units(folder / "units.jsonl")
        print(report(units, f"{st['drafter']}, {st['dataset']}, batch {st['batch_size']}", rounds_of(units),
                     st["batch_size"], st["max_new_tokens"])[1])
        return
    label = f"{args.drafter}, {args.dataset}, batch {args.batch_size}"
    reps, text = report(run(args), label, args.rounds, args.batch_size, args.max_new_tokens)
    print(text)
    if args.out:
        (Path(args.out) / "summary.json").write_text(json.dumps(reps, indent=1))


ESTIMATES = ("wall", "step_priced", "unit_priced")


def report(units: list[dict], label: str, rounds: int, batch_size: int, max_new: int) -> tuple[dict, str]:
    """The summaries of a run (over all rounds, and after the first where there are more than two)
    and their printout."""
    reps = {"all": summarise(units, label)}
    if rounds > 2:
        reps["after_round_1"] = summarise(units, label, skip_rounds=1)
    lines = []
    for which, rep in reps.items():
        lines.append(f"{label}: {rep['units']} units of {batch_size} × {max_new} tokens ({which.replace('_', ' ')})")
        for n, r in rep["configs"].items():
            lines.append(f"  {n:9s} " + "  ".join(f"{est.replace('_', '-')} ×{r[est + '_over_plain']:.3f} {r[est + '_over_plain_ci']}"
                                                  for est in ESTIMATES)
                         + f"  steps {r['steps']:5d}  verifying {r['verifying']:5d}  median ms target/drafter/other {r['median_ms']}")
        for est in ESTIMATES:
            lines.append(f"  adaptive / best fixed ({rep['best_fixed_' + est]}), {est.replace('_', '-')}: "
                         f"{rep['adaptive_over_best_fixed_' + est]:.3f} {rep['adaptive_over_best_fixed_' + est + '_ci']}")
            if "adaptive_over_versus_" + est in rep:
                lines.append(f"  adaptive / versus, {est.replace('_', '-')}: "
                             f"{rep['adaptive_over_versus_' + est]:.3f} {rep['adaptive_over_versus_' + est + '_ci']}")
    return reps, "\n".join(lines)


if __name__ == "__main__":
    main()
