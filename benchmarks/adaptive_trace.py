"""Adaptive D's drafting decisions through a validation's sweep, replayed on the machine.

    python benchmarks/adaptive_trace.py runs/s30/pvd/sweep --adaptive runs/s30/pvd/profile.json \
        --drafter draft-model:zoo/draft

For each cell (dataset × batch size, in the sweep's order), it decodes the batches that the run's
adaptive configuration decoded, with the same prompts in the same order and one drafter object (so
one scheduler per context, as the sweep keeps it). It prints the cell's decode seconds and the
seconds spent in the drafter. Then it lists every step where the scheduler chose to draft: whether
that was a probe, the time decoded so far and the probes' share of it, the prefill the drafter had
yet to absorb, and what the scheduler priced that catch-up at (BENCHMARKS, session 31).
`--scheduler PATH` runs another version of planner/adaptive.py instead. Only the adaptive
configuration runs, so a whole sweep replays in about a minute.
"""
import argparse
import json
from collections import defaultdict
from pathlib import Path

from _common import steady_malloc

steady_malloc()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", help="a sweep directory of planner_validation.py (or draftwise bench with --adaptive)")
    ap.add_argument("--adaptive", required=True, help="the profile JSON the sweep's adaptive D used")
    ap.add_argument("--drafter", default="draft-model:zoo/draft")
    ap.add_argument("--target", default="zoo/target")
    ap.add_argument("--scheduler", default=None, metavar="PATH",
                    help="another version of planner/adaptive.py (e.g. git show REV:src/draftwise/planner/adaptive.py)")
    args = ap.parse_args()

    import draftwise as dw
    from draftwise.bench.runner import ADAPTIVE, read_prompts, read_results
    from draftwise.planner.adaptive import AdaptiveDraftLength

    from adaptive_ab import scheduler_class
    cls = scheduler_class(args.scheduler) if args.scheduler else AdaptiveDraftLength

    prompts = read_prompts(args.run)
    cells: dict[tuple, dict] = defaultdict(lambda: defaultdict(list))   # (dataset, B) → batch start → shas
    order: list[tuple] = []
    D = 0
    for r in read_results(args.run):
        if r["drafter"] != args.drafter + ADAPTIVE:
            continue
        key, D = (r["dataset"], int(r["batch_size"])), int(r["D"])
        if key not in cells:
            order.append(key)
        for o in r["outputs"]:
            cells[key][o["t0"]].append(o["prompt_sha"])
    if not order:
        raise SystemExit(f"{args.run}: no records of {args.drafter}{ADAPTIVE}; pick the drafter the sweep ran")
    missing = {s for c in cells.values() for b in c.values() for s in b} - set(prompts)
    if missing:
        raise SystemExit(f"{args.run}: {len(missing)} prompts are not in prompts.jsonl; the run is incomplete")

    log, cell = [], [""]
    decide = cls._decide_cap

    def logged(self, batch_size: int, max_draft: int) -> int:
        before = (self._elapsed, self._explored, self._pending)
        d = decide(self, batch_size, max_draft)
        if d > 0:
            log.append(f"{cell[0]}: D={d} {'probe' if self._probing else 'choice'}; decoded {before[0]:.3f} s, "
                       f"probes {before[1]:.4f} s; prefill pending {before[2]:.3f} s, "
                       f"its catch-up priced {self._catch_up_price(batch_size):.4f} s")
        return d

    cls._decide_cap = logged
    max_new = int(json.loads((Path(args.run) / "configuration.json").read_text())["settings"]["max_new_tokens"])
    target = dw.load_target(args.target)
    drafter = dw.build_drafter(args.drafter, target)
    print("| dataset | B | steps | decode s | drafter s |\n|---|---|---|---|---|")
    for ds, B in order:
        cell[0] = f"{ds}, batch {B}"
        decode = drafting = 0.0
        steps = 0
        for t0 in sorted(cells[(ds, B)]):
            batch = [prompts[s] for s in cells[(ds, B)][t0]]
            out = dw.generate(target, batch, drafter=drafter, num_draft_tokens=D, max_new_tokens=max_new,
                              ignore_eos=True, adaptive=dw.api._adaptive_scheduler(
                                  target, args.adaptive, batch, D, drafter, max_new, scheduler_cls=cls))
            st = out.stats
            decode += st.t_total - st.t_prefill
            drafting += sum(s.t_drafter for s in st.steps)
            steps += len(st.steps)
        print(f"| {ds} | {B} | {steps} | {decode:.3f} | {drafting:.3f} |", flush=True)
    print("\nsteps that drafted:" if log else "\nno step drafted")
    for line in log:
        print("  " + line)

if __name__ == "__main__":
    main()
