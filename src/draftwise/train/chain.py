"""Training of the chain drafters (EAGLE-3, MTP): the training-time test (unrolled drafting).

Anchor a (a committed position) starts a chain. Step 0 reads (target feature at a, embedding of token
a+1) at position a and predicts token a+2; step i reads (the drafter's own output of step i−1 at the
same anchor, embedding of token a+1+i) at position a+i and predicts token a+2+i — exactly what the
drafter sees at inference when the first i drafts were accepted. Step i's query attends to step-0
keys of anchors ≤ a (the committed context, target features) and to the keys of steps 1…i of its own
anchor (its drafted prefix). Loss: soft cross-entropy against the target's distribution at position
a+1+i, weighted decay**i. EAGLE-3 unrolls several steps; post-hoc MTP trains step 0 only and is used
recursively.
"""
from __future__ import annotations

import torch

from .data import soft_cross_entropy, target_probs


def ttt_masks(A: int, steps: int, device) -> list[torch.Tensor | None]:
    """masks[i]: bool [1, A, (i+1)·A] over keys [step 0 | step 1 | … | step i]; None for step 0 (causal)."""
    causal = torch.ones(A, A, dtype=torch.bool, device=device).tril()
    eye = torch.eye(A, dtype=torch.bool, device=device)
    return [None] + [torch.cat([causal] + [eye] * i, 1)[None] for i in range(1, steps)]


def unrolled_loss(model, batch: dict, steps: int, decay: float = 0.8):
    """(loss, logs) of `steps` unrolled drafting steps; logs hold per-step loss and top-1 agreement."""
    ids = batch["input_ids"]
    B, T = ids.shape
    A = T - 1  # anchors 0 … T−2 (anchor a needs token a+1)
    if A < 1:
        raise ValueError("sequences must have at least 2 tokens")
    steps = max(1, min(int(steps), A))
    emb = model.embed(ids)
    hidden = {l: h[:, :A] for l, h in batch["hidden"].items()}
    g = model.fuse(hidden)
    probs = target_probs(batch, model.vocab_size)  # [B, T, V]
    mask = batch["loss_mask"].float()
    anchors = torch.arange(A, device=ids.device)
    masks = ttt_masks(A, steps, ids.device)
    prev_k, prev_v = [], []
    total = 0.0
    wsum = 0.0
    logs = {}
    for i in range(steps):
        idx = (anchors + 1 + i).clamp(max=T - 1)
        valid = (anchors + 1 + i <= T - 1).float()[None, :] * mask[:, idx]  # [B, A]
        e = emb[:, idx]
        pos = (anchors + i)[None, :]
        extra = (torch.cat(prev_k, 2), torch.cat(prev_v, 2)) if prev_k else None
        out, (k, v) = model.step(g, e, pos, mask=masks[i], extra_kv=extra, return_kv=True)
        prev_k.append(k)
        prev_v.append(v)
        logits = model.logits(out)
        p = probs[:, idx]
        ce = soft_cross_entropy(logits, p)
        cnt = valid.sum().clamp_min(1.0)
        step_loss = (ce * valid).sum() / cnt
        w = decay ** i
        total = total + w * step_loss
        wsum += w
        with torch.no_grad():
            agree = ((logits.argmax(-1) == p.argmax(-1)).float() * valid).sum() / cnt
        logs[f"loss_{i}"] = float(step_loss.detach())
        logs[f"acc_{i}"] = float(agree)
        g = out
    return total / wsum, logs


def entry_points(model_cls, ttt_steps: int, ttt_decay: float = 0.8):
    """(DEFAULTS, build_model, loss_fn) of a chain drafter's training module; they differ only in
    the model class and how many steps the training-time test unrolls."""
    defaults = {"lr": 1e-3, "batch_size": 8, "seq_len": 256, "warmup_steps": 20, "weight_decay": 0.0,
                "grad_clip": 1.0, "ttt_steps": ttt_steps, "ttt_decay": ttt_decay}

    def build_model(target, ttt_steps: int = ttt_steps, ttt_decay: float = ttt_decay, **opts):
        model = model_cls(target, **opts)
        model.config["ttt_steps"], model.config["ttt_decay"] = int(ttt_steps), float(ttt_decay)
        return model

    def loss_fn(model, batch):
        m = getattr(model, "module", model)   # unwrap DDP
        return unrolled_loss(m, batch, m.config.get("ttt_steps", ttt_steps), m.config.get("ttt_decay", ttt_decay))

    return defaults, build_model, loss_fn
