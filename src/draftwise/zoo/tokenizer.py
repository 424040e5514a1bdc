"""Byte-level BPE tokenizer for the reference models, trained with `tokenizers`.

Saved as a Hugging Face folder (``tokenizer.json``, ``tokenizer_config.json``,
``special_tokens_map.json``) that ``AutoTokenizer.from_pretrained(folder)`` loads as a
``PreTrainedTokenizerFast`` with ``<|endoftext|>`` as BOS/EOS and ``<|pad|>`` as padding.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Iterator

EOS = "<|endoftext|>"
PAD = "<|pad|>"
SPECIAL_TOKENS = [EOS, PAD]
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def _chunks(files: Iterable[Path], lines_per_chunk: int = 64) -> Iterator[str]:
    for f in files:
        buf: list[str] = []
        with open(f, encoding="utf-8") as fh:
            for line in fh:
                buf.append(line)
                if len(buf) >= lines_per_chunk:
                    yield "".join(buf)
                    buf = []
        if buf:
            yield "".join(buf)


def train_tokenizer(files: Iterable[Path], vocab_size: int = 8192, min_frequency: int = 2):
    """Train a byte-level BPE on the given text files; returns a `tokenizers.Tokenizer`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_chunks([Path(f) for f in files]), trainer=trainer)
    return tok


def save_tokenizer(tok, out_dir: Path, model_max_length: int = 1024) -> Path:
    """Write the HF tokenizer files into `out_dir` (created)."""
    from transformers import PreTrainedTokenizerFast

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=EOS, eos_token=EOS, unk_token=EOS, pad_token=PAD,
        model_max_length=model_max_length, clean_up_tokenization_spaces=False)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out_dir))
    # transformers 5 may no longer write this file; older loaders and tools still read it
    smap = out_dir / "special_tokens_map.json"
    if not smap.exists():
        smap.write_text(json.dumps({"bos_token": EOS, "eos_token": EOS, "unk_token": EOS,
                                    "pad_token": PAD}, indent=2) + "\n")
    # make sure the config names the fast class explicitly (AutoTokenizer resolves it offline)
    cfg_path = out_dir / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"    # resolves in transformers 4.x and 5.x
    cfg.update(bos_token=EOS, eos_token=EOS, unk_token=EOS, pad_token=PAD)
    cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")
    return out_dir


def copy_tokenizer_files(src_dir: Path, dst_dir: Path) -> None:
    import shutil
    dst_dir = Path(dst_dir)
    dst_dir.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                 "chat_template.jinja"):
        if (Path(src_dir) / name).exists():
            shutil.copy2(Path(src_dir) / name, dst_dir / name)


def load_tokenizer(folder: Path):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(str(folder))
