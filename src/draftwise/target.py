"""A Hugging Face causal LM driven with explicit positions and a cache where each row has its own length.

`ModelRunner` is shared by the target and by the draft-model drafter. One primitive carries the
whole engine: `forward(tokens, lengths)` appends `lengths[r]` tokens to row r (the rest of the
padded block is ignored), and `rollback(keep)` keeps only the first `keep[r]` of them.
"""
from __future__ import annotations

import functools
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


def inference(fn):
    """`torch.inference_mode()` as a decorator that costs nothing where it is already on (the
    engine's loop): the stock one builds and enters a context each call, a few µs each of the
    several calls a step makes."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        if torch.is_inference_mode_enabled():
            return fn(*args, **kwargs)
        with torch.inference_mode():
            return fn(*args, **kwargs)
    return run


def pad_rows(rows: list[list[int]], device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded [B, W] tensor and lengths [B] from ragged token lists (one tensor build)."""
    lengths = [len(r) for r in rows]
    width = max(lengths, default=0)
    padded = [r + [0] * (width - n) for r, n in zip(rows, lengths)]
    tokens = torch.tensor(padded, dtype=torch.long, device=device)
    if not (rows and width):    # ([] or [[]] has no shape to infer)
        tokens = tokens.reshape(len(rows), width)
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
        # The bookkeeping a step asks about lives in Python, so that asking costs no torch op
        # (each ~5–10 µs on caches the forward left cold; a dozen of them per step were ~8 % of a
        # batch-1 step on this project's CPU)
        self.lengths = [0] * batch_size   # tokens each row holds (`seq_lens` as a tensor)
        self._dense = True              # `valid` has no hole (None: not known, ask the tensor)
        self._whole = True              # every column appended since the mark is a real entry in every row
        self._mark = None      # (recurrent snapshot, cache length, lengths, _dense) where rollback counts from
        self._appended = []    # (tokens, lengths) fed since the mark, replayed by stateful rollback
        self._trues = {}       # (rows, columns) → all True, the `valid` of a block without padding

    @property
    def seq_lens(self) -> torch.Tensor:
        """[B] tokens each row holds."""
        return torch.tensor(self.lengths, dtype=torch.long, device=self.device)

    @property
    def batch_size(self) -> int:
        return len(self.lengths)

    def select_rows(self, rows: torch.Tensor) -> None:
        kv.select_rows(self.cache, rows)
        self.valid = self.valid.index_select(0, rows)
        self.lengths = [self.lengths[r] for r in rows.tolist()]
        self._dense = True if self._dense else None     # some of the rows left may have no hole
        self._mark, self._appended = None, []

    def mark(self) -> None:
        """Remember the current state; `rollback(keep)` then counts tokens from here."""
        snap = kv.snapshot_recurrent(self.cache) if self.stateful else None
        self._mark = (snap, kv.cache_length(self.cache), list(self.lengths), self._dense)
        self._appended = []
        self._whole = True

    # --- forward -----------------------------------------------------------------------------
    @inference
    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor | list[int], hidden_layers: tuple[int, ...] = (),
                need_logits: bool = True) -> tuple[torch.Tensor | None, dict[int, torch.Tensor]]:
        """Append lengths[r] ≤ W tokens to each row (a tensor or a list); return logits [B, W, V]
        (float32) and the requested hidden states {layer: [B, W, d]} (layer 0 = embeddings, i =
        after decoder layer i). Entries at j ≥ lengths[r] are padding: their outputs are
        meaningless. need_logits=False (a prefill that only fills the cache) skips most of the LM
        head and returns None."""
        W = tokens.shape[1]
        lens = lengths if isinstance(lengths, list) else lengths.tolist()
        reach = max((a + n for a, n in zip(self.lengths, lens)), default=0)
        if self.max_positions is not None and reach > self.max_positions:
            raise ValueError(f"sequence would reach {reach} positions, beyond the model's {self.max_positions}; "
                             "shorten the prompt or lower max_new_tokens")
        if self.window is not None and kv.cache_length(self.cache) + W >= self.window:
            raise NotImplementedError(
                f"this model has sliding-window attention (window {self.window}) and the cache would reach "
                f"{kv.cache_length(self.cache) + W} entries; draftwise's ragged rollback needs the cache to stay "
                "inside the window — shorten prompt + max_new_tokens or load the model with the window disabled")
        if self.stateful and self._mark is not None:
            self._appended.append((tokens, lens))
        if self.stateful and any(n < W for n in lens):
            logits, hidden = self._forward_levels(tokens, lens, hidden_layers, need_logits)
        else:
            logits, hidden = self._forward_once(tokens, lens, hidden_layers, need_logits)
        return (logits if need_logits else None), hidden

    TRUNCATE_LEVEL = True   # rows that keep alike roll back by truncation (False: the general path, for tests)
    SMALL_BLOCK = 4096    # (rows × columns) up to which positions and padding are built from lists

    def _block(self, W: int, lens: list[int]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Positions [B, W] of a block appended after each row's tokens (clamped to the model's
        last position: padding past it is never attended), and its columns' `valid` [B, W] — None
        where every row fills the block."""
        B, dev = len(lens), self.device
        top = self.max_positions - 1 if self.max_positions is not None else None
        whole = all(n == W for n in lens)
        if B * W <= self.SMALL_BLOCK:   # one tensor op each, where arange/add/clamp/compare took four
            pos = [[a + j for j in range(W)] for a in self.lengths]
            if top is not None and max(self.lengths, default=0) + W > top + 1:
                pos = [[min(p, top) for p in row] for row in pos]
            positions = torch.tensor(pos, dtype=torch.long, device=dev)
            fill = None if whole else torch.tensor([[j < n for j in range(W)] for n in lens], dtype=torch.bool, device=dev)
            if not (B and W):    # ([] or [[]] has no shape to infer)
                positions = positions.reshape(B, W)
                fill = None if fill is None else fill.reshape(B, W)
            return positions, fill
        steps = torch.arange(W, device=dev)[None, :]
        positions = self.seq_lens[:, None] + steps
        if top is not None:
            positions = positions.clamp(max=top)
        return positions, None if whole else steps < torch.tensor(lens, device=dev)[:, None]

    def _forward_once(self, tokens, lens, hidden_layers, need_logits=True):
        W = tokens.shape[1]
        positions, fill = self._block(W, lens)
        whole = fill is None
        if whole:    # no padding in the block: W more real columns (kept: one op a step, not two)
            fill = self._trues.get((len(lens), W))
            if fill is None:
                fill = self._trues[(len(lens), W)] = torch.ones(len(lens), W, dtype=torch.bool, device=self.device)
        self.valid = torch.cat([self.valid, fill], dim=1)
        self._whole = self._whole and whole
        if self._dense is not None:
            self._dense = self._dense and whole
        self.lengths = [a + n for a, n in zip(self.lengths, lens)]
        if self._lean is not None:
            logits, hidden = self._lean(tokens, positions, self.valid, self.cache, last_only=not need_logits,
                                        hidden_layers=hidden_layers, dense=self._dense)
            return (logits if logits.dtype == torch.float32 else logits.float()), hidden
        if self._dense is None:
            self._dense = bool(self.valid.all())
        kwargs = {self._cache_arg: self.cache, "use_cache": True}
        if self._takes_mask and not self._dense:
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
        hidden = {i: out.hidden_states[i] for i in hidden_layers} if hidden_layers else {}
        return out.logits.float(), hidden

    def _forward_levels(self, tokens, lens, hidden_layers, need_logits=True):
        """Recurrent state cannot skip padding, so feed the block in chunks that end at each
        distinct row length, restoring the recurrent state of rows that already ended."""
        B, W = tokens.shape
        logits = hidden = None
        s = 0
        for e in sorted({x for x in lens if x > 0}):
            done = [n <= s for n in lens]
            snap = kv.snapshot_recurrent(self.cache) if any(done) else None
            lg, hd = self._forward_once(tokens[:, s:e], [0 if d else e - s for d in done], hidden_layers, need_logits)
            if snap is not None:
                kv.restore_recurrent(self.cache, snap, torch.tensor(done, device=self.device))
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
    @inference
    def rollback(self, keep: torch.Tensor | list[int]) -> None:
        """Of the tokens appended since `mark()`, keep the first keep[r] in row r (a tensor or a list)."""
        if self._mark is None:
            raise RuntimeError("rollback() without mark()")
        snap, start, lens0, dense0 = self._mark
        appended, self._appended, self._mark = self._appended, [], None
        whole, self._whole = self._whole, True
        keep_l = keep if isinstance(keep, list) else keep.tolist()
        if all(a + k == n for a, k, n in zip(lens0, keep_l, self.lengths)):
            return
        if self.stateful:
            # Recurrent state has absorbed every token: restore the mark and replay the kept ones.
            tokens = torch.cat([t for t, _ in appended], dim=1)
            width = sum(t.shape[1] for t, _ in appended)
            fed = torch.tensor([[j < ns[r] for t, ns in appended for j in range(t.shape[1])] for r in range(len(lens0))],
                               dtype=torch.bool, device=self.device).reshape(len(lens0), width)
            order = torch.sort((~fed).to(torch.int8), dim=1, stable=True).indices
            tokens = tokens.gather(1, order)[:, : max(keep_l, default=0)]
            kv.restore_recurrent(self.cache, snap)
            kv.truncate(self.cache, start)
            self.valid = self.valid[:, :start]
            self.lengths, self._dense = list(lens0), dense0
            if tokens.shape[1] > 0:
                self.forward(tokens, keep_l, need_logits=False)
            return
        self.lengths = [a + k for a, k in zip(lens0, keep_l)]
        if self.TRUNCATE_LEVEL and whole and keep_l and min(keep_l) == max(keep_l) and (keep_l[0] >= 1 or dense0):
            # every row appended the same full block and keeps the same prefix of it (batch 1
            # always): the columns after it are holes in every row, which is a truncation — the
            # general path's result (which would also drop holes before the mark where a row
            # keeps none; there are none where the cache had no hole), for no mask arithmetic
            end = start + keep_l[0]
            kv.truncate(self.cache, end)
            self.valid = self.valid[:, :end]
            self._dense = dense0
            self._compact_if_holey()
            return
        cols = self.valid[:, start:]
        self.valid[:, start:] = cols & (cols.long().cumsum(1) <= torch.tensor(keep_l, device=self.device)[:, None])
        self._dense = None
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
        self._compact_if_holey()

    def _compact_if_holey(self) -> None:
        """Compact when holes exceed a quarter of the cache."""
        T, longest = self.valid.shape[1], max(self.lengths, default=0)
        if T - longest > max(16, T // 4):
            # Stable sort puts each row's valid entries first, in order.
            order = torch.sort((~self.valid).to(torch.int8), dim=1, stable=True).indices[:, :longest]
            kv.gather_positions(self.cache, order)
            self.valid = torch.arange(longest, device=self.device)[None, :] < self.seq_lens[:, None]
            self._dense = min(self.lengths, default=0) == longest


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
