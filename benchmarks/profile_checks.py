"""Side-by-side checks behind two of `draftwise profile`'s measurements (BENCHMARKS §5.0zzz, session 34).

    python benchmarks/profile_checks.py [--target zoo/target] [--draft zoo/draft] [--context 1048]

1. The draft model's first forward of a step, right after a target step, against the step's later
   forwards; and one against two tokens a row in that first forward (`catch_up_seconds`: a row
   that accepted every draft feeds its last draft and the bonus token).
2. A step of plain decoding: the engine's own (`generate`, no drafter, median target seconds),
   against the profile's run of 16 plain forwards timed straight after wider steps, and after
   `PLAIN_WARM` untimed plain steps (what `measure_steps` now does).
Each line is one round; the machine drifts, so compare within a line.
"""
import argparse
import json
import random
import statistics
import time
from pathlib import Path

import torch

import draftwise
from draftwise.planner.profile import PLAIN_RUN, PLAIN_WARM, _interleaved_samples, _prefill, _width_step
from draftwise.target import ModelRunner


def draft_forwards(target, draft, B: int, L: int, rounds: int = 10) -> str:
    tr, dr = ModelRunner(target, lean="exact"), ModelRunner(draft, lean=True)
    g = torch.Generator().manual_seed(0)
    _prefill(tr, B, L, target.config.vocab_size, g, "cpu")
    _prefill(dr, B, L, draft.config.vocab_size, g, "cpu")
    verify = _width_step(tr, B, 1, target.config.vocab_size, g, "cpu")
    one, two = ([torch.randint(0, draft.config.vocab_size, (B, w), generator=g), [w] * B] for w in (1, 2))
    first, later, wide = [], [], []
    for _ in range(rounds + 2):
        verify()
        dr.mark()
        t0 = time.perf_counter()
        dr.forward(*one)
        t1 = time.perf_counter()
        for _ in range(3):
            dr.forward(*one)
        t2 = time.perf_counter()
        dr.rollback([0] * B)
        verify()
        dr.mark()
        t3 = time.perf_counter()
        dr.forward(*two)
        wide.append(time.perf_counter() - t3)
        dr.rollback([0] * B)
        first.append(t1 - t0)
        later.append((t2 - t1) / 3)
    f, n, w = (statistics.median(x[2:]) * 1e3 for x in (first, later, wide))
    return (f"B={B:2d} L={L}: draft forward after a target step {f:.2f} ms, later in the step {n:.2f} ms "
            f"(×{f / n:.2f}); two tokens a row after a target step {w:.2f} ms (+{w - f:.2f})")


def plain_steps(tgt, prompts: list, B: int, L: int, seed: int) -> str:
    out = draftwise.generate(tgt, prompts[:B], max_new_tokens=48, ignore_eos=True)
    engine = statistics.median(s.t_target for s in out.stats.steps)
    model = tgt.model if hasattr(tgt, "model") else tgt
    r, g = ModelRunner(model, lean="exact"), torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    _prefill(r, B, L, vocab, g, "cpu")
    steps = {D: _width_step(r, B, 1 + D, vocab, g, "cpu") for D in range(9)}
    steps["plain"] = _width_step(r, B, 1, vocab, g, "cpu", passes=PLAIN_RUN)
    warm = {"plain": _width_step(r, B, 1, vocab, g, "cpu", passes=PLAIN_WARM)}
    cold = statistics.median(_interleaved_samples(steps, 5, random.Random(seed), "cpu")["plain"]) / PLAIN_RUN
    warmed = statistics.median(_interleaved_samples(steps, 5, random.Random(seed), "cpu", before=warm)["plain"]) / PLAIN_RUN
    return (f"B={B:2d} L={L}: the engine's plain step {engine * 1e3:.2f} ms; the profile's run straight after "
            f"wider steps {cold * 1e3:.2f} (×{cold / engine:.2f}), after {PLAIN_WARM} untimed {warmed * 1e3:.2f} "
            f"(×{warmed / engine:.2f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="zoo/target")
    ap.add_argument("--draft", default="zoo/draft")
    ap.add_argument("--context", type=int, default=1048)
    ap.add_argument("--batch-sizes", default="1,4,16")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the plain-step check")
    ap.add_argument("--prompts", default=None, metavar="JSONL",
                    help="token ids, one {\"token_ids\": [...]} a line (a validation's OUT/sweep/prompts.jsonl); "
                         "default: random tokens of --context length")
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    tgt = draftwise.load_target(args.target)
    target = tgt.model if hasattr(tgt, "model") else tgt
    from transformers import AutoModelForCausalLM
    draft = AutoModelForCausalLM.from_pretrained(args.draft).eval()
    Bs = [int(b) for b in args.batch_sizes.split(",")]
    print("1. the draft model's first forward of a step")
    for B in Bs:
        print("  " + draft_forwards(target, draft, B, args.context), flush=True)
    if args.prompts:
        prompts = [json.loads(x)["token_ids"] for x in Path(args.prompts).read_text().splitlines() if x.strip()]
        prompts = [p for p in prompts if len(p) >= args.context - 64]
    else:
        g = torch.Generator().manual_seed(1)
        prompts = torch.randint(0, target.config.vocab_size, (max(Bs), args.context), generator=g).tolist()
    print("2. a step of plain decoding")
    for rnd in range(args.rounds):
        for B in Bs:
            if len(prompts) >= B:
                print("  " + plain_steps(tgt, prompts, B, args.context, rnd), flush=True)


if __name__ == "__main__":
    main()
