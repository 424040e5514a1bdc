"""Does a small compute probe tell the host's price of width, without verifying a draft?
(BENCHMARKS, session 41.)

    python benchmarks/host_state.py --batch-size 4 --context 1048 --seconds 150 --out runs/s41/host_state.json

On the 2-core host of BENCHMARKS.md a step verifying drafts costs one price in some stretches and
another in others (`draftwise.planner.levels`), while a plain step keeps its own. Adaptive D at
batch 4 learns that price only by verifying, which is what it wants to avoid where plain decoding
wins. This times, in rounds of a fresh random order: the target's plain step (one token a row),
its steps verifying 1 and 2 drafts (B rows at context L, through the engine's runner, rolled back
as a draft loop does), and two matrix products of the kind that makes a wide step dear (64 and 8
rows × 1024 × 1024, float32, on every thread). Per window of rounds, the medians; then how well
each probe's time tracks the price of a width of 1 (correlation over windows), and how often one
sample of each tells a cheap window from a dear one.
"""
import argparse
import json
import random
import statistics
import time
from pathlib import Path

from _common import steady_malloc

steady_malloc()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="zoo/target")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--context", type=int, default=1048)
    ap.add_argument("--seconds", type=float, default=150.0)
    ap.add_argument("--window", type=int, default=50, help="rounds a window's medians are taken over")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None, help="also write every round's timings here (JSON)")
    args = ap.parse_args()

    import numpy as np
    import torch

    from draftwise.planner.profile import _load_target, _prefill, _width_step
    from draftwise.target import ModelRunner

    torch.set_num_threads(args.threads)
    model, _ = _load_target(args.target, torch.float32, "cpu")
    runner, vocab = ModelRunner(model, lean="exact"), model.config.vocab_size
    g = torch.Generator().manual_seed(0)
    B = args.batch_size
    _prefill(runner, B, args.context, vocab, g, "cpu")
    w = torch.randn(1024, 1024, generator=g)
    x64, x8 = torch.randn(64, 1024, generator=g), torch.randn(8, 1024, generator=g)
    timed = {"plain": _width_step(runner, B, 1, vocab, g, "cpu"), "w1": _width_step(runner, B, 2, vocab, g, "cpu"),
             "w2": _width_step(runner, B, 3, vocab, g, "cpu"),
             "mm64": lambda: torch.mm(x64, w), "mm8": lambda: torch.mm(x8, w)}
    for fn in timed.values():      # warm
        for _ in range(3):
            fn()
    rng, rounds, names = random.Random(0), [], list(timed)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < args.seconds:
        rng.shuffle(names)
        rec = {"t": round(time.perf_counter() - t0, 3)}
        for n in names:
            s = time.perf_counter()
            timed[n]()
            rec[n] = round(time.perf_counter() - s, 7)
        rounds.append(rec)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"batch_size": B, "context": args.context, "rounds": rounds}))

    W = args.window
    wins = []
    for i in range(0, len(rounds) - W + 1, W):
        part = rounds[i:i + W]
        med = {k: statistics.median(r[k] for r in part) for k in timed}
        wins.append((part, med))
    print(f"batch {B}, context {args.context}: {len(rounds)} rounds, windows of {W}")
    print("a step verifying 1 and 2 drafts in plain steps; the plain step and the probes in ms")
    print("   t/s  width 1  width 2  plain ms   mm64 ms   mm8 ms")
    for part, m in wins:
        print(f"{part[0]['t']:6.0f}  {m['w1'] / m['plain']:7.3f}  {m['w2'] / m['plain']:7.3f}  "
              f"{m['plain'] * 1e3:8.2f}  {m['mm64'] * 1e3:8.3f}  {m['mm8'] * 1e3:7.3f}")
    price = np.array([m["w1"] / m["plain"] for _, m in wins])
    if len(wins) > 2:
        for k in ("mm64", "mm8", "plain"):
            r = np.corrcoef([m[k] / m["plain"] if k != "plain" else m[k] for _, m in wins], price)[0, 1]
            print(f"correlation over windows of {k}{'' if k == 'plain' else '/plain'} with a width of 1's price: {r:.2f}")
    # one sample against the windows' split: cheap below the midpoint of the prices' range, dear above
    lo, hi = price.min(), price.max()
    mid = (lo + hi) / 2
    if hi - lo > 0.08:
        for k in ("w1", "mm64", "mm8", "plain"):
            cheap = [np.log(r[k]) for (part, _), p in zip(wins, price) if p < mid for r in part]
            dear = [np.log(r[k]) for (part, _), p in zip(wins, price) if p >= mid for r in part]
            cut = (np.median(cheap) + np.median(dear)) / 2
            right = (sum(v < cut for v in cheap) + sum(v >= cut for v in dear)) / (len(cheap) + len(dear))
            print(f"{k:>5}: cheap {np.exp(np.median(cheap)) * 1e3:.3f} ms, dear {np.exp(np.median(dear)) * 1e3:.3f} ms; "
                  f"one sample tells them apart {right:.0%} of the time")
    else:
        print("no two levels of the price of width in this run (range under 0.08 plain steps)")


if __name__ == "__main__":
    main()
