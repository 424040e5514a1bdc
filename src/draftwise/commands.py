"""`draftwise generate`: decode prompts with a drafter and print the text and the statistics."""
from __future__ import annotations

import argparse
import json
import sys


def add_cli(sub) -> None:
    p = sub.add_parser("generate", help="generate text with speculative decoding",
                       description="Generate with a local Hugging Face causal LM, speculatively when --drafter is given.")
    p.add_argument("--target", required=True, help="local model folder (config.json + model.safetensors + tokenizer)")
    p.add_argument("--drafter", default=None,
                   help="ngram | suffix | draft-model:PATH | eagle3:PATH | mtp:PATH | dflash:PATH | dspark:PATH "
                        "(omit for plain decoding)")
    p.add_argument("-D", "--num-draft-tokens", type=int, default=4, help="tokens drafted per step (default 4)")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--stop", action="append", default=None, help="stop string (repeatable)")
    p.add_argument("--adaptive", nargs="?", const=True, default=False, metavar="PROFILE_OR_NAME",
                   help="run-time adaptive D per row (DSpark prefix scheduler); its steps/s curve from the "
                        "planner on a `draftwise profile` file or datasheet name, else measured at start")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--json", action="store_true", help="print one JSON object per prompt instead of text")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", action="append", help="prompt text (repeatable: one batch)")
    src.add_argument("--prompts-file", help="a text file with one prompt per line, or a .jsonl with a 'prompt' field")
    p.set_defaults(func=run)


def _read_prompts(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f if line.strip()]
    if path.endswith(".jsonl"):
        return [json.loads(line)["prompt"] for line in lines]
    return lines


def run(args: argparse.Namespace) -> int:
    import draftwise

    prompts = args.prompt or _read_prompts(args.prompts_file)
    target = draftwise.load_target(args.target, dtype=args.dtype)
    outs = draftwise.generate(target, prompts, drafter=args.drafter, num_draft_tokens=args.num_draft_tokens,
                              max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                              top_p=args.top_p, seed=args.seed, stop=args.stop, adaptive=args.adaptive)
    st = outs.stats
    tokens = sum(len(o.token_ids) for o in outs)
    decode_time = max(st.t_total - st.t_prefill, 1e-9)
    for prompt, o in zip(prompts, outs):
        if args.json:
            print(json.dumps({"prompt": prompt, "text": o.text, "token_ids": o.token_ids,
                              "accept_lengths": o.accept_lengths, "finish_reason": o.finish_reason}))
        else:
            print(f"{prompt}{o.text}\n")
    summary = (f"[{len(outs)} prompt(s), {tokens} tokens, {len(st.steps)} steps, mean acceptance length "
               f"{st.mean_accept_length:.2f}, {tokens / decode_time:.1f} tokens/s decode "
               f"(target {st.t_target:.2f}s, drafter {st.t_drafter:.2f}s, other {st.t_other:.2f}s)]")
    print(summary, file=sys.stderr if args.json else sys.stdout)
    return 0
