"""What the run-time scheduler believes, request by request (BENCHMARKS §5.1, "why, taken apart").

    python benchmarks/adaptive_state.py --batch-size 1 --dataset throughput-256 --drafter ngram \
        --adaptive runs/pv-interleaved/profile.json

Decodes 8 requests (48 tokens each, greedy) with adaptive D and prints after each batch: tokens
drafted, per-position acceptance (a missing proposal counted as a rejection), proposal rate, the
chosen D, the learned target time per verified width, the expected step time per D and the
drafter-cost line. Run it on a quiet machine: another process on the cores distorts every time.
"""
from _common import adaptive_parser, adaptive_workload, steady_malloc

steady_malloc()


def main() -> None:
    args = adaptive_parser(__doc__, requests=8).parse_args()
    import draftwise as dw

    tgt, prompts, adaptive = adaptive_workload(args)
    draft = dw.build_drafter(args.drafter, tgt)
    B, D = args.batch_size, args.D
    for i in range(0, args.requests, B):
        res = dw.generate(tgt, prompts[i:i + B], drafter=draft, num_draft_tokens=D, max_new_tokens=48,
                          ignore_eos=True, adaptive=adaptive)
        s = next(iter(tgt._schedulers[draft].values()))
        step = s._step_time(B)
        ms = lambda x: round(1e3 * x, 1)  # noqa: E731
        print(f"requests {i}–{i + B - 1}: drafted {sum(sum(x.drafted) for x in res.stats.steps)} tokens; "
              f"acceptance {[round(a, 2) for a in s.position_alpha()[:D]]}; proposal rate {s.proposal_rate():.2f}; "
              f"best D {s._best_cap(B, D)}\n  target ms by width {[ms(s.target_time(B, w)) for w in range(D + 1)]}"
              f"\n  step ms by D {[ms(step(d)) for d in range(D + 1)]}; drafter ms/token, ms/step "
              f"{[round(1e3 * x, 2) for x in s._draft_line()]}", flush=True)


if __name__ == "__main__":
    main()
