"""draftwise: lossless speculative decoding for Hugging Face causal LMs, and a planner that picks
the drafter and how many tokens to draft."""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

# Attributes resolve on first use, so `draftwise plan` does not pay for importing torch/transformers.
_LAZY = {
    "generate": "draftwise.api", "load_target": "draftwise.api", "TargetModel": "draftwise.api",
    "build_drafter": "draftwise.drafters", "Drafter": "draftwise.drafters",
    "GenerationOutput": "draftwise.types", "GenerationResult": "draftwise.types",
    "GenerationStats": "draftwise.types", "Proposal": "draftwise.types", "SamplingParams": "draftwise.types",
    "plan": "draftwise.planner",
}


def __getattr__(name):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'draftwise' has no attribute {name!r}")


__all__ = sorted(_LAZY)
