"""Self-distillation data for the learned drafters.

Prompts are windows of a corpus (a token file or text); the frozen target regenerates their
continuations (sampled or greedy), so the drafter learns the target's distribution rather than the
corpus'. One plain forward of the target over each finished sequence then gives what the losses need:

    {"input_ids":  [B, T] long,
     "loss_mask":  [B, T] float   — 1 where position t's target distribution is a training label,
     "hidden":     {layer: [B, T, d]} — target hidden states (index i = output of decoder layer i,
                                        N = after the final norm, as in the engine),
     "target_logprobs": [B, T, V]  (full log-probs, small vocabularies)
       or "target_topk": {"values": [B, T, k] log-probs, "indices": [B, T, k]}}

Position t's hidden state and distribution are the target's after reading input_ids[:, :t+1], i.e.
they score token t+1. "online" mode builds batches on the fly (`OnlineStream`); "offline" mode writes
them to safetensors shards once (`write_shards`) and reads them back (`OfflineStream`): both feed the
same dict to the loss functions.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import torch

from .trainer import IndexedStream

FULL_LOGPROBS_MAX_VOCAB = 4096  # above this, keep only the top-k by default


# --------------------------------------------------------------------------- token sources

def load_token_source(path, tokenizer=None) -> np.ndarray:
    """Token ids from: a uint16 ``.bin`` memmap (the zoo's tokenized corpus), ``.npy``, a folder holding
    ``train.bin``, or a text file (encoded with the target's tokenizer)."""
    p = Path(path)
    if p.is_dir():
        if (p / "train.bin").is_file():
            p = p / "train.bin"
        else:
            raise ValueError(f"{str(path)!r} is a folder without train.bin; pass a token file or a text file")
    if not p.exists():
        raise FileNotFoundError(f"training data {str(path)!r} does not exist")
    if p.suffix == ".bin":
        return np.memmap(p, dtype=np.uint16, mode="r")
    if p.suffix == ".npy":
        return np.load(p, allow_pickle=False)
    if tokenizer is None:
        raise ValueError(f"{str(path)!r} is text; the target has no tokenizer to encode it (give a token .bin/.npy)")
    text = p.read_text(encoding="utf-8", errors="replace")
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return np.asarray(ids, dtype=np.int64)


def _model_of(target):
    return getattr(target, "model", target)


# --------------------------------------------------------------------------- the teacher

@torch.no_grad()
def regenerate(target, prompts: torch.Tensor, new_tokens: int, mode: str = "sample", temperature: float = 1.0,
               generator: torch.Generator | None = None) -> torch.Tensor:
    """Continue equal-length prompts [B, P] by new_tokens with the target (KV-cached, no padding):
    mode "sample" (at `temperature`), "greedy", or "none" (return the prompts)."""
    if mode == "none" or new_tokens <= 0:
        return prompts
    if mode not in ("sample", "greedy"):
        raise ValueError(f"regeneration mode must be sample, greedy or none, not {mode!r}")
    import inspect

    from transformers import DynamicCache

    model = _model_of(target)
    params = inspect.signature(model.forward).parameters
    arg = next((n for n in ("cache", "past_key_values", "cache_params") if n in params), "past_key_values")
    cache = DynamicCache(config=model.config)  # filled in place by each forward
    out = model(input_ids=prompts, use_cache=True, **{arg: cache})
    seqs = [prompts]
    logits = out.logits[:, -1].float()
    for i in range(new_tokens):
        if mode == "greedy":
            nxt = logits.argmax(-1)
        else:
            probs = torch.softmax(logits / max(temperature, 1e-6), -1)
            nxt = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        seqs.append(nxt[:, None])
        if i + 1 < new_tokens:
            out = model(input_ids=nxt[:, None], use_cache=True, **{arg: cache})
            logits = out.logits[:, -1].float()
    return torch.cat(seqs, 1)


@torch.no_grad()
def teach(target, input_ids: torch.Tensor, layers, topk: int | None = None) -> dict:
    """One plain forward of the frozen target: hidden states of `layers` and its distributions.
    topk=None keeps full log-probs, otherwise the top-k log-probs and their ids."""
    model = _model_of(target)
    out = model(input_ids=input_ids, output_hidden_states=True, use_cache=False)
    logp = torch.log_softmax(out.logits.float(), -1)
    batch = {"input_ids": input_ids, "hidden": {int(l): out.hidden_states[int(l)] for l in layers}}
    if topk is None:
        batch["target_logprobs"] = logp
    else:
        v, i = logp.topk(topk, -1)
        batch["target_topk"] = {"values": v, "indices": i}
    return batch


def target_probs(batch: dict, vocab_size: int | None = None) -> torch.Tensor:
    """The target's distribution [B, T, V] from either form (top-k renormalised over its k ids)."""
    if "target_logprobs" in batch:
        return batch["target_logprobs"].float().exp()
    tk = batch["target_topk"]
    vals, idx = tk["values"].float(), tk["indices"].long()
    if vocab_size is None:
        raise ValueError("top-k targets need the vocabulary size")
    p = torch.softmax(vals, -1)
    return torch.zeros(*vals.shape[:-1], vocab_size, device=vals.device).scatter_(-1, idx, p)


def soft_cross_entropy(logits: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
    """−Σ p log softmax(logits) per position (zero-probability entries contribute nothing)."""
    logq = torch.log_softmax(logits.float(), -1)
    return -(probs * logq.masked_fill(probs == 0, 0.0)).sum(-1)


# --------------------------------------------------------------------------- online mode

class OnlineStream(IndexedStream):
    """Batch i: `batch_size` random prompt windows (a pure function of (seed, i)), regenerated by the
    target, then taught. Resuming restores i only."""

    def __init__(self, target, tokens: np.ndarray, layers, batch_size: int = 8, seq_len: int = 256,
                 prompt_len: int | None = None, regen: str = "sample", temperature: float = 1.0,
                 topk: int | None = None, mask_prompt: bool = False, seed: int = 0):
        self.target, self.tokens, self.layers = target, tokens, tuple(int(l) for l in layers)
        self.batch_size, self.seq_len = int(batch_size), int(seq_len)
        if prompt_len is None:
            prompt_len = seq_len if regen == "none" else max(1, seq_len // 4)
        self.prompt_len = min(int(prompt_len), self.seq_len)
        self.regen, self.temperature, self.mask_prompt, self.seed = regen, temperature, mask_prompt, seed
        V = _model_of(target).get_output_embeddings().weight.shape[0]
        self.topk = topk if topk is not None else (None if V <= FULL_LOGPROBS_MAX_VOCAB else 64)
        if len(tokens) <= self.prompt_len + 1:
            raise ValueError(f"the token source has {len(tokens)} tokens, fewer than one prompt of {self.prompt_len}")
        super().__init__(self.make)

    def make(self, i: int) -> dict:
        rng = np.random.default_rng([self.seed, i])
        P = self.prompt_len
        starts = rng.integers(0, len(self.tokens) - P, size=self.batch_size)
        prompts = torch.from_numpy(np.stack([np.asarray(self.tokens[s:s + P], dtype=np.int64) for s in starts]))
        dev = getattr(self.target, "device", None) or next(_model_of(self.target).parameters()).device
        prompts = prompts.to(dev)
        gen = torch.Generator(device=dev).manual_seed(int(rng.integers(0, 2**62)))
        ids = regenerate(self.target, prompts, self.seq_len - P, self.regen, self.temperature, gen)
        batch = teach(self.target, ids, self.layers, self.topk)
        mask = torch.ones(ids.shape, dtype=torch.float32, device=ids.device)
        if self.mask_prompt and self.regen != "none":
            mask[:, : P - 1] = 0.0
        batch["loss_mask"] = mask
        return batch


# --------------------------------------------------------------------------- offline mode

def _flatten(batch: dict) -> dict[str, torch.Tensor]:
    flat = {"input_ids": batch["input_ids"], "loss_mask": batch["loss_mask"]}
    for l, h in batch["hidden"].items():
        flat[f"hidden.{l}"] = h
    if "target_logprobs" in batch:
        flat["target_logprobs"] = batch["target_logprobs"]
    else:
        flat["target_topk.values"] = batch["target_topk"]["values"]
        flat["target_topk.indices"] = batch["target_topk"]["indices"]
    return flat


def _unflatten(flat: dict[str, torch.Tensor]) -> dict:
    batch = {"input_ids": flat["input_ids"].long(), "loss_mask": flat["loss_mask"].float(), "hidden": {}}
    for k, v in flat.items():
        if k.startswith("hidden."):
            batch["hidden"][int(k.split(".", 1)[1])] = v
    if "target_logprobs" in flat:
        batch["target_logprobs"] = flat["target_logprobs"].float()
    else:
        batch["target_topk"] = {"values": flat["target_topk.values"].float(),
                                "indices": flat["target_topk.indices"].long()}
    return batch


def write_shards(out_dir, stream: OnlineStream, num_batches: int, hidden_dtype=None, progress: bool = False) -> dict:
    """Offline mode: write num_batches of `stream` as safetensors shards (one per batch) + meta.json."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    it = iter(stream)
    rng = range(num_batches)
    if progress:
        from tqdm.auto import tqdm
        rng = tqdm(rng, desc="shards")
    n = 0
    for b in rng:
        flat = _flatten(next(it))
        if hidden_dtype is not None:
            flat = {k: (v.to(hidden_dtype) if k.startswith("hidden.") else v) for k, v in flat.items()}
        flat = {k: v.detach().cpu().contiguous() for k, v in flat.items()}
        tmp = out / f"shard_{b:05d}.safetensors.tmp"
        save_file(flat, str(tmp))
        os.replace(tmp, out / f"shard_{b:05d}.safetensors")
        n += flat["input_ids"].shape[0]
    meta = {"num_sequences": n, "num_shards": num_batches, "seq_len": stream.seq_len, "layers": list(stream.layers),
            "topk": stream.topk, "regen": stream.regen, "temperature": stream.temperature,
            "tokens": n * stream.seq_len, "seed": stream.seed}
    try:
        from ..drafters.learned import target_fingerprint
        meta["target"] = target_fingerprint(stream.target)
    except Exception:  # noqa: BLE001 — a bare PreTrainedModel is fine too
        pass
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


class OfflineStream(IndexedStream):
    """Sequences from the shards, shuffled per epoch by (seed, epoch); batch i is a pure function of i."""

    def __init__(self, shard_dir, batch_size: int, seed: int = 0, layers=None):
        from safetensors.torch import load_file

        d = Path(shard_dir)
        if not (d / "meta.json").is_file():
            raise ValueError(f"{str(shard_dir)!r} holds no shards (meta.json missing); write them with "
                             "`draftwise train … --mode offline` or train.data.write_shards")
        self.meta = json.loads((d / "meta.json").read_text())
        files = sorted(d.glob("shard_*.safetensors"))
        parts = [load_file(str(f)) for f in files]
        self.data = {k: torch.cat([p[k] for p in parts], 0) for k in parts[0]}
        if layers is not None:
            have = {int(k.split(".", 1)[1]) for k in self.data if k.startswith("hidden.")}
            miss = sorted(set(int(l) for l in layers) - have)
            if miss:
                raise ValueError(f"shards in {str(shard_dir)!r} hold hidden states of layers {sorted(have)}, "
                                 f"the drafter needs {miss} too; regenerate them")
        self.N = self.data["input_ids"].shape[0]
        self.batch_size, self.seed = int(batch_size), seed
        self._perm = (-1, None)
        super().__init__(self.batch)

    def batch(self, i: int) -> dict:
        B = self.batch_size
        idx = []
        for j in range(i * B, (i + 1) * B):
            epoch, k = divmod(j, self.N)
            if self._perm[0] != epoch:
                self._perm = (epoch, np.random.default_rng([self.seed, epoch]).permutation(self.N))
            idx.append(int(self._perm[1][k]))
        ix = torch.tensor(idx)
        return _unflatten({k: v.index_select(0, ix) for k, v in self.data.items()})


def heldout_prompts(tokens: np.ndarray, n: int, length: int, seed: int = 12345) -> list[list[int]]:
    """Evaluation prompts from the end of a token source (not where training windows concentrate:
    pass a validation file for a true hold-out)."""
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, max(1, len(tokens) - length), size=n)
    return [np.asarray(tokens[s:s + length], dtype=np.int64).tolist() for s in starts]
