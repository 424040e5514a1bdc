"""`draftwise profile`: measure the machine it runs on, for the planner's cost model.

- matmul throughput against the number of rows M: x[M, d] @ W[d, 4d] cycling over enough weight
  matrices (≥ 64 MB) that weights stream from memory as in a real forward;
- memory bandwidth: a large tensor copy (bytes read + written / time);
- with a target (model folder, config.json or bundled config name — a config alone gives a
  randomly initialised model), the real step time for B sequences × (1 + D) new tokens at context L,
  through the engine's own runner (mask, positions, rollback included), every D of a (B, L) timed in
  the same rounds;
- with a draft model, the time of one drafted token for B sequences at context L, through the
  engine's own runner, right after a target forward as in decoding (small models are dominated
  by per-forward costs no FLOP count predicts, and by whether their weights are still cached),
  how much dearer the target's next verification is after those drafts (`target_factor`), and
  what a second token in the draft's first forward of a step adds (`catch_up_seconds`);
- a warning where the passes over the step grid met two prices of width (`planner.levels`).
Saved as JSON (a `Hardware` with `source: "measured"`) and reused with `--hardware profile.json`;
`sps_curves` in the file give steps/s against verified tokens for the run-time scheduler.
"""
from __future__ import annotations

import json
import os
import random
import statistics
import time
from pathlib import Path
from typing import Any, Optional, Sequence

import torch

from .hardware import Hardware
from .levels import describe_levels, find_levels

DEFAULT_ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _median_time(fn, repeats: int, device: str, warmup: int = 1, best: bool = False, before=None) -> float:
    """`before`, if given, runs untimed ahead of every call of `fn`."""
    for _ in range(warmup):
        fn()
    _sync(device)
    ts = _in_turns({0: (before, fn)}, repeats, device)[0]
    return min(ts) if best else statistics.median(ts)


def measure_gemm(hidden: int, rows: Sequence[int] = DEFAULT_ROWS, *, dtype=torch.float32, device: str = "cpu",
                 repeats: int = 3, min_weight_bytes: float = 64e6) -> list[list[float]]:
    """[[M, FLOP/s], …] for x[M, hidden] @ W[hidden, 4·hidden] over a cycle of weights."""
    esize = torch.tensor([], dtype=dtype).element_size()
    per = hidden * 4 * hidden * esize
    n = max(1, int(min_weight_bytes // per) + (1 if min_weight_bytes % per else 0))
    n = min(n, 64)
    ws = [torch.randn(hidden, 4 * hidden, dtype=dtype, device=device) for _ in range(n)]
    out = []
    for m in rows:
        x = torch.randn(m, hidden, dtype=dtype, device=device)

        def run():
            for w in ws:
                x @ w
        t = _median_time(run, repeats, device, best=True)
        out.append([int(m), 2.0 * m * hidden * 4 * hidden * n / t])
    return out


def measure_bandwidth(*, nbytes: float = 256e6, device: str = "cpu", repeats: int = 3) -> float:
    n = int(nbytes // 4)
    a = torch.empty(n, dtype=torch.float32, device=device).fill_(1.0)
    b = torch.empty_like(a)
    t = _median_time(lambda: b.copy_(a), repeats, device, best=True)
    return 2.0 * n * 4 / t


def _load_target(target: str, dtype, device: str):
    from transformers import AutoConfig, AutoModelForCausalLM

    from .model import load_config
    p = Path(target)
    has_weights = p.is_dir() and any(p.glob("*.safetensors")) or (p.is_dir() and any(p.glob("*.bin")))
    if has_weights:
        model = AutoModelForCausalLM.from_pretrained(str(p), dtype=dtype)
        cfg = model.config.to_dict()
    else:
        cfg, _ = load_config(target)
        cfg = {k: v for k, v in cfg.items() if not k.startswith("_")}
        conf = AutoConfig.for_model(**cfg)
        model = AutoModelForCausalLM.from_config(conf, dtype=dtype)
        cfg = conf.to_dict()
    model.to(device).eval()
    return model, cfg


def _prefill(runner, B: int, L: int, vocab: int, g, device: str) -> None:
    """A fresh cache of B rows at context L."""
    runner.reset(B)
    runner.forward(torch.randint(0, vocab, (B, L), generator=g).to(device), torch.full((B,), L, device=device))


def _width_step(runner, B: int, width: int, vocab: int, g, device: str, passes: int = 1):
    """A step to time: `passes` forwards of `width` tokens to the B cached rows, rolled back
    afterwards (as a draft loop does)."""
    tok = torch.randint(0, vocab, (B, width), generator=g).to(device)
    n, zero = torch.full((B,), width, device=device), torch.zeros(B, dtype=torch.long, device=device)

    def step():
        runner.mark()
        for _ in range(passes):
            runner.forward(tok, n)
        runner.rollback(zero)
    return step


def _interleaved_samples(steps: dict, rounds: int, rng: random.Random, device: str,
                         clock=time.perf_counter, before: Optional[dict] = None) -> dict:
    """{key: [seconds, …]}: `rounds` rounds, each timing every step once in a fresh random order
    (after one untimed round), so that every step sees the same moments of a drifting machine;
    `before[key]`, where given, runs untimed right ahead of that step."""
    keys = list(steps)
    for k in keys:
        steps[k]()
    _sync(device)
    out: dict = {k: [] for k in keys}
    for _ in range(rounds):
        rng.shuffle(keys)
        for k in keys:
            if before and k in before:
                before[k]()
                _sync(device)
            t0 = clock()
            steps[k]()
            _sync(device)
            out[k].append(clock() - t0)
    return out


PLAIN_RUN = 16
PLAIN_WARM = 4      # untimed plain steps ahead of each timed run of them (`measure_steps`)


@torch.no_grad()
def measure_steps(model, batch_sizes: Sequence[int], draft_tokens: Sequence[int], context_lengths: Sequence[int],
                  *, device: str = "cpu", repeats: int = 3, passes: int = 3, log=None, runner=None,
                  clock=time.perf_counter, plain_run: int = PLAIN_RUN) -> list[dict]:
    """[{"B", "D", "L", "seconds"}]: one verification forward of B × (1 + D) tokens at context L,
    through the engine's own runner (ragged mask, positions, rollback), as the engine pays it.

    With `plain_run` > 0 the D = 0 points also get "plain_run_seconds": a step of plain decoding,
    timed as a run of `plain_run` one-token forwards (the cache growing) in the same rounds, each
    run right after `PLAIN_WARM` untimed ones. One token a row amid wider steps costs more than in
    a run of its own (on the 2-core CPU of BENCHMARKS.md 7–10 % in a profile, 6–30 % inside
    decoding): plain decoding is the baseline every speedup divides by, and prompt lookup's steps
    without a proposal pay the other price. Plain decoding's steps follow plain steps, so the timed
    run does too: in one side-by-side check, 16 plain steps at batch 4, 1k tokens timed straight
    after the round's wider steps cost 11 % more than the engine's plain decoding, and 1–3 % after
    4 untimed ones; a rerun (`benchmarks/profile_checks.py`) found 0.92–1.00× and 0.91–1.02×, so
    the effect is at most of the host's noise (BENCHMARKS §5.0zzz, session 34).

    The grid is measured `passes` times, the (B, L) in reverse order every other pass; within a
    (B, L), `repeats` rounds time every width once each, in a fresh random order; a point is the
    median of its passes × repeats timings, and "pass_seconds" ("pass_plain_run_seconds") keeps
    each pass's own median, in the order the passes ran (`planner.levels` reads them). Measured
    once, point after point, a shared CPU's drift of ±10 % over seconds became the profile's shape
    (one such profile had 12 rows cheaper than 8, and the planner followed it); timed width after
    width, drift over a few seconds still shaped the curve (on a clock slowing 2 % a forward, equal
    widths came out up to 1.35× apart). What stays is the host's own state: on the 2-core CPU of
    BENCHMARKS.md, verifying 5 tokens at batch 1 measured 1.30×, 1.65× and 1.92× a plain step in
    profiles hours apart, and 1.35× or 1.85× in stretches minutes apart within one run."""
    from ..target import ModelRunner

    runner = runner or ModelRunner(model, lean="exact")
    vocab = model.config.vocab_size
    g, rng = torch.Generator().manual_seed(0), random.Random(0)
    cells = [(B, L) for L in context_lengths for B in batch_sizes]
    samples: dict[tuple[int, int, int], list[float]] = {}
    per_pass: dict[tuple[int, int, int], list[float]] = {}
    for p in range(max(int(passes), 1)):
        for B, L in (cells if p % 2 == 0 else cells[::-1]):
            _prefill(runner, B, L, vocab, g, device)
            steps = {D: _width_step(runner, B, 1 + D, vocab, g, device) for D in draft_tokens}
            warm = {}
            if plain_run > 0:
                steps["plain"] = _width_step(runner, B, 1, vocab, g, device, passes=plain_run)
                warm["plain"] = _width_step(runner, B, 1, vocab, g, device, passes=PLAIN_WARM)
            for D, ts in _interleaved_samples(steps, max(int(repeats), 1), rng, device, clock, warm).items():
                if D == "plain":
                    ts = [t / plain_run for t in ts]
                samples.setdefault((B, D, L), []).extend(ts)
                per_pass.setdefault((B, D, L), []).append(statistics.median(ts))
    out = []
    for L in context_lengths:
        for B in batch_sizes:
            for D in draft_tokens:
                point = {"B": int(B), "D": int(D), "L": int(L), "seconds": statistics.median(samples[(B, D, L)]),
                         "pass_seconds": per_pass[(B, D, L)]}
                if D == 0 and plain_run > 0:
                    point["plain_run_seconds"] = statistics.median(samples[(B, "plain", L)])
                    point["pass_plain_run_seconds"] = per_pass[(B, "plain", L)]
                out.append(point)
                if log:
                    log(f"  B={B:<4d} D={D:<3d} L={L:<6d} {point['seconds'] * 1e3:9.2f} ms"
                        + (f"  (in a run of plain steps {point['plain_run_seconds'] * 1e3:.2f} ms)"
                           if "plain_run_seconds" in point else ""))
    return out


@torch.no_grad()
def measure_draft_steps(model, batch_sizes: Sequence[int], context_lengths: Sequence[int], *,
                        device: str = "cpu", repeats: int = 5, log=None, target=None) -> list[dict]:
    """[{"B", "L", "seconds"}]: one draft-model token for B rows at context L, through the engine's
    own runner (lean forward, ragged mask, rollback) — what a draft step really costs.

    With `target` (the target model), each timed run of four draft tokens follows an untimed target
    forward at the same (B, L), as in decoding. Timed alone, back to back, the draft's weights stay
    in the CPU's caches: on the 2-core CPU of BENCHMARKS.md a draft token cost 0.66 ms in such a
    profile and 1.9 ms inside decoding, and the planner predicted gains where the sweep measured
    losses (BENCHMARKS.md, session 17)."""
    from ..target import ModelRunner

    runner, vocab = ModelRunner(model, lean=True), model.config.vocab_size
    trunner = ModelRunner(target, lean="exact") if target is not None else None
    g = torch.Generator().manual_seed(0)
    out = []
    for L in context_lengths:
        for B in batch_sizes:
            _prefill(runner, B, L, vocab, g, device)
            verify = None
            if trunner is not None:
                _prefill(trunner, B, L, target.config.vocab_size, g, device)
                verify = _width_step(trunner, B, 1, target.config.vocab_size, g, device)
            drafts = _width_step(runner, B, 1, vocab, g, device, passes=4)
            sec = _median_time(drafts, repeats, device, warmup=2, before=verify) / 4
            point = {"B": int(B), "L": int(L), "seconds": sec,
                     "catch_up_seconds": _catch_up(runner, B, vocab, g, device, verify, repeats)}
            if trunner is not None:
                point["target_factor"] = _target_after_drafts(trunner, B, target.config.vocab_size, g, device,
                                                              drafts, verify, repeats)
            out.append(point)
            if log:
                log(f"  draft B={B:<4d} L={L:<6d} {sec * 1e3:9.2f} ms"
                    + (f"  (then the target's step ×{point['target_factor']:.2f})" if "target_factor" in point else ""))
    return out


def _catch_up(runner, B: int, vocab: int, g, device: str, verify, repeats: int) -> float:
    """What a second token a row adds to the draft model's first forward of a step: after a step
    in which a row accepted every draft, the draft has yet to see its last draft and the target's
    bonus token, and the batch's first forward feeds two tokens a row. At 1k tokens, batch 16, on
    the 2-core CPU of BENCHMARKS.md that forward took 5.8 ms against 3.7 for one token, and the
    draft model's steps in the validation's runs cost up to 2.2× the profile's D tokens at D = 1
    (BENCHMARKS §5.0zzz, session 34). Timed in turns, one token then two, each after `verify`."""
    one, two = _width_step(runner, B, 1, vocab, g, device), _width_step(runner, B, 2, vocab, g, device)
    times = _in_turns({1: (verify, one), 2: (verify, two)}, max(int(repeats), 1) + 1, device)
    return max(statistics.median(times[2][1:]) - statistics.median(times[1][1:]), 0.0)     # (the first: warm-up)


def _in_turns(runs: dict, rounds: int, device: str) -> dict:
    """{key: [seconds, …]}: each of `runs`' (before, step) once a round, in turn, `before` (if
    any) untimed: what a step costs after what decoding runs ahead of it, compared side by side."""
    times: dict = {k: [] for k in runs}
    for _ in range(rounds):
        for k, (before, step) in runs.items():
            if before is not None:
                before()
            _sync(device)
            t0 = time.perf_counter()
            step()
            _sync(device)
            times[k].append(time.perf_counter() - t0)
    return times


def _target_after_drafts(trunner, B: int, vocab: int, g, device: str, drafts, verify, repeats: int) -> float:
    """A verification of 5 tokens a row right after four draft tokens, over the same right after
    a target step: the draft model's passage through the caches slows the target too (on the
    2-core CPU of BENCHMARKS.md its runs paid up to 24 % more than prompt lookup's for the same
    target step at batch 1), a cost of drafting with a model that the target's own grid never sees."""
    step = _width_step(trunner, B, 5, vocab, g, device)
    times = _in_turns({"draft": (drafts, step), "target": (verify, step)}, max(int(repeats), 1), device)
    base = statistics.median(times["target"])
    return statistics.median(times["draft"]) / base if base > 0 else 1.0


def sps_curves(step_times: list[dict]) -> list[dict]:
    """Steps/s against verified tokens N = B(1 + D), per (B, L)."""
    groups: dict[tuple, list] = {}
    for s in step_times:
        groups.setdefault((s["B"], s["L"]), []).append([s["B"] * (1 + s["D"]), 1.0 / s["seconds"]])
    return [{"B": b, "L": l, "points": sorted(p)} for (b, l), p in sorted(groups.items())]


def profile(target: Optional[str] = None, *, hidden: Optional[int] = None, device: Optional[str] = None,
            dtype: Optional[str] = None, rows: Sequence[int] = DEFAULT_ROWS, batch_sizes: Sequence[int] = (1, 4),
            draft_tokens: Sequence[int] = tuple(range(9)), context_lengths: Sequence[int] = (128, 512),
            repeats: int = 3, name: Optional[str] = None, draft_model: Optional[str] = None,
            passes: int = 6, log=print) -> Hardware:
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype_name = dtype or ("bfloat16" if device.startswith("cuda") else "float32")
    tdtype = getattr(torch, dtype_name)
    model = cfg = None
    if target is not None:
        model, cfg = _load_target(target, tdtype, device)
        hidden = hidden or int(cfg.get("hidden_size") or cfg.get("n_embd"))
    hidden = hidden or 1024
    log(f"profiling {device} ({dtype_name}), GEMMs with d = {hidden}")
    curve = measure_gemm(hidden, rows, dtype=tdtype, device=device, repeats=repeats)
    for m, f in curve:
        log(f"  M={m:<5d} {f / 1e9:9.1f} GFLOP/s")
    bw = measure_bandwidth(device=device, repeats=repeats)
    log(f"  memory bandwidth {bw / 1e9:.1f} GB/s")
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(0)
        mem, hname, tile = float(props.total_memory), props.name, 128
    else:
        try:
            mem = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        except (ValueError, OSError, AttributeError):  # pragma: no cover
            mem = 16e9
        hname, tile = f"cpu-{os.cpu_count()}core", 1
    hw = Hardware(name=name or hname, flops=max(f for _, f in curve), bandwidth=bw, memory=mem,
                  source="measured", compute_efficiency=1.0, bandwidth_efficiency=1.0, attention_tile=tile,
                  overhead_s=0.0 if device.startswith("cuda") else 1e-3, gemm_curve=curve, dtype=dtype_name,
                  notes=f"measured by draftwise profile on {device}, torch {torch.__version__}")
    if model is not None:
        log(f"target step times ({target}):")
        hw.step_times = measure_steps(model, batch_sizes, draft_tokens, context_lengths, device=device,
                                      repeats=repeats, passes=passes, log=log)
        hw.target = str(target)
        hw.target_config = {k: v for k, v in cfg.items() if _jsonable(v)}
        levels = find_levels(hw.step_times)
        if levels:
            log("warning: this host priced width at two levels in different passes:")
            for line in describe_levels(levels):
                log(f"  {line}")
            log("  the best D depends on which level a run meets; `draftwise plan` prices both and picks the D "
                "that loses least at either (its reasons say what each level alone would pick)")
    if draft_model is not None:
        dmodel, dcfg = _load_target(draft_model, tdtype, device)
        log(f"draft-model token times ({draft_model}):")
        hw.draft_step_times = measure_draft_steps(dmodel, batch_sizes, context_lengths, device=device,
                                                  repeats=max(2 * repeats, 10), log=log, target=model)
        hw.draft_config = {k: v for k, v in dcfg.items() if _jsonable(v)}
    return hw


def _jsonable(v: Any) -> bool:
    try:
        json.dumps(v)
        return True
    except (TypeError, ValueError):
        return False


def save_profile(hw: Hardware, path: str | Path) -> None:
    d = hw.to_dict()
    if hw.step_times:
        d["sps_curves"] = sps_curves(hw.step_times)
        d["price_levels"] = find_levels(hw.step_times)
    Path(path).write_text(json.dumps(d, indent=1))
