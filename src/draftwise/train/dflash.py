"""Training DFlash: many random anchors per sequence, each a masked block, position-decayed CE.

Batch (train/data.py): input_ids [B, T], loss_mask [B, T] (1 where position t's distribution — the one
scoring token t+1 — is a training label), hidden {layer: [B, T, d]} (target features of every token),
optionally target_logprobs [B, T, V] or target_topk {"values", "indices"} (the target's distribution of
token t+1). Block j with anchor a predicts tokens a+1 … a+Bk−1 from context features of tokens < a
and the anchor token; token i is a label when loss_mask[i−1] is 1.

Anchors are drawn per sequence from a generator seeded by the sequence's own tokens, so they do not
depend on the rank, the batch composition or any global RNG: 2-process DDP sees exactly the blocks a
single process with the same global batch sees, and a resumed run draws the same blocks.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..drafters.dflash import DFlashModel, frozen_embedding_and_head, make_config

DEFAULTS = {
    "block_size": 8,
    "num_layers": 2,
    "num_anchors": 32,
    "gamma": 4.0,       # loss weight exp(−(k−1)/γ); ≈7 for block 16 in the paper, scaled to block 8
    "soft": True,       # soft CE against the target's distribution when the batch carries one (else hard CE)
    "lr": 6e-4,
}

_MODEL_KEYS = ("block_size", "num_layers", "layer_ids", "num_heads", "num_kv_heads", "head_dim",
               "intermediate_size", "rope_theta", "markov_rank")


def _split_opts(opts: dict):
    model_opts = {k: v for k, v in opts.items() if k in _MODEL_KEYS and v is not None}
    return model_opts


def as_runner(target):
    """A ModelRunner (what the drafter code reads fingerprints and devices from)."""
    from ..target import ModelRunner
    return target if isinstance(target, ModelRunner) else ModelRunner(target)


def build_model(target, cls=DFlashModel, drafter_type="dflash", **opts) -> DFlashModel:
    target = as_runner(target)
    known = set(DEFAULTS) | set(_MODEL_KEYS) | {"w_ce", "w_tv", "w_conf"}
    unknown = sorted(set(opts) - known)
    if unknown:
        raise ValueError(f"unknown {drafter_type} options {unknown}; known: {sorted(known)}")
    cfg = make_config(target, drafter_type, **_split_opts({**DEFAULTS, **opts}))
    for k in ("num_anchors", "gamma", "soft"):
        cfg["train_" + k] = {**DEFAULTS, **opts}.get(k)
    if "markov_rank" in opts:
        cfg["markov_rank"] = int(opts["markov_rank"])
    embed, head = frozen_embedding_and_head(target)
    model = cls(cfg, embed, head)
    return model.to(target.device)


def _unwrap(model):
    return getattr(model, "module", model)


def _row_seed(ids: torch.Tensor) -> int:
    w = torch.arange(1, ids.numel() + 1, dtype=torch.long, device=ids.device)
    return int(((ids.long() + 1) * (w * 2654435761 % 1000003)).sum()) % (2**62)


def sample_anchors(input_ids: torch.Tensor, loss_mask: torch.Tensor, num_anchors: int):
    """→ anchors [B, N] (long) and valid [B, N] (bool). An anchor a is usable when token a+1 exists and
    is a label (loss_mask[a])."""
    Bsz, T = input_ids.shape
    ok = loss_mask.bool().clone()
    ok[:, -1] = False
    anchors = torch.zeros(Bsz, num_anchors, dtype=torch.long, device=input_ids.device)
    valid = torch.zeros(Bsz, num_anchors, dtype=torch.bool, device=input_ids.device)
    for b in range(Bsz):
        cand = ok[b].nonzero().flatten().cpu()
        if cand.numel() == 0:
            continue
        g = torch.Generator().manual_seed(_row_seed(input_ids[b].cpu()))
        pick = cand[torch.randperm(cand.numel(), generator=g)[:num_anchors]].sort().values
        anchors[b, : pick.numel()] = pick.to(anchors.device)
        valid[b, : pick.numel()] = True
    return anchors, valid


def block_targets(input_ids, loss_mask, anchors, valid, block: int):
    """Labels [B, N, Bk−1], label_mask, and the flat token index of each label (a + k)."""
    T = input_ids.shape[1]
    k = torch.arange(1, block, device=anchors.device)
    idx = anchors[..., None] + k  # [B, N, Bk−1]
    inside = idx < T
    idx_c = idx.clamp(max=T - 1)
    labels = input_ids.gather(1, idx_c.flatten(1)).view_as(idx)
    lmask = loss_mask.bool().gather(1, (idx_c - 1).flatten(1)).view_as(idx) & inside & valid[..., None]
    return labels, lmask, idx_c


def position_weights(block: int, gamma: float, device) -> torch.Tensor:
    k = torch.arange(1, block, device=device, dtype=torch.float32)
    return torch.exp(-(k - 1) / gamma)


def weighted_mean(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Per sequence Σ w·x / Σ w over its blocks and positions, then the mean over sequences: a mean over
    examples, so data-parallel slices of a batch average to the single-process loss exactly."""
    num = (x * w).flatten(1).sum(1)
    den = w.flatten(1).sum(1).clamp_min(1e-6)
    return (num / den).mean()


def target_distribution(batch: dict, idx: torch.Tensor, V: int):
    """Target's probabilities for the labels at flat token indices idx [B, N, K] (the distribution
    predicting token a+k is the target's output at a+k−1) → [B, N, K, V] or None."""
    prev = (idx - 1).clamp_min(0)
    if batch.get("target_logprobs") is not None:
        lp = batch["target_logprobs"]
        g = lp.gather(1, prev.flatten(1)[..., None].expand(-1, -1, lp.shape[-1]))
        return g.float().exp().view(*idx.shape, lp.shape[-1])[..., :V]
    topk = batch.get("target_topk")
    if topk is not None:
        if isinstance(topk, dict):
            ids, lps = topk.get("ids", topk.get("indices")), topk.get("logprobs", topk.get("values"))
        else:
            ids, lps = topk
        K = ids.shape[-1]
        gi = ids.gather(1, prev.flatten(1)[..., None].expand(-1, -1, K)).long()
        gv = lps.gather(1, prev.flatten(1)[..., None].expand(-1, -1, K)).float().exp()
        p = torch.zeros(*gi.shape[:-1], V, device=gv.device)
        p.scatter_(-1, gi, gv)
        p = p / p.sum(-1, keepdim=True).clamp_min(1e-12)  # top-k renormalised
        return p.view(*idx.shape, V)
    return None


def prepare(model, batch: dict, num_anchors: int):
    m = _unwrap(model)
    ids, lmask = batch["input_ids"], batch.get("loss_mask")
    if lmask is None:
        lmask = torch.ones_like(ids)
    anchors, valid = sample_anchors(ids, lmask, num_anchors)
    hidden = batch["hidden"]
    hidden = {int(k): v for k, v in hidden.items()} if isinstance(hidden, dict) else hidden
    out = model(ids, hidden, anchors)
    labels, label_mask, idx = block_targets(ids, lmask, anchors, valid, m.block_size)
    return out, labels, label_mask, idx


def loss_fn(model, batch: dict):
    m = _unwrap(model)
    cfg = m.config
    gamma = float(cfg.get("train_gamma") or DEFAULTS["gamma"])
    out, labels, lmask, idx = prepare(model, batch, int(cfg.get("train_num_anchors") or DEFAULTS["num_anchors"]))
    logits = out["logits"]  # [B, N, K, V]
    logp = logits.float().log_softmax(-1)
    w = position_weights(m.block_size, gamma, logits.device)[None, None] * lmask.float()
    p_t = target_distribution(batch, idx, logits.shape[-1]) if cfg.get("train_soft") else None
    if p_t is not None:
        ce = -(p_t * logp).sum(-1)
    else:
        ce = -logp.gather(-1, labels[..., None]).squeeze(-1)
    loss = weighted_mean(ce, w)
    with torch.no_grad():
        acc = (logits.argmax(-1) == labels).float()
        n = lmask.float().sum(0).sum(0).clamp_min(1)
        acc_k = (acc * lmask).sum(0).sum(0) / n
    logs = {"loss": float(loss.detach()), "ce": float(loss.detach()), "acc_1": float(acc_k[0]),
            "acc_mean": float((acc * lmask).sum() / lmask.float().sum().clamp_min(1)),
            "labels": int(lmask.sum())}
    return loss, logs
