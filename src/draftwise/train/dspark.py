"""Training DSpark: loss = 0.1·CE + 0.9·TV + 1.0·BCE(confidence), each position-weighted exp(−(k−1)/γ).

CE is against the sequence's (target-generated) token; TV = ½‖p_draft − p_target‖₁ against the
target's distribution when the batch carries it (target_logprobs or top-k), else against the one-hot
label (TV = 1 − p_draft(label)); the confidence head is trained with BCE against the soft label
c* = 1 − TV (detached), i.e. the acceptance probability of position k given its prefix accepted.
The Markov head is teacher-forced with the true previous token (the accepted prefix).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..drafters.dspark import DSparkModel
from . import dflash as _df

DEFAULTS = {**_df.DEFAULTS, "markov_rank": 32, "w_ce": 0.1, "w_tv": 0.9, "w_conf": 1.0}


def build_model(target, **opts) -> DSparkModel:
    opts = {**DEFAULTS, **opts}
    model = _df.build_model(target, cls=DSparkModel, drafter_type="dspark", **opts)
    for k in ("w_ce", "w_tv", "w_conf"):
        model.config["train_" + k] = float(opts[k])
    return model


def loss_fn(model, batch: dict):
    m = _df._unwrap(model)
    cfg = m.config
    gamma = float(cfg.get("train_gamma") or DEFAULTS["gamma"])
    out, labels, lmask, idx = _df.prepare(model, batch, int(cfg.get("train_num_anchors") or DEFAULTS["num_anchors"]))
    logits = out["logits"].float()  # Markov-head logits [B, N, K, V]
    logp = logits.log_softmax(-1)
    p_d = logp.exp()
    w = _df.position_weights(m.block_size, gamma, logits.device)[None, None] * lmask.float()

    ce = -logp.gather(-1, labels[..., None]).squeeze(-1)
    p_t = _df.target_distribution(batch, idx, logits.shape[-1])
    if p_t is not None:
        tv = 0.5 * (p_d - p_t).abs().sum(-1)
    else:
        tv = 1.0 - p_d.gather(-1, labels[..., None]).squeeze(-1)
    target_c = (1.0 - tv).detach().clamp(0.0, 1.0)
    bce = F.binary_cross_entropy_with_logits(out["conf_logits"], target_c, reduction="none")

    w_ce = float(cfg.get("train_w_ce", DEFAULTS["w_ce"]))
    w_tv = float(cfg.get("train_w_tv", DEFAULTS["w_tv"]))
    w_conf = float(cfg.get("train_w_conf", DEFAULTS["w_conf"]))
    L_ce, L_tv, L_bce = [_df.weighted_mean(x, w) for x in (ce, tv, bce)]
    loss = w_ce * L_ce + w_tv * L_tv + w_conf * L_bce
    with torch.no_grad():
        acc = (logits.argmax(-1) == labels).float()
        n = lmask.float().sum(0).sum(0).clamp_min(1)
        acc_k = (acc * lmask).sum(0).sum(0) / n
    logs = {"loss": float(loss.detach()), "ce": float(L_ce.detach()), "tv": float(L_tv.detach()),
            "bce": float(L_bce.detach()),
            "acc_1": float(acc_k[0]), "acc_mean": float((acc * lmask).sum() / lmask.float().sum().clamp_min(1)),
            "labels": int(lmask.sum())}
    return loss, logs
