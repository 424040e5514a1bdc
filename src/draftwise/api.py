"""`draftwise.generate`: argument checks with clear errors, then the engine."""
from __future__ import annotations

import math
import os
import weakref
from typing import Sequence

import torch
from transformers import PreTrainedModel

from .drafters.base import build_drafter
from .engine import DraftScheduler, StopChecker, StreamCallback, decode
from .sampling import check_sampling_params
from .target import ModelRunner, load_causal_lm, load_tokenizer
from .types import GenerationResult


class TargetModel(ModelRunner):
    """The model whose output speculative decoding must reproduce, with its tokenizer. It runs
    through the lean forward where that reproduces Hugging Face's forward bit for bit."""

    def __init__(self, model: PreTrainedModel, tokenizer=None, lean: bool = True):
        super().__init__(model, tokenizer, lean="exact" if lean else False)


def load_target(target, tokenizer=None, dtype="float32", lean: bool = True) -> TargetModel:
    """A local path, a loaded PreTrainedModel, or an existing TargetModel (returned as is).
    lean=False keeps Hugging Face's own forward even where the lean one is bitwise the same."""
    if isinstance(target, TargetModel):
        if tokenizer is not None:
            target.tokenizer = tokenizer
        return target
    if isinstance(target, PreTrainedModel):
        model = target
    elif isinstance(target, str) or hasattr(target, "__fspath__"):
        model = load_causal_lm(target, dtype=dtype)
        if tokenizer is None:
            try:
                tokenizer = load_tokenizer(target)
            except ValueError:
                tokenizer = None
    else:
        raise TypeError(f"target must be a local path, a PreTrainedModel or a TargetModel, not {type(target).__name__}")
    if isinstance(tokenizer, str):
        tokenizer = load_tokenizer(tokenizer)
    return TargetModel(model, tokenizer, lean=lean)


def _encode_prompts(prompts, tokenizer) -> list[list[int]]:
    if isinstance(prompts, str):
        prompts = [prompts]
    if not isinstance(prompts, Sequence) or len(prompts) == 0:
        raise ValueError("prompts must be a string, a non-empty list of strings, or a non-empty list of token-id lists")
    out = []
    for i, p in enumerate(prompts):
        if isinstance(p, str):
            if tokenizer is None:
                raise ValueError("text prompts need a tokenizer: pass tokenizer=… or give token-id lists")
            ids = tokenizer(p, add_special_tokens=True)["input_ids"]
        elif isinstance(p, torch.Tensor):
            ids = p.flatten().tolist()
        else:
            ids = [int(t) for t in p]
        if len(ids) == 0:
            raise ValueError(f"prompt {i} is empty (no tokens); give at least one token or non-empty text")
        out.append(ids)
    return out


def _eos_ids(target: ModelRunner) -> set[int]:
    ids: set[int] = set()
    gen = getattr(target.model, "generation_config", None)
    for src in (getattr(gen, "eos_token_id", None), getattr(target.tokenizer, "eos_token_id", None)):
        if isinstance(src, int):
            ids.add(src)
        elif src is not None:
            ids.update(int(x) for x in src)
    return ids


def _adaptive_scheduler(tgt, adaptive, ids, num_draft_tokens, draft, max_new_tokens, scheduler_cls=None):
    """The scheduler `generate(adaptive=...)` decodes with; `scheduler_cls` another implementation of
    `AdaptiveDraftLength` built the same way (benchmarks/adaptive_ab.py --versus)."""
    from .planner.adaptive import AdaptiveDraftLength, measure_sps_curve

    if not isinstance(adaptive, (bool, str, os.PathLike)):
        return adaptive
    # One scheduler per drafter object, D, curve source and context octave: what it learned
    # (acceptance, calibration, step and drafter times) carries over to the next call. Keyed by the
    # exact mean prompt length and batch size instead, prompts of varied length got a fresh
    # scheduler (and, with adaptive=True, a fresh measurement of the curve) on almost every call.
    L = sum(len(p) for p in ids) / len(ids)
    source = None if isinstance(adaptive, bool) else str(adaptive)
    key = (int(num_draft_tokens), source, round(math.log2(max(L, 1.0))))
    curves = tgt.__dict__.setdefault("_sps_curves", {})
    if key not in curves:
        if source is None:
            curves[key] = {}       # batch size → curve measured on this machine, filled below
        else:
            from .planner.cost import CostModel
            cm, ctx = CostModel(tgt.model.config, source), int(L) + max_new_tokens // 2
            curves[key] = lambda b: cm.sps_curve(b, ctx)
    found = curves[key]
    measured = isinstance(found, dict)
    new_curve = measured and len(ids) not in found
    if new_curve:
        # measured before decoding (mid-run it would clobber the cache), once per batch size; a
        # batch that shrinks as rows finish uses the nearest batch size measured, in tokens N
        found[len(ids)] = measure_sps_curve(tgt, len(ids), int(L), max_tokens=key[0])
    for_batch = (lambda b: found[min(found, key=lambda m: abs(math.log(m / b)))]) if measured else found
    per_drafter = tgt.__dict__.setdefault("_schedulers", weakref.WeakKeyDictionary())
    try:
        mine = per_drafter.setdefault(draft, {})
    except TypeError:        # not weak-referenceable: a fresh scheduler each call
        mine = {}
    if key not in mine:
        mine[key] = (scheduler_cls or AdaptiveDraftLength)(
            sps_for_batch=for_batch, draft_token_seconds=_profiled_draft_price(tgt, source, draft, L))
    elif new_curve:
        mine[key].refresh_curves()
    return mine[key]


def _profiled_draft_price(tgt, source, draft, L):
    """Seconds per drafted token by batch size where the profile `source` measured this very draft
    model (its `draft_step_times`), else None: the scheduler then prices the drafter itself."""
    from .drafters.draft_model import DraftModelDrafter
    if source is None or not isinstance(draft, DraftModelDrafter):
        return None
    from .planner.cost import CostModel
    from .planner.model import drafter_desc
    cm = CostModel(tgt.model.config, source)
    desc = drafter_desc("draft_model", cm.target, config=draft.runner.model.config)
    if cm.measured_draft_token(desc, 1, int(L)) is None:
        return None
    return lambda b: cm.measured_draft_token(desc, b, int(L))


def generate(
    target,
    prompts,
    drafter=None,
    num_draft_tokens: int = 4,
    max_new_tokens: int = 128,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    tokenizer=None,
    stop: str | list[str] | None = None,
    stream: StreamCallback | None = None,
    scheduler: DraftScheduler | None = None,
    adaptive=False,
    ignore_eos: bool = False,
    dtype="float32",
) -> GenerationResult:
    """Decode a batch of prompts with speculative decoding (or plain decoding when drafter=None).

    Greedy output is token-for-token the target's own greedy output; sampled output follows the
    target's processed distribution exactly. Returns one GenerationOutput per prompt, with `.stats`.

    adaptive: run-time D per row and step (DSpark's prefix scheduler) from the drafter's confidences
    and the target's steps/s curve — True measures that curve on this machine once per batch size
    (and context octave);
    a hardware profile path (`draftwise profile`) or datasheet name takes it from the planner's
    cost model instead; or pass a `draftwise.planner.adaptive.AdaptiveDraftLength`.
    It only reads the drafts, never the target's verdict, so output stays lossless.
    """
    params = check_sampling_params(temperature, top_k, top_p)
    if int(num_draft_tokens) != num_draft_tokens or num_draft_tokens < 0:
        raise ValueError(f"num_draft_tokens (D) must be an integer ≥ 0, got {num_draft_tokens}")
    if int(max_new_tokens) != max_new_tokens or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an integer ≥ 1, got {max_new_tokens}")
    tgt = load_target(target, tokenizer=tokenizer, dtype=dtype)
    ids = _encode_prompts(prompts, tgt.tokenizer)
    if tgt.max_positions is not None:
        for i, p in enumerate(ids):
            if len(p) + max_new_tokens > tgt.max_positions:
                raise ValueError(
                    f"prompt {i} has {len(p)} tokens; with max_new_tokens={max_new_tokens} it needs "
                    f"{len(p) + max_new_tokens} positions but the target has {tgt.max_positions}; "
                    "shorten the prompt or lower max_new_tokens")
    for i, p in enumerate(ids):
        if max(p) >= tgt.vocab_size or min(p) < 0:
            raise ValueError(f"prompt {i} holds token id {max(p)} outside the target's vocabulary of {tgt.vocab_size}")
    draft = build_drafter(drafter, tgt)
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    stopper = StopChecker(set() if ignore_eos else _eos_ids(tgt), stops, int(max_new_tokens), tgt.tokenizer)
    if adaptive:
        scheduler = _adaptive_scheduler(tgt, adaptive, ids, num_draft_tokens, draft, int(max_new_tokens))
    generator = None
    if seed is not None:
        generator = torch.Generator(device=tgt.device).manual_seed(int(seed))
    result = decode(tgt, draft, ids, params, int(num_draft_tokens), stopper, generator, stream, scheduler)
    if tgt.tokenizer is not None:
        for out in result:
            out.text = tgt.tokenizer.decode(out.token_ids, skip_special_tokens=True)
            if out.finish_reason == "stop":
                cut = min((out.text.find(s) for s in stops if s in out.text), default=-1)
                if cut >= 0:
                    out.text = out.text[:cut]
    return result
