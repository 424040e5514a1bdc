"""Adaptive D's decisions on the machine, one line each (BENCHMARKS, session 40).

    python benchmarks/adaptive_decisions.py --batch-size 4 --dataset throughput-1k \
        --adaptive benchmarks/results/planner_s38_run2/profile.json [--scheduler OLD.py] [--out LOG.json]

Decodes `--requests` prompts in batches, `--rounds` times over, with one drafter (prompt lookup
unless `--drafter`) and one scheduler, as `adaptive_ab.py` runs its adaptive configuration
(without the other configurations). For every `draft_cap` the scheduler really decides (not the
plain steps it decided ahead): the unit, the most tokens a row has left, the cap, whether it is a
probe (shadow: drafting only), and, where it drafts, the modelled rate of D = 0…3 over plain, the
first-draft acceptance learned, the modelled price of a width-1 step over a plain one (drafting
included), and (φ, β). Then what the per-step schedule verified of it. Where adaptive D drafts
that a fixed D would not have paid for, this says which input it acted on — in session 40, a
width-1 price of 1.18 plain steps, the profile's, where that hour's runs measured 1.28–1.33.
"""
import collections
import json

from _common import adaptive_parser, adaptive_workload, steady_malloc

steady_malloc()


def main() -> None:
    ap = adaptive_parser(__doc__, requests=16)
    ap.set_defaults(dataset="throughput-1k", batch_size=4)
    ap.add_argument("--scheduler", default=None, metavar="PATH", help="another version of planner/adaptive.py")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--out", default=None, metavar="JSON", help="also write every decision here")
    args = ap.parse_args()

    import draftwise as dw
    from draftwise.planner.adaptive import AdaptiveDraftLength

    from adaptive_ab import scheduler_class
    base = scheduler_class(args.scheduler) if args.scheduler else AdaptiveDraftLength
    log: list[dict] = []
    unit = [0]

    class Traced(base):
        def draft_cap(self, batch_size, max_draft, remaining=None, catch_up=0.0, rows=None):
            ahead = self._coast_left > 0 and batch_size == self._coast_b
            cap = super().draft_cap(batch_size, max_draft, remaining=remaining, catch_up=catch_up, rows=rows)
            if not ahead:
                entry = {"unit": unit[0], "left": max(remaining) + 1 if remaining else None, "cap": cap,
                         "probe": self._probing, "shadow": self._shadow_probe}
                if cap:
                    values, step = self.draft_values(batch_size, 3), self._step_time(batch_size)
                    entry.update(rate=[round(v / values[0], 3) for v in values],
                                 alpha1=round(self.position_alpha()[0], 3), width1=round(step(1) / step(0), 3),
                                 phi_beta=[round(x, 2) for x in self._phi_beta(batch_size)])
                log.append(entry)
            return cap

        def counts(self, proposal):
            out = super().counts(proposal)
            if log and "verified" not in log[-1]:
                log[-1].update(verified=max(out, default=0), proposed=max(proposal.num_tokens.tolist()))
            return out

    tgt, prompts, adaptive = adaptive_workload(args)
    prompts = prompts[:args.requests]
    drafter = dw.build_drafter(args.drafter, tgt)
    B, starts = args.batch_size, list(range(0, len(prompts), args.batch_size))
    widths: collections.Counter = collections.Counter()
    for u in range(args.rounds * len(starts)):
        unit[0], i = u, starts[u % len(starts)]
        sched = dw.api._adaptive_scheduler(tgt, adaptive, prompts[i:i + B], args.D, drafter,
                                           args.max_new_tokens, scheduler_cls=Traced)
        res = dw.generate(tgt, prompts[i:i + B], drafter=drafter, num_draft_tokens=args.D,
                          max_new_tokens=args.max_new_tokens, ignore_eos=True, adaptive=sched)
        for s in res.stats.steps:
            widths[(u >= len(starts), max(s.drafted))] += 1
    later = [e for e in log if e["unit"] >= len(starts)]
    print(f"steps after round 1 by width verified: {dict(sorted((w, n) for (a, w), n in widths.items() if a))}")
    print(f"decisions after round 1: {len(later)}, drafting {sum(1 for e in later if e['cap'])}, "
          f"verifying {sum(1 for e in later if e.get('verified'))}")
    for e in later:
        if e["cap"]:
            print("  " + json.dumps(e))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(log, f)


if __name__ == "__main__":
    main()
