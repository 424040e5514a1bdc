"""Acceptance at every draft length D from one greedy run: where a step starts depends on D.

The α_k measured at one D describe the steps that D takes. Where acceptance has memory, another D
takes other steps: prompt lookup accepts long runs where the text repeats itself, so at D = 8 a
repeated passage is swallowed by a few long steps and the steps start mostly where the text is
new, while at D = 2 several steps start inside each repeated passage, and their first drafts are
accepted far more often. Priced with the α_k of D = 8, D = 1–3 at batch 1 came out 10–13 % slower
than measured in session 18; traced, they match to two decimals (BENCHMARKS §5.0n, session 19).

Under greedy decoding the output is the same at every D (lossless), and a drafter whose proposal
is a function of the row's own tokens (`Drafter.from_prefix`: prompt lookup, a draft model
drafting greedily) proposes the same continuation at a given position whatever D brought the
engine there. So one run tells, at every output position t, what the drafter proposes there and
how many of those drafts the target accepts; walking the output as the engine would, at cap D,
gives the steps of D exactly (tests/test_planner_trace.py checks them against the engine's).
"""
from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path
from typing import Optional, Sequence

import torch

from ..drafters.base import DraftContext
from ..types import SamplingParams
from .acceptance import Acceptance

Trace = list[tuple[int, int]]     # per output position: (drafts proposed there, of them accepted)


def trace_request(drafter, prompt: Sequence[int], output: Sequence[int], max_draft: int) -> Trace:
    """At each position t of `output` (the greedy continuation of `prompt`): the drafts the
    drafter proposes after prompt + output[:t] (at most `max_draft`, and none past the output's
    end) and how many of them lead output[t:]. The drafter is driven through its engine protocol,
    one committed token a step, every draft rejected (its state then follows the output)."""
    if not getattr(drafter, "from_prefix", False):
        raise ValueError(f"{type(drafter).__name__}'s proposals depend on more than the row's own tokens "
                         f"(target features, or what earlier requests taught it): a trace of one run "
                         f"cannot stand for other draft lengths; measure each D instead")
    out = [int(x) for x in output]
    if not prompt:
        raise ValueError("trace_request needs a non-empty prompt")
    ctx = DraftContext(sequences=[[int(x) for x in prompt]], params=SamplingParams(), generator=None)
    drafter.start(ctx)
    trace: Trace = []
    for t in range(len(out)):
        cap = min(int(max_draft), len(out) - t - 1)
        if cap > 0:
            prop = drafter.propose(ctx, torch.tensor([cap]))
            n = int(prop.num_tokens[0])
            drafts = prop.tokens[0, :n].tolist()
            drafter.accepted(torch.zeros(1, dtype=torch.long))
        else:
            n, drafts = 0, []
        agree = 0
        while agree < n and drafts[agree] == out[t + agree]:
            agree += 1
        trace.append((n, agree))
        ctx.sequences[0].append(out[t])
    return trace


def walk(trace: Trace, D: int, max_new_tokens: int) -> tuple[list[int], list[int]]:
    """The engine's steps over a traced output at draft length D: (tokens each step emits, drafts
    it verifies). A row drafts min(D, tokens it may still generate − 1), as the engine caps it."""
    lengths, drafted = [], []
    t = 0
    while t < len(trace):
        proposed, agree = trace[t]
        k = max(0, min(proposed, int(D), max_new_tokens - t - 1))
        L = min(agree, k) + 1
        lengths.append(L)
        drafted.append(k)
        t += L
    return lengths, drafted


def acceptance_by_draft_length(traces: Sequence[Trace], max_draft: int, max_new_tokens: int,
                               name: str = "default", shrink: bool = True) -> Acceptance:
    """`Acceptance` at D = `max_draft` with `by_draft_length` for every D = 1 … max_draft, each from
    the steps that D takes over the traced outputs (one trace per request)."""
    if not traces:
        raise ValueError("acceptance_by_draft_length needs at least one traced request")
    per_d = {}
    for D in range(1, int(max_draft) + 1):
        records = [{"outputs": [dict(zip(("step_lengths", "drafted"), walk(t, D, max_new_tokens)))]} for t in traces]
        acc = Acceptance.from_records(records, D, max_new_tokens, name=name, shrink=shrink)
        acc.source = f"traced: {len(traces)} requests walked at D = {D}"
        per_d[D] = acc
    return dataclasses.replace(per_d[int(max_draft)], by_draft_length=per_d)


class _TargetInfo:
    """What building a prefix drafter needs of the target a run used — its tokenizer, vocabulary
    and dtype — without loading its weights (a bench run's target may be far larger than this
    machine can hold); read on first use (prompt lookup needs none of it)."""

    def __init__(self, path: str, dtype: str):
        from ..target import resolve_dtype

        self.path, self.dtype, self.device = path, resolve_dtype(dtype), torch.device("cpu")

    @functools.cached_property
    def tokenizer(self):
        from ..target import load_tokenizer

        return load_tokenizer(self.path)

    @functools.cached_property
    def vocab_size(self) -> int:
        from transformers import AutoConfig

        return int(AutoConfig.from_pretrained(self.path).vocab_size)


def acceptance_from_run(run_dir, max_draft: int, *, drafters: Optional[Sequence[str]] = None,
                        dataset: Optional[str] = None, category: Optional[str] = None,
                        shrink: bool = True) -> dict[str, Acceptance]:
    """{drafter label: Acceptance at every D = 1 … `max_draft`} from a greedy `draftwise bench` run,
    its outputs traced (`trace_request`) and walked at each D — also at D beyond those the run
    measured. Only drafters whose proposals depend on the row alone (`Drafter.from_prefix`) are
    traced; the others are left out. One configuration per drafter is traced (its smallest batch
    size, largest D): under greedy decoding every D gives the same outputs. `dataset` defaults to
    the first of the run that has the drafter; `category` keeps that category's requests only."""
    from ..bench.runner import (BASELINE, CONFIG_FILE, drafter_model_path, hash_model_path, read_prompts,
                                read_results, split_adaptive)
    from ..drafters.base import build_drafter

    run = Path(run_dir)
    conf_path = run / CONFIG_FILE
    if not conf_path.is_file():
        raise FileNotFoundError(f"{run} is not a `draftwise bench` run directory (no {CONFIG_FILE})")
    conf = json.loads(conf_path.read_text())
    settings = conf.get("settings", {})
    if float(settings.get("temperature") or 0.0) != 0.0:
        raise ValueError(f"{run} was sampled (temperature {settings['temperature']}): only a greedy run's "
                         f"outputs are the same at every D; use its per-D measurements (--no-trace)")
    prompts = read_prompts(run)
    if not prompts:
        raise ValueError(f"{run} holds no prompt token ids (prompts.jsonl; a run from before the bench kept "
                         f"them): rerun the benchmark, or use its per-D measurements (--no-trace)")
    records = [r for r in read_results(run) if r["drafter"] != BASELINE and not split_adaptive(r["drafter"])[1]]
    order = conf.get("sweep", {}).get("datasets", [])
    by_drafter: dict[str, list[dict]] = {}
    for r in records:
        by_drafter.setdefault(r["drafter"], []).append(r)
    target = _TargetInfo(conf.get("models", {}).get("target", {}).get("path") or settings["target"],
                         settings.get("dtype") or "float32")
    out: dict[str, Acceptance] = {}
    for spec, recs in by_drafter.items():
        if drafters is not None and spec not in drafters:
            continue
        datasets = [d for d in order if any(r["dataset"] == d for r in recs)] or sorted({r["dataset"] for r in recs})
        ds = dataset if dataset is not None else datasets[0]
        recs = [r for r in recs if r["dataset"] == ds]
        if not recs:
            continue
        bs = min(r["batch_size"] for r in recs)
        D = max(r["D"] for r in recs if r["batch_size"] == bs)
        recs = [r for r in recs if r["batch_size"] == bs and r["D"] == D
                and (category is None or r.get("category") == category)]
        if not recs:
            continue
        path = drafter_model_path(spec)
        if path is not None:
            had = conf.get("models", {}).get(f"drafter:{spec}", {}).get("files")
            if had is not None and hash_model_path(path)["files"] != had:
                raise ValueError(f"the files of {path} changed since {run} was measured: its outputs no longer "
                                 f"say what this drafter proposes; rerun the benchmark, or use --no-trace")
        dr = build_drafter(spec, target)
        if not getattr(dr, "from_prefix", False):
            continue
        traces = []
        for r in recs:
            for o in r["outputs"]:
                ids = prompts.get(o.get("prompt_sha"))
                if ids is None:
                    raise ValueError(f"{run}: no prompt for request {r['question_id']} of {spec} in prompts.jsonl "
                                     f"(a run from before prompts were kept?): rerun it, or use --no-trace")
                traces.append(trace_request(dr, ids, o["token_ids"], max_draft))
        acc = acceptance_by_draft_length(traces, max_draft, int(settings["max_new_tokens"]), name=spec, shrink=shrink)
        acc.source = (f"traced: {len(traces)} greedy outputs of {run} [{ds}/{spec}/D={D}/bs={bs}"
                      f"{'' if category is None else '/' + category}] walked at each D = 1 … {max_draft}")
        out[spec] = acc
    return out
