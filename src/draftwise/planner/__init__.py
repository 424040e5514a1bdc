"""The planner: which drafter and how many tokens to draft, per batch size, context and hardware —
ahead of time (`plan`) and at run time (`AdaptiveDraftLength`, `schedule_prefix`).

    plan(alpha=0.8, cost_ratio=0.05)                       # Leviathan's closed form
    plan("llama-3.1-8b", "h100-sxm", acceptance="runs/x")  # schedule per batch size × context
    predict(target, hardware, acceptance=...)              # every (drafter, B, D, L) cell, for validation
    pick_num_draft_tokens(speedups, min_gain)              # plan's choice of D from predicted speedups

Run time (engine): `AdaptiveDraftLength(sps_curve)(proposal) -> LongTensor[B]` verified drafts per
row; `schedule_prefix(confidence[B, D], num_tokens[B], sps) -> LongTensor[B]` is the pure function.
"""
from .acceptance import Acceptance, leviathan_expected_tokens, load_acceptance
from .adaptive import AdaptiveDraftLength, SPSCurve, schedule_prefix
from .cost import CostModel
from .hardware import Hardware, datasheet_names, get_hardware
from .model import ModelDesc, bundled_models, describe, drafter_desc, expected_experts
from .schedule import leviathan, pick_num_draft_tokens, plan, predict

__all__ = [
    "Acceptance", "AdaptiveDraftLength", "CostModel", "Hardware", "ModelDesc", "SPSCurve",
    "bundled_models", "datasheet_names", "describe", "drafter_desc", "expected_experts", "get_hardware",
    "leviathan", "leviathan_expected_tokens", "load_acceptance", "pick_num_draft_tokens", "plan",
    "predict", "schedule_prefix",
]
