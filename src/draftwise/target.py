"""A Hugging Face causal LM driven with explicit positions and a cache where each row has its own length.

`ModelRunner` is shared by the target and by the draft-model drafter. One primitive carries the
whole engine: `forward(tokens, lengths)` appends `lengths[r]` tokens to row r (the rest of the
padded block is ignored), and `rollback(keep)` keeps only the first `keep[r]` of them.
"""
from __future__ import annotations

import inspect
import os
from pathlib import Path

import torch
from safetensors import SafetensorError
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, DynamicCache, PreTrainedModel

from . import cache as kv

_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
           "float16": torch.float16, "fp16": torch.float16}


def resolve_dtype(dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in _DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(_DTYPES)}")
    return _DTYPES[dtype]


def load_causal_lm(path: str | os.PathLike, dtype="float32", trust_remote_code: bool = False) -> PreTrainedModel:
    """Load a local causal LM folder with clear errors for the usual mistakes."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"model path {str(path)!r} does not exist; pass a local folder holding config.json "
                                "and model.safetensors (draftwise never downloads from a hub)")
    if not (p / "config.json").is_file():
        raise ValueError(f"{str(path)!r} is not a Hugging Face model folder (no config.json)")
    config = AutoConfig.from_pretrained(p, trust_remote_code=trust_remote_code)
    try:
        model = AutoModelForCausalLM.from_pretrained(p, dtype=resolve_dtype(dtype), trust_remote_code=trust_remote_code,
                                                     use_safetensors=True)
    except ValueError as exc:
        if "Unrecognized configuration class" in str(exc):
            raise ValueError(f"{str(path)!r} holds a {type(config).__name__} ({config.model_type}), which is not a "
                             "causal language model; pass a decoder-only LM (AutoModelForCausalLM)") from exc
        raise
    except (OSError, SafetensorError) as exc:
        raise ValueError(f"could not load weights from {str(path)!r}: {exc}. The checkpoint is missing or corrupt: "
                         "re-save or re-download model.safetensors (pickle checkpoints are refused)") from exc
    return model.eval()


def load_tokenizer(path: str | os.PathLike):
    try:
        return AutoTokenizer.from_pretrained(path)
    except Exception as exc:  # noqa: BLE001 — transformers raises many types here
        raise ValueError(f"no tokenizer found in {str(path)!r} ({exc}); pass tokenizer=…") from exc


def pad_rows(rows: list[list[int]], device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded [B, W] tensor and lengths [B] from ragged token lists (one tensor build)."""
    lengths = [len(r) for r in rows]
    width = max(lengths, default=0)
    padded = [r + [0] * (width - n) for r, n in zip(rows, lengths)]
    tokens = torch.tensor(padded, dtype=torch.long, device=device).reshape(len(rows), width)
    return tokens, torch.tensor(lengths, dtype=torch.long, device=device)


class ModelRunner:
    """Drives one model over a ragged batch. Holes in the attention cache are hidden by `valid`."""

    def __init__(self, model: PreTrainedModel, tokenizer=None, lean: bool | str = False):
        """lean: run supported Llama-family models through `draftwise.lean`. True: whenever the
        family is supported (draft models: rounding only moves proposals). "exact": only if it
        reproduces Hugging Face's own forward bit for bit on a probe (targets: that forward is the
        reference of greedy exactness), else Hugging Face's forward."""
        from .lean import LeanForward, supports

        self.model = model.eval()
        self.config = model.config
        self.tokenizer = tokenizer
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        params = inspect.signature(model.forward).parameters
        self._cache_arg = next(n for n in ("cache", "past_key_values", "cache_params") if n in params)
        self._takes_positions = "position_ids" in params
        self._takes_mask = "attention_mask" in params
        self._takes_keep = "logits_to_keep" in params
        text_cfg = self.config.get_text_config() if hasattr(self.config, "get_text_config") else self.config
        self.max_positions = getattr(text_cfg, "max_position_embeddings", None) or getattr(text_cfg, "n_positions", None)
        self.num_layers = getattr(text_cfg, "num_hidden_layers", None) or getattr(text_cfg, "n_layer", None)
        self.vocab_size = model.get_output_embeddings().weight.shape[0]
        probe = DynamicCache(config=self.config)
        self.stateful = kv.has_recurrent_layers(probe)
        self.window = kv.sliding_window(probe)
        self._lean = LeanForward(model) if lean and supports(model) and not self.stateful else None
        if self._lean is not None and lean == "exact" and not _lean_reproduces_hf(model):
            self._lean = None
        self.reset(0)

    @property
    def uses_lean_forward(self) -> bool:
        return self._lean is not None

    # --- state -----------------------------------------------------------------------------
    def reset(self, batch_size: int) -> None:
        self.cache = kv.new_cache(self.config)
        self.valid = torch.zeros(batch_size, 0, dtype=torch.bool, device=self.device)
        self.seq_lens = torch.zeros(batch_size, dtype=torch.long, device=self.device)
        self._mark = None      # (recurrent snapshot, cache length, seq_lens) where rollback counts from
        self._appended = []    # (tokens, lengths) fed since the mark, replayed by stateful rollback

    @property
    def batch_size(self) -> int:
        return self.seq_lens.shape[0]

    def select_rows(self, rows: torch.Tensor) -> None:
        kv.select_rows(self.cache, rows)
        self.valid = self.valid.index_select(0, rows)
        self.seq_lens = self.seq_lens.index_select(0, rows)
        self._mark, self._appended = None, []

    def mark(self) -> None:
        """Remember the current state; `rollback(keep)` then counts tokens from here."""
        snap = kv.snapshot_recurrent(self.cache) if self.stateful else None
        self._mark = (snap, kv.cache_length(self.cache), self.seq_lens.clone())
        self._appended = []

    # --- forward -----------------------------------------------------------------------------
    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor, hidden_layers: tuple[int, ...] = (),
                need_logits: bool = True) -> tuple[torch.Tensor | None, dict[int, torch.Tensor]]:
        """Append lengths[r] ≤ W tokens to each row; return logits [B, W, V] (float32) and the
        requested hidden states {layer: [B, W, d]} (layer 0 = embeddings, i = after decoder layer i).
        Entries at j ≥ lengths[r] are padding: their outputs are meaningless. need_logits=False
        (a prefill that only fills the cache) skips most of the LM head and returns None."""
        W = tokens.shape[1]
        reach = int((self.seq_lens + lengths).max())
        if self.max_positions is not None and reach > self.max_positions:
            raise ValueError(f"sequence would reach {reach} positions, beyond the model's {self.max_positions}; "
                             "shorten the prompt or lower max_new_tokens")
        if self.window is not None and kv.cache_length(self.cache) + W >= self.window:
            raise NotImplementedError(
                f"this model has sliding-window attention (window {self.window}) and the cache would reach "
                f"{kv.cache_length(self.cache) + W} entries; draftwise's ragged rollback needs the cache to stay "
                "inside the window — shorten prompt + max_new_tokens or load the model with the window disabled")
        if self.stateful and self._mark is not None:
            self._appended.append((tokens, lengths))
        if self.stateful and bool((lengths < W).any()):
            logits, hidden = self._forward_levels(tokens, lengths, hidden_layers, need_logits)
        else:
            logits, hidden = self._forward_once(tokens, lengths, hidden_layers, need_logits)
        return (logits if need_logits else None), hidden

    def _forward_once(self, tokens, lengths, hidden_layers, need_logits=True):
        W = tokens.shape[1]
        steps = torch.arange(W, device=self.device)[None, :]
        positions = self.seq_lens[:, None] + steps
        if self.max_positions is not None:
            positions = positions.clamp(max=self.max_positions - 1)
        self.valid = torch.cat([self.valid, steps < lengths[:, None]], dim=1)
        if self._lean is not None:
            logits, hidden = self._lean(tokens, positions, self.valid, self.cache, last_only=not need_logits,
                                        hidden_layers=hidden_layers)
            self.seq_lens = self.seq_lens + lengths
            return logits.float(), hidden
        kwargs = {self._cache_arg: self.cache, "use_cache": True}
        if self._takes_mask and not bool(self.valid.all()):
            # holes (padding, rolled-back entries) need the mask; without any, the model builds its
            # own causal mask, the path its plain generate() takes too
            kwargs["attention_mask"] = self.valid.long()
        if self._takes_positions:
            kwargs["position_ids"] = positions
        if hidden_layers:
            kwargs["output_hidden_states"] = True
        if not need_logits and self._takes_keep:
            kwargs["logits_to_keep"] = 1
        out = self.model(input_ids=tokens, **kwargs)
        self.seq_lens = self.seq_lens + lengths
        hidden = {i: out.hidden_states[i] for i in hidden_layers} if hidden_layers else {}
        return out.logits.float(), hidden

    def _forward_levels(self, tokens, lengths, hidden_layers, need_logits=True):
        """Recurrent state cannot skip padding, so feed the block in chunks that end at each
        distinct row length, restoring the recurrent state of rows that already ended."""
        B, W = tokens.shape
        logits = hidden = None
        s = 0
        for e in sorted({int(x) for x in lengths.tolist() if x > 0}):
            done = lengths <= s
            snap = kv.snapshot_recurrent(self.cache) if bool(done.any()) else None
            lg, hd = self._forward_once(tokens[:, s:e], torch.where(done, 0, e - s), hidden_layers, need_logits)
            if snap is not None:
                kv.restore_recurrent(self.cache, snap, done)
            if hidden is None:
                logits = lg.new_zeros(B, W, lg.shape[-1]) if need_logits else None
                hidden = {i: h.new_zeros(B, W, h.shape[-1]) for i, h in hd.items()}
            if need_logits:
                logits[:, s:e] = lg
            for i, h in hd.items():
                hidden[i][:, s:e] = h
            s = e
        return logits, hidden

    # --- rollback ----------------------------------------------------------------------------
    @torch.inference_mode()
    def rollback(self, keep: torch.Tensor) -> None:
        """Of the tokens appended since `mark()`, keep the first keep[r] in row r."""
        if self._mark is None:
            raise RuntimeError("rollback() without mark()")
        snap, start, lens0 = self._mark
        appended, self._appended, self._mark = self._appended, [], None
        if bool((lens0 + keep == self.seq_lens).all()):
            return
        if self.stateful:
            # Recurrent state has absorbed every token: restore the mark and replay the kept ones.
            tokens = torch.cat([t for t, _ in appended], dim=1)
            fed = torch.cat([torch.arange(t.shape[1], device=self.device)[None, :] < n[:, None]
                             for t, n in appended], dim=1)
            order = torch.sort((~fed).to(torch.int8), dim=1, stable=True).indices
            tokens = tokens.gather(1, order)[:, : int(keep.max())]
            kv.restore_recurrent(self.cache, snap)
            kv.truncate(self.cache, start)
            self.valid = self.valid[:, :start]
            self.seq_lens = lens0.clone()
            if tokens.shape[1] > 0:
                self.forward(tokens, keep, need_logits=False)
            return
        cols = self.valid[:, start:]
        self.valid[:, start:] = cols & (cols.long().cumsum(1) <= keep[:, None])
        self.seq_lens = lens0 + keep
        self._squeeze()

    def _squeeze(self) -> None:
        """Drop trailing all-hole columns; compact when holes exceed a quarter of the cache."""
        T = self.valid.shape[1]
        if T == 0:
            return
        any_valid = self.valid.any(0)
        last = int(any_valid.nonzero().max()) + 1 if bool(any_valid.any()) else 0
        if last < T:
            kv.truncate(self.cache, last)
            self.valid = self.valid[:, :last]
            T = last
        longest = int(self.seq_lens.max())
        if T - longest > max(16, T // 4):
            # Stable sort puts each row's valid entries first, in order.
            order = torch.sort((~self.valid).to(torch.int8), dim=1, stable=True).indices[:, :longest]
            kv.gather_positions(self.cache, order)
            self.valid = torch.arange(longest, device=self.device)[None, :] < self.seq_lens[:, None]


def _lean_reproduces_hf(model: PreTrainedModel) -> bool:
    """Whether the lean forward gives Hugging Face's logits and hidden states bit for bit on a
    short probe of every attention path the engine takes: one row without holes (causal prefill,
    one-token and multi-token steps), then two ragged rows with padding and rolled-back drafts."""
    hf, lean = ModelRunner(model), ModelRunner(model, lean=True)
    vocab = min(int(model.config.vocab_size), 256)
    g = torch.Generator().manual_seed(0)
    layers = tuple(range(lean.num_layers + 1))
    dev = hf.device
    for rows, steps in ((1, ((6, [6]), (1, [1]), (4, [4]))), (2, ((6, [6, 3]), (1, [1, 1]), (4, [4, 2]), (3, [1, 3])))):
        for r in (hf, lean):
            r.reset(rows)
        for width, lengths in steps:
            tokens = torch.randint(0, vocab, (rows, width), generator=g).to(dev)
            n = torch.tensor(lengths, device=dev)
            for r in (hf, lean):
                r.mark()
            (a, ha), (b, hb) = (r.forward(tokens, n, layers) for r in (hf, lean))
            real = torch.arange(width, device=dev)[None, :] < n[:, None]
            if not torch.equal(a[real], b[real]) or any(not torch.equal(ha[i][real], hb[i][real]) for i in layers):
                return False
            keep = (n - 1).clamp_min(1)  # roll back the last token of each step: holes
            for r in (hf, lean):
                r.rollback(keep)
    return True
