"""Training entry points of EAGLE-3 (used by `draftwise train eagle3` and the tests): the
training-time test unrolls 3 drafting steps, weighted 0.8^step."""
from __future__ import annotations

from ..drafters.eagle3 import Eagle3Model
from .chain import entry_points

# training / data / model options (the CLI splits them); small-scale defaults for the reference target
DEFAULTS, build_model, loss_fn = entry_points(Eagle3Model, ttt_steps=3)
