"""A standalone small causal LM with the target's tokenizer, run autoregressively D steps."""
from __future__ import annotations

import torch

from ..sampling import process_logits, sample
from ..target import ModelRunner, inference, load_causal_lm, load_tokenizer, pad_rows
from ..types import Proposal
from .base import DraftContext, Drafter, register


def check_same_vocabulary(target_tok, draft_tok, draft_name: str) -> None:
    """Same token → id map; extra padding rows in either embedding matrix are fine."""
    if target_tok is None or draft_tok is None:
        return
    if target_tok.get_vocab() != draft_tok.get_vocab():
        t, d = target_tok.get_vocab(), draft_tok.get_vocab()
        diff = sorted(set(t.items()) ^ set(d.items()), key=lambda kv: kv[1])[:3]
        raise ValueError(
            f"draft model {draft_name} uses a different tokenizer than the target (vocab sizes {len(t)} vs {len(d)}; "
            f"first differences: {diff}); speculative decoding needs the same token ids — pick a draft model "
            "from the target's family or train one with the target's tokenizer")


def perturbed_copy(model, scale: float, seed: int = 0):
    """The model with relative Gaussian noise on every weight: a draft that mostly agrees with it
    (for demos and tests where no trained draft exists)."""
    import copy

    draft = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn(p.shape, generator=g, dtype=torch.float32).to(p.dtype)
                   * p.float().std().nan_to_num(0.0) * scale)
    return draft


class DraftModelDrafter(Drafter):
    name = "draft-model"
    catches_up = True   # feeds whatever the target committed since its last proposal
    from_prefix = True

    def __init__(self, model, target_vocab: int, lean: bool = True):
        self.runner = ModelRunner(model, lean=lean)
        self.target_vocab = target_vocab

    def start(self, ctx: DraftContext) -> None:
        self.runner.reset(ctx.batch_size)

    def _distribution(self, logits: torch.Tensor, ctx: DraftContext) -> torch.Tensor:
        V = self.target_vocab
        if logits.shape[-1] >= V:
            logits = logits[..., :V]
        else:  # the draft's vocabulary is the target's minus padding rows: those get zero probability
            logits = torch.nn.functional.pad(logits, (0, V - logits.shape[-1]), value=float("-inf"))
        return process_logits(logits, ctx.params)

    def _next(self, logits: torch.Tensor, ctx: DraftContext):
        if ctx.params.greedy:
            V = self.target_vocab
            return (logits if logits.shape[-1] <= V else logits[..., :V]).argmax(-1), None
        q = self._distribution(logits, ctx)
        return sample(q, ctx.generator), q

    @inference
    def propose(self, ctx: DraftContext, max_tokens: torch.Tensor) -> Proposal:
        r = self.runner
        dev = r.device
        B = ctx.batch_size
        # feed what the target committed since our last proposal (kept drafts are already cached)
        # (lengths and counts on lists: each small tensor op costs ~5–10 µs on caches a forward left cold)
        fresh = [seq[n:] for seq, n in zip(ctx.sequences, r.lengths)]
        toks, _ = pad_rows(fresh, dev)
        lens = [len(f) for f in fresh]
        logits, _ = r.forward(toks, lens)
        W = toks.shape[1]
        last = logits[:, -1] if all(n == W for n in lens) else \
            logits[torch.arange(B, device=dev), torch.tensor([max(n - 1, 0) for n in lens], device=dev)]
        caps = max_tokens.tolist()
        k = max(caps, default=0)
        toks_j, dists = [], []   # per position: drafted token, and q (sampled) or the logits (greedy)
        r.mark()
        for j in range(k):
            tok, q = self._next(last, ctx)
            toks_j.append(tok)
            dists.append(q if q is not None else last)
            if j + 1 < k:
                logits, _ = r.forward(tok[:, None], [int(c > j + 1) for c in caps])   # rows still drafting
                last = logits[:, 0]
        self._fed = [max(c - 1, 0) for c in caps]
        if k == 0:
            tokens, probs, conf = torch.zeros(B, 0, dtype=torch.long, device=dev), None, torch.zeros(B, 0, device=dev)
            if not ctx.params.greedy:
                probs = torch.zeros(B, 0, self.target_vocab, device=dev)
        else:
            tokens = torch.stack(toks_j, 1)
            dist = torch.stack(dists, 1)
            probs = None if ctx.params.greedy else dist
            # confidence of position j: the peak of the draft's distribution there, a function of the
            # tokens before j only (never of the token sampled at j, which would bias sampled output
            # once the adaptive scheduler reads it); for greedy drafts it is q of the drafted token
            conf = (dist if probs is not None else dist.softmax(-1)).amax(-1)
        return Proposal(tokens=tokens, num_tokens=max_tokens, probs=probs, confidence=conf)

    def accepted(self, num_accepted: torch.Tensor) -> None:
        self.runner.rollback([min(a, f) for a, f in zip(num_accepted.tolist(), self._fed)])

    def select_rows(self, rows: torch.Tensor) -> None:
        self.runner.select_rows(rows)


@register("draft-model")
def _factory(arg, target, dtype=None, **options):
    from transformers import PreTrainedModel

    if isinstance(arg, PreTrainedModel):
        model, tok, name = arg, None, type(arg).__name__
    else:
        if not arg:
            raise ValueError("draft-model needs a path: 'draft-model:PATH'")
        model = load_causal_lm(arg, dtype=dtype or target.dtype)
        try:
            tok = load_tokenizer(arg)
        except ValueError:
            tok = None  # no tokenizer files beside the weights: fall back to the vocabulary size check
        name = repr(arg)
    check_same_vocabulary(target.tokenizer, tok, name)
    draft_vocab = model.get_output_embeddings().weight.shape[0]
    tok_len = len(target.tokenizer) if target.tokenizer is not None else None
    if tok is None and tok_len is not None and draft_vocab < tok_len:
        raise ValueError(f"draft model {name} has {draft_vocab} output rows but the target's tokenizer has "
                         f"{tok_len} tokens; the models do not share a vocabulary")
    return DraftModelDrafter(model, target.vocab_size)
