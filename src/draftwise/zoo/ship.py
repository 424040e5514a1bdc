"""`draftwise zoo add-drafter SRC DST`: copy a trained drafter into the zoo at a smaller dtype.

Training writes fp32; the committed zoo stores bf16 (the whole folder must stay small). Integer
buffers (vocabulary maps) keep their dtype; config.json and train_log.json are copied as they are.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch


def add_drafter(src, dst, dtype: str = "bfloat16") -> Path:
    from safetensors.torch import load_file, save_file

    src, dst = Path(src), Path(dst)
    cfg_path, weights = src / "config.json", src / "model.safetensors"
    if not cfg_path.is_file() or not weights.is_file():
        raise FileNotFoundError(f"{src} is not a drafter checkpoint (needs config.json and model.safetensors); "
                                "pass the --out folder of `draftwise train`")
    if "drafter_type" not in json.loads(cfg_path.read_text()):
        raise ValueError(f"{cfg_path} has no drafter_type: not a draftwise drafter checkpoint")
    to = getattr(torch, dtype)
    tensors = {k: (v.to(to) if v.is_floating_point() else v).contiguous() for k, v in load_file(weights).items()}
    dst.mkdir(parents=True, exist_ok=True)
    tmp = dst / "model.safetensors.tmp"
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    os.replace(tmp, dst / "model.safetensors")
    for name in ("config.json", "train_log.json"):
        if (src / name).is_file():
            shutil.copyfile(src / name, dst / name)
    return dst


def add_cli(zsub) -> None:
    p = zsub.add_parser("add-drafter", help="copy a trained drafter into the zoo (bf16 weights)",
                        description=__doc__)
    p.add_argument("src", help="a `draftwise train` output folder")
    p.add_argument("dst", help="e.g. zoo/eagle3")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.set_defaults(func=lambda a: print(add_drafter(a.src, a.dst, a.dtype)) or 0)
