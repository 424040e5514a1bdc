"""Python cost of the run-time scheduler per decoding step (BENCHMARKS §5.1): draft_cap, the
per-step schedule and observe, for a batch of 2 rows offered 8 drafts, without any model.

    python benchmarks/adaptive_overhead.py        # compare: git checkout 4ad7d9e, rerun
"""
import time

import torch

from draftwise.planner.adaptive import AdaptiveDraftLength
from draftwise.types import Proposal


def main() -> None:
    torch.set_num_threads(2)
    s = AdaptiveDraftLength(lambda N: 1.0 / (0.01 + 0.001 * N))
    B, D = 2, 8
    prop = Proposal(tokens=torch.zeros(B, D, dtype=torch.long), num_tokens=torch.tensor([8, 3]))
    caps, acc = torch.full((B,), D), torch.tensor([2, 1])

    def step(i):
        s.draft_cap(B, D)
        k = torch.minimum(prop.num_tokens, s(prop))
        try:
            s.observe(k, acc, 0.001, D, offered=caps, target_seconds=0.02 + 0.001 * (i % 3))
        except TypeError:     # an older scheduler without these arguments
            s.observe(k, acc, 0.001, D)

    for i in range(200):
        step(i)
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for i in range(1000):
            step(i)
        best = min(best, (time.perf_counter() - t) / 1000)
    print(f"scheduler bookkeeping: {best * 1e6:.0f} µs per step (best of 5 × 1000)")


if __name__ == "__main__":
    main()
