"""Adaptive D against fixed D and plain decoding, side by side, with each step's time taken apart.

    python benchmarks/adaptive_ab.py --batch-size 1 --fixed 4,8 --adaptive runs/pv-interleaved/profile.json

Each batch of requests is decoded by every configuration in turn (the order rotates from batch to
batch), so the machine's drift falls on all of them alike. Prints per configuration: decode tokens/s
(prefill left out) and its ratio to plain decoding, steps, steps that verified drafts, and the
median target / drafter / other milliseconds of a step (drafter time includes the scheduler's own
decisions). Run it on a quiet machine: another process on the cores distorts every time.
"""
import argparse
import os
import statistics

os.environ.setdefault("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="zoo/target")
    ap.add_argument("--drafter", default="ngram")
    ap.add_argument("--dataset", default="throughput-256")
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("-D", type=int, default=8, help="adaptive D's largest draft")
    ap.add_argument("--fixed", default="4", help="comma-separated fixed D to compare with")
    ap.add_argument("--adaptive", default="true", help="a profile JSON or datasheet name; 'true' measures at start")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    import torch

    import draftwise as dw
    from draftwise.bench.datasets import load_dataset

    torch.set_num_threads(args.threads)
    tgt = dw.load_target(args.target)
    prompts = [tgt.tokenizer.encode(r.turns[0])
               for r in load_dataset(args.dataset, tgt.tokenizer, num_requests=args.requests)]
    adaptive = True if args.adaptive.lower() == "true" else args.adaptive
    configs = ([("plain", 0, False)] + [(f"D={d}", int(d), False) for d in args.fixed.split(",") if d]
               + [("adaptive", args.D, adaptive)])
    drafters = {name: dw.build_drafter(args.drafter, tgt) if D else None for name, D, _ in configs}
    agg = {name: {"tokens": 0, "seconds": 0.0, "steps": []} for name, _, _ in configs}
    B = args.batch_size
    for k, i in enumerate(range(0, len(prompts), B)):
        for name, D, ad in configs[k % len(configs):] + configs[:k % len(configs)]:
            res = dw.generate(tgt, prompts[i:i + B], drafter=drafters[name], num_draft_tokens=D,
                              max_new_tokens=args.max_new_tokens, ignore_eos=True, adaptive=ad)
            a, st = agg[name], res.stats
            a["tokens"] += sum(len(o.token_ids) for o in res)
            a["seconds"] += st.t_total - st.t_prefill
            a["steps"] += [(s.t_target, s.t_drafter, s.t_other, max(s.drafted)) for s in st.steps]
    plain = agg["plain"]["tokens"] / agg["plain"]["seconds"]
    print(f"{args.drafter}, {args.dataset}, batch {B}, {len(prompts)} requests × {args.max_new_tokens} tokens")
    for name, a in agg.items():
        steps = a["steps"]
        ms = [round(1e3 * statistics.median(x[k] for x in steps), 2) for k in range(3)]
        tps = a["tokens"] / a["seconds"]
        print(f"  {name:9s} {tps:7.1f} tok/s  ×{tps / plain:.3f}  steps {len(steps):4d}  "
              f"verifying drafts {sum(1 for x in steps if x[3]):4d}  median ms target/drafter/other {ms}",
              flush=True)


if __name__ == "__main__":
    main()
