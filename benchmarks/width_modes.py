"""Does a step that verifies drafts change price while nothing else changes? (BENCHMARKS, session 37)

    python benchmarks/width_modes.py --width 5 --steps 2000        # ~40 s at 1k tokens
    python benchmarks/width_modes.py --threads 1                    # the same with one thread

One process, one request: the prompt is prefilled once, then every step appends a plain token and
then 1 + `--width` tokens, each rolled back, so each step sees the same cache and the same inputs.
Printed per block of `--block` steps: the median ms of the plain step, of the wide step, and of the
wide step's linear layers (every `F.linear` call, summed). On session 37's host (2 vCPUs under
KVM) the wide step switched between ~8.7 ms and ~12 ms every few tens of seconds, in both
directions, and its linear layers carried the whole change, while the plain step stayed at
~6.4 ms. One thread gives ~11.5 ms throughout: in the slow stretches the second thread adds
nothing. Which stretch a profile, a sweep or an A/B falls into moves every price of width it takes.
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from _common import steady_malloc

steady_malloc()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="zoo/target")
    ap.add_argument("--dataset", default="throughput-1k")
    ap.add_argument("--width", type=int, default=5, help="drafts the wide step verifies")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--block", type=int, default=100, help="steps per printed median")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import draftwise as dw
    from draftwise.bench.datasets import load_dataset

    tgt = dw.load_target(args.target)
    prompt = tgt.tokenizer.encode(load_dataset(args.dataset, tgt.tokenizer, num_requests=1)[0].turns[0])
    if len(prompt) <= args.width + 1:
        raise SystemExit(f"the first prompt of {args.dataset} has {len(prompt)} tokens; pick a longer set or a smaller --width")
    linear_s = [0.0]
    real_linear = F.linear

    def timed_linear(*a, **k):      # nn.Linear calls F.linear through the module: every layer is seen
        t = time.perf_counter()
        out = real_linear(*a, **k)
        linear_s[0] += time.perf_counter() - t
        return out

    F.linear = timed_linear
    plain, wide, wide_linear = [], [], []
    with torch.inference_mode():
        tgt.reset(1)
        tgt.forward(torch.tensor([prompt[:-1]]), [len(prompt) - 1], need_logits=False)
        blocks = (torch.tensor([prompt[-1:]]), torch.tensor([prompt[-1:] + prompt[:args.width]]))
        for _ in range(args.steps):
            for block, out in zip(blocks, (plain, wide)):
                tgt.mark()
                linear_s[0] = 0.0
                t = time.perf_counter()
                tgt.forward(block, [block.shape[1]])
                out.append(time.perf_counter() - t)
                if out is wide:
                    wide_linear.append(linear_s[0])
                tgt.rollback([0])
    F.linear = real_linear
    b = args.block
    for name, v in (("plain step", plain), (f"width {args.width}", wide), ("… its linear layers", wide_linear)):
        print(f"{name:>20}: " + " ".join(f"{1e3 * statistics.median(v[j:j + b]):.2f}" for j in range(0, len(v), b)))


if __name__ == "__main__":
    main()
