"""Training entry points of post-hoc MTP (depth 1 on the frozen target; used recursively at inference)."""
from __future__ import annotations

from ..drafters.mtp import MTPModel
from .chain import entry_points

DEFAULTS, build_model, loss_fn = entry_points(MTPModel, ttt_steps=1)
