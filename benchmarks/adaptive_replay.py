"""Adaptive D's decisions without the machine's noise: prompt lookup replayed (BENCHMARKS §5.0k).

    python benchmarks/adaptive_replay.py --dataset throughput-1k --batch-size 1 \
        --adaptive benchmarks/results/profile_s14.json [--times CELL/units.jsonl] [--versus OLD.py]

Greedy output does not depend on what is drafted or verified, and prompt lookup's proposal at a
point of the text depends only on the text before it. So one plain decode of the requests gives,
for every row and position, the proposal (its matched length, so its confidences) and how many of
its drafts the target accepts; any schedule can then be replayed step by step, exactly, in a
second or so. Each step is priced by a table of step times per (rows, width) — by default the
cost model's curve from the profile (what the scheduler itself starts from); with `--times`, the
medians a real run of the cell measured (`adaptive_ab.py` writes them), which is the fairer test:
the scheduler then has to learn prices its prior got wrong (`--write-times` keeps that table as
JSON, which `--times` also reads: benchmarks/results/replay_prices_s15/). `--jitter` multiplies
each step's time by noise (log-normal, seeded), as a shared machine does; `--seeds N` replays
under N such noise streams and prints min and median over them (`--rotate`: each stream also
starts at another request, since what a fresh scheduler meets first decides much of what it
learns). As the engine does, the
scheduler is shown each row's emitted tokens (`sees_emitted`). `--explain` prints what
each scheduler learned (acceptance per position, of the rows furthest behind, the price of a
step by width) and the rate its `draft_cap` model gives each D, also for a scheduler that
verifies every proposal at the best fixed D: where adaptive D's model and the replay disagree,
which input is off.

Plain decoding, fixed D = 1 … `-D` and adaptive D (one scheduler learning over `--rounds` passes
of the requests, as `adaptive_ab.py` runs it) are priced alike; the ratios count the rounds after
the first (`--warm-rounds`). `--warm-rounds 0 --rounds 1 --prompts OUT/sweep --times OUT/sweep`
replays a cell as planner_validation.py measures it: a fresh scheduler, the prompts that run fed
in its order, its steps' prices (BENCHMARKS, session 23). `--ceiling` prices the best policy by
prompt lookup's matched length in hindsight, `--by-age` how often a first draft is accepted by
tokens generated so far (BENCHMARKS, session 24). A validation's sweep keeps one scheduler
through batch 1, 2, 4, … in turn; `--carry` replays it so (BENCHMARKS, session 25). Drafting is
priced at `--draft-seconds`; the scheduler's own Python only with `--python X` (its calls timed
here, × X: inside decoding, on caches the forward left cold, they cost 2–3× more; the scheduler's
clock runs X times fast too, so it prices its own calls as the replay does). With `--versus` and
`--seeds`, the two schedulers run in alternating order and their difference is paired over the
noise streams. What this leaves out is how step times move while a run goes: a schedule that wins
here can still lose on the machine, one that loses here loses there too. `--times-other` moves
them as the host of BENCHMARKS.md does (`benchmarks/host_state.py`): a second table, the host's
other state, entered and left every `--dwell` replayed seconds on average (BENCHMARKS, session
41: `benchmarks/results/replay_prices_s41/` holds the two states of one run). A scheduler
that can be told the state (`set_host_state`: `--versus benchmarks/host_oracle.py`) is told it
before every decision. `--times-units` moves them as the host of one `adaptive_ab.py` run moved
them, unit by unit; with `--python 2.5` that reproduced the run's unit-priced ratios within 0.8 %
a run, where `--python 1` was three times too kind to a scheduler that verifies more
(BENCHMARKS, session 43).
"""
import argparse
import itertools
import json
import math
import random
import time
from pathlib import Path
from statistics import median
from typing import Optional

import torch

import draftwise as dw
from draftwise.bench.datasets import load_dataset
from draftwise.bench.runner import read_prompts, read_results
from draftwise.drafters.ngram import NgramIndex, prior
from draftwise.planner.adaptive import AdaptiveDraftLength
from draftwise.planner.cost import CostModel
from draftwise.types import Proposal

from adaptive_ab import load_units, scheduler_class, unit_shape_prices


class Table(list):
    """`replay_rows`' rows per request, with `gens`: each request's generated tokens."""
    gens: list


def replay_rows(tgt, prompts, max_new: int, max_draft: int, max_n: int = 3, min_n: int = 1) -> Table:
    """Per request and generated position t: (matched n, drafts proposed at cap `max_draft`, drafts
    of them the target accepts, the drafts), from one plain greedy decode."""
    out = dw.generate(tgt, prompts, max_new_tokens=max_new, ignore_eos=True)
    table = Table()
    table.gens = [list(o.token_ids) for o in out]
    for p, o in zip(prompts, out):
        gen = list(o.token_ids)
        seq, idx, rows = list(p), NgramIndex(max_n, min_n), []
        for t in range(len(gen)):
            cont, n = idx.match(seq, max_draft)
            a = 0
            while a < len(cont) and t + a < len(gen) and cont[a] == gen[t + a]:
                a += 1
            rows.append((n, len(cont), a, list(cont)))
            seq.append(gen[t])
        table.append(rows)
    return table


class Prices:
    """Step seconds per (rows, width): measured medians where given, else the scheduler's prior.
    With `other`, a second table: the host's other state (`benchmarks/host_state.py`), entered and
    left after exponentially distributed stretches of `dwell` seconds of the replayed decoding,
    the same stretches for every configuration of a seed. With `units` (`unit_prices`), one table
    per unit of a run, the replay entering the k-th as it decodes its k-th batch (`enter_unit`)."""

    def __init__(self, curve, measured: dict | None = None, jitter: float = 0.0, seed: int = 0,
                 other: dict | None = None, dwell: float = 2.0, units: list[dict] | None = None):
        self.curve, self.measured = curve, measured or {}     # curve: rows → steps/s by tokens
        self.units = units
        self.jitter, self.rng = jitter, random.Random(seed)
        self.tables, self.state, self.clock = [self.measured, other], 0, 0.0
        self.flips, self.dwell = random.Random(seed + 7919), dwell
        self.next_flip = self.flips.expovariate(1.0 / dwell) if other else math.inf

    def enter_unit(self, k: int) -> None:
        """With `units` (`unit_prices`): the host as it was in the k-th unit of the run measured."""
        if self.units:
            self.tables[0] = self.units[k % len(self.units)]

    def _prior(self, rows: int, width: int) -> float:
        return 1.0 / self.curve(rows)(rows * (1 + width)) + 0.5e-3     # + the step's bookkeeping

    def base(self, rows: int, width: int) -> float:
        """A measured price where there is one; else the nearest measured (rows, width), lower
        widths first, moved by the prior's ratio between the two."""
        table = self.tables[self.state]
        got = table.get((rows, width))
        if got is not None or not table:
            return got if got is not None else self._prior(rows, width)
        r, w = min(table, key=lambda k: (abs(k[0] - rows), abs(k[1] - width), k[1] > width))
        return table[(r, w)] * self._prior(rows, width) / self._prior(r, w)

    def __call__(self, rows: int, width: int) -> float:
        t = self.base(rows, width)
        t = t * math.exp(self.rng.gauss(0.0, self.jitter)) if self.jitter else t
        self.clock += t
        while self.clock >= self.next_flip:
            self.state ^= 1
            self.next_flip += self.flips.expovariate(1.0 / self.dwell)
        return t


def measured_prices(path: Path, min_steps: int = 5, dataset: str = "", batch_size: int = 0) -> dict:
    """Median step seconds besides drafting (what the engine tells `observe`) per (rows, width)
    over every configuration of a cell's `units.jsonl`; over a benchmark run's (a directory, e.g. a
    validation's OUT/sweep) prompt-lookup steps of `dataset` at `batch_size`, fixed D only; or
    such a table as `--write-times` saved it."""
    if path.suffix == ".json":
        return {tuple(map(int, k.split(","))): v for k, v in json.loads(path.read_text()).items()}
    seen: dict = {}
    if path.is_dir():
        for rec in read_results(path):
            if rec["drafter"] == "ngram" and rec["dataset"] == dataset and rec["batch_size"] == batch_size:
                for out in rec["outputs"]:      # a batch's steps are on its first row's record
                    for rows, width, t_target, _t_drafter, t_other in out.get("batch_steps", []):
                        seen.setdefault((rows, width), []).append(t_target + t_other)
        if not seen:
            raise SystemExit(f"{path}/results.jsonl has no prompt-lookup step of {dataset!r} at batch size {batch_size}")
    else:
        for line in path.read_text().splitlines():
            for cfg in json.loads(line)["configs"].values():
                for rows, width, t_target, _t_drafter, t_other in cfg["steps"]:
                    seen.setdefault((rows, width), []).append(t_target + t_other)
    return {k: median(v) for k, v in seen.items() if len(v) >= min_steps}


def unit_prices(path: Path) -> list[dict]:
    """Per unit of an `adaptive_ab.py` run, in the order it ran: its step prices besides drafting
    (`measured_prices`' seconds) as that unit's host charged them (`unit_shape_prices`)."""
    return unit_shape_prices(load_units(path), seconds=lambda step: step[2] + step[4], min_steps=5)


DRAFT_SECONDS = (0.15e-3, 0.005e-3)   # prompt lookup per step and per drafted token (--draft-seconds)
PYTHON = 0.0    # --python: the scheduler's own calls, timed here and × this, join each step's seconds
_IDS = itertools.count()


def decode(table, batch: list[int], max_new: int, D: int, prices: Prices, sched=None) -> tuple[int, float, int, int]:
    """One static batch replayed: (tokens, seconds, steps, steps verifying drafts)."""
    at = {r: 0 for r in batch}              # next position to generate, per request
    ids = {r: next(_IDS) for r in batch}
    active, fresh = list(batch), True
    tokens = steps = verifying = 0
    seconds = 0.0
    sees = sched is not None and hasattr(sched, "sees_emitted")     # as the engine
    if sched is not None:
        sched.skips_idle = True
        if PYTHON:      # the scheduler times its own calls as this replay prices them (× PYTHON)
            sched.clock = lambda: PYTHON * time.perf_counter()
        if sees:
            sched.sees_emitted = True
    while active:
        n = len(active)
        remaining = [max_new - at[r] - 1 for r in active]
        cap, t0 = D, time.perf_counter()
        if sched is not None and D > 0:
            if hasattr(sched, "set_host_state"):     # benchmarks/host_oracle.py: told the host's state
                sched.set_host_state(prices.state)
            cap = min(cap, sched.draft_cap(n, D, remaining=remaining, catch_up=0.0 if not fresh else 3 * prices.base(n, 0),
                                           rows=[ids[r] for r in active]))
        drafting = D > 0 and cap > 0 and max(remaining) > 0
        py = time.perf_counter() - t0           # (the engine counts draft_cap in the drafting time)
        rows = [table[r][at[r]] for r in active]
        if drafting:
            caps = [min(max(m, 0), cap) for m in remaining]
            made = [min(L, c) if m else 0 for (m, L, _, _), c in zip(rows, caps)]
            width = max(made)
            k = made
            if sched is not None:   # as the engine: every drafting step, a proposal of no drafts too
                conf = torch.tensor([[prior(m + j) if m else 0.0 for j in range(width)] for m, *_ in rows]).reshape(n, width)
                drafts = torch.tensor([(c[:k] + [-1] * width)[:width] for (*_, c), k in zip(rows, made)]).reshape(n, width)
                prop = Proposal(tokens=drafts, num_tokens=torch.tensor(made), confidence=conf)
                t0 = time.perf_counter()      # as the engine asks: a list where the scheduler gives one
                picked = sched.counts(prop) if hasattr(sched, "counts") else sched(prop).tolist()
                k = [min(a, b) for a, b in zip(made, picked)]
                py += time.perf_counter() - t0
            draft_s = DRAFT_SECONDS[0] + DRAFT_SECONDS[1] * width + PYTHON * py
        else:
            caps, k, draft_s = None, [0] * n, 0.0
        acc = [min(a, v) for (_, _, a, _), v in zip(rows, k)]
        w = max(k, default=0)
        step_s = prices(n, w)
        t0 = time.perf_counter()
        if sched is not None and D > 0:
            emitted = {"emitted": [table.gens[r][at[r]:at[r] + a + 1] for r, a in zip(active, acc)]} if sees else {}
            sched.observe(k, acc, draft_s, int(width) if drafting else 0, offered=caps,
                          target_seconds=step_s, catch_up=fresh and drafting, **emitted)
        fresh = fresh and not drafting
        seconds += step_s + draft_s + PYTHON * (time.perf_counter() - t0 + (0.0 if drafting else py))
        steps += 1
        verifying += w > 0
        for r, a in zip(active, acc):
            e = min(a + 1, max_new - at[r])
            at[r] += e
            tokens += e
        active = [r for r in active if at[r] < max_new]
    return tokens, seconds, steps, verifying


def ceiling(table, prices: Prices, max_new: int, D: int) -> tuple[float, float, dict]:
    """Batch 1, each step at its unjittered price: (rate of the best policy that verifies a
    proposal by its matched length n alone, chosen knowing each n's acceptance in hindsight;
    rate of the best fixed D; that policy {n: drafts verified}), rates over plain decoding's.
    What a per-step schedule reading prompt lookup's confidence could reach at most, learning
    nothing. Every policy is replayed where there are at most `ENUMERATE` of them (prompt lookup's
    n ≤ 3: 729 at D = 8); else Dinkelbach's iteration: at the rate λ reached, each n gets the width
    maximising its mean tokens − λ × seconds. That treats each n's steps as if the others did not
    move them, and at 1k tokens (session 23's prices) it found 1.062 × plain where replaying every
    policy found 1.074 (BENCHMARKS, session 24)."""
    T = [prices.base(1, w) for w in range(D + 1)]
    by_n: dict = {}
    for rows in table:
        for m, _L, a, _ in rows:
            if m:
                by_n.setdefault(m, []).append(a)

    def rate(width_of, drafts: bool = True) -> float:
        """Every step drafts (the matched length is known only once prompt lookup has run), except
        in plain decoding."""
        tok = sec = 0.0
        for rows in table:
            t = 0
            while t < max_new:
                m, L, a, _ = rows[t]
                w = min(width_of(m), L, max_new - 1 - t) if m else 0
                drafting = DRAFT_SECONDS[0] + DRAFT_SECONDS[1] * min(L, D) if drafts else 0.0
                e = min(min(a, w) + 1, max_new - t)
                tok, sec, t = tok + e, sec + T[w] + drafting, t + e
        return tok / sec

    plain = rate(lambda m: 0, drafts=False)
    fixed = max(rate(lambda m, d=d: d) for d in range(1, D + 1))
    ns = sorted(by_n)
    if (D + 1) ** len(ns) <= ENUMERATE:
        best = max((rate(lambda m, p=dict(zip(ns, ws)): p.get(m, 0)), ws)
                   for ws in itertools.product(range(D + 1), repeat=len(ns)))
        return best[0] / plain, fixed / plain, dict(zip(ns, best[1]))
    lam, policy = plain, {}
    for _ in range(20):
        policy = {m: max(range(D + 1), key=lambda w: sum(1 + min(a, w) for a in acc) / len(acc) - lam * T[w])
                  for m, acc in by_n.items()}
        new = rate(lambda m: policy.get(m, 0))
        if abs(new - lam) < 1e-9:
            break
        lam = new
    return lam / plain, fixed / plain, dict(sorted(policy.items()))


ENUMERATE = 1000    # policies `ceiling` replays one by one at most


def by_age(table, edges=(8, 16, 32)) -> list[tuple[str, int, float]]:
    """Per span of generated tokens: (span, positions with a proposal, share of them whose first
    draft the target accepts), over every position of the plain decode (`replay_rows`). Prompt
    lookup is accepted least early in a response (`AdaptiveDraftLength.YOUNG`)."""
    bounds = [0, *edges, None]
    out = []
    for lo, hi in zip(bounds, bounds[1:]):
        hits = [a >= 1 for rows in table for t, (m, _L, a, _) in enumerate(rows[:-1])
                if m and t >= lo and (hi is None or t < hi)]
        out.append((f"{lo}–{hi - 1}" if hi else f"{lo}+", len(hits), sum(hits) / max(len(hits), 1)))
    return out


def run_prompts(run: Path, dataset: str, batch_size: int) -> list[list[int]]:
    """The token ids a benchmark run in `run` fed for `dataset` at `batch_size`, in its order (a
    sweep draws its own requests for each batch size, and batches them in the order it ran them)."""
    recs = [r for r in read_results(run) if r["dataset"] == dataset and r["batch_size"] == batch_size]
    if not recs:
        raise SystemExit(f"{run}/results.jsonl has no request of dataset {dataset!r} at batch size {batch_size}")
    by_sha, key = read_prompts(run), recs[0]["key"]
    return [by_sha[r["outputs"][0]["prompt_sha"]] for r in recs if r["key"] == key]


def main() -> None:
    global DRAFT_SECONDS, PYTHON
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="zoo/target")
    ap.add_argument("--dataset", default="throughput-256")
    ap.add_argument("--batch-size", type=int, nargs="+", default=[1])
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("-D", type=int, default=8)
    ap.add_argument("--adaptive", default="benchmarks/results/profile_s14.json", help="a profile JSON or datasheet name")
    ap.add_argument("--times", default=None, metavar="UNITS_JSONL",
                    help="price steps at a real run's medians: adaptive_ab's units.jsonl, a --write-times "
                         "JSON, or a benchmark run's directory (OUT/sweep: that cell's prompt-lookup steps)")
    ap.add_argument("--times-other", default=None, metavar="UNITS_JSONL",
                    help="a second price table (as --times reads it): the host's other state, which the replay "
                         "enters and leaves every --dwell seconds of decoding on average")
    ap.add_argument("--times-units", default=None, metavar="UNITS_JSONL",
                    help="move the prices as the host moved them in an adaptive_ab.py run: its units.jsonl's medians, "
                         "each batch decoded at how dear the host was in the unit that decoded it there (unit_prices)")
    ap.add_argument("--dwell", type=float, default=2.0, metavar="SECONDS",
                    help="mean replayed seconds in one state of the host with --times-other (a run of adaptive_ab.py "
                         "decodes each configuration about a sixth of its wall-clock time, and the host of "
                         "BENCHMARKS.md stays seconds to a minute or two in one state)")
    ap.add_argument("--jitter", type=float, default=0.0, help="log-normal sd of each step's time")
    ap.add_argument("--seed", type=int, default=0, help="of the jitter")
    ap.add_argument("--seeds", type=int, default=None, metavar="N",
                    help="replay under jitter seeds 0 … N−1 and summarise adaptive / best fixed (min, median)")
    ap.add_argument("--versus", default=None, metavar="PATH", help="also another adaptive.py's scheduler")
    ap.add_argument("--write-times", default=None, metavar="JSON", help="save the price table --times gave")
    ap.add_argument("--explain", action="store_true",
                    help="print what each scheduler learned and the value its model gives each D, also for "
                         "a scheduler that verifies every proposal at the best fixed D")
    ap.add_argument("--prompts", default=None, metavar="RUN_DIR",
                    help="the dataset's prompts as a benchmark run fed them (its prompts.jsonl), e.g. a "
                         "validation's OUT/sweep: the same tokens, so the same proposals")
    ap.add_argument("--warm-rounds", type=int, default=1,
                    help="rounds the scheduler learns in before counting; 0 with --rounds 1: from a "
                         "fresh scheduler, as planner_validation.py measures a cell")
    ap.add_argument("--ceiling", action="store_true",
                    help="at batch 1, also the rate of the best policy by matched length chosen in hindsight")
    ap.add_argument("--by-age", action="store_true",
                    help="also print how often a first draft is accepted, by tokens generated so far")
    ap.add_argument("--draft-seconds", default=None, metavar="STEP,TOKEN",
                    help=f"prompt lookup's drafting seconds per step and per drafted token (default "
                         f"{DRAFT_SECONDS[0]:g},{DRAFT_SECONDS[1]:g}: a host whose plain step took 12 ms)")
    ap.add_argument("--python", type=float, default=0.0, metavar="X",
                    help="add the scheduler's own calls, timed in the replay, × X to each step's seconds "
                         "(inside decoding, on caches the forward left cold, the same Python costs 2–3× more)")
    ap.add_argument("--carry", action="store_true",
                    help="one scheduler per scheduler version through every --batch-size in turn, as a "
                         "validation's sweep keeps it (its adaptive drafter runs batch 1, 2, 4, … in order)")
    ap.add_argument("--rotate", action="store_true",
                    help="with --seeds: seed s starts at request s (mod --requests) and goes round in order, so "
                         "a fresh scheduler meets the requests first in as many orders as there are requests")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    if args.draft_seconds:
        DRAFT_SECONDS = tuple(float(x) for x in args.draft_seconds.split(","))
    PYTHON = args.python
    torch.set_num_threads(args.threads)
    tgt = dw.load_target(args.target)
    if (args.prompts or (args.times and Path(args.times).is_dir())) and len(args.batch_size) > 1 and not args.carry:
        raise SystemExit("--prompts or --times RUN_DIR: one --batch-size at a time (a sweep draws its requests, "
                         "and its steps have their prices, per batch size), or --carry")
    by_batch = {B: cell(tgt, args, B) for B in args.batch_size}    # B → (prompts, table, measured prices)
    prompts, table, measured = by_batch[args.batch_size[0]]
    if measured and args.write_times:
        Path(args.write_times).write_text(json.dumps({f"{r},{w}": t for (r, w), t in sorted(measured.items())}, indent=0))
    L = sum(map(len, prompts)) / len(prompts)
    cm = CostModel(tgt.model.config, args.adaptive)
    cost = lambda b: cm.sps_curve(b, int(L) + args.max_new_tokens // 2)  # noqa: E731
    schedulers = [("adaptive", AdaptiveDraftLength)] + ([("versus", scheduler_class(args.versus))] if args.versus else [])
    ratios: dict = {}
    counted = f"after round {args.warm_rounds}" if args.warm_rounds else "from a fresh scheduler"
    print(f"prompt lookup, {args.dataset}, replayed: rate {counted} / plain decoding (steps, verifying)")
    if args.by_age:
        print("  first draft accepted, by tokens generated: " + ", ".join(
            f"{span}: {share:.2f} ({n})" for span, n, share in by_age(table)))
    if args.ceiling and 1 in args.batch_size:
        top, fixed, policy = ceiling(table, Prices(cost, measured), args.max_new_tokens, args.D)
        print(f"  batch 1, unjittered: verifying by matched length in hindsight {top:.3f} × plain (drafts per "
              f"match length {policy}); best fixed D {fixed:.3f} × plain")
    seeds = range(args.seeds) if args.seeds else [args.seed]
    other = measured_prices(Path(args.times_other), dataset=args.dataset, batch_size=args.batch_size[0]) \
        if args.times_other else None
    units = None
    if args.times_units:
        if args.times_other or len(args.batch_size) > 1:
            raise SystemExit("--times-units moves one run's host for one --batch-size; leave out --times-other "
                             "and give one batch size")
        units = unit_prices(Path(args.times_units))
        batches = args.rounds * math.ceil(min(args.requests, len(prompts)) / args.batch_size[0])
        if len(units) != batches:
            print(f"  (--times-units: {len(units)} units where the replay decodes {batches} batches: "
                  f"batch k is priced as unit k mod {len(units)})")
    keys: dict = {}       # (seed, scheduler class) → the drafter object a carried scheduler is kept under
    for seed, B in itertools.product(seeds, args.batch_size):
        prompts, table, measured = by_batch[B]
        requests = min(args.requests, len(prompts))
        shift = seed % requests if args.rotate else 0
        order = [(i + shift) % requests for i in range(requests)]

        def run(D, cls=None):
            sched = None
            if cls is not None:   # built as generate(adaptive=profile) builds it
                key = keys.setdefault((seed, cls), object()) if args.carry else object()
                sched = dw.api._adaptive_scheduler(tgt, args.adaptive, prompts[:B], D, key, args.max_new_tokens,
                                                   scheduler_cls=cls)
            prices = Prices(cost, measured, args.jitter, seed=seed * 1000 + B, other=other, dwell=args.dwell,
                            units=units)
            tok = sec = st = ver = 0
            for k, (r, i) in enumerate(itertools.product(range(args.rounds), range(0, requests, B))):
                prices.enter_unit(k)
                t, s, n, v = decode(table, order[i:i + B], args.max_new_tokens, D, prices, sched)
                if r >= args.warm_rounds:
                    tok, sec, st, ver = tok + t, sec + s, st + n, ver + v
            return (tok / sec, st, ver), sched
        base = run(0)[0][0]
        cells = [(f"D={D}", run(D)[0]) for D in range(1, args.D + 1)]
        best = max(cells, key=lambda c: c[1][0])
        line = [f"batch {B}" + (f", seed {seed}" if args.seeds else "") + f": best fixed {best[0]} {best[1][0] / base:.3f}"]
        # the scheduler run first after the fixed D's ran worse: about 1 run in 15 of the same
        # scheduler decoded plain there and none second (session 27), so the order alternates
        done = {}
        for name, cls in (schedulers if seed % 2 == 0 else schedulers[::-1]):
            done[name] = run(args.D, cls)
        explained = []
        for name, _ in schedulers:
            (rate, st, ver), sched = done[name]
            of_best = rate / max(base, best[1][0])
            line.append(f"{name} {rate / base:.3f} ({of_best:.3f} of best; {st} steps, {ver} verifying)")
            explained.append((name, sched))
            ratios.setdefault((B, name), []).append(of_best)
        print("  " + " | ".join(line))
        if args.seeds and seed == seeds[-1]:
            print(f"  batch {B} over {len(seeds)} seeds, of the best fixed D (or plain): " + " | ".join(
                f"{name} min {min(ratios[B, name]):.3f} median {median(ratios[B, name]):.3f} "
                f"mean {sum(ratios[B, name]) / len(seeds):.4f}" for name, _ in schedulers))
            if len(schedulers) > 1 and len(seeds) > 1:
                d = [a - v for a, v in zip(ratios[B, "adaptive"], ratios[B, "versus"])]
                m = sum(d) / len(d)
                se = math.sqrt(sum((x - m) ** 2 for x in d) / (len(d) - 1) / len(d))
                print(f"  batch {B}: adaptive − versus, paired over the seeds: {m:+.4f} ± {se:.4f} (standard error)")
        if args.explain:
            D = int(best[0][2:])
            explained.append((f"verifying every proposal at {best[0]}", run(D, verify_all(D))[1]))
            for name, sched in explained:
                print(f"    {name}: " + explain(sched, B, args.D))


def cell(tgt, args, B: int) -> tuple[list, Table, Optional[dict]]:
    """(prompts, `replay_rows` of them, measured step prices or None) for batch size B."""
    if args.prompts:
        prompts = run_prompts(Path(args.prompts), args.dataset, B)[:args.requests]
    else:
        prompts = [tgt.tokenizer.encode(r.turns[0])
                   for r in load_dataset(args.dataset, tgt.tokenizer, num_requests=args.requests)][:args.requests]
    measured = measured_prices(Path(args.times), dataset=args.dataset, batch_size=B) if args.times else None
    return prompts, replay_rows(tgt, prompts, args.max_new_tokens, args.D), measured


def verify_all(D: int):
    """A scheduler that drafts D and verifies every proposal, learning as adaptive D learns."""
    class VerifyAll(AdaptiveDraftLength):
        def draft_cap(self, batch_size, max_draft, **kw):
            super().draft_cap(batch_size, max_draft, **kw)
            self._probing, self._coast_b, self._coast_left = False, None, 0
            return D

        def counts(self, proposal):
            super().counts(proposal)
            return proposal.num_tokens.tolist()
    return VerifyAll


def explain(sched, B: int, max_draft: int) -> str:
    """What a scheduler learned, and the value per step its `draft_cap` model gives each D."""
    phi, beta = sched._phi_beta(B)
    alpha, lag = sched.position_alpha(), sched.position_alpha(behind=True)
    values = AdaptiveDraftLength.draft_values(sched, B, max_draft)   # this checkout's model, for an older version too
    value = [v / values[0] for v in values]
    f = lambda xs: " ".join(f"{x:.2f}" for x in xs)  # noqa: E731
    t0, step = sched.target_time(B, 0), sched._step_time(B)
    return (f"acceptance per position {f(alpha[:max_draft])}; rows behind {f(lag[:max_draft])}; "
            f"φ {phi:.2f}, β {beta:.2f}; modelled rate / plain by D = 0…{max_draft}: {f(value)}\n"
            f"      a step of width w = 0…3 in plain steps {f([sched.target_time(B, w) / t0 for w in range(4)])}, "
            f"with drafting {f([step(w) / step(0) for w in range(4)])}; a plain step {t0 * 1e3:.2f} ms; "
            f"rows proposing {sched.proposal_rate():.2f}")


if __name__ == "__main__":
    main()
