"""DFlash: a parallel block drafter conditioned on the target's hidden states (arXiv 2602.06036).

Model
  Target hidden states of a few uniformly spaced layers, concatenated and projected (FC + RMSNorm),
  are the *context features* of the committed tokens. In every drafter layer the keys and values
  are computed over [context features ; block] while the queries come from the block only ("KV
  injection"); the context keys/values live in the drafter's own per-row cache. The block input is
  [pending token, MASK × (B−1)], attention inside the block is bidirectional, the context is seen up
  to (not including) the pending token. A few Qwen3-style layers (RMSNorm, q/k norms, RoPE at the
  tokens' absolute positions, SwiGLU) end in a final RMSNorm and the target's own frozen LM head;
  the input embedding is the target's frozen one too. Block position k (1 … B−1) predicts the token
  at absolute position (pending + k), so one forward proposes up to B−1 drafts.

Positions: the pending token sits at absolute position L = len(sequence) − 1; the context holds the
features of positions 0 … L−1 (exactly what the target has processed).
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..sampling import process_logits, sample
from ..types import Proposal
from .base import DraftContext, Drafter, register

from .learned import (DecoderLayer, RMSNorm, frozen_embedding_and_head, load_checkpoint, load_weights,
                      register_config_keys, save_checkpoint, target_fingerprint, trainable_state)


def dflash_layer_ids(num_layers: int, count: int = 4) -> tuple[int, ...]:
    """Uniformly spaced target layers 1 … N−3 (HF hidden_states indices: i = output of decoder layer i),
    at most `count`; a very shallow target (N ≤ 4) uses its layers 1 … N."""
    N = int(num_layers)
    if N <= 4:
        return tuple(range(1, N + 1))[:count]
    hi = N - 3
    count = max(1, min(count, hi))
    return tuple(sorted({round(1 + i * (hi - 1) / max(count - 1, 1)) for i in range(count)}))


# --------------------------------------------------------------------------------------------------
# the model


def make_config(target, drafter_type: str = "dflash", **opts) -> dict:
    """Architecture config from the target (a ModelRunner; hidden size shared with the frozen
    embedding and head, attention shape and RoPE base copied from the target)."""
    c = target.model.config
    c = c.get_text_config() if hasattr(c, "get_text_config") else c
    fp = target_fingerprint(target)
    d = fp["hidden_size"]
    heads = int(opts.get("num_heads") or getattr(c, "num_attention_heads", None) or max(1, d // 64))
    head_dim = int(opts.get("head_dim") or getattr(c, "head_dim", None) or d // heads)
    kv = int(opts.get("num_kv_heads") or getattr(c, "num_key_value_heads", None) or heads)
    if heads % kv:
        kv = heads
    ids = opts.get("layer_ids") or dflash_layer_ids(fp["num_hidden_layers"])
    ids = tuple(int(i) for i in (ids.split(",") if isinstance(ids, str) else ids))
    block = int(opts.get("block_size", 8))
    if block < 2:
        raise ValueError(f"block_size must be ≥ 2 (one anchor + at least one mask), got {block}")
    theta = opts.get("rope_theta") or getattr(c, "rope_theta", None) or \
        (getattr(c, "rope_parameters", None) or {}).get("rope_theta", 10000.0)
    return {
        "drafter_type": drafter_type,
        "target": fp,
        "target_layer_ids": list(ids),
        "hidden_size": d,
        "num_layers": int(opts.get("num_layers", 2)),
        "num_heads": heads,
        "num_kv_heads": kv,
        "head_dim": head_dim,
        "intermediate_size": int(opts.get("intermediate_size") or getattr(c, "intermediate_size", None) or 4 * d),
        "rope_theta": float(theta),
        "rms_norm_eps": float(getattr(c, "rms_norm_eps", 1e-6)),
        "block_size": block,
        "vocab_size": fp["vocab_size"],
    }


CONFIG_KEYS = ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim", "intermediate_size",
               "rope_theta", "rms_norm_eps", "block_size", "vocab_size", "train_num_anchors", "train_gamma",
               "train_soft")
register_config_keys("dflash", CONFIG_KEYS)


class DFlashModel(nn.Module):
    """Backbone shared by DFlash and DSpark. `embed` and `head` are the target's frozen modules."""

    drafter_type = "dflash"

    def __init__(self, config: dict, embed: nn.Module, head: nn.Module):
        super().__init__()
        self.config = dict(config)
        d = config["hidden_size"]
        self.layer_ids = tuple(config["target_layer_ids"])
        self.block_size = int(config["block_size"])
        self.fc = nn.Linear(len(self.layer_ids) * int(config["target"]["hidden_size"]), d, bias=False)
        self.ctx_norm = RMSNorm(d, config["rms_norm_eps"])
        self.mask_embedding = nn.Parameter(torch.randn(d) * 0.02)
        self.layers = nn.ModuleList(
            DecoderLayer(d, config["num_heads"], config["num_kv_heads"], config["intermediate_size"],
                         config["head_dim"], config["rope_theta"], config["rms_norm_eps"], qk_norm=True)
            for _ in range(config["num_layers"]))
        self.norm = RMSNorm(d, config["rms_norm_eps"])
        self.embed, self.head = embed, head
        for p in list(embed.parameters()) + list(head.parameters()):
            p.requires_grad_(False)

    # hidden_layers is what the data pipeline / the engine must capture for this model
    @property
    def hidden_layers(self) -> tuple[int, ...]:
        return self.layer_ids

    # -- pieces ---------------------------------------------------------------------------------
    @property
    def param_dtype(self):
        return self.fc.weight.dtype

    def context_features(self, hidden) -> torch.Tensor:
        """{layer: [B, L, d_t]} (or the concatenation [B, L, n·d_t]) → projected features [B, L, d]."""
        if isinstance(hidden, dict):
            hidden = torch.cat([hidden[i] for i in self.layer_ids], -1)
        return self.ctx_norm(self.fc(hidden.to(self.param_dtype)))

    def context_kv(self, feats: torch.Tensor, pos: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [layer.attn.project_kv(feats, pos) for layer in self.layers]

    def block_inputs(self, anchors: torch.Tensor, n_blocks_shape=None) -> torch.Tensor:
        """anchors [...] token ids → [..., B, d]: the anchor's embedding then B−1 mask embeddings."""
        e = self.embed(anchors).to(self.param_dtype)
        m = self.mask_embedding.to(e.dtype).expand(*anchors.shape, self.block_size - 1, -1)
        return torch.cat([e[..., None, :], m], -2)

    def backbone(self, x, pos, ctx_kv, mask) -> torch.Tensor:
        """x [B, Q, d] block inputs at positions pos [B, Q]; ctx_kv per layer; → final-normed [B, Q, d]."""
        for layer, kv in zip(self.layers, ctx_kv):
            x = layer(x, pos, mask=mask, extra_kv=kv)
        return self.norm(x)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        w = self.head.weight
        flat = h.reshape(-1, h.shape[-1]).to(w.dtype)  # 2-D: a plain GEMM (a strided 4-D input runs a slow bmm)
        return self.head(flat).float().view(*h.shape[:-1], -1)

    # -- training forward -----------------------------------------------------------------------
    def forward(self, input_ids: torch.Tensor, hidden, anchors: torch.Tensor) -> dict:
        """Many blocks per sequence in one pass.

        input_ids [B, T]; hidden {layer: [B, T, d_t]} (features of every token); anchors [B, N]
        anchor indices (block j starts at token anchors[b, j]; its context is tokens < anchor).
        Returns {"hidden": [B, N, Bk−1, d] final-normed states of block positions 1 … Bk−1,
                 "logits": [B, N, Bk−1, V] float32}.
        """
        Bsz, T = input_ids.shape
        N, Bk = anchors.shape[1], self.block_size
        dev = input_ids.device
        feats = self.context_features(hidden)  # [B, T, d]
        ctx_pos = torch.arange(T, device=dev)[None].expand(Bsz, T)
        ctx_kv = self.context_kv(feats, ctx_pos)
        a_tok = input_ids.gather(1, anchors)  # [B, N]
        x = self.block_inputs(a_tok).reshape(Bsz, N * Bk, -1)
        pos = (anchors[..., None] + torch.arange(Bk, device=dev)).reshape(Bsz, N * Bk)
        mask = block_mask(anchors, T, Bk)
        h = self.backbone(x, pos, ctx_kv, mask).view(Bsz, N, Bk, -1)[:, :, 1:]
        return {"hidden": h, "logits": self.logits(h)}


def block_mask(anchors: torch.Tensor, T: int, block: int) -> torch.Tensor:
    """Bool [B, N·Bk, T + N·Bk]: block j's queries see context tokens t < anchors[:, j] and every
    position of block j (bidirectional), nothing of the other blocks."""
    Bsz, N = anchors.shape
    dev = anchors.device
    q_block = torch.arange(N * block, device=dev) // block  # [Q] block index of each query
    q_anchor = anchors.repeat_interleave(block, 1)  # [B, Q]
    ctx = torch.arange(T, device=dev)[None, None, :] < q_anchor[:, :, None]  # [B, Q, T]
    same = (q_block[:, None] == q_block[None, :])[None].expand(Bsz, -1, -1)  # [B, Q, Q]
    return torch.cat([ctx, same], -1)


# --------------------------------------------------------------------------------------------------
# inference side


class ContextCache:
    """Per-layer context keys/values of each row's committed tokens, ragged (row r holds len[r])."""

    def __init__(self, model: DFlashModel, batch: int, device):
        self.model, self.device = model, device
        self.len = torch.zeros(batch, dtype=torch.long, device=device)
        self.kv: list[tuple[torch.Tensor, torch.Tensor]] | None = None

    @property
    def capacity(self) -> int:
        return 0 if self.kv is None else self.kv[0][0].shape[2]

    def _ensure(self, need: int, like: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        if self.kv is None:
            self.kv = [(k.new_zeros(self.len.shape[0], k.shape[1], 0, k.shape[3]),
                        v.new_zeros(self.len.shape[0], v.shape[1], 0, v.shape[3])) for k, v in like]
        cap = self.capacity
        if need > cap:
            grow = max(need, 2 * cap, 8) - cap
            self.kv = [(F.pad(k, (0, 0, 0, grow)), F.pad(v, (0, 0, 0, grow))) for k, v in self.kv]

    def append(self, feats: torch.Tensor, n: torch.Tensor) -> None:
        """feats [B, M, d] projected features, row r's first n[r] valid, at positions len[r] + j."""
        B, M, _ = feats.shape
        if M == 0 or int(n.max()) == 0:
            return
        j = torch.arange(M, device=self.device)
        pos = self.len[:, None] + j
        new = self.model.context_kv(feats, pos)
        self._ensure(int((self.len + n).max()), new)
        rows, cols = (j[None, :] < n[:, None]).nonzero(as_tuple=True)
        dest = self.len[rows] + cols
        for (K, V), (k, v) in zip(self.kv, new):
            K[rows, :, dest] = k[rows, :, cols].to(K.dtype)
            V[rows, :, dest] = v[rows, :, cols].to(V.dtype)
        self.len = self.len + n

    def select_rows(self, rows: torch.Tensor) -> None:
        self.len = self.len.index_select(0, rows)
        if self.kv is not None:
            self.kv = [(k.index_select(0, rows), v.index_select(0, rows)) for k, v in self.kv]

    def view(self, batch: int):
        if self.kv is None:
            cfg = self.model.config
            z = torch.zeros(batch, cfg["num_kv_heads"], 0, cfg["head_dim"], device=self.device,
                            dtype=self.model.param_dtype)
            return [(z, z) for _ in self.model.layers], torch.zeros(batch, 0, dtype=torch.bool, device=self.device)
        valid = torch.arange(self.capacity, device=self.device)[None] < self.len[:, None]
        return self.kv, valid


class BlockDrafter(Drafter):
    """Bookkeeping shared by DFlash and DSpark: turns the target features the engine hands over into
    projected context features in a ragged cache, then runs one block forward per proposal."""

    parallel = True

    def __init__(self, model: DFlashModel):
        self.model = model.eval()
        self.hidden_layers = tuple(model.layer_ids)
        self.device = next(model.parameters()).device
        self.cache: Optional[ContextCache] = None

    def start(self, ctx: DraftContext) -> None:
        self.cache = ContextCache(self.model, ctx.batch_size, self.device)
        self._ingest(ctx)

    def select_rows(self, rows: torch.Tensor) -> None:
        if self.cache is not None:
            self.cache.select_rows(rows.to(self.device))

    @torch.inference_mode()
    def _ingest(self, ctx: DraftContext) -> None:
        """Append the features of committed tokens not yet in the cache (positions len[r] … L−1)."""
        B = ctx.batch_size
        want = torch.tensor([len(s) - 1 for s in ctx.sequences], device=self.device)
        missing = want - self.cache.len
        if int(missing.max()) <= 0:
            return
        if ctx.num_hidden is None or not ctx.hidden:
            raise RuntimeError(f"{self.name} needs the target's hidden states of layers {self.hidden_layers}")
        n = ctx.num_hidden.to(self.device)
        if bool((missing > n).any()):
            raise RuntimeError(f"{self.name}: the engine handed over fewer target features than tokens committed "
                               f"({n.tolist()} < {missing.tolist()})")
        M = int(missing.max())
        hid = torch.cat([ctx.hidden[i] for i in self.hidden_layers], -1).to(self.device)  # [B, W, n·d]
        j = torch.arange(M, device=self.device)
        src = (n - missing)[:, None] + j
        src = src.clamp(0, hid.shape[1] - 1)
        gathered = hid.gather(1, src[..., None].expand(B, M, hid.shape[-1]))
        feats = self.model.context_features(gathered)
        self.cache.append(feats, missing.clamp_min(0))

    @torch.inference_mode()
    def _block(self, ctx: DraftContext) -> torch.Tensor:
        """One backbone forward; returns final-normed states of block positions 1 … Bk−1 [B, Bk−1, d]."""
        self._ingest(ctx)
        B, Bk = ctx.batch_size, self.model.block_size
        anchors = torch.tensor([s[-1] for s in ctx.sequences], device=self.device)
        x = self.model.block_inputs(anchors)  # [B, Bk, d]
        pos = self.cache.len[:, None] + torch.arange(Bk, device=self.device)
        kv, valid = self.cache.view(B)
        mask = torch.cat([valid[:, None, :].expand(B, Bk, -1),
                          torch.ones(B, Bk, Bk, dtype=torch.bool, device=self.device)], -1)
        h = self.model.backbone(x, pos, kv, mask)[:, 1:]
        self.last_block = (pos[:, 0], h)  # (anchor positions, states): read by tests and diagnostics
        return h

    def _widths(self, max_tokens: torch.Tensor):
        num = max_tokens.to(self.device).clamp(min=0, max=self.model.block_size - 1)
        return num, int(num.max()) if num.numel() else 0


class DFlashDrafter(BlockDrafter):
    name = "dflash"

    @torch.inference_mode()
    def propose(self, ctx: DraftContext, max_tokens: torch.Tensor) -> Proposal:
        num, D = self._widths(max_tokens)
        if D == 0:
            self._ingest(ctx)
            return Proposal.empty(ctx.batch_size, self.device)
        h = self._block(ctx)[:, :D]
        logits = self.model.logits(h)  # [B, D, V]
        if ctx.params.greedy:
            tokens = logits.argmax(-1)
            conf = logits.softmax(-1).gather(-1, tokens[..., None]).squeeze(-1)
            return Proposal(tokens=tokens, num_tokens=num, probs=None, confidence=conf)
        q = process_logits(logits, ctx.params)
        tokens = sample(q, ctx.generator)
        # the peak of q, not q of the sampled token: a confidence that read the sampled token would
        # let the adaptive scheduler pick drafts by value, which biases sampled output
        return Proposal(tokens=tokens, num_tokens=num, probs=q, confidence=q.max(-1).values)


# --------------------------------------------------------------------------------------------------
# checkpoints (format and checks: drafters/learned.py)


def save(model: DFlashModel, out_dir) -> None:
    """Checkpoint folder: config.json + model.safetensors (the drafter's own weights only)."""
    model = getattr(model, "module", model)
    config = dict(model.config)
    config["drafter_type"] = model.drafter_type
    save_checkpoint(model, config, out_dir)


def load(path, expected_type: str, target, cls=None) -> DFlashModel:
    """Validate the drafter type and the target fingerprint (before any decoding), rebuild, load."""
    config, state = load_checkpoint(path, expected_type, target)
    embed, head = frozen_embedding_and_head(target)
    model = (cls or DFlashModel)(config, embed, head).to(target.device)
    load_weights(model, state, where=repr(str(path)))
    return model.eval()


@register("dflash")
def _factory(arg, target, **options):
    if isinstance(arg, DFlashModel):
        return DFlashDrafter(arg)
    if not arg:
        raise ValueError("dflash needs a checkpoint folder: 'dflash:PATH' (train one with `draftwise train dflash`)")
    return DFlashDrafter(load(arg, "dflash", target))
