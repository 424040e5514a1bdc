"""draftwise: lossless speculative decoding for Hugging Face causal LMs, and a planner that picks
the drafter and how many tokens to draft."""
from .api import TargetModel, generate, load_target
from .drafters import Drafter, build_drafter
from .types import GenerationOutput, GenerationResult, GenerationStats, Proposal, SamplingParams

__version__ = "0.1.0"


def plan(*args, **kwargs):
    """Ahead-of-time choice of drafter and D; see `draftwise.planner.plan`."""
    from .planner import plan as _plan

    return _plan(*args, **kwargs)


__all__ = ["generate", "load_target", "build_drafter", "plan", "TargetModel", "Drafter", "GenerationOutput",
           "GenerationResult", "GenerationStats", "Proposal", "SamplingParams"]
