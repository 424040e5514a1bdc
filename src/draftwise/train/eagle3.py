"""Training entry points of EAGLE-3 (used by `draftwise train eagle3` and the tests)."""
from __future__ import annotations

from ..drafters.eagle3 import Eagle3Model
from .chain import unrolled_loss

# training / data / model options (the CLI splits them); small-scale defaults for the reference target
DEFAULTS = {"lr": 1e-3, "batch_size": 8, "seq_len": 256, "warmup_steps": 20, "weight_decay": 0.0,
            "grad_clip": 1.0, "ttt_steps": 3, "ttt_decay": 0.8}


def build_model(target, ttt_steps: int = 3, ttt_decay: float = 0.8, **opts) -> Eagle3Model:
    model = Eagle3Model(target, **opts)
    model.config["ttt_steps"], model.config["ttt_decay"] = int(ttt_steps), float(ttt_decay)
    return model


def loss_fn(model, batch):
    m = getattr(model, "module", model)
    return unrolled_loss(m, batch, m.config.get("ttt_steps", 4), m.config.get("ttt_decay", 0.8))
