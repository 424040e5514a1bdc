"""τ, per-position conditional acceptance, drafter cost and batch-1 speedup, per held-out source.

    python benchmarks/drafter_eval.py --target zoo/target --tokens work/tokens \
        mtp:zoo/mtp eagle3:zoo/eagle3 dflash:zoo/dflash dspark:zoo/dspark ngram draft-model:zoo/draft

`--tokens` is the tokenized corpus of `draftwise zoo build` (its val_*.bin files and meta.json).
Prompts are held-out windows, greedy, batch 1; plain decoding is timed in the same run.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

import draftwise
from draftwise.train.data import heldout_prompts
from draftwise.train.trainer import acceptance_stats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("drafters", nargs="+", help="drafter specs")
    ap.add_argument("--target", default="zoo/target")
    ap.add_argument("--tokens", default="work/tokens")
    ap.add_argument("-D", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--prompts-per-source", type=int, default=4)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    tgt = draftwise.load_target(args.target)
    tokens_dir = Path(args.tokens)
    meta = json.loads((tokens_dir / "meta.json").read_text())
    prompts = {src: heldout_prompts(np.fromfile(tokens_dir / f"val_{src}.bin", dtype=np.uint16),
                                    args.prompts_per_source, args.prompt_len, seed=1) for src in meta["sources"]}

    def run(drafter, ps):
        return [draftwise.generate(tgt, [p], drafter=drafter, num_draft_tokens=args.D,
                                   max_new_tokens=args.max_new_tokens, ignore_eos=True) for p in ps]

    everything = [p for ps in prompts.values() for p in ps]
    t0 = time.perf_counter()
    run(None, everything)
    t_plain = time.perf_counter() - t0
    results = {}
    for spec in args.drafters:
        drafter = draftwise.build_drafter(spec, tgt)
        per, t_target, t_drafter = {}, 0.0, 0.0
        t0 = time.perf_counter()
        for src, ps in prompts.items():
            outs = run(drafter, ps)
            t_target += sum(r.stats.t_target for r in outs)
            t_drafter += sum(r.stats.t_drafter for r in outs)
            st = acceptance_stats([o for r in outs for o in r])
            per[src] = {"kind": meta["sources"][src]["kind"], "tau": round(st["tau"], 3),
                        "alpha": [None if a is None else round(a, 3) for a in st["alpha"]]}
        t_spec = time.perf_counter() - t0
        results[spec] = {"D": args.D, "speedup_b1": round(t_plain / t_spec, 3), "per_source": per,
                         "tau_mean": round(float(np.mean([v["tau"] for v in per.values()])), 3),
                         "drafter_time_per_target_time": round(t_drafter / max(t_target, 1e-9), 3)}
        print(json.dumps({spec: results[spec]}), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
