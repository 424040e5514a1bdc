"""The incremental n-gram index proposes exactly what a full rescan of the sequence would."""
import numpy as np
import torch
from hypothesis import given, settings, strategies as st

from draftwise.drafters.base import DraftContext
from draftwise.drafters.ngram import NgramDrafter, NgramIndex, lookup
from draftwise.types import SamplingParams


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=60), st.integers(1, 3), st.integers(0, 2),
       st.integers(0, 5), st.integers(1, 7))
def test_index_matches_rescan(seq, max_n, dn, k, chunk):
    min_n = max(1, max_n - dn)
    idx = NgramIndex(max_n, min_n)
    # grow the sequence in chunks, as accepted tokens arrive, and ask at every length
    for L in list(range(1, len(seq) + 1, chunk)) + [len(seq)]:
        got = idx.lookup(seq[:L], k)
        assert got == lookup(np.asarray(seq[:L], dtype=np.int64), k, max_n, min_n), (seq[:L], k)


def test_drafter_follows_row_selection():
    d = NgramDrafter(max_n=2)
    seqs = [[1, 2, 3, 1, 2], [5, 6, 5], [7, 8, 9, 7]]
    ctx = DraftContext(sequences=seqs, params=SamplingParams(), generator=None)
    d.start(ctx)
    p = d.propose(ctx, torch.tensor([2, 2, 2]))
    assert p.tokens[0].tolist() == [3, 1] and p.tokens[1, :1].tolist() == [6] and p.tokens[2].tolist() == [8, 9]
    d.select_rows(torch.tensor([2, 0]))
    ctx.sequences = [seqs[2] + [8], seqs[0] + [3]]
    p = d.propose(ctx, torch.tensor([3, 3]))
    assert p.tokens[0].tolist() == [9, 7, 8] and p.tokens[1].tolist() == [1, 2, 3]


def test_loop_is_continued_cyclically():
    idx = NgramIndex(3, 1)
    # "a b a b a b": the latest match of [b, a, b] ends two tokens before the end → period 2
    assert idx.lookup([1, 2, 1, 2, 1, 2], 5) == [1, 2, 1, 2, 1]
    assert lookup(np.asarray([7, 7, 7]), 4, 3, 1) == [7, 7, 7, 7]


def test_confidence_is_the_matched_length():
    """Rows matched on 3, 1 and no tokens: draft j extends a match of m = n + j tokens, confidence
    m / (m + 2); no match, 0. The run-time scheduler calibrates acceptance per confidence, so it
    can verify long matches and skip short ones (a fixed D verifies both)."""
    d = NgramDrafter(max_n=3)
    seqs = [[1, 2, 3, 4, 5, 1, 2, 3], [9, 1, 8, 7, 1], [4, 5, 6]]
    ctx = DraftContext(sequences=seqs, params=SamplingParams(), generator=None)
    d.start(ctx)
    p = d.propose(ctx, torch.tensor([3, 3, 3]))
    assert p.num_tokens.tolist() == [3, 3, 0]
    assert p.tokens[0].tolist() == [4, 5, 1] and p.tokens[1].tolist() == [8, 7, 1]
    assert p.confidence.shape == (3, 3)
    expect = [[3 / 5, 4 / 6, 5 / 7], [1 / 3, 2 / 4, 3 / 5], [0.0] * 3]
    assert torch.allclose(p.confidence, torch.tensor(expect))
    empty = d.propose(ctx, torch.tensor([0, 0, 0]))
    assert empty.confidence.shape == (3, 0)


def test_the_prompt_is_indexed_at_start_not_in_the_first_proposal():
    """A proposal's time is what the run-time scheduler prices a drafted token at. Indexing a
    1k-token prompt inside the first proposal priced prompt lookup at a third of a target step per
    token, and adaptive D never drafted again; the prompt belongs to `start`."""
    seqs = [list(range(50)) * 3, [1, 2, 3]]
    ctx = DraftContext(sequences=[list(s) for s in seqs], params=SamplingParams(), generator=None)
    ngram = NgramDrafter(max_n=3)
    ngram.start(ctx)
    assert [i.upto for i in ngram._rows] == [len(s) - 1 for s in seqs]
    # the first proposal indexes nothing new, and still proposes from the prompt
    p = ngram.propose(ctx, torch.tensor([3, 3]))
    assert [i.upto for i in ngram._rows] == [len(s) - 1 for s in seqs]
    assert p.tokens[0].tolist() == [0, 1, 2]
