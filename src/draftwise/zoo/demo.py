"""`draftwise demo`: the reference target with every available drafter on a few kinds of text.

Prints one table — per drafter and prompt kind: mean acceptance length, tokens/s, speedup over
plain decoding and whether greedy output matched plain decoding — and writes the same as JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from importlib import resources
from pathlib import Path

LEARNED = ["eagle3", "mtp", "dflash", "dspark"]


def default_zoo() -> Path:
    env = os.environ.get("DRAFTWISE_ZOO")
    if env:
        return Path(env)
    here = Path(__file__).resolve()
    for parent in here.parents:  # a source checkout (editable install) keeps zoo/ at the top
        if (parent / "zoo" / "target" / "config.json").is_file():
            return parent / "zoo"
    return Path.cwd() / "zoo"


def build_tiny_zoo(out: Path, prompts: list[dict]) -> Path:
    """A stand-in zoo for machines without the trained reference models: a byte-level BPE trained
    on the demo prompts, a random Llama target and a noisy copy of it as draft model. Its acceptance
    numbers mean nothing about real text; exactness and the plumbing are what it shows."""
    import torch
    import transformers as T
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from ..drafters.draft_model import perturbed_copy

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([p["prompt"] for p in prompts] * 4, trainer)
    fast = T.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")
    torch.manual_seed(0)
    cfg = T.LlamaConfig(vocab_size=len(fast), hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
                        num_key_value_heads=2, intermediate_size=256, initializer_range=0.1,
                        tie_word_embeddings=False, max_position_embeddings=512, eos_token_id=None)
    target = T.LlamaForCausalLM(cfg).eval()
    for name, model in (("target", target), ("draft", perturbed_copy(target, 0.05, seed=1))):
        model.save_pretrained(out / name)
        fast.save_pretrained(out / name)
    return out


def load_prompts(path: str | None = None) -> list[dict]:
    text = (Path(path).read_text(encoding="utf-8") if path
            else resources.files("draftwise.data").joinpath("demo_prompts.jsonl").read_text(encoding="utf-8"))
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def available_drafters(zoo: Path) -> list[tuple[str, str]]:
    """(label, spec) of every drafter the zoo can offer, plain decoding first."""
    out = [("plain", None)]
    if (zoo / "draft" / "config.json").is_file():
        out.append(("draft-model", f"draft-model:{zoo / 'draft'}"))
    out += [("ngram", "ngram"), ("suffix", "suffix")]
    for name in LEARNED:
        if (zoo / name / "config.json").is_file():
            out.append((name, f"{name}:{zoo / name}"))
    return out


def run_demo(zoo: Path, prompts: list[dict], num_draft_tokens: int, max_new_tokens: int, dtype: str,
             progress: bool = True, drafters: list[str] | None = None) -> dict:
    from tqdm import tqdm

    import draftwise

    if not (zoo / "target" / "config.json").is_file():
        raise FileNotFoundError(f"no reference target in {zoo}/target; run from a draftwise checkout, pass --zoo, "
                                "or build it with `draftwise zoo build`")
    target = draftwise.load_target(str(zoo / "target"), dtype=dtype)
    choices = [(label, spec) for label, spec in available_drafters(zoo) if not drafters or label in drafters
               or label == "plain"]
    built = [(label, draftwise.build_drafter(spec, target)) for label, spec in choices]
    kinds = sorted({p["kind"] for p in prompts}, key=[p["kind"] for p in prompts].index)
    rows, plain_ids = [], {}
    bar = tqdm(total=len(built) * len(prompts), desc="demo", disable=not progress, unit="prompt")
    for label, drafter in built:
        # warm-up: first calls pay one-off allocation costs that would distort short timings
        draftwise.generate(target, prompts[0]["prompt"], drafter=drafter, num_draft_tokens=num_draft_tokens,
                           max_new_tokens=8)
        per_kind = {k: {"tokens": 0, "time": 0.0, "steps": 0, "match": True} for k in kinds}
        for i, p in enumerate(prompts):
            t0 = time.perf_counter()
            out = draftwise.generate(target, p["prompt"], drafter=drafter, num_draft_tokens=num_draft_tokens,
                                     max_new_tokens=max_new_tokens)[0]
            dt = time.perf_counter() - t0
            acc = per_kind[p["kind"]]
            acc["tokens"] += len(out.token_ids)
            acc["time"] += dt
            acc["steps"] += len(out.accept_lengths)
            if label == "plain":
                plain_ids[i] = out.token_ids
            else:
                acc["match"] &= out.token_ids == plain_ids[i]
            bar.update(1)
        for k, acc in per_kind.items():
            rows.append({"drafter": label, "kind": k, "mean_accept_length": acc["tokens"] / max(acc["steps"], 1),
                         "tokens_per_s": acc["tokens"] / acc["time"], "tokens": acc["tokens"],
                         "greedy_match": acc["match"] if label != "plain" else None})
    bar.close()
    base = {r["kind"]: r["tokens_per_s"] for r in rows if r["drafter"] == "plain"}
    for r in rows:
        r["speedup"] = r["tokens_per_s"] / base[r["kind"]]
    return {"target": str(zoo / "target"), "dtype": dtype, "num_draft_tokens": num_draft_tokens,
            "max_new_tokens": max_new_tokens, "rows": rows}


def format_table(result: dict) -> str:
    head = f"{'drafter':<12} {'kind':<10} {'accept len':>10} {'tokens/s':>9} {'speedup':>8}  greedy == plain"
    lines = [head, "-" * len(head)]
    for r in result["rows"]:
        match = "-" if r["greedy_match"] is None else ("yes" if r["greedy_match"] else "NO")
        lines.append(f"{r['drafter']:<12} {r['kind']:<10} {r['mean_accept_length']:>10.2f} {r['tokens_per_s']:>9.1f} "
                     f"{r['speedup']:>7.2f}x  {match}")
    return "\n".join(lines)


def add_cli(sub) -> None:
    p = sub.add_parser("demo", help="the reference models with every drafter: acceptance, speed, exactness",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--zoo", default=None, help="folder with target/, draft/ and trained drafters (default: the repo's zoo/)")
    p.add_argument("--tiny", action="store_true",
                   help="use a tiny random stand-in (built in a temp dir) instead of the reference models; "
                        "also the fallback when no reference models are found")
    p.add_argument("--prompts", default=None, help="JSONL with 'kind' and 'prompt' (default: the bundled set)")
    p.add_argument("-D", "--num-draft-tokens", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                   help="float32 (default) keeps greedy output exactly equal to plain decoding")
    p.add_argument("--drafter", action="append", default=None, help="only these drafters (labels; repeatable)")
    p.add_argument("--out", default="draftwise_demo.json", help="where to write the JSON results")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=_run)


def _run(args) -> int:
    import tempfile

    zoo = Path(args.zoo) if args.zoo else default_zoo()
    prompts = load_prompts(args.prompts)
    with tempfile.TemporaryDirectory() as tmp:
        if args.tiny or (args.zoo is None and not (zoo / "target" / "config.json").is_file()):
            print("no reference models found: running on a tiny random stand-in (acceptance numbers are not "
                  "meaningful; build the real ones with `draftwise zoo build`)")
            zoo = build_tiny_zoo(Path(tmp), prompts)
        result = run_demo(zoo, prompts, args.num_draft_tokens, args.max_new_tokens, args.dtype,
                          progress=not args.no_progress, drafters=args.drafter)
    print(format_table(result))
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"\nwrote {args.out}")
    return 0
