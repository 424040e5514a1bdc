"""What one draft-model token costs: timed alone, timed right after a target forward (as
`draftwise profile` now times it), and inside decoding (the engine's drafter seconds per drafted
token), side by side in one process (BENCHMARKS.md, session 17).

    python benchmarks/draft_token_cost.py [--batch-size 1] [--dataset throughput-256] [--rounds 3]

On this repository's 2-core CPU the 10 MB draft stays in the 32 MB L3 when timed back to back; in
decoding the target's 44 MB forward runs between its drafts.
"""
import argparse
import statistics

from _common import steady_malloc

steady_malloc()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="zoo/target")
    ap.add_argument("--draft", default="zoo/draft")
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--dataset", default="throughput-256")
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("-D", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    import torch

    import draftwise as dw
    from draftwise.bench.datasets import load_dataset
    from draftwise.planner.profile import _load_target, measure_draft_steps

    torch.set_num_threads(args.threads)
    tgt = dw.load_target(args.target)
    tmodel = tgt.model
    dmodel, _ = _load_target(args.draft, torch.float32, "cpu")
    B = args.batch_size
    prompts = [tgt.tokenizer.encode(r.turns[0])
               for r in load_dataset(args.dataset, tgt.tokenizer, num_requests=max(args.requests * B, 16))]
    L = len(prompts[0]) + 24
    rows = {"alone": [], "after a target forward": [], "inside decoding": []}
    for _ in range(args.rounds):
        rows["alone"].append(measure_draft_steps(dmodel, [B], [L], repeats=10)[0]["seconds"])
        rows["after a target forward"].append(
            measure_draft_steps(dmodel, [B], [L], repeats=10, target=tmodel)[0]["seconds"])
        steps = []
        for i in range(args.requests):
            out = dw.generate(tgt, prompts[i * B:(i + 1) * B], drafter=f"draft-model:{args.draft}",
                              num_draft_tokens=args.D, max_new_tokens=48, ignore_eos=True)
            steps += [s.t_drafter / args.D for s in out.stats.steps[1:] if max(s.drafted, default=0) == args.D]
        rows["inside decoding"].append(statistics.median(steps))
    print(f"one draft-model token, batch {B}, context ~{L} (ms; {args.rounds} rounds, side by side)")
    for name, ts in rows.items():
        print(f"  {name:<24s} " + "  ".join(f"{t * 1e3:6.2f}" for t in ts)
              + f"   median {statistics.median(ts) * 1e3:6.2f}")


if __name__ == "__main__":
    main()
