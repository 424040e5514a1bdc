"""Shared pieces of the learned, feature-based drafters (EAGLE-3, MTP, DFlash, DSpark).

* Checkpoints: a folder with ``config.json`` and ``model.safetensors`` holding only the drafter's own
  weights; the target's embedding and LM head are shared at load time (`frozen_embedding_and_head`).
  `load_checkpoint` checks the folder, the drafter type and the target before any decoding starts.
* `FeatureDrafter`: the protocol bookkeeping common to drafters that read target hidden states —
  per row, the features of committed tokens the drafter has not consumed yet — and the conversion of
  draft logits into (tokens, probs) that keeps rejection sampling lossless.
* Small modules used by several drafters: `RMSNorm`, rotary embedding, `RaggedKV` (a per-row KV cache
  with explicit positions), and `DecoderLayer` (Llama-style attention + SwiGLU with an optional
  extra key/value context).
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Iterable

import torch
import torch.nn.functional as F
from torch import nn

from ..sampling import process_logits, sample
from ..types import Proposal
from .base import DraftContext, Drafter

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
FORMAT_VERSION = 1

# keys every learned-drafter config may hold; drafter-specific keys are registered per type
COMMON_KEYS = {"drafter_type", "format_version", "target", "target_layer_ids", "draftwise_version", "training"}
KNOWN_KEYS: dict[str, set[str]] = {}


def register_config_keys(drafter_type: str, keys: Iterable[str]) -> None:
    """Declare the drafter-specific config keys of `drafter_type`; `load_checkpoint` then refuses
    any other key (a checkpoint from a newer or different format) with an error naming it."""
    KNOWN_KEYS.setdefault(drafter_type, set()).update(keys)


# --------------------------------------------------------------------------- the target

def _text_config(target):
    cfg = target.config
    return cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg


def target_fingerprint(target) -> dict:
    """What a checkpoint must agree with: hidden size, layer count, vocabulary, model type."""
    cfg = _text_config(target)
    hidden = getattr(cfg, "hidden_size", None) or getattr(cfg, "n_embd", None)
    return {"hidden_size": int(hidden), "num_hidden_layers": int(target.num_layers),
            "vocab_size": int(target.vocab_size), "model_type": str(getattr(cfg, "model_type", "unknown"))}


def default_layer_ids(num_layers: int) -> tuple[int, ...]:
    """EAGLE-3's low / middle / high layers (2, N//2, N−3) as hidden-state indices (i = output of
    decoder layer i), clamped to 1…N and made distinct by moving collisions to the nearest free layer
    (upwards first). Fewer than three only when the target has fewer than three layers."""
    N = int(num_layers)
    if N < 1:
        raise ValueError(f"target has {N} layers")
    chosen: list[int] = []
    for want in (2, N // 2, N - 3):
        want = min(max(want, 1), N)
        for cand in [want] + [x for d in range(1, N + 1) for x in (want + d, want - d)]:
            if 1 <= cand <= N and cand not in chosen:
                chosen.append(cand)
                break
    return tuple(sorted(chosen))


def frozen_embedding_and_head(target) -> tuple[nn.Embedding, nn.Linear]:
    """The target's input embedding and LM head (shared references; frozen)."""
    embed = target.model.get_input_embeddings()
    head = target.model.get_output_embeddings()
    for m in (embed, head):
        for p in m.parameters():
            p.requires_grad_(False)
    return embed, head


def final_norm(target) -> nn.Module:
    """The target's final norm (applied before its LM head), or Identity when none is found."""
    base = getattr(target.model, "base_model", target.model)
    for name in ("norm", "final_layernorm", "ln_f", "norm_f"):
        m = getattr(base, name, None)
        if isinstance(m, nn.Module):
            for p in m.parameters():
                p.requires_grad_(False)
            return m
    return nn.Identity()


class _Frozen:
    """Holds modules without registering them (so they are neither saved nor trained nor moved)."""

    def __init__(self, **mods):
        self.__dict__.update(mods)


# --------------------------------------------------------------------------- checkpoints

def _unwrap(module: nn.Module) -> nn.Module:
    return getattr(module, "module", module) if isinstance(module, nn.parallel.DistributedDataParallel) else module


def trainable_state(module: nn.Module) -> dict[str, torch.Tensor]:
    """The state dict minus frozen parameters (requires_grad=False): the drafter's own weights and
    persistent buffers (vocabulary maps, calibration temperatures…), not the target's shared ones."""
    module = _unwrap(module)
    # remove_duplicate=False: a tied embedding/head is one parameter under two names, both frozen
    frozen = {n for n, p in module.named_parameters(remove_duplicate=False) if not p.requires_grad}
    return {k: v for k, v in module.state_dict().items() if k not in frozen}


def save_checkpoint(module: nn.Module, config: dict, out_dir) -> None:
    """Write ``config.json`` and ``model.safetensors`` (own weights only) into out_dir, atomically
    per file."""
    from safetensors.torch import save_file

    for key in ("drafter_type", "target", "target_layer_ids"):
        if key not in config:
            raise ValueError(f"drafter config lacks {key!r}")
    for key in ("hidden_size", "num_hidden_layers", "vocab_size", "model_type"):
        if key not in config["target"]:
            raise ValueError(f"drafter config['target'] lacks {key!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = dict(config)
    cfg.setdefault("format_version", FORMAT_VERSION)
    cfg["target_layer_ids"] = [int(x) for x in cfg["target_layer_ids"]]
    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in trainable_state(module).items()}
    tmp = out / (WEIGHTS_FILE + ".tmp")
    save_file(tensors, str(tmp), metadata={"drafter_type": str(cfg["drafter_type"])})
    os.replace(tmp, out / WEIGHTS_FILE)
    tmp = out / (CONFIG_FILE + ".tmp")
    tmp.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, out / CONFIG_FILE)


def check_config(config: dict, expected_type: str, target, where: str = "checkpoint",
                 known_keys: Iterable[str] | None = None) -> None:
    """The checks of `load_checkpoint` on an already-read config."""
    kind = config.get("drafter_type")
    if kind != expected_type:
        raise ValueError(f"{where} is a {kind} checkpoint, not {expected_type}; load it with drafter=\"{kind}:PATH\"")
    known = set(known_keys) if known_keys is not None else KNOWN_KEYS.get(expected_type)
    if known is not None:
        for key in config:
            if key not in COMMON_KEYS and key not in known:
                raise ValueError(f"{where}: unknown config key {key!r} for a {expected_type} drafter "
                                 f"(known: {sorted(COMMON_KEYS | known)}); was it written by a newer draftwise?")
    want = config.get("target")
    if not isinstance(want, dict):
        raise ValueError(f"{where}: config.json has no 'target' description")
    have = target_fingerprint(target)
    names = {"hidden_size": "hidden size", "num_hidden_layers": "layer count", "vocab_size": "vocabulary size"}
    for key, label in names.items():
        if key in want and int(want[key]) != have[key]:
            raise ValueError(f"{where} was trained for a different target: {label} {want[key]} there, "
                             f"{have[key]} in this target ({have['model_type']}); train a drafter for this target")
    layers = config.get("target_layer_ids")
    if layers is None:
        raise ValueError(f"{where}: config.json has no 'target_layer_ids'")
    for layer in layers:
        if not 0 <= int(layer) <= have["num_hidden_layers"]:
            raise ValueError(f"{where} reads target layer {layer}, but the target has hidden states 0…"
                             f"{have['num_hidden_layers']}")


def load_checkpoint(path, expected_type: str, target, known_keys: Iterable[str] | None = None
                    ) -> tuple[dict, dict[str, torch.Tensor]]:
    """Read (config, own weights) from a checkpoint folder, with clear errors for a missing folder or
    files, a different drafter type, a different target, or unknown config keys. Weights come from
    safetensors only (never pickle) and are placed on the target's device."""
    from safetensors.torch import load_file

    if path is None or str(path) == "":
        raise ValueError(f"{expected_type} needs a checkpoint folder: drafter=\"{expected_type}:PATH\"")
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{expected_type} checkpoint {str(path)!r} does not exist")
    if not p.is_dir():
        raise ValueError(f"{expected_type} checkpoint {str(path)!r} is not a folder (expected {CONFIG_FILE} and "
                         f"{WEIGHTS_FILE} inside)")
    missing = [f for f in (CONFIG_FILE, WEIGHTS_FILE) if not (p / f).is_file()]
    if missing:
        extra = " (pickle .bin/.pt weights are refused for safety)" if WEIGHTS_FILE in missing else ""
        raise ValueError(f"{expected_type} checkpoint {str(path)!r} lacks {', '.join(missing)}{extra}")
    try:
        config = json.loads((p / CONFIG_FILE).read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{str(p / CONFIG_FILE)!r} is not valid JSON: {exc}") from exc
    if not isinstance(config, dict):
        raise ValueError(f"{str(p / CONFIG_FILE)!r} does not hold a JSON object")
    check_config(config, expected_type, target, where=f"{str(path)!r}", known_keys=known_keys)
    state = load_file(str(p / WEIGHTS_FILE), device=str(target.device))
    return config, state


def load_weights(module: nn.Module, state: dict[str, torch.Tensor], where: str = "checkpoint") -> None:
    """Load own weights strictly (every trainable entry present with the right shape), clear errors."""
    own = trainable_state(module)
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    if missing or unexpected:
        raise ValueError(f"{where} does not match the drafter's architecture: missing {missing[:5]}, "
                         f"unexpected {unexpected[:5]}")
    for k, v in own.items():
        if tuple(state[k].shape) != tuple(v.shape):
            raise ValueError(f"{where}: weight {k!r} has shape {tuple(state[k].shape)}, expected {tuple(v.shape)}")
    module.load_state_dict(state, strict=False)


# --------------------------------------------------------------------------- building blocks

class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dt = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight.float() * x).to(dt)


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float = 10000.0):
    """cos, sin of shape [..., head_dim] for integer positions [...] (Llama's rotate-half layout)."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim))
    ang = positions.float()[..., None] * inv
    emb = torch.cat([ang, ang], -1)
    return emb.cos(), emb.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, H, T, dh]; cos/sin [B, T, dh]."""
    cos, sin = cos[:, None].to(x.dtype), sin[:, None].to(x.dtype)
    h = x.shape[-1] // 2
    rot = torch.cat([-x[..., h:], x[..., :h]], -1)
    return x * cos + rot * sin


class RaggedKV:
    """Per-row key/value cache of one attention layer: entry j of row r is position j of that row.
    `append` writes n[r] new entries at lens[r]…; `truncate(keep)` sets the lengths back."""

    def __init__(self, batch_size: int, heads: int, head_dim: int, device, dtype):
        self.k = torch.zeros(batch_size, heads, 0, head_dim, device=device, dtype=dtype)
        self.v = torch.zeros_like(self.k)
        self.lens = torch.zeros(batch_size, dtype=torch.long, device=device)

    def append(self, k: torch.Tensor, v: torch.Tensor, n: torch.Tensor) -> None:
        B, H, W, dh = k.shape
        need = int((self.lens + W).max()) if B else 0
        if need > self.k.shape[2]:
            grow = max(need - self.k.shape[2], min(64, max(8, self.k.shape[2] // 2)))
            pad = self.k.new_zeros(B, H, grow, dh)
            self.k, self.v = torch.cat([self.k, pad], 2), torch.cat([self.v, pad.clone()], 2)
        idx = (self.lens[:, None] + torch.arange(W, device=k.device)[None, :])  # [B, W]
        idx4 = idx[:, None, :, None].expand(B, H, W, dh)
        self.k.scatter_(2, idx4, k.to(self.k.dtype))
        self.v.scatter_(2, idx4, v.to(self.v.dtype))
        self.lens = self.lens + n

    def truncate(self, keep: torch.Tensor) -> None:
        self.lens = torch.minimum(self.lens, keep)

    def select_rows(self, rows: torch.Tensor) -> None:
        self.k, self.v = self.k.index_select(0, rows), self.v.index_select(0, rows)
        self.lens = self.lens.index_select(0, rows)


class Attention(nn.Module):
    """Grouped-query attention with rotary positions. Two calling modes:

    * training: `forward(x, positions, mask)` over a whole sequence; `mask` [B or 1, T, S] bool
      (True = may attend) over keys [extra_kv ; x] — or causal when mask is None;
    * inference: `forward(x, positions, cache=RaggedKV, n=lengths)` appends the new keys to the cache
      and attends to each row's cache entries at positions ≤ the query's own.
    `extra_kv` (optional) gives extra keys/values placed before x's own (DFlash-style context
    injection, with `mask` over [extra ; x]). qk_norm: Qwen3-style RMSNorm of each head's queries and
    keys before RoPE (DFlash's layers).
    """

    def __init__(self, dim: int, heads: int, kv_heads: int, head_dim: int | None = None, rope_theta: float = 10000.0,
                 in_dim: int | None = None, qk_norm: bool = False, eps: float = 1e-6):
        super().__init__()
        self.h, self.kvh = heads, kv_heads
        self.dh = head_dim or dim // heads
        self.theta = rope_theta
        in_dim = in_dim or dim
        self.q = nn.Linear(in_dim, heads * self.dh, bias=False)
        self.k = nn.Linear(in_dim, kv_heads * self.dh, bias=False)
        self.v = nn.Linear(in_dim, kv_heads * self.dh, bias=False)
        self.o = nn.Linear(heads * self.dh, dim, bias=False)
        self.q_norm = RMSNorm(self.dh, eps) if qk_norm else nn.Identity()
        self.k_norm = RMSNorm(self.dh, eps) if qk_norm else nn.Identity()

    def project_kv(self, x: torch.Tensor, positions: torch.Tensor):
        """Keys (rotated) and values [B, kv_heads, T, dh] of inputs x [B, T, d] at `positions`."""
        B, T, _ = x.shape
        k = self.k_norm(self.k(x).view(B, T, self.kvh, self.dh)).transpose(1, 2)
        v = self.v(x).view(B, T, self.kvh, self.dh).transpose(1, 2)
        cos, sin = rope_cos_sin(positions, self.dh, self.theta)
        return apply_rope(k, cos, sin), v

    def forward(self, x, positions, mask=None, cache: RaggedKV | None = None, n=None, extra_kv=None,
                return_kv: bool = False):
        """mask: None → causal over x (or, with extra_kv, everything visible); else bool
        [B|1, T, S] over the keys [extra_kv ; x]. return_kv: also return x's own (k, v) (rotated,
        before head repetition) so a caller can pass them as extra_kv later (unrolled training)."""
        B, T, _ = x.shape
        q = self.q_norm(self.q(x).view(B, T, self.h, self.dh)).transpose(1, 2)
        cos, sin = rope_cos_sin(positions, self.dh, self.theta)
        q = apply_rope(q, cos, sin)
        k, v = self.project_kv(x, positions)
        own = (k, v)
        causal = False
        if cache is not None:
            start = cache.lens.clone()
            cache.append(k, v, n if n is not None else torch.full((B,), T, device=x.device))
            k, v = cache.k, cache.v
            S = k.shape[2]
            kpos = torch.arange(S, device=x.device)[None, None, :]
            qpos = (start[:, None] + torch.arange(T, device=x.device)[None, :])[:, :, None]
            mask = kpos <= qpos  # [B, T, S]
        elif extra_kv is not None:
            ek, ev = extra_kv
            k, v = torch.cat([ek.to(k.dtype), k], 2), torch.cat([ev.to(v.dtype), v], 2)
        elif mask is None:
            causal = True
        rep = self.h // self.kvh
        if rep > 1:
            k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        k, v = k.to(q.dtype), v.to(q.dtype)
        if causal:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None else mask[:, None])
        out = self.o(out.transpose(1, 2).reshape(B, T, self.h * self.dh))
        return (out, own) if return_kv else out


class MLP(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class DecoderLayer(nn.Module):
    """Pre-norm Llama block: x + Attn(norm(x)); + MLP(norm(x))."""

    def __init__(self, dim: int, heads: int, kv_heads: int, ffn: int, head_dim: int | None = None,
                 rope_theta: float = 10000.0, eps: float = 1e-6, qk_norm: bool = False):
        super().__init__()
        self.attn_norm = RMSNorm(dim, eps)
        self.attn = Attention(dim, heads, kv_heads, head_dim, rope_theta, qk_norm=qk_norm, eps=eps)
        self.mlp_norm = RMSNorm(dim, eps)
        self.mlp = MLP(dim, ffn)

    def forward(self, x, positions, mask=None, cache=None, n=None, extra_kv=None, return_kv: bool = False):
        a = self.attn(self.attn_norm(x), positions, mask=mask, cache=cache, n=n, extra_kv=extra_kv,
                      return_kv=return_kv)
        a, kv = a if return_kv else (a, None)
        x = x + a
        x = x + self.mlp(self.mlp_norm(x))
        return (x, kv) if return_kv else x


def attention_shape(dim: int, heads: int | None = None) -> tuple[int, int, int]:
    """(heads, kv_heads, head_dim) for a small drafter layer of width dim."""
    if heads is None:
        heads = max(1, dim // 64) if dim >= 64 else 1
        while dim % heads:
            heads -= 1
    kv = heads // 2 if heads % 2 == 0 and heads > 1 else heads
    return heads, kv, dim // heads


# --------------------------------------------------------------------------- the protocol side

def expand_to_vocab(logits: torch.Tensor, vocab_size: int, d2t: torch.Tensor | None = None) -> torch.Tensor:
    """Draft logits → logits over the target vocabulary: with a reduced draft vocabulary (d2t[i] =
    target id of draft id i) unmapped ids get −inf; a larger head is cut, a smaller one padded −inf."""
    if d2t is not None:
        full = logits.new_full((*logits.shape[:-1], vocab_size), float("-inf"))
        full[..., d2t] = logits
        return full
    V = logits.shape[-1]
    if V > vocab_size:
        return logits[..., :vocab_size]
    if V < vocab_size:
        return F.pad(logits, (0, vocab_size - V), value=float("-inf"))
    return logits


def draft_from_logits(logits: torch.Tensor, ctx: DraftContext, vocab_size: int, d2t: torch.Tensor | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(tokens [...], q [..., V] or None) for one or more draft positions.

    Greedy: argmax (over the target vocabulary) and no probs. Sampling: q = the processed draft
    distribution (the same temperature / top-k / top-p as the target) and tokens sampled from exactly
    q — what rejection sampling needs to stay lossless."""
    full = expand_to_vocab(logits.float(), vocab_size, d2t)
    if ctx.params.greedy:
        return full.argmax(-1), None
    q = process_logits(full, ctx.params)
    return sample(q, ctx.generator), q


class FeatureDrafter(Drafter):
    """Bookkeeping for drafters that read target hidden states.

    Per row it keeps the features of committed positions the drafter has not consumed yet
    (`pending`), the absolute position of the first of them (`consumed[r]` = positions already
    consumed), and hands them out with `take_pending(ctx)`. Position t's feature is the target's
    state after token t, which predicts token t+1; `take_pending` returns both the tokens at those
    positions and the tokens that follow them (all committed, so always known).

    Subclasses implement `propose` (calling `take_pending` first) and, if they hold a cache of draft
    positions, `accepted` to roll it back. `select_rows` here keeps the bookkeeping in step; subclasses
    extend it for their own caches."""

    parallel = False

    def __init__(self, target, hidden_layers: tuple[int, ...]):
        self.target = target
        self.vocab_size = target.vocab_size
        self.hidden_layers = tuple(int(x) for x in hidden_layers)
        self.device = target.device
        self._reset(0)

    def _reset(self, batch_size: int) -> None:
        self.pending: list[dict[int, torch.Tensor]] = [
            {l: None for l in self.hidden_layers} for _ in range(batch_size)]
        self.pending_start = [0] * batch_size       # absolute position of pending[r]'s first entry
        self.pending_count = [0] * batch_size
        self.consumed = torch.zeros(batch_size, dtype=torch.long, device=self.device)
        self._seen_hidden = None

    # --- protocol --------------------------------------------------------------------------
    def start(self, ctx: DraftContext) -> None:
        self._reset(ctx.batch_size)

    def select_rows(self, rows: torch.Tensor) -> None:
        idx = rows.tolist()
        self.pending = [self.pending[i] for i in idx]
        self.pending_start = [self.pending_start[i] for i in idx]
        self.pending_count = [self.pending_count[i] for i in idx]
        self.consumed = self.consumed.index_select(0, rows.to(self.consumed.device))

    # --- features ----------------------------------------------------------------------------
    def absorb(self, ctx: DraftContext) -> None:
        """Move ctx.hidden (each batch of it once) into the per-row pending buffers."""
        if ctx.num_hidden is None or not ctx.hidden:
            return
        if ctx.hidden is self._seen_hidden:  # a reference (not an id), so it cannot be recycled
            return
        self._seen_hidden = ctx.hidden
        nh = ctx.num_hidden.tolist()
        for r, n in enumerate(nh):
            if n <= 0:
                continue
            start = len(ctx.sequences[r]) - 1 - n
            end_pending = self.pending_start[r] + self.pending_count[r]
            if self.pending_count[r] == 0:
                self.pending_start[r] = start
            elif start != end_pending:
                raise RuntimeError(f"{self.name}: row {r} received features from position {start}, expected "
                                   f"{end_pending} (a step's hidden states were skipped)")
            for l in self.hidden_layers:
                h = ctx.hidden[l][r, :n]
                old = self.pending[r][l]
                self.pending[r][l] = h if old is None else torch.cat([old, h], 0)
            self.pending_count[r] += n

    def take_pending(self, ctx: DraftContext):
        """Absorb ctx.hidden and return everything pending, left-aligned and padded:

        feats {layer: [B, W, d]}, n [B] (valid entries per row), positions [B, W] (absolute
        positions), tokens [B, W] (the token at each position) and next_tokens [B, W] (the token
        after it). Clears the buffers and advances `consumed`."""
        B = ctx.batch_size
        if (ctx.num_hidden is not None and ctx.hidden and ctx.hidden is not self._seen_hidden
                and not any(self.pending_count)):
            return self._take_direct(ctx)
        self.absorb(ctx)
        n = torch.tensor(self.pending_count, dtype=torch.long, device=self.device)
        W = int(n.max()) if B else 0
        feats = {}
        for l in self.hidden_layers:
            ref = next((p[l] for p in self.pending if p[l] is not None), None)
            d = ref.shape[-1] if ref is not None else 1
            dt = ref.dtype if ref is not None else torch.float32
            t = torch.zeros(B, W, d, device=self.device, dtype=dt)
            for r in range(B):
                if self.pending_count[r]:
                    t[r, : self.pending_count[r]] = self.pending[r][l]
            feats[l] = t
        starts = torch.tensor(self.pending_start, dtype=torch.long, device=self.device)
        positions = starts[:, None] + torch.arange(W, device=self.device)[None, :]
        tokens = torch.zeros(B, W, dtype=torch.long, device=self.device)
        nxt = torch.zeros(B, W, dtype=torch.long, device=self.device)
        for r in range(B):
            c, s = self.pending_count[r], self.pending_start[r]
            if c:
                seq = ctx.sequences[r]
                tokens[r, :c] = torch.tensor(seq[s:s + c], dtype=torch.long)
                nxt[r, :c] = torch.tensor(seq[s + 1:s + c + 1], dtype=torch.long)
        for r in range(B):
            self.pending_start[r] += self.pending_count[r]
            self.pending_count[r] = 0
            self.pending[r] = {l: None for l in self.hidden_layers}
        self.consumed = self.consumed + n
        return feats, n, positions, tokens, nxt

    def _take_direct(self, ctx: DraftContext):
        """Fast path of take_pending when nothing was pending: ctx.hidden is already left-aligned."""
        self._seen_hidden = ctx.hidden
        n = ctx.num_hidden.to(self.device).long().clamp_min(0)
        B = ctx.batch_size
        W = int(n.max()) if B else 0
        feats = {l: ctx.hidden[l][:, :W] for l in self.hidden_layers}
        lens = [len(s) for s in ctx.sequences]
        nl = n.tolist()
        starts = [L - 1 - c for L, c in zip(lens, nl)]
        positions = torch.tensor(starts, dtype=torch.long, device=self.device)[:, None] + \
            torch.arange(W, device=self.device)[None, :]
        pad = [seq[s:s + c + 1] + [0] * (W - c) for seq, s, c in zip(ctx.sequences, starts, nl)]
        both = torch.tensor(pad, dtype=torch.long, device=self.device).view(B, W + 1)
        tokens, nxt = both[:, :W].clone(), both[:, 1:].clone()
        valid = torch.arange(W, device=self.device)[None, :] < n[:, None]
        tokens, nxt = tokens * valid, nxt * valid
        self.pending_start = [s + c for s, c in zip(starts, nl)]
        self.consumed = self.consumed + n
        return feats, n, positions, tokens, nxt

    # --- drafting helpers ----------------------------------------------------------------------
    def draft(self, logits: torch.Tensor, ctx: DraftContext, d2t: torch.Tensor | None = None):
        return draft_from_logits(logits, ctx, self.vocab_size, d2t)

    @staticmethod
    def make_proposal(tokens: list[torch.Tensor], probs: list[torch.Tensor | None], max_tokens: torch.Tensor,
                      confidence: list[torch.Tensor] | None = None) -> Proposal:
        B = max_tokens.shape[0]
        dev = max_tokens.device
        if not tokens:
            return Proposal.empty(B, dev)
        tok = torch.stack(tokens, 1)
        pr = torch.stack(probs, 1) if probs and probs[0] is not None else None
        conf = torch.stack(confidence, 1) if confidence else None
        return Proposal(tokens=tok, num_tokens=max_tokens.clamp(max=tok.shape[1]).clone(), probs=pr,
                        confidence=conf)
