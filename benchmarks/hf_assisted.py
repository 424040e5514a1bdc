"""draftwise vs Hugging Face assisted generation vs plain decoding, side by side in one run.

Same target + draft pair, same D, greedy, batch 1, fp32: checks that all three produce the same
tokens, prints tokens/s ratios, and the engine overhead — wall time minus the time spent inside
the models' forward calls, as a share of the wall time — for draftwise and for HF.

    python benchmarks/hf_assisted.py                      # the reference pair in zoo/
    python benchmarks/hf_assisted.py --synthetic          # a random 30M Llama + a noisy copy as draft
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from _common import steady_malloc

steady_malloc()

import torch  # noqa: E402
import transformers as T  # noqa: E402

import draftwise  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = [
    "def merge_sorted(a, b):\n    \"\"\"Merge two sorted lists into one sorted list.\"\"\"\n",
    "And it came to pass, when the king had heard these words,",
    "HAMLET. O, what a rogue and peasant slave am I!\n",
    "The tarfile module makes it possible to read and write tar archives,",
]


class ForwardTimer:
    """Accumulates wall time spent inside a module's forward (the models' own work)."""

    def __init__(self, *models):
        self.total = 0.0
        for m in models:
            m.register_forward_pre_hook(self._pre)
            m.register_forward_hook(self._post)

    def wrap(self, cls, name: str = "__call__") -> None:
        """Also count calls of cls.name — draftwise's lean forward of the draft model, which runs
        the model's modules without going through model.forward."""
        inner = getattr(cls, name)

        def timed(*a, **k):
            t0 = time.perf_counter()
            try:
                return inner(*a, **k)
            finally:
                self.total += time.perf_counter() - t0
        setattr(cls, name, timed)

    def _pre(self, module, args):
        module._t0 = time.perf_counter()

    def _post(self, module, args, out):
        self.total += time.perf_counter() - module._t0


def synthetic_pair():
    torch.manual_seed(0)
    cfg = T.LlamaConfig(vocab_size=8192, hidden_size=512, num_hidden_layers=6, num_attention_heads=8,
                        num_key_value_heads=2, intermediate_size=1536, initializer_range=0.06,
                        tie_word_embeddings=False, max_position_embeddings=1024)
    target = T.LlamaForCausalLM(cfg).eval()
    dcfg = T.LlamaConfig(**{**cfg.to_dict(), "num_hidden_layers": 1, "hidden_size": 512})
    draft = T.LlamaForCausalLM(dcfg).eval()
    with torch.no_grad():  # the draft = target's first layer + embeddings: cheap, often right
        draft.model.embed_tokens.weight.copy_(target.model.embed_tokens.weight)
        draft.lm_head.weight.copy_(target.lm_head.weight)
        draft.model.norm.weight.copy_(target.model.norm.weight)
        draft.model.layers[0].load_state_dict(target.model.layers[0].state_dict())
    return target, draft, None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=str(ROOT / "zoo" / "target"))
    ap.add_argument("--draft", default=str(ROOT / "zoo" / "draft"))
    ap.add_argument("--synthetic", action="store_true")
    ap.add_argument("-D", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                    help="bf16: batched verification rounds differently, so outputs may diverge (reported)")
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    if args.synthetic:
        target_model, draft_model, tok = synthetic_pair()
        prompts = [torch.randint(0, 8192, (24,), generator=torch.Generator().manual_seed(i)).tolist() for i in range(4)]
    else:
        tok = T.AutoTokenizer.from_pretrained(args.target)
        dtype = getattr(torch, args.dtype)
        target_model = T.AutoModelForCausalLM.from_pretrained(args.target, dtype=dtype).eval()
        draft_model = T.AutoModelForCausalLM.from_pretrained(args.draft, dtype=dtype).eval()
        prompts = [tok(p)["input_ids"] for p in PROMPTS]
    for m in (target_model, draft_model):
        m.generation_config.eos_token_id = None  # fixed-length runs: every engine makes the same tokens
        m.generation_config.pad_token_id = 0
    # HF: constant D, no confidence-based early stop, so both engines draft the same number of tokens
    draft_model.generation_config.num_assistant_tokens = args.D
    draft_model.generation_config.num_assistant_tokens_schedule = "constant"
    draft_model.generation_config.assistant_confidence_threshold = 0.0
    timer = ForwardTimer(target_model, draft_model)
    from draftwise.lean import LeanForward
    timer.wrap(LeanForward)
    target = draftwise.load_target(target_model, tokenizer=tok)
    drafter = draftwise.build_drafter(draft_model, target)
    N = args.max_new_tokens

    def run_hf(p, assisted):
        ids = torch.tensor([p])
        kw = dict(assistant_model=draft_model) if assisted else {}
        with torch.inference_mode():
            out = target_model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                        max_new_tokens=N, min_new_tokens=N, **kw)
        return out[0, len(p):].tolist(), None

    def run_dw(p, use_draft):
        out = draftwise.generate(target, [p], drafter=drafter if use_draft else None, num_draft_tokens=args.D,
                                 max_new_tokens=N, ignore_eos=True)[0]
        return out.token_ids, out.mean_accept_length

    engines = {"hf_plain": lambda p: run_hf(p, False), "hf_assisted": lambda p: run_hf(p, True),
               "draftwise_plain": lambda p: run_dw(p, False), "draftwise_spec": lambda p: run_dw(p, True)}
    for fn in engines.values():  # warm-up
        fn(prompts[0][:8])
    times = {k: [] for k in engines}
    fwd = {k: [] for k in engines}
    outputs, accept = {k: [] for k in engines}, []
    for rep in range(args.repeats):
        for p in prompts:
            for name, fn in engines.items():  # interleaved, so drifts in machine speed hit all alike
                timer.total = 0.0
                t0 = time.perf_counter()
                ids, al = fn(p)
                dt = time.perf_counter() - t0
                times[name].append(dt)
                fwd[name].append(timer.total)
                if rep == 0:
                    outputs[name].append(ids)
                    if al is not None and name == "draftwise_spec":
                        accept.append(al)
    agree = {k: sum(a == b for a, b in zip(outputs[k], outputs["hf_plain"])) / len(prompts) for k in engines}
    same = all(v == 1.0 for v in agree.values())
    tok_s = {k: N * len(times[k]) / sum(times[k]) for k in engines}
    overhead = {k: 1 - sum(fwd[k]) / sum(times[k]) for k in engines}
    result = {
        "target": "synthetic" if args.synthetic else args.target, "D": args.D, "max_new_tokens": N,
        "prompts": len(prompts), "repeats": args.repeats, "threads": torch.get_num_threads(),
        "dtype": args.dtype, "outputs_identical": same, "share_identical_to_hf_plain": agree, "mean_accept_length_draftwise": statistics.mean(accept),
        "tokens_per_s": tok_s,
        "draftwise_vs_hf_assisted": tok_s["draftwise_spec"] / tok_s["hf_assisted"],
        "draftwise_spec_vs_plain": tok_s["draftwise_spec"] / tok_s["draftwise_plain"],
        "hf_assisted_vs_plain": tok_s["hf_assisted"] / tok_s["hf_plain"],
        "draftwise_plain_vs_hf_plain": tok_s["draftwise_plain"] / tok_s["hf_plain"],
        "overhead_share": overhead,
    }
    print(f"outputs identical across engines: {same} ({', '.join(f'{k} {v:.0%}' for k, v in agree.items())})   "
          f"mean acceptance length (draftwise): "
          f"{result['mean_accept_length_draftwise']:.2f}")
    print(f"{'engine':<18}{'tokens/s':>10}{'overhead':>10}")
    for k in engines:
        print(f"{k:<18}{tok_s[k]:>10.1f}{overhead[k]:>9.1%}")
    print(f"draftwise / HF assisted: {result['draftwise_vs_hf_assisted']:.2f}x   "
          f"speculative / plain: draftwise {result['draftwise_spec_vs_plain']:.2f}x, HF {result['hf_assisted_vs_plain']:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0 if same or args.dtype != "float32" else 1


if __name__ == "__main__":
    sys.exit(main())
