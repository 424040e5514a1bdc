"""Training entry points of post-hoc MTP (depth 1 on the frozen target; used recursively at inference)."""
from __future__ import annotations

from ..drafters.mtp import MTPModel
from .chain import unrolled_loss

DEFAULTS = {"lr": 1e-3, "batch_size": 8, "seq_len": 256, "warmup_steps": 20, "weight_decay": 0.0,
            "grad_clip": 1.0, "ttt_steps": 1, "ttt_decay": 0.8}


def build_model(target, ttt_steps: int = 1, ttt_decay: float = 0.8, **opts) -> MTPModel:
    model = MTPModel(target, **opts)
    model.config["ttt_steps"], model.config["ttt_decay"] = int(ttt_steps), float(ttt_decay)
    return model


def loss_fn(model, batch):
    m = getattr(model, "module", model)
    return unrolled_loss(m, batch, m.config.get("ttt_steps", 1), m.config.get("ttt_decay", 0.8))
