"""The target's cache and grouped attention, before and after session 30, side by side in one run.

    python benchmarks/engine_paths.py --dataset throughput-1k --requests 8 --rounds 3

Before: Hugging Face's `DynamicLayer` (every step copies the whole cache by `torch.cat`) and, for
a multi-token step with holes, each KV head copied once per query head (`repeat_kv`). After:
`draftwise.cache.GrowingLayer` (a step writes its own columns) and one attention call per head of
each group (nothing copied). Both give the same logits bit for bit (tests/test_lean.py). This
decodes the same prompts, plain and with prompt lookup at fixed D, under both, the variants
interleaved in every round so the machine's drift falls on all alike, and prints ms per token,
after/before, and each D over plain decoding under the same engine.
"""
import argparse
import statistics

from _common import steady_malloc

steady_malloc()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from transformers import DynamicCache  # noqa: E402

import draftwise as dw  # noqa: E402
from draftwise import cache as kv  # noqa: E402
from draftwise.bench.datasets import load_dataset  # noqa: E402
from draftwise.lean import LeanForward  # noqa: E402

NEW_CACHE, NEW_ATTEND = kv.new_cache, LeanForward._attend


def _attend_before(self, q, k, v, mask, causal):
    """The grouped attention as it was: KV heads repeated for a masked multi-token step."""
    B, H, W, hd = q.shape
    groups = H // k.shape[1]
    if groups == 1 or mask is None or W == 1:
        return NEW_ATTEND(self, q, k, v, mask, causal)
    k = k[:, :, None].expand(-1, -1, groups, -1, -1).reshape(B, H, -1, hd)
    v = v[:, :, None].expand(-1, -1, groups, -1, -1).reshape(B, H, -1, hd)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scaling)


def use(engine: str) -> None:
    kv.new_cache = NEW_CACHE if engine == "after" else (lambda config: DynamicCache(config=config))
    LeanForward._attend = NEW_ATTEND if engine == "after" else _attend_before


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="zoo/target")
    ap.add_argument("--dataset", default="throughput-1k")
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("-D", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    tgt = dw.load_target(args.target)
    prompts = [tgt.tokenizer.encode(r.turns[0])
               for r in load_dataset(args.dataset, tgt.tokenizer, num_requests=max(args.requests, 16))][: args.requests]
    modes = [0] + list(args.D)
    times = {(e, d): [] for e in ("before", "after") for d in modes}
    outputs = {}
    for rnd in range(args.rounds):
        order = [(e, d) for d in modes for e in ("before", "after")]
        if rnd % 2:
            order.reverse()
        for e, d in order:
            use(e)
            seconds = tokens = 0
            for i in range(0, len(prompts), args.batch_size):
                batch = prompts[i:i + args.batch_size]
                res = dw.generate(tgt, batch, drafter="ngram" if d else None, num_draft_tokens=d,
                                  max_new_tokens=args.max_new_tokens, ignore_eos=True)
                seconds += res.stats.t_total - res.stats.t_prefill     # decoding, not the prompt
                tokens += sum(len(o.token_ids) for o in res)
                outputs.setdefault((d, i), [o.token_ids for o in res])
                assert outputs[(d, i)] == [o.token_ids for o in res], "the two engines decoded differently"
            times[(e, d)].append(seconds / tokens * 1e3)
    use("after")
    ms = {key: statistics.median(v) for key, v in times.items()}
    print(f"{args.dataset}, batch {args.batch_size}, {args.requests} requests × {args.max_new_tokens} tokens, "
          f"{args.rounds} rounds (median ms per generated token, prefill left out)")
    print(f"{'mode':>8} {'before':>8} {'after':>8} {'after/before':>13} {'÷plain before':>14} {'÷plain after':>13}")
    for d in modes:
        b, a = ms[("before", d)], ms[("after", d)]
        name = "plain" if d == 0 else f"D={d}"
        print(f"{name:>8} {b:8.3f} {a:8.3f} {a / b:13.3f} {ms[('before', 0)] / b:14.3f} {ms[('after', 0)] / a:13.3f}")


if __name__ == "__main__":
    main()
