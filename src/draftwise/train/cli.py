"""`draftwise train {eagle3,mtp,dflash,dspark} --target PATH --out DIR --tokens N …`

Each drafter's training module `draftwise.train.<name>` exposes `build_model(target, **opts)`,
`loss_fn(model, batch)` and `DEFAULTS` (training and model options); modules are looked up lazily,
so a drafter is trainable as soon as its module exists. The checkpoint is written with the module's
`save(model, out_dir)` when it has one, else `save_checkpoint(model, model.config, out_dir)`, and
evaluated through the real engine by loading it back with `drafter="<name>:<out_dir>"`.
"""
from __future__ import annotations

import argparse
import importlib
import json
import time
from dataclasses import fields
from pathlib import Path

DRAFTERS = ("eagle3", "mtp", "dflash", "dspark")
DATA_KEYS = {"batch_size", "seq_len", "prompt_len", "regen", "temperature", "topk", "mask_prompt"}
EVAL_KEYS = {"eval_prompts", "eval_prompt_len", "eval_new_tokens", "eval_draft_tokens"}


def _train_keys():
    from .trainer import TrainConfig
    return {f.name for f in fields(TrainConfig)}


def split_options(opts: dict) -> tuple[dict, dict, dict, dict]:
    """(trainer options, data options, eval options, model options)."""
    tk = _train_keys()
    tr = {k: v for k, v in opts.items() if k in tk}
    da = {k: v for k, v in opts.items() if k in DATA_KEYS}
    ev = {k: v for k, v in opts.items() if k in EVAL_KEYS}
    mo = {k: v for k, v in opts.items() if k not in tk and k not in DATA_KEYS and k not in EVAL_KEYS}
    return tr, da, ev, mo


def save_drafter(mod, model, out_dir, extra: dict | None = None) -> None:
    from ..drafters.learned import save_checkpoint
    m = getattr(model, "module", model)
    if hasattr(mod, "save"):
        mod.save(m, out_dir)
        if extra:
            p = Path(out_dir) / "config.json"
            cfg = json.loads(p.read_text())
            cfg.update(extra)
            p.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        return
    cfg = dict(m.config)
    if extra:
        cfg.update(extra)
    save_checkpoint(m, cfg, out_dir)


def run_training(name: str, target, out_dir, tokens: int | None = None, data=None, mode: str = "online",
                 steps: int | None = None, resume: bool = False, shards=None, eval_data=None, **overrides) -> dict:
    """Train drafter `name` on `target` (a TargetModel); returns the training log. `data`: a token
    file / text file / folder with train.bin, or a token array; `shards`: an offline shard folder."""
    import numpy as np

    from ..drafters.base import build_drafter
    from . import data as D
    from .trainer import TrainConfig, make_eval_fn, train

    try:
        mod = importlib.import_module(f"draftwise.train.{name}")
    except ModuleNotFoundError as exc:
        if exc.name == f"draftwise.train.{name}":
            raise ValueError(f"training for {name!r} is not available yet (no module draftwise.train.{name})") from exc
        raise
    opts = dict(getattr(mod, "DEFAULTS", {}))
    opts.update({k: v for k, v in overrides.items() if v is not None})
    tr, da, ev, mo = split_options(opts)
    model = mod.build_model(target, **mo)
    cfg_layers = list(getattr(model, "config", {}).get("target_layer_ids", []))
    layers = tuple(getattr(mod, "data_layers", lambda m: cfg_layers)(model))
    batch_size, seq_len = int(da.get("batch_size", 8)), int(da.get("seq_len", 256))
    if steps is None:
        if not tokens:
            raise ValueError("give --tokens N (training tokens) or --steps N")
        steps = max(1, int(tokens) // (batch_size * seq_len))
    tr["steps"] = int(steps)
    tr["resume"] = bool(resume)
    tr.setdefault("warmup_steps", max(1, steps // 20))
    tr["warmup_steps"] = min(int(tr["warmup_steps"]), max(1, steps // 2))
    cfg = TrainConfig.from_dict(tr)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    toks = None
    if data is not None:
        toks = data if isinstance(data, np.ndarray) else D.load_token_source(data, getattr(target, "tokenizer", None))
    ds_opts = {k: da[k] for k in ("prompt_len", "regen", "temperature", "topk", "mask_prompt") if k in da}
    if mode == "offline" or shards is not None:
        shard_dir = Path(shards) if shards is not None else out / "shards"
        if not (shard_dir / "meta.json").is_file():
            if toks is None:
                raise ValueError("offline mode needs --data to write shards from (or --shards with existing shards)")
            src = D.OnlineStream(target, toks, layers, batch_size=batch_size, seq_len=seq_len, seed=cfg.seed + 1,
                                 **ds_opts)
            D.write_shards(shard_dir, src, steps, progress=cfg.progress)
        stream = D.OfflineStream(shard_dir, batch_size, seed=cfg.seed, layers=layers)
    elif mode == "online":
        if toks is None:
            raise ValueError("online mode needs --data (a token .bin/.npy, a folder with train.bin, or a text file)")
        stream = D.OnlineStream(target, toks, layers, batch_size=batch_size, seq_len=seq_len, seed=cfg.seed + 1,
                                **ds_opts)
    else:
        raise ValueError(f"--mode must be online or offline, not {mode!r}")

    eval_fn = None
    n_eval = int(ev.get("eval_prompts", 8))
    plen = int(ev.get("eval_prompt_len", 32))
    vals = []
    if eval_data is None and isinstance(data, (str, Path)):  # the zoo's token folder: use its val_*.bin
        d = Path(data) if Path(data).is_dir() else Path(data).parent
        vals = sorted(d.glob("val_*.bin"))
    prompts = []
    if n_eval > 0 and eval_data is not None:
        prompts = D.heldout_prompts(D.load_token_source(eval_data, getattr(target, "tokenizer", None)), n_eval, plen)
    elif n_eval > 0 and vals:
        per = -(-n_eval // len(vals))
        prompts = [p for v in vals for p in D.heldout_prompts(D.load_token_source(v), per, plen)]
    elif n_eval > 0 and toks is not None:  # no held-out file: prompts from the training tokens
        prompts = D.heldout_prompts(toks, n_eval, plen)
    if prompts:
        eval_fn = make_eval_fn(target, prompts, lambda m: build_drafter(f"{name}:{out}", target),
                               num_draft_tokens=int(ev.get("eval_draft_tokens", 4)),
                               max_new_tokens=int(ev.get("eval_new_tokens", 32)))
    t0 = time.time()
    log = train(model, mod.loss_fn, stream, cfg, out, eval_fn=eval_fn,
                save_fn=lambda m, o: save_drafter(mod, m, o))
    info = {"training": {"tokens": log["tokens"], "steps": log["steps"], "wall_time_s": log["wall_time_s"],
                         "mode": mode, "batch_size": batch_size, "seq_len": seq_len}}
    save_drafter(mod, model, out, extra=info)
    log["cli_wall_s"] = time.time() - t0
    return log


def _cmd(args) -> int:
    import draftwise

    target = draftwise.load_target(args.target, dtype=args.dtype)
    overrides = {"lr": args.lr, "batch_size": args.batch_size, "seq_len": args.seq_len, "seed": args.seed,
                 "checkpoint_every": args.checkpoint_every, "bf16": {"on": True, "off": False}.get(args.bf16),
                 "progress": False if args.quiet else None, "device": args.device,
                 "eval_prompts": args.eval_prompts, "regen": args.regen}
    for kv in args.option or []:
        k, _, v = kv.partition("=")
        try:
            overrides[k] = json.loads(v)
        except json.JSONDecodeError:
            overrides[k] = v
    log = run_training(args.drafter, target, args.out, tokens=args.tokens, data=args.data, mode=args.mode,
                       steps=args.steps, resume=args.resume, shards=args.shards, eval_data=args.eval_data,
                       **overrides)
    last = log["evals"][-1] if log.get("evals") else {}
    print(json.dumps({"out": str(args.out), "steps": log["steps"], "tokens": log["tokens"],
                      "wall_time_s": round(log["wall_time_s"], 1), "final_loss": log["history"][-1]["loss"]
                      if log["history"] else None, "tau": last.get("tau"), "alpha": last.get("alpha")}))
    return 0


def add_cli(sub) -> None:
    p = sub.add_parser("train", help="train a learned drafter (eagle3, mtp, dflash, dspark) on a target",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("drafter", choices=DRAFTERS)
    p.add_argument("--target", required=True, help="target model folder")
    p.add_argument("--out", required=True, help="output folder (checkpoint, train_log.json, trainer state)")
    p.add_argument("--tokens", type=int, default=None, help="training tokens (steps = tokens // (batch × seq_len))")
    p.add_argument("--data", default=None, help="token .bin/.npy, folder with train.bin, or a text file")
    p.add_argument("--eval-data", default=None, help="held-out token/text file for the evaluation prompts")
    p.add_argument("--mode", choices=("online", "offline"), default="online")
    p.add_argument("--shards", default=None, help="offline shard folder (written there when missing)")
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--seq-len", type=int, default=None)
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--checkpoint-every", type=int, default=None)
    p.add_argument("--eval-prompts", type=int, default=None, help="held-out prompts per evaluation (0: none)")
    p.add_argument("--regen", choices=("sample", "greedy", "none"), default=None,
                   help="how the target regenerates continuations (none: train on corpus windows)")
    p.add_argument("--device", default=None)
    p.add_argument("--dtype", default="float32", help="target dtype")
    p.add_argument("--bf16", choices=("auto", "on", "off"), default="auto",
                   help="bf16 autocast (auto: on CUDA only; CPU bf16 matmuls are much slower than fp32)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--resume", action="store_true", help="continue from OUT/trainer_state")
    p.add_argument("-o", "--option", action="append", metavar="KEY=VALUE",
                   help="any drafter/training option (JSON value), e.g. -o num_layers=2 -o ttt_steps=4")
    p.set_defaults(func=_cmd)
