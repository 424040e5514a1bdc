"""What one verification forward costs by the drafts each row verifies (BENCHMARKS §5.0e, §5.0f).

    python benchmarks/ragged_verify.py --batch-size 2 --dataset throughput-256 \
        --pattern 0,0 --pattern 3,3 --pattern 2,2 --pattern 2,0 --pattern 8,8 --pattern 8,0

Adaptive D verifies a different number of drafts per row (a ragged block, padded to the widest
row); a fixed D verifies the same number in every row. This times the target's forward alone, on
the prompts of a throughput set, every pattern in turn at each step (the order shuffled, so the
machine's drift falls on all alike), with a rollback after each that keeps a random number of the
verified tokens, as acceptance would (which leaves holes in the cache, as decoding does).
"""
import argparse
import random
import statistics
import time

from _common import steady_malloc

steady_malloc()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="zoo/target")
    ap.add_argument("--dataset", default="throughput-256")
    ap.add_argument("--batch-size", type=int, default=2)
    ap.add_argument("--pattern", action="append", help="drafts verified per row, comma-separated (repeatable)")
    ap.add_argument("--batches", type=int, default=6, help="batches of prompts, each a fresh cache")
    ap.add_argument("--steps", type=int, default=40, help="steps per batch (every pattern once per step)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    import torch

    import draftwise as dw
    from draftwise.bench.datasets import load_dataset

    torch.set_num_threads(args.threads)
    B = args.batch_size
    patterns = {p: [int(x) for x in p.split(",")] for p in (args.pattern or ["0,0", "3,3", "2,0"])}
    bad = [p for p, k in patterns.items() if len(k) != B or min(k) < 0]
    if bad:
        raise SystemExit(f"--pattern {bad[0]}: give {B} non-negative draft counts, one per row of --batch-size {B}")
    tgt = dw.load_target(args.target)
    prompts = [tgt.tokenizer.encode(r.turns[0])
               for r in load_dataset(args.dataset, tgt.tokenizer, num_requests=B * args.batches)]
    rng = random.Random(0)
    gen = torch.Generator().manual_seed(0)
    vocab = int(tgt.model.config.vocab_size)
    times: dict[str, list[float]] = {p: [] for p in patterns}
    for b in range(args.batches):
        rows = prompts[b * B:(b + 1) * B]
        L = min(len(p) for p in rows)
        tgt.reset(B)
        tgt.forward(torch.tensor([p[:L - 1] for p in rows]), torch.full((B,), L - 1), need_logits=False)
        for _ in range(args.steps):
            for name, k in rng.sample(list(patterns.items()), len(patterns)):
                lengths = torch.tensor(k) + 1
                block = torch.randint(0, vocab, (B, int(lengths.max())), generator=gen)
                tgt.mark()
                t = time.perf_counter()
                tgt.forward(block, lengths)
                times[name].append(time.perf_counter() - t)
                tgt.rollback(torch.tensor([rng.randint(1, x + 1) for x in k]))
    print(f"{args.dataset}, batch {B}: target forward by drafts verified per row "
          f"({args.batches} batches × {args.steps} steps)")
    base = statistics.median(times[next(iter(patterns))])
    for name, v in times.items():
        m = statistics.median(v)
        print(f"  [{name}]  median {1e3 * m:6.2f} ms  ({m / base:.2f}× [{next(iter(patterns))}])")


if __name__ == "__main__":
    main()
