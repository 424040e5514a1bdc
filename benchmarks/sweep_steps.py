"""Where a sweep's decode time went, per configuration: steps per token, share of steps that verify,
mean verified width, and mean target / drafter / other milliseconds a step (BENCHMARKS, session 25).

    python benchmarks/sweep_steps.py runs/s25/pv/sweep runs/s25/pv/sweep-2 --batch-size 1 2 --drafter ngram

Read from the records' `batch_steps` (rows, width, t_target, t_drafter, t_other), every step after a
batch's first, as the validation's decode throughput counts them. Adaptive D pays its scheduler in
t_drafter (`draft_cap`, the per-step schedule) and t_other (`observe`): where it verifies no more
than plain decoding, the difference in those two columns is what being adaptive cost.
"""
import argparse
from collections import defaultdict
from pathlib import Path

from draftwise.bench.runner import read_results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="benchmark run directories (a validation's OUT/sweep, OUT/sweep-2, …)")
    ap.add_argument("--batch-size", type=int, nargs="*", default=None)
    ap.add_argument("--drafter", default=None, help="only this drafter (and its +adaptive), besides plain decoding")
    ap.add_argument("--D", type=int, nargs="*", default=None, help="only these fixed D (adaptive and plain kept)")
    args = ap.parse_args()
    cells = defaultdict(lambda: [0, 0, 0, 0, 0.0, 0.0, 0.0])   # steps, tokens, verifying, Σwidth, Σt, Σd, Σo
    for run in args.runs:
        for r in read_results(Path(run)):
            d, D, B = r["drafter"], int(r["D"]), int(r["batch_size"])
            if args.batch_size and B not in args.batch_size:
                continue
            if args.drafter and d not in ("none", args.drafter, args.drafter + "+adaptive"):
                continue
            if args.D and d == args.drafter and D not in args.D:
                continue
            c = cells[(r["dataset"], B, d, D, Path(run).name)]
            for o in r["outputs"]:
                c[1] += o["num_tokens"] - (o["step_lengths"][0] if o["step_lengths"] else 0)
                for _rows, w, t, td, to in o.get("batch_steps", [])[1:]:   # a batch's steps, on one row
                    c[0], c[2], c[3] = c[0] + 1, c[2] + (w > 0), c[3] + w
                    c[4], c[5], c[6] = c[4] + t, c[5] + td, c[6] + to
    print("| dataset | B | drafter | D | run | steps/token | verifying | mean width | target ms | drafter ms "
          "| other ms | ms/token |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (ds, B, d, D, run), (n, tok, ver, wid, t, td, to) in sorted(cells.items()):
        if n and tok:
            print(f"| {ds} | {B} | {d} | {D} | {run} | {n / tok:.3f} | {ver / n:.2f} | {wid / n:.2f} | "
                  f"{t / n * 1e3:.3f} | {td / n * 1e3:.3f} | {to / n * 1e3:.3f} | {(t + td + to) / tok * 1e3:.3f} |")


if __name__ == "__main__":
    main()
