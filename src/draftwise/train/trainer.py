"""The one training loop of the learned drafters.

AdamW (β 0.9/0.95), linear warm-up then cosine decay, bf16 autocast, gradient clipping, a tqdm bar
with loss and tokens seen, checkpoints every N steps (model, optimizer, schedule position, RNG and
data position; tensors in safetensors, the rest JSON — never pickle) and exact resume, an evaluation
at each checkpoint, and `train_log.json` with training tokens and wall time.

Data parallel through `torchrun`: with WORLD_SIZE > 1 the process group is initialised (gloo on CPU,
nccl on CUDA), every rank reads the same global batch and trains on its slice of the batch dimension,
and the gradients are averaged over ranks after each backward (an explicit all-reduce, which works
whatever methods the loss function calls on the model). With equal-size slices and a loss that is a
mean over examples, the loss curve equals the single-process one.
"""
from __future__ import annotations

import json
import math
import os
import random
import shutil
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np
import torch
from torch import nn

CKPT_DIR = "trainer_state"


@dataclass
class TrainConfig:
    steps: int = 100
    lr: float = 1e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 10
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0
    bf16: bool | None = None         # bf16 autocast; None: on CUDA only (CPU bf16 matmuls are far slower)
    checkpoint_every: int = 0        # 0: only at the end
    log_every: int = 1
    seed: int = 0
    progress: bool = True
    resume: bool = False
    device: str | None = None        # None: the model's device

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"unknown training options {sorted(unknown)}; known: {sorted(names)}")
        return cls(**d)


def lr_factor(step: int, cfg: TrainConfig) -> float:
    """Multiplier of cfg.lr at optimizer step `step` (0-based)."""
    if cfg.warmup_steps > 0 and step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    frac = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    frac = min(1.0, max(0.0, frac))
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * frac))


# --------------------------------------------------------------------------- data

class DataStream:
    """A resumable iterable of batch dicts: iteration yields batches from the current position;
    `state_dict()` / `load_state_dict()` save and restore the position (JSON-able)."""

    def __iter__(self) -> Iterator[dict]:
        raise NotImplementedError

    def state_dict(self) -> dict:
        raise NotImplementedError

    def load_state_dict(self, state: dict) -> None:
        raise NotImplementedError


class IndexedStream(DataStream):
    """Batch i = make_batch(i), a pure function of i: resuming just restores i."""

    def __init__(self, make_batch: Callable[[int], dict], start: int = 0):
        self.make_batch = make_batch
        self.index = start

    def __iter__(self):
        while True:
            b = self.make_batch(self.index)
            self.index += 1
            yield b

    def state_dict(self) -> dict:
        return {"index": self.index}

    def load_state_dict(self, state: dict) -> None:
        self.index = int(state["index"])


class ListStream(IndexedStream):
    """Cycles through a list of batches."""

    def __init__(self, batches: list[dict]):
        super().__init__(lambda i: batches[i % len(batches)])


# --------------------------------------------------------------------------- distributed

def dist_info() -> tuple[int, int]:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    return rank, world


def _init_dist(device: torch.device) -> tuple[int, int, bool]:
    """(rank, world size, whether this call created the process group: then `train` destroys it)."""
    rank, world = dist_info()
    if world > 1:
        import torch.distributed as dist
        if not dist.is_initialized():
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
            return rank, world, True
    return rank, world, False


def _slice_batch(batch, rank: int, world: int):
    """Rank's share of the batch dimension of every tensor in the (nested) batch dict."""
    if world == 1:
        return batch
    if isinstance(batch, dict):
        return {k: _slice_batch(v, rank, world) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(_slice_batch(v, rank, world) for v in batch)
    if isinstance(batch, torch.Tensor) and batch.dim() > 0:
        B = batch.shape[0]
        if B % world:
            raise ValueError(f"global batch {B} is not divisible by {world} processes")
        b = B // world
        return batch[rank * b:(rank + 1) * b]
    return batch


def _to_device(batch, device):
    if isinstance(batch, dict):
        return {k: _to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(v, device) for v in batch)
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    return batch


def _all_reduce_grads(params: list[nn.Parameter], world: int) -> None:
    import torch.distributed as dist
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1).float() for g in grads])
    dist.all_reduce(flat)
    flat /= world
    off = 0
    for p, g in zip(params, grads):
        n = g.numel()
        p.grad = flat[off:off + n].view_as(p).to(p.dtype)
        off += n


def _mean_over_ranks(x: float, world: int) -> float:
    if world == 1:
        return x
    import torch.distributed as dist
    t = torch.tensor([x], dtype=torch.float64)
    dist.all_reduce(t)
    return float(t) / world


def _broadcast_params(model: nn.Module, world: int) -> None:
    if world == 1:
        return
    import torch.distributed as dist
    with torch.no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            dist.broadcast(t.data, 0)


# --------------------------------------------------------------------------- checkpoints

def _tokens_in(batch) -> int:
    ids = batch.get("input_ids") if isinstance(batch, dict) else None
    return int(ids.numel()) if isinstance(ids, torch.Tensor) else 0


def _rng_state() -> tuple[dict[str, torch.Tensor], dict]:
    tensors = {"rng.torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"rng.cuda.{i}"] = s
    py = random.getstate()
    np_state = np.random.get_state()
    meta = {"python": [py[0], list(py[1]), py[2]],
            "numpy": [np_state[0], np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])]}
    return tensors, meta


def _set_rng_state(tensors: dict, meta: dict) -> None:
    torch.set_rng_state(tensors["rng.torch"].cpu())
    if torch.cuda.is_available():
        states = [tensors[k] for k in sorted(k for k in tensors if k.startswith("rng.cuda."))]
        if states:
            torch.cuda.set_rng_state_all([s.cpu() for s in states])
    py = meta["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    n = meta["numpy"]
    np.random.set_state((n[0], np.asarray(n[1], dtype=np.uint32), n[2], n[3], n[4]))


def save_train_state(path, model: nn.Module, opt: torch.optim.Optimizer, step: int, tokens: int,
                     data: Iterable | None, extra: dict | None = None) -> None:
    """Everything resume needs, in `path` (a folder written atomically)."""
    from safetensors.torch import save_file

    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    model_t = {k: v.detach().cpu().contiguous().clone() for k, v in model.state_dict().items()}
    save_file(model_t, str(tmp / "model.safetensors"))
    sd = opt.state_dict()
    opt_t = {}
    for pid, st in sd["state"].items():
        for k, v in st.items():
            if isinstance(v, torch.Tensor):
                opt_t[f"state.{pid}.{k}"] = v.detach().cpu().contiguous().clone()
    scalars = {str(pid): {k: v for k, v in st.items() if not isinstance(v, torch.Tensor)}
               for pid, st in sd["state"].items()}
    rng_t, rng_meta = _rng_state()
    opt_t.update(rng_t)
    save_file(opt_t, str(tmp / "optimizer.safetensors"))
    meta = {"step": step, "tokens": tokens, "param_groups": sd["param_groups"], "scalar_state": scalars,
            "rng": rng_meta, "data": data.state_dict() if hasattr(data, "state_dict") else None,
            "extra": extra or {}}
    (tmp / "state.json").write_text(json.dumps(meta))
    if path.exists():
        shutil.rmtree(path)
    os.replace(tmp, path)


def load_train_state(path, model: nn.Module, opt: torch.optim.Optimizer, data) -> dict:
    from safetensors.torch import load_file

    path = Path(path)
    meta = json.loads((path / "state.json").read_text())
    dev = next(model.parameters()).device
    model.load_state_dict(load_file(str(path / "model.safetensors"), device=str(dev)))
    t = load_file(str(path / "optimizer.safetensors"))
    state: dict = {}
    for k, v in t.items():
        if k.startswith("state."):
            _, pid, name = k.split(".", 2)
            state.setdefault(int(pid), {})[name] = v
    for pid, sc in meta["scalar_state"].items():
        state.setdefault(int(pid), {}).update(sc)
    groups = meta["param_groups"]
    for g in groups:
        if "betas" in g:
            g["betas"] = tuple(g["betas"])
    opt.load_state_dict({"state": state, "param_groups": groups})
    for st in opt.state.values():  # keep AdamW's `step` on the CPU like a fresh optimizer does
        for k, v in list(st.items()):
            if isinstance(v, torch.Tensor) and k != "step":
                st[k] = v.to(dev)
    _set_rng_state({k: v for k, v in t.items() if k.startswith("rng.")}, meta["rng"])
    if meta.get("data") is not None and hasattr(data, "load_state_dict"):
        data.load_state_dict(meta["data"])
    return meta


# --------------------------------------------------------------------------- the loop

def train(model: nn.Module, loss_fn: Callable[[nn.Module, dict], tuple[torch.Tensor, dict]], data,
          cfg: TrainConfig, out_dir, eval_fn: Callable[[nn.Module, int], dict] | None = None,
          save_fn: Callable[[nn.Module, Path], None] | None = None) -> dict:
    """Train `model` for cfg.steps optimizer steps on batches from `data`.

    loss_fn(model, batch) → (scalar loss, logs dict of floats); per-position weights are its job.
    eval_fn(model, step) → dict, run at each checkpoint (rank 0) and at the end.
    save_fn(model, out_dir) writes the drafter-loadable checkpoint (config.json + model.safetensors)
    at each checkpoint and at the end (rank 0).
    With cfg.resume and a saved state in out_dir, training continues from it exactly.
    Returns the log (also written to out_dir/train_log.json)."""
    out = Path(out_dir)
    device = torch.device(cfg.device) if cfg.device else next(model.parameters()).device
    model.to(device)
    rank, world, owned = _init_dist(device)
    main = rank == 0
    if main:
        out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    _broadcast_params(model, world)
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=cfg.lr, betas=tuple(cfg.betas), eps=1e-8)
    log = {"config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(cfg).items()},
           "world_size": world, "history": [], "evals": [], "tokens": 0, "wall_time_s": 0.0, "steps": 0}
    step, tokens, wall_before = 0, 0, 0.0
    state_dir = out / CKPT_DIR
    if cfg.resume and (state_dir / "state.json").is_file():
        meta = load_train_state(state_dir, model, opt, data)
        step, tokens = meta["step"], meta["tokens"]
        prev = meta["extra"].get("log")
        if prev:
            log["history"], log["evals"] = prev["history"], prev["evals"]
            wall_before = prev["wall_time_s"]
        log["resumed_from_step"] = step
    t0 = time.perf_counter()
    autocast = (device.type == "cuda") if cfg.bf16 is None else bool(cfg.bf16 and device.type in ("cpu", "cuda"))
    bar = None
    if cfg.progress and main:
        from tqdm.auto import tqdm
        bar = tqdm(total=cfg.steps, initial=step, desc="train", dynamic_ncols=True)

    def checkpoint(final: bool):
        log["steps"], log["tokens"] = step, tokens
        log["wall_time_s"] = wall_before + (time.perf_counter() - t0)
        if main:
            if save_fn is not None:
                save_fn(model, out)
            if eval_fn is not None:
                model.eval()
                with torch.no_grad():
                    ev = dict(eval_fn(model, step))
                model.train()
                ev.update(step=step, tokens=tokens)
                log["evals"].append(ev)
                if bar is not None:
                    bar.write(f"[eval step {step}] " + ", ".join(f"{k}={_fmt(v)}" for k, v in ev.items()))
            # the state stores the log so a resumed run's train_log.json carries the whole history
            save_train_state(state_dir, model, opt, step, tokens, data, extra={"log": _jsonable(log)})
            (out / "train_log.json").write_text(json.dumps(_jsonable(log), indent=2) + "\n")
        if world > 1:
            import torch.distributed as dist
            dist.barrier()

    model.train()
    it = iter(data)
    while step < cfg.steps:
        batch = next(it)
        tokens += _tokens_in(batch)
        local = _to_device(_slice_batch(batch, rank, world), device)
        for g in opt.param_groups:
            g["lr"] = cfg.lr * lr_factor(step, cfg)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            loss, logs = loss_fn(model, local)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if world > 1:
            _all_reduce_grads(params, world)
        gnorm = float(torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)) if cfg.grad_clip else float("nan")
        opt.step()
        step += 1
        lval = _mean_over_ranks(float(loss.detach()), world)
        if step % max(1, cfg.log_every) == 0 or step == cfg.steps:
            rec = {"step": step, "loss": lval, "lr": cfg.lr * lr_factor(step - 1, cfg), "grad_norm": gnorm,
                   "tokens": tokens}
            rec.update({k: float(v) for k, v in (logs or {}).items()})
            log["history"].append(rec)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{lval:.4f}", tokens=f"{tokens:,}")
        if cfg.checkpoint_every and step % cfg.checkpoint_every == 0 and step < cfg.steps:
            checkpoint(final=False)
    checkpoint(final=True)
    if bar is not None:
        bar.close()
    if owned:
        # left alive, gloo's threads met the interpreter's exit: in one CI run of three a rank
        # aborted ("terminate called without an active exception") after training had finished
        import torch.distributed as dist
        dist.destroy_process_group()
    return _jsonable(log)


def _fmt(v):
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return str(v)


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, torch.Tensor):
        return x.tolist()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


# --------------------------------------------------------------------------- evaluation

def acceptance_stats(outputs) -> dict:
    """τ (mean tokens per verification step, bonus included) and per-position conditional acceptance
    α_k = P(draft k accepted | drafts < k accepted, draft k was offered), from GenerationOutputs."""
    attempted: dict[int, int] = {}
    accepted: dict[int, int] = {}
    steps = emitted = 0
    for o in outputs:
        for L, k in zip(o.accept_lengths, o.num_drafted):
            steps += 1
            emitted += L
            a = L - 1
            for pos in range(1, min(a + 1, k) + 1):
                attempted[pos] = attempted.get(pos, 0) + 1
                if pos <= a:
                    accepted[pos] = accepted.get(pos, 0) + 1
    K = max(attempted, default=0)
    alpha = [accepted.get(p, 0) / attempted[p] if attempted.get(p) else None for p in range(1, K + 1)]
    return {"tau": emitted / steps if steps else 0.0, "alpha": alpha, "verify_steps": steps}


def make_eval_fn(target, prompts: list[list[int]], to_drafter: Callable[[nn.Module], object],
                 num_draft_tokens: int = 4, max_new_tokens: int = 32, temperature: float = 0.0,
                 seed: int = 0) -> Callable[[nn.Module, int], dict]:
    """An eval_fn running the real engine (`draftwise.generate`) with the drafter built from the model
    being trained, on held-out prompts; reports τ and per-position conditional acceptance."""
    import draftwise

    def eval_fn(model, step):
        drafter = to_drafter(getattr(model, "module", model))
        res = draftwise.generate(target, prompts, drafter=drafter, num_draft_tokens=num_draft_tokens,
                                 max_new_tokens=max_new_tokens, temperature=temperature, seed=seed,
                                 ignore_eos=True)
        st = acceptance_stats(res)
        st["D"] = num_draft_tokens
        st["temperature"] = temperature
        return st

    return eval_fn
