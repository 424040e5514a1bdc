"""Does adaptive D expect the drafts each row then accepts? (BENCHMARKS §5.0j)

    python benchmarks/adaptive_calibration.py --batch-size 2 --rounds 4 \
        --adaptive benchmarks/results/profile_s14.json

Decodes a throughput set with adaptive D (the same request set `--rounds` times, one scheduler
learning throughout) and, for every row of every step that verified drafts after the first round,
adds up the drafts it accepted and those the scheduler expected of it when it chose the width:
from the calibration that pools every row, and with the row's own factor (`_row_scale`) applied.
Split by the rows still in the batch: in a static batch the rows left last are the ones that
accepted least. A ratio under 1 is a row verified for drafts it did not accept.
"""
import torch

from _common import adaptive_parser, adaptive_workload, steady_malloc

steady_malloc()

import draftwise as dw  # noqa: E402
from draftwise.planner.adaptive import AdaptiveDraftLength  # noqa: E402


class Tally(AdaptiveDraftLength):
    """The scheduler as is, plus a tally of expected against accepted drafts per verified row."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.tally: dict[int, list[float]] = {}     # rows in the step → [rows, pooled, own, accepted]
        self.counting = False

    def observe(self, verified, accepted, *a, **k):
        raw = self._raw
        if self.counting and raw is not None and not isinstance(raw, torch.Tensor):
            rows = raw.tolist() if hasattr(raw, "tolist") else raw
            ver = verified if isinstance(verified, list) else verified.tolist()
            acc = accepted if isinstance(accepted, list) else accepted.tolist()
            if rows and len(rows) == len(ver) and max(ver) > 0:
                cal = self._cal if self._cal is not None else self._calibrate_rows(rows)
                scale = self._row_scale(len(rows)) or [1.0] * len(rows)
                t = self.tally.setdefault(len(rows), [0.0, 0.0, 0.0, 0.0])
                for row, v, a_, s in zip(cal, ver, acc, scale):
                    surv, pooled, own = 1.0, 0.0, 0.0
                    for j in range(min(v, len(row))):
                        surv *= row[j]
                        pooled += surv
                        own += min(1.0, s * surv)
                    if v > 0:
                        t[0] += 1
                        t[1] += pooled
                        t[2] += own
                        t[3] += a_
        return super().observe(verified, accepted, *a, **k)


def main() -> None:
    ap = adaptive_parser(__doc__, requests=16)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    tgt, prompts, adaptive = adaptive_workload(args)
    drafter = dw.build_drafter(args.drafter, tgt)
    B = args.batch_size
    sched = dw.api._adaptive_scheduler(tgt, adaptive, prompts[:B], args.D, drafter, args.max_new_tokens,
                                       scheduler_cls=Tally)
    for r in range(args.rounds):
        sched.counting = r > 0
        for i in range(0, args.requests, B):
            dw.generate(tgt, prompts[i:i + B], drafter=drafter, num_draft_tokens=args.D,
                        max_new_tokens=args.max_new_tokens, ignore_eos=True, adaptive=sched)
    print(f"{args.drafter}, {args.dataset}, batch {B}, after round 1: drafts accepted / expected, per verified row")
    print("| rows in the step | verified rows | accepted | expected, pooled calibration | ratio | "
          "expected, with the row's own factor | ratio |")
    print("|---|---|---|---|---|---|---|")
    for rows, (n, pooled, own, acc) in sorted(sched.tally.items(), reverse=True):
        print(f"| {rows} | {n:.0f} | {acc:.0f} | {pooled:.1f} | {acc / pooled:.3f} | {own:.1f} | {acc / own:.3f} |")


if __name__ == "__main__":
    main()
