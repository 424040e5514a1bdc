"""`draftwise bench` sweep runner: drafters × D × batch sizes × datasets through the built-in engine.

Run directory layout (``--out DIR``):

* ``configuration.json`` – settings, package versions, sha256 of every model file used, the union of
  the sweeps run into DIR.
* ``results.jsonl`` – one line per finished (configuration, request), appended with flush + fsync as
  soon as its batch finishes. Rerunning into the same DIR reads it and skips finished work (a torn
  last line from a kill is dropped); only the batch in flight when a run died is redone.
* ``prompts.jsonl`` – greedy runs only: each distinct prompt's token ids once, keyed by the
  ``prompt_sha`` its turn records carry. With them one run's greedy outputs price every draft
  length for prompt lookup and draft models (`draftwise.planner.trace.acceptance_from_run`).
* the reports written from ``results.jsonl`` by :mod:`draftwise.bench.report`.

A *configuration* is (dataset, drafter, D, batch size); the plain baseline is ``drafter = "none"``,
``D = 0``, run at every batch size. Requests are split into consecutive batches of the batch size
in the (stratified) dataset order; a multi-turn conversation generates turn by turn, appending each
reply to the history and re-encoding it (chat template when the tokenizer has one, else plain
"User: …\\nAssistant: …" text; see ``--prompt-format``).
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from draftwise.bench.datasets import Request, first_messages, load_dataset, render_conversation

RESULTS_FILE = "results.jsonl"
PROMPTS_FILE = "prompts.jsonl"
CONFIG_FILE = "configuration.json"
BASELINE = "none"
ADAPTIVE = "+adaptive"   # drafter label suffix: run-time D up to the largest -D (DSpark prefix scheduler)

# settings that must match when resuming into an existing run directory
_GLOBAL_KEYS = ("target", "max_new_tokens", "temperature", "top_k", "top_p", "seed", "dtype",
                "prompt_format", "num_requests", "per_tier", "ignore_eos", "min_batches")


@dataclass
class BenchConfig:
    target: str
    out: str
    drafters: list[str] = field(default_factory=list)
    draft_lengths: list[int] = field(default_factory=lambda: [3])
    batch_sizes: list[int] = field(default_factory=lambda: [1])
    datasets: list[str] = field(default_factory=lambda: ["qualitative"])
    num_requests: Optional[int] = None
    min_batches: int = 1        # at least this many batches per batch size (more requests at large ones)
    max_new_tokens: int = 128
    temperature: float = 0.0
    top_k: Optional[int] = None
    top_p: Optional[float] = None
    seed: int = 0
    dtype: str = "float32"
    prompt_format: str = "auto"
    per_tier: Optional[int] = None
    warmup: bool = True
    ignore_eos: bool = False
    adaptive: bool = False      # also run each drafter with run-time adaptive D (label "<drafter>+adaptive")
    interleave: bool = False    # per batch of requests, every configuration in turn (see run_bench)
    adaptive_hardware: Optional[str] = None   # adaptive D's steps/s curve: planner on this profile
    progress: bool = True
    plots: bool = True

    def global_settings(self) -> dict[str, Any]:
        d = asdict(self)
        return {k: d[k] for k in _GLOBAL_KEYS}


def requests_at(cfg: BenchConfig, batch_size: int) -> Optional[int]:
    """Requests per dataset at this batch size: `num_requests`, or more where that would make
    fewer than `min_batches` batches — one batch of 16 is one measurement, whose ±20 % noise no
    interleaving can average out."""
    if cfg.num_requests is None:
        return None
    return max(cfg.num_requests, cfg.min_batches * batch_size)


def config_key(dataset: str, drafter: str, D: int, batch_size: int) -> str:
    return f"{dataset}|{drafter}|D={D}|bs={batch_size}"


def sweep_units(cfg: BenchConfig) -> list[tuple[str, str, int, int]]:
    """(dataset, drafter, D, batch size), baseline first at each batch size."""
    units = []
    drafters = [d for d in cfg.drafters if d.lower() not in (BASELINE, "plain", "")]
    for ds in cfg.datasets:
        for bs in cfg.batch_sizes:
            units.append((ds, BASELINE, 0, bs))
            for dr in drafters:
                for D in cfg.draft_lengths:
                    units.append((ds, dr, int(D), bs))
                if cfg.adaptive:
                    units.append((ds, dr + ADAPTIVE, int(max(cfg.draft_lengths)), bs))
    return units


def split_adaptive(label: str) -> tuple[str, bool]:
    """(drafter spec, adaptive?) of a drafter label."""
    if label.endswith(ADAPTIVE):
        return label[: -len(ADAPTIVE)], True
    return label, False


# ------------------------------------------------------------------------------------ backend

class EngineBackend:
    """The built-in engine behind the contract ``draftwise.load_target / build_drafter / generate``."""

    def __init__(self, target_path: str, dtype: str = "float32"):
        import draftwise

        if not hasattr(draftwise, "generate"):
            raise RuntimeError("the draftwise engine (draftwise.generate) is not available in this build")
        self._dw = draftwise
        self.target = draftwise.load_target(target_path, dtype=dtype)
        self.tokenizer = self.target.tokenizer
        if self.tokenizer is None:
            raise ValueError(f"{target_path}: no tokenizer found next to the model; the benchmark needs one")
        self._drafters: dict[str, Any] = {}
        self.adaptive_hardware: Optional[str] = None   # else adaptive D measures its own curve
        self.max_positions = getattr(self.target, "max_positions", None)

    def drafter(self, spec: str, D: int = 0):
        """One drafter object per configuration (label and D): a configuration is a session of its
        own (the suffix drafter's global tree, the adaptive scheduler's statistics), also when the
        sweep interleaves configurations."""
        if split_adaptive(spec)[0] == BASELINE:
            return None
        if (spec, D) not in self._drafters:
            self._drafters[(spec, D)] = self._dw.build_drafter(split_adaptive(spec)[0], self.target)
        return self._drafters[(spec, D)]

    def reset_drafter(self, spec: str, D: int = 0) -> None:
        """Each configuration starts from a fresh session."""
        d = self.drafter(spec, D)
        if d is not None:
            d.reset()

    def generate(self, prompts: list[list[int]], drafter: str, D: int, max_new_tokens: int, *,
                 temperature: float = 0.0, top_k=None, top_p=None, seed=None, ignore_eos=False,
                 stop=None, stream=None) -> list[dict[str, Any]]:
        """One engine call; ``stream(row, new_ids)`` is called per step when given. A drafter label
        ending in ``+adaptive`` drafts D tokens and lets the run-time scheduler pick how many to verify."""
        outs = self._dw.generate(self.target, prompts, drafter=self.drafter(drafter, D), num_draft_tokens=D,
                                 max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k,
                                 top_p=top_p, seed=seed, ignore_eos=ignore_eos, stop=stop, stream=stream,
                                 adaptive=(self.adaptive_hardware or True) if split_adaptive(drafter)[1] else False)
        res = [{"token_ids": list(o.token_ids), "text": o.text, "accept_lengths": list(o.accept_lengths),
                "num_drafted": list(o.num_drafted), "token_times": list(o.token_times),
                "finish_reason": o.finish_reason} for o in outs]
        stats = getattr(outs, "stats", None)
        if res and stats is not None:
            # the batch's steps, once (on the first row): what each width cost inside decoding, so a
            # profile's step prices can be checked against the run they predict
            res[0]["batch_steps"] = [[len(s.rows), max(s.drafted, default=0), round(s.t_target, 7),
                                      round(s.t_drafter, 7), round(s.t_other, 7)] for s in stats.steps]
        return res


# ----------------------------------------------------------------------------------- run dir

def sha256_file(path: Path, _cache: dict = {}) -> str:
    key = (str(path), path.stat().st_mtime_ns, path.stat().st_size)
    if key not in _cache:
        h = hashlib.sha256()
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        _cache[key] = h.hexdigest()
    return _cache[key]


def hash_model_path(path: str) -> dict[str, Any]:
    """sha256 of every file of a model directory (or of the file itself)."""
    p = Path(path)
    if p.is_file():
        return {"path": str(p.resolve()), "files": {p.name: sha256_file(p)}}
    if p.is_dir():
        files = {str(f.relative_to(p)): sha256_file(f) for f in sorted(p.rglob("*"))
                 if f.is_file() and not any(part.startswith(".") for part in f.relative_to(p).parts)}
        return {"path": str(p.resolve()), "files": files}
    return {"path": path, "files": {}}


def drafter_model_path(spec: str) -> Optional[str]:
    """The model path inside a drafter spec such as ``draft-model:PATH`` or ``eagle3:PATH``."""
    if ":" in spec:
        path = spec.split(":", 1)[1].split(",")[0]
        if os.path.exists(path):
            return path
    return None


def package_versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0], "platform": platform.platform()}
    from importlib import metadata

    for name in ("draftwise", "torch", "transformers", "tokenizers", "numpy", "pyarrow", "matplotlib", "httpx"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False, default=str)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def prepare_run_dir(cfg: BenchConfig, models: dict[str, Any], server: Optional[dict] = None) -> dict[str, Any]:
    """Create or check ``configuration.json``; refuse to resume with different global settings."""
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / CONFIG_FILE
    settings = cfg.global_settings()
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if path.is_file():
        old = json.loads(path.read_text(encoding="utf-8"))
        before = {"min_batches": 1, **old.get("settings", {})}    # runs from before the setting existed
        diff = {k: (before.get(k), v) for k, v in settings.items() if before.get(k) != v}
        if diff:
            raise ValueError(f"{out} holds a run with different settings {diff} (old, new); "
                             "use another --out directory, or the same settings to resume")
        for k, tk in (("drafters", "drafters"), ("draft_lengths", "draft_lengths"),
                      ("batch_sizes", "batch_sizes"), ("datasets", "datasets")):
            merged = list(old["sweep"].get(k, []))
            merged += [x for x in getattr(cfg, tk) if x not in merged]
            old["sweep"][k] = merged
        old.setdefault("models", {}).update(models)
        old["versions"] = package_versions()
        old["updated"] = now
        old.setdefault("invocations", []).append({"argv": sys.argv, "time": now})
        conf = old
    else:
        conf = {
            "format": "draftwise-bench/1",
            "settings": settings,
            "sweep": {"drafters": list(cfg.drafters), "draft_lengths": list(cfg.draft_lengths),
                      "batch_sizes": list(cfg.batch_sizes), "datasets": list(cfg.datasets)},
            "models": models,
            "versions": package_versions(),
            "created": now,
            "updated": now,
            "invocations": [{"argv": sys.argv, "time": now}],
        }
        if server:
            conf["server"] = server
    write_json_atomic(path, conf)
    return conf


def read_results(out: str | Path) -> list[dict[str, Any]]:
    """Records of ``results.jsonl``; a torn last line (killed mid-write) is cut off the file."""
    path = Path(out) / RESULTS_FILE
    if not path.is_file():
        return []
    data = path.read_bytes()
    records = []
    good_end = 0
    pos = 0
    for line in data.split(b"\n"):
        end = pos + len(line) + 1
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                break
            if end <= len(data):  # complete line (has its newline)
                good_end = end
            else:  # parsed but without newline: keep it, add the newline
                good_end = len(data)
        else:
            good_end = min(end, len(data))
        pos = end
    if good_end < len(data):
        with path.open("r+b") as f:
            f.truncate(good_end)
    elif data and not data.endswith(b"\n"):
        with path.open("ab") as f:
            f.write(b"\n")
    return records


class ResultWriter:
    def __init__(self, out: str | Path):
        self.path = Path(out) / RESULTS_FILE
        self.f = self.path.open("a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        self.f.write(json.dumps(record, ensure_ascii=False) + "\n")
        self.f.flush()
        os.fsync(self.f.fileno())

    def close(self) -> None:
        self.f.close()


def prompt_sha(token_ids: Sequence[int]) -> str:
    return hashlib.sha256(json.dumps([int(t) for t in token_ids]).encode()).hexdigest()[:20]


def read_prompts(out: str | Path) -> dict[str, list[int]]:
    """{prompt_sha: token ids} of a run's ``prompts.jsonl`` (a torn last line is ignored)."""
    path = Path(out) / PROMPTS_FILE
    found: dict[str, list[int]] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                d = json.loads(line)
            except json.JSONDecodeError:
                continue
            found[d["sha"]] = d["token_ids"]
    return found


class PromptStore:
    """Each distinct prompt once: a sweep over D and batch sizes sends the same prompts again and
    again, and a 1k-token prompt written into every record would make ``results.jsonl`` mostly
    prompts."""

    def __init__(self, out: str | Path):
        self.seen = set(read_prompts(out))
        self.path = Path(out) / PROMPTS_FILE
        if self.path.is_file() and not self.path.read_bytes().endswith(b"\n") and self.path.stat().st_size:
            with self.path.open("ab") as f:      # a line torn by a kill: the next starts afresh
                f.write(b"\n")

    def __call__(self, token_ids: Sequence[int]) -> str:
        sha = prompt_sha(token_ids)
        if sha not in self.seen:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps({"sha": sha, "token_ids": [int(t) for t in token_ids]}) + "\n")
            self.seen.add(sha)
        return sha


# --------------------------------------------------------------------------------------- sweep

def _turns_for_record(req: Request) -> list[str]:
    if req.prompt_token_ids is not None:
        return [f"<{req.category} prompt of exactly {len(req.prompt_token_ids)} tokens>"]
    return list(req.turns)


def run_batch(backend, reqs: Sequence[Request], drafter: str, D: int, cfg: BenchConfig,
              seed: Optional[int], keep_prompt: Optional[Callable[[list[int]], str]] = None) -> list[list[dict[str, Any]]]:
    """Generate every turn of a batch of conversations; returns per request the list of turn records
    (with `keep_prompt`, e.g. a `PromptStore`, each turn's ``prompt_sha``)."""
    replies: list[list[str]] = [[] for _ in reqs]
    turns_out: list[list[dict[str, Any]]] = [[] for _ in reqs]
    n_turns = max(len(r.turns) for r in reqs)
    for t in range(n_turns):
        active = [i for i, r in enumerate(reqs) if len(r.turns) > t]
        prompts = []
        for i in active:
            r = reqs[i]
            if r.prompt_token_ids is not None and t == 0:
                prompts.append(list(r.prompt_token_ids))
            else:
                prompts.append(render_conversation(backend.tokenizer, first_messages(r, t, replies[i]),
                                                   cfg.prompt_format))
        window = uuid.uuid4().hex[:12]
        t0 = time.time()
        outs = backend.generate(prompts, drafter, D, cfg.max_new_tokens, temperature=cfg.temperature,
                                top_k=cfg.top_k, top_p=cfg.top_p,
                                seed=None if seed is None else seed + t, ignore_eos=cfg.ignore_eos)
        for i, p, o in zip(active, prompts, outs):
            replies[i].append(o["text"])
            turns_out[i].append({
                "prompt_tokens": len(p),
                **({"prompt_sha": keep_prompt(p)} if keep_prompt is not None else {}),
                "token_ids": o["token_ids"],
                "text": o["text"],
                "step_lengths": o["accept_lengths"],
                "drafted": o["num_drafted"],
                "t0": t0,
                "chunk_times": [t0 + x for x in o["token_times"]],
                "num_tokens": len(o["token_ids"]),
                "window": window,
                "finish_reason": o["finish_reason"],
                **({"batch_steps": o["batch_steps"]} if "batch_steps" in o else {}),
            })
    return turns_out


def run_bench(cfg: BenchConfig, backend=None, log: Callable[[str], None] = print,
              before_group: Optional[Callable[[str, int], None]] = None) -> Path:
    """Run (or resume) the sweep into ``cfg.out`` and write the reports; returns the run dir.
    ``before_group(dataset, batch_size)``, with ``cfg.interleave``, runs before each (dataset, batch
    size) that has requests left, e.g. to time the machine in the minutes that group is measured."""
    from draftwise.bench import report

    if cfg.temperature < 0:
        raise ValueError("--temperature must be >= 0")
    if any(b < 1 for b in cfg.batch_sizes) or not cfg.batch_sizes:
        raise ValueError("--batch-sizes must be positive integers")
    if any(d < 1 for d in cfg.draft_lengths):
        raise ValueError("-D must be >= 1 (the baseline with D = 0 is always run)")
    if backend is None:
        backend = EngineBackend(cfg.target, dtype=cfg.dtype)
    if cfg.adaptive_hardware and hasattr(backend, "adaptive_hardware"):
        backend.adaptive_hardware = cfg.adaptive_hardware
    models = {"target": hash_model_path(cfg.target)}
    for spec in cfg.drafters:
        p = drafter_model_path(spec)
        if p:
            models[f"drafter:{spec}"] = hash_model_path(p)
    prepare_run_dir(cfg, models)
    done = {(r["key"], r["question_id"]) for r in read_results(cfg.out)}

    most = requests_at(cfg, max(cfg.batch_sizes))
    datasets = {ds: load_dataset(ds, tokenizer=backend.tokenizer, num_requests=most, per_tier=cfg.per_tier)
                for ds in cfg.datasets}
    max_pos = getattr(backend, "max_positions", None)
    units = sweep_units(cfg)
    todo = []  # (dataset, drafter, D, bs, key, [(batch start, batch requests)])
    total = skipped = 0
    for ds, dr, D, bs in units:
        key = config_key(ds, dr, D, bs)
        reqs = datasets[ds][:requests_at(cfg, bs)]
        skipped += sum(1 for r in reqs if (key, r.question_id) in done)
        # batches are cut from the full list so a resumed run batches exactly like an uninterrupted one
        batches = [(b, reqs[b:b + bs]) for b in range(0, len(reqs), bs)
                   if any((key, r.question_id) not in done for r in reqs[b:b + bs])]
        if batches:
            todo.append((ds, dr, D, bs, key, batches))
            total += sum(1 for _, bt in batches for r in bt if (key, r.question_id) not in done)
    if skipped:
        log(f"resuming {cfg.out}: {skipped} finished request results kept, {total} to run")
    if max_pos:
        for ds, reqs in datasets.items():
            for r in reqs:
                if r.prompt_token_ids is not None and len(r.prompt_token_ids) + cfg.max_new_tokens > max_pos:
                    raise ValueError(f"{ds}: prompts of {len(r.prompt_token_ids)} tokens + max_new_tokens "
                                     f"{cfg.max_new_tokens} exceed the target's {max_pos} positions")
    writer = ResultWriter(cfg.out)
    keep_prompt = PromptStore(cfg.out) if cfg.temperature == 0 else None
    bar = None
    if cfg.progress and total:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, desc="bench", unit="req", dynamic_ncols=True)
    def run_one(ds, dr, D, bs, key, b, batch):
        seed = cfg.seed + b if cfg.seed is not None else None
        results = run_batch(backend, batch, dr, D, cfg, seed, keep_prompt)
        for r, turns in zip(batch, results):
            if (key, r.question_id) in done:
                continue
            writer.write({"key": key, "dataset": ds, "drafter": dr, "D": D, "batch_size": bs,
                          "question_id": r.question_id, "category": r.category,
                          "sub_category": r.sub_category, "turns": _turns_for_record(r),
                          "outputs": turns})
            done.add((key, r.question_id))
            if bar is not None:
                bar.update(1)

    def warm_up(ds, dr, D, bs, key, batches):
        if hasattr(backend, "reset_drafter"):
            backend.reset_drafter(dr, D)
        if cfg.warmup:
            warm = batches[0][1]
            wcfg = BenchConfig(**{**asdict(cfg), "max_new_tokens": min(8, cfg.max_new_tokens)})
            run_batch(backend, [Request(r.question_id, r.category, r.turns[:1], prompt_token_ids=r.prompt_token_ids)
                                for r in warm], dr, D, wcfg, cfg.seed)

    try:
        if not cfg.interleave:
            for ds, dr, D, bs, key, batches in todo:
                if bar is not None:
                    bar.set_postfix_str(f"{ds} {dr} D={D} bs={bs}")
                warm_up(ds, dr, D, bs, key, batches)
                for b, batch in batches:
                    run_one(ds, dr, D, bs, key, b, batch)
        else:
            # Per (dataset, batch size), each batch of requests goes through every configuration
            # before the next batch, in an order that changes from batch to batch: the machine's
            # drift over minutes (and its warmth after the previous configuration) then falls on
            # all configurations alike, so their ratios are measured side by side. Each pair of
            # batches runs the cycle from one start, forwards then backwards, so that within a pair a
            # configuration follows a different one each time (the starts spread over the cycle
            # from pair to pair): rotated by one place a batch, a group
            # of two batches left each configuration behind the same one both times, and adaptive D
            # with the draft model, always after the draft model at D = 8, ran the same plain steps
            # as plain decoding 3 % slower (BENCHMARKS §5.0o, session 20).
            groups: dict[tuple[str, int], list] = {}
            for unit in todo:
                groups.setdefault((unit[0], unit[3]), []).append(unit)
            for (ds, bs), units in groups.items():
                if before_group is not None:
                    before_group(ds, bs)
                if bar is not None:
                    bar.set_postfix_str(f"{ds} bs={bs} ({len(units)} configurations interleaved)")
                for unit in units:
                    warm_up(*unit)
                pending = [dict(u[5]) for u in units]     # per configuration: batch start → requests
                starts = sorted({b for p in pending for b in p})
                pairs = (len(starts) + 1) // 2
                for w, b in enumerate(starts):
                    order = list(zip(units, pending))
                    k = ((w // 2) * len(order)) // pairs      # each pair of batches: one start, both ways
                    order = order[k:] + order[:k]
                    if w % 2:
                        order.reverse()
                    for (ds_, dr, D, bs_, key, _), todo_b in order:
                        if b in todo_b:
                            run_one(ds_, dr, D, bs_, key, b, todo_b[b])
    finally:
        writer.close()
        if bar is not None:
            bar.close()
    report.write_reports(cfg.out, plots=cfg.plots)
    return Path(cfg.out)
