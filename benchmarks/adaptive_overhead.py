"""Python cost of the run-time scheduler per decoding step (BENCHMARKS §5.0d, §5.1): draft_cap, the
per-step schedule and observe, for a batch of 2 rows offered 8 drafts.

    python benchmarks/adaptive_overhead.py            # without any model, a hot loop
    python benchmarks/adaptive_overhead.py --engine   # inside real decoding: the zoo pair, prompt lookup
    # compare: git checkout 268175f -- src, rerun

Inside decoding each call runs right after a target forward, with the caches cold: there the same
Python costs about three times what the hot loop measures.
"""
import argparse
import time
from collections import defaultdict

import torch

from draftwise.planner.adaptive import AdaptiveDraftLength
from draftwise.types import Proposal


def hot_loop() -> None:
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


def in_engine(profile: str, batch_size: int, dataset: str) -> None:
    """Seconds per decoding step spent in each scheduler call, timed inside `draftwise.generate`."""
    import draftwise as dw
    from draftwise.bench.datasets import load_dataset

    spent, calls = defaultdict(float), defaultdict(int)
    # the engine asks for the per-step schedule through `counts` where the scheduler has it
    schedule = "counts" if hasattr(AdaptiveDraftLength, "counts") else "__call__"
    for name in ("draft_cap", schedule, "observe"):
        orig = getattr(AdaptiveDraftLength, name)

        def timed(*a, _orig=orig, _name=name, **k):
            t = time.perf_counter()
            try:
                return _orig(*a, **k)
            finally:
                spent[_name] += time.perf_counter() - t
                calls[_name] += 1
        setattr(AdaptiveDraftLength, name, timed)
    tgt = dw.load_target("zoo/target")
    prompts = [tgt.tokenizer.encode(r.turns[0]) for r in load_dataset(dataset, tgt.tokenizer, num_requests=16)]
    drafter = dw.build_drafter("ngram", tgt)
    for rnd in range(3):      # the scheduler learns in the first round; the last one is reported
        spent.clear(), calls.clear()
        steps = 0
        for i in range(0, len(prompts), batch_size):
            out = dw.generate(tgt, prompts[i:i + batch_size], drafter=drafter, num_draft_tokens=8,
                              max_new_tokens=48, ignore_eos=True, adaptive=profile)
            steps += len(out.stats.steps)
    print(f"inside decoding ({dataset}, batch {batch_size}, {steps} steps): "
          + ", ".join(f"{n} {spent[n] / steps * 1e6:.0f} µs" for n in ("draft_cap", schedule, "observe"))
          + f" per step; {sum(spent.values()) / steps * 1e6:.0f} µs in all")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", action="store_true", help="time the calls inside real decoding")
    ap.add_argument("--profile", default="benchmarks/results/profile_s14.json")
    ap.add_argument("--batch-size", type=int, default=2)
    ap.add_argument("--dataset", default="throughput-256")
    args = ap.parse_args()
    torch.set_num_threads(2)
    if args.engine:
        in_engine(args.profile, args.batch_size, args.dataset)
    else:
        hot_loop()


if __name__ == "__main__":
    main()
