"""What a decoding step that drafts nothing costs besides the target forward (BENCHMARKS §5.0c):
plain decoding against adaptive D whose scheduler is primed never to draft (the A/A case), on the
zoo pair, per-step drafter and other columns of the engine's step records.

    python benchmarks/idle_step.py --batch-size 4      # before: git checkout 7598c49 -- src/draftwise/engine.py
"""
import argparse
import statistics

from _common import steady_malloc

steady_malloc()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--profile", default="runs/pv-interleaved/profile.json")
    ap.add_argument("--repeats", type=int, default=6)
    args = ap.parse_args()

    import torch

    import draftwise as dw
    from draftwise.planner.adaptive import AdaptiveDraftLength
    from draftwise.planner.cost import CostModel

    tgt = dw.load_target("zoo/target")
    draft = dw.build_drafter("draft-model:zoo/draft", tgt)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(5, 1000, (256,), generator=g).tolist() for _ in range(args.batch_size)]
    cm = CostModel(tgt.model.config, args.profile)
    sched = AdaptiveDraftLength(sps_for_batch=lambda b: cm.sps_curve(b, 280))
    sched.skips_idle = True
    # primed: the drafter is priced (50 ms a token, so drafting never pays) and no probe is due
    sched.observe(torch.zeros(1, dtype=torch.long), torch.zeros(1, dtype=torch.long), draft_seconds=0.05, drafted=1)
    sched._since_probe, sched._interval = -10**9, 10**9
    cols = {"plain": [], "adaptive": []}
    for rep in range(args.repeats):
        for name in cols:
            ad = name == "adaptive"
            r = dw.generate(tgt, prompts, drafter=draft if ad else None, num_draft_tokens=8, max_new_tokens=48,
                            ignore_eos=True, adaptive=sched if ad else False)
            if rep:    # the first is a warm-up
                cols[name] += [(s.t_drafter, s.t_other, s.t_target, max(s.drafted)) for s in r.stats.steps]
    for name, v in cols.items():
        print(f"batch {args.batch_size} {name:9s} drafter {1e3 * statistics.mean(x[0] for x in v):.3f} ms  "
              f"other {1e3 * statistics.mean(x[1] for x in v):.3f} ms  target (median) "
              f"{1e3 * statistics.median(x[2] for x in v):.2f} ms  steps {len(v)}  verifying {sum(x[3] > 0 for x in v)}")


if __name__ == "__main__":
    main()
