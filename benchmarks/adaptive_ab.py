"""Adaptive D against fixed D and plain decoding, side by side, with each step's time taken apart.

    python benchmarks/adaptive_ab.py --batch-size 1 --fixed 4,8 --adaptive runs/pv-interleaved/profile.json

Each batch of requests is decoded by every configuration in turn (the order rotates from batch to
batch), so the machine's drift falls on all of them alike. Prints per configuration: decode tokens/s
(prefill left out) and its ratio to plain decoding, steps, steps that verified drafts, and the
median target / drafter / other milliseconds of a step (drafter time includes the scheduler's own
decisions). Run it on a quiet machine: another process on the cores distorts every time.
"""
import statistics

from _common import adaptive_parser, adaptive_workload, steady_malloc

steady_malloc()


def main() -> None:
    ap = adaptive_parser(__doc__, requests=16)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--fixed", default="4", help="comma-separated fixed D to compare with")
    args = ap.parse_args()
    import draftwise as dw

    tgt, prompts, adaptive = adaptive_workload(args)
    prompts = prompts[:args.requests]
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
