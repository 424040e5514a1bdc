"""Run-time draft length per sequence: DSpark's hardware-aware prefix scheduler.

Each step, for row r and draft position j the survival a_{r,j} = Π_{i≤j} c_{r,i} is the
probability that position j is accepted (c: the drafter's conditional confidences). All (row,
position) pairs are sorted by survival and admitted greedily; with ℓ_r admitted positions in row r
the verify batch has N = Σ_r (1 + ℓ_r) tokens and the expected emitted tokens are
τ* = Σ_r (1 + Σ_{j≤ℓ_r} a_{r,j}). Admission stops at the first candidate that does not raise
Θ = τ*·SPS(N), SPS being the verifier's steps per second at N tokens.

Survival never increases along a row (c ∈ [0, 1]) and ties are broken by position, so every row's
admitted positions form a prefix. The decision reads only the drafter's confidences, never the
target's verdict on the drafted tokens. For sampled (stochastic) drafts one more condition keeps
it lossless: c_{r,j} may depend on the drafts before position j but not on the token sampled at j.
Verifying position j or stopping there both leave the output distribution of that position
exactly p given the accepted prefix, so the choice may depend on anything already part of the
output (an optional-stopping argument); choosing by the value of x_j itself would keep
high-q tokens preferentially and bias the output (tests/test_sampling.py shows both).
"""
from __future__ import annotations

import bisect
import math
import time
from typing import Any, Callable, NamedTuple, Optional, Sequence, Union

import numpy as np
import torch

from .acceptance import verify_share

SPSLike = Union[Callable[[float], float], "SPSCurve", Sequence[Sequence[float]], dict]


class SPSCurve:
    """Steps per second against verified tokens N, from measured points [(N, sps), …]:
    linear interpolation in log N, flat beyond the ends (beyond the last point: time grows
    linearly with N, i.e. sps ∝ 1/N, the compute-bound limit)."""

    def __init__(self, points: Union[Sequence[Sequence[float]], dict]):
        if isinstance(points, dict):
            points = [(float(k), float(v)) for k, v in points.items()]
        pts = sorted((float(n), float(s)) for n, s in points)
        if not pts:
            raise ValueError("SPSCurve needs at least one (N, steps/s) point")
        if any(n <= 0 or s <= 0 for n, s in pts):
            raise ValueError("SPSCurve points must be positive")
        self.n = [p[0] for p in pts]
        self.s = [p[1] for p in pts]

    @staticmethod
    def from_step_times(points: Union[Sequence[Sequence[float]], dict]) -> "SPSCurve":
        """From (N, seconds per step) pairs."""
        items = points.items() if isinstance(points, dict) else points
        return SPSCurve([(n, 1.0 / t) for n, t in items])

    def __call__(self, n: float) -> float:
        n = float(n)
        if n <= self.n[0]:
            return self.s[0]
        if n >= self.n[-1]:
            return self.s[-1] * self.n[-1] / n if len(self.n) > 1 else self.s[-1]
        i = bisect.bisect_right(self.n, n) - 1
        n0, n1, s0, s1 = self.n[i], self.n[i + 1], self.s[i], self.s[i + 1]
        t = (math.log(n) - math.log(n0)) / (math.log(n1) - math.log(n0))
        return s0 + t * (s1 - s0)


def _nondecreasing(values: list[float], weights: Optional[Sequence[float]] = None) -> list[float]:
    """The weighted least-squares nondecreasing fit (pool adjacent violators).

    A step that verifies more tokens never costs less, but a profile's measured points do dip:
    session 8's put 2 drafts per row at batch 2 below a plain step and 5 below 3 and 4. The
    per-step scheduler then verified 2, 5 or 8 drafts and never 3 or 4, so never saw their true
    price — a dip no observation corrects."""
    blocks: list[list[float]] = []       # [mean, weight, length]
    for v, w in zip(values, weights if weights is not None else [1.0] * len(values)):
        blocks.append([v, w, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            v2, w2, n2 = blocks.pop()
            v1, w1, n1 = blocks[-1]
            blocks[-1] = [(v1 * w1 + v2 * w2) / (w1 + w2), w1 + w2, n1 + n2]
    return [v for v, _, n in blocks for _ in range(n)]


def _as_np(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy().astype(np.float64)
    return np.asarray(x, np.float64)


def _unit(x: np.ndarray) -> np.ndarray:
    """x clamped to [0, 1] (np.clip costs ~20 µs a call; these run every step)."""
    return np.minimum(np.maximum(x, 0.0), 1.0)


def _as_sps(sps: SPSLike) -> Callable[[float], float]:
    if callable(sps):
        return sps
    return SPSCurve(sps)


def schedule_prefix(confidence: torch.Tensor, num_tokens: torch.Tensor, sps: SPSLike) -> torch.LongTensor:
    """Per-row number of drafted tokens to verify.

    confidence: [B, D] P(position k accepted | positions < k accepted), values clamped to [0, 1].
    num_tokens: [B] valid drafts per row (positions ≥ num_tokens[r] are never admitted).
    sps:        steps/s as a function of the verified tokens N (callable, SPSCurve, or points).
    Returns a LongTensor [B] (on num_tokens' device) with 0 ≤ ℓ_r ≤ num_tokens[r].
    """
    sps_fn = _as_sps(sps)
    conf = torch.from_numpy(_unit(_as_np(confidence)))
    if conf.dim() != 2:
        raise ValueError(f"confidence must be [B, D], got {tuple(confidence.shape)}")
    B, D = conf.shape
    valid = num_tokens.detach().to("cpu", torch.long).clamp(0, D)
    out = torch.zeros(B, dtype=torch.long)
    if B == 0:
        return out.to(num_tokens.device)
    if D == 0:
        return out.to(num_tokens.device)
    surv = torch.cumprod(conf, dim=1)
    pos = torch.arange(D).expand(B, D)
    mask = pos < valid[:, None]
    rows = torch.arange(B)[:, None].expand(B, D)[mask].tolist()
    cols = pos[mask].tolist()
    vals = surv[mask].tolist()
    order = sorted(range(len(vals)), key=lambda i: (-vals[i], cols[i], rows[i]))

    n_tok = float(B)
    tau = float(B)
    theta = tau * sps_fn(n_tok)
    for i in order:
        new_tau = tau + vals[i]
        new_theta = new_tau * sps_fn(n_tok + 1)
        if not new_theta > theta:
            break  # first drop (or no gain): stop — later candidates are never considered
        r, j = rows[i], cols[i]
        if out[r] != j:  # cannot happen with survival sorted and ties broken by position
            break        # pragma: no cover
        out[r] = j + 1
        tau, n_tok, theta = new_tau, n_tok + 1, new_theta
    return out.to(num_tokens.device)


def schedule_width(confidence: torch.Tensor, num_tokens: torch.Tensor, sps: SPSLike,
                   weights: Optional[Sequence[float]] = None, worth: Optional[StaticWorth] = None) -> torch.LongTensor:
    """`schedule_prefix` for an engine that pads the verify block to its widest row (draftwise's own:
    B rows × (1 + w) tokens cost the same whatever each row uses): the width w maximising
    Θ(w) = τ*(w)·SPS(B(1 + w)), every row verifying min(w, its drafts) — extra positions inside the
    paid width are free. The whole range is searched, not only up to the first drop: when later
    positions are more likely accepted given the earlier ones (a prompt-lookup match), Θ can dip
    and rise again. The choice reads only confidences, never the target's verdict, so the lossless
    condition of `schedule_prefix` holds.

    `weights` (per row, default 1; or [B, 1 + D], per row and token: the first, always emitted,
    then each draft position) is what a token is worth; or `worth`, a static batch's, where a draft
    position every row at the back accepts also moves the batch's end
    (`AdaptiveDraftLength.static_worth`)."""
    sps_fn = _as_sps(sps)
    conf = _unit(_as_np(confidence))
    B, D = conf.shape
    valid = num_tokens.tolist()
    times = [1.0 / sps_fn(float(B * (1 + w))) for w in range(D + 1)]
    w = _best_width(conf, valid, times, weights, worth)
    return num_tokens.clamp(min=0, max=w).long()


class StaticWorth(NamedTuple):
    """What a step's tokens are worth in a static batch (`AdaptiveDraftLength.static_worth`), in
    tokens of a row at this batch size (t(B)/B seconds each): every emitted token 1, a draft φ,
    and β more for a draft position that every row at the back accepts while they stay behind
    every other row (the first `gap` drafts)."""
    phi: float
    back: tuple
    gap: int
    beta: float


def _best_width(conf: np.ndarray, valid: list, times: list, weights: Optional[Sequence[float]] = None,
                worth: Optional[StaticWorth] = None, scale: Optional[Sequence[float]] = None) -> int:
    """`schedule_width`'s search, given calibrated confidences [B, D] in [0, 1], the drafts per row
    and the step seconds per width `times[0 … D]`; `scale`, per row, a factor on its chance of
    reaching each position (`AdaptiveDraftLength._row_scale`). Lists and a handful of numpy calls:
    it runs every step, where the torch and closure calls it replaced cost ~0.2 ms a step."""
    B, D = conf.shape
    if not (B and D):
        return 0
    valid = [min(max(int(v), 0), D) for v in valid]
    top = max(valid)
    if top == 0:
        return 0
    surv = np.cumprod(conf[:, :top], axis=1)
    if min(valid) < top:
        surv = surv * (np.arange(top)[None, :] < np.asarray(valid)[:, None])
    if scale is not None:
        surv = np.minimum(1.0, surv * np.asarray(scale, np.float64)[:, None])
    if worth is not None:
        gain, tau = (worth.phi * surv.sum(0)).tolist(), float(B)
        n = min(worth.gap, top)
        if worth.beta > 0 and n > 0:
            both = surv[list(worth.back), :n].prod(0).tolist()
            gain[:n] = [g + worth.beta * b for g, b in zip(gain[:n], both)]
    elif weights is None:
        gain, tau = surv.sum(0).tolist(), float(B)
    else:
        wt = np.asarray(weights, np.float64)
        if wt.ndim == 1:
            gain, tau = (wt @ surv).tolist(), float(wt.sum())
        else:          # [B, 1 + D]: the first (always emitted) token, then each draft position
            gain, tau = (wt[:, 1:top + 1] * surv).sum(0).tolist(), float(wt[:, 0].sum())
    return _argmax_width(tau, gain, times)


def _argmax_width(tau: float, gain: list, times: list, saved: bool = False):
    """The width w maximising Θ(w) = (τ + Σ_{j<w} gain[j]) / times[w] (the smallest on ties); with
    `saved`, (w, the seconds it is expected to save over plain steps of the same worth:
    (τ(w)/τ)·t(0) − t(w), with τ(w) = τ + Σ_{j<w} gain[j])."""
    if tau <= 0:
        return (0, 0.0) if saved else 0
    best, w, tau0 = tau / times[0], 0, tau
    for j, g in enumerate(gain):
        tau += g
        theta = tau / times[j + 1]
        if theta > best * (1 + 1e-9):
            best, w = theta, j + 1
    if saved:
        return w, best * times[w] / tau0 * times[0] - times[w]
    return w


def _best_width_row(cal: list, times: list, k: float = 1.0) -> int:
    """`_best_width` in plain Python for a batch of one row (no static worth), in one pass: `cal`,
    its calibrated confidences cut to what it proposed; k, its factor (`scale`). The same answer
    as `_best_width` (tests/test_planner_adaptive.py)."""
    tau, surv, best, w = 1.0, 1.0, 1.0 / times[0], 0
    for j, c in enumerate(cal):
        surv *= c
        tau += surv if k == 1.0 else min(1.0, k * surv)
        theta = tau / times[j + 1]
        if theta > best * (1 + 1e-9):
            best, w = theta, j + 1
    return w


def expected_throughput(confidence: torch.Tensor, lengths: torch.Tensor, sps: SPSLike) -> float:
    """Θ = τ*·SPS(N) for given per-row lengths (for tests and reports)."""
    sps_fn = _as_sps(sps)
    surv = torch.cumprod(confidence.detach().double().clamp(0, 1), dim=1)
    tau = float(len(lengths))
    for r, l in enumerate(lengths.tolist()):
        tau += float(surv[r, :l].sum())
    return tau * sps_fn(float(len(lengths) + int(lengths.sum())))


class AdaptiveDraftLength:
    """Holds the SPS curve; call with a `draftwise.types.Proposal` to get per-row draft counts.

    Confidence source, in order: `proposal.confidence`; else the peak of the draft distribution at
    each position, max q_k (for greedy drafts q_k of the drafted token; it must not depend on the
    token sampled at k — see `schedule_prefix`); else the constant `alpha`.
    `max_tokens` optionally caps every row.

    With `learn` (the default) it also learns from the steps already verified — never from the
    step being decided, so output stays lossless:
    - calibration: raw confidences are mapped per draft position and confidence bin to the observed
      acceptance rate (a Beta prior centred on the raw value, so it starts as the identity) —
      draft-model probabilities are not acceptance probabilities;
    - draft length before drafting (`draft_cap`): the drafting cost of a sequential drafter is paid
      for every drafted token whether or not it is verified, so the number to draft this step is
      argmax_D B·E[τ(D)] / (1/SPS(B(1+D)) + t_draft(D)) from the observed per-position acceptance
      and the drafter time measured per drafted token (plus the drafter's per-step cost when the
      engine skips a drafter that drafts nothing, `skips_idle`); `schedule_width` (draftwise's
      padded verify block) or, with padded=False, the per-row `schedule_prefix` then picks how
      many of them to verify. At batch 1 and 2, where drafting costs under `free_draft` of a
      plain step (prompt lookup), every step drafts the most (at batch 1, what `_shape_cap`
      says; at batch 2, while what the schedule expects to save pays for the drafting,
      `_free_pays`): what to verify is then decided per step from the row's confidence (for
      prompt lookup, from the matched length: first-draft acceptance 20–39 % after a 1-token
      match, 59–82 % after a 3-token one), not from the average behind argmax_D. A drafting
      step's price includes the scheduler's own time (its three calls), at its median
      (`_observe_s`); the drafter's line is fitted on the rest of the drafting seconds;
    - drafts left unverified (`_shadow`, where the engine reports the tokens each row emitted
      and the drafts are exact tokens: greedy decoding, or a drafter without probabilities): each
      is checked against what the target emitted there, so calibration and acceptance learn
      from every draft proposed, not only from those the schedule chose;
    - proposals the drafter did not make (prompt lookup without a match, or a match shorter than
      offered) count as rejections at the first missing position, and the share of rows that
      propose anything, r, weighs the step time as in the planner: with probability (1 − r)^B no
      row proposes and the step is a plain one. Without this, acceptance conditional on proposing
      made prompt lookup look worth drafting at batch 8, where every step then verified
      B·(1 + D) tokens for far fewer accepted ones;
    - step times: the SPS curve (a profile, or a measurement before decoding) is the prior. A
      step's time besides drafting (`target_time`) is the speed of the moment (a plain step's
      time, following the last ~50 steps timed at its batch size) times the price of its width,
      the curve's corrected by each step timed against the speed of its moment, over the last
      ~1000 — a shared machine drifts by tens of per cent within minutes, the price of width far
      less, and a step pays for more than the forward the curve times (the acceptance test,
      bookkeeping). The curve is kept nondecreasing in width (a profile's dips are partly
      noise); a width timed is priced as timed, dips included (on this CPU 5 tokens a row cost
      less than 3);
    - rows: the rows of a batch are not alike, and a request's first drafts are accepted least.
      Each row's chance of reaching each draft position is scaled by its own accepted over
      expected drafts (`_row_scale`) times that of every row at its age (`_age_factor`: young,
      fewer than `YOUNG` tokens generated, or grown);
    - exploration: every step that drafts D and verifies it observes positions 1…D. The first
      step drafts one token, which prices the drafter (three such steps if that one looks
      implausibly dear, `_note_draft`; unless `draft_token_seconds`,
      from a profile that measured this drafter, gives the price ahead; a step in which the drafter
      also fed itself the prompts prices nothing, the next one does; what of it to verify the
      per-step schedule decides); then, periodically, the
      scheduler probes past the current choice and verifies all of it: the full
      D where that costs at most `probe_budget` plain steps (prompt lookup at small batches, whose
      acceptance rises along the draft, so one position deeper would not pay while four would),
      else one position deeper (a draft model; at batch 16 its full-length probe costs about six
      plain steps). Until observed, a position's acceptance is the prior `alpha`. The period
      starts at `probe_every` steps and doubles, up to `max_probe_interval`, each time a probe
      finds drafting still does not pay (256 after ~250 steps of such probes): where the best
      choice is not to speculate, probes are the whole cost of being adaptive. A probe is made
      only while it could pay: the choice under acceptance `optimism` standard errors above the
      observed rates (a position never observed: near 1) must exceed the current one. A draft
      model at batch 1 whose first draft is accepted 40 % of the time stops probing after a
      handful of probes; each one, in a new request, first has to feed the draft the whole
      prompt. Probes together may cost at most `explore` of the decoding time so far — the first
      step's pricing included — and explore/(1 + k) after k probes in a row that left the choice
      standing (the whole budget again once one moves it); a probe waits while the model's price
      of it would overrun the budget, and then is charged its share of the step it measured (1 −
      the model's price of the choice over the probe's): at batch 8 a full-length probe costs 0.7
      of a plain step, and where drafting never pays that bound is the whole price of being
      adaptive. Where drafting costs under `free_draft` of a plain step and `_shadow` sees the
      drafts, a probe only drafts, at any batch size and without the optimistic test: what to
      verify stays with the per-step schedule, and drafting is all it costs (while the choice is
      plain decoding, such probes keep the period `probe_every` and the whole budget: at batch 1
      and 2 always, at larger batches while drafting one token could still pay, `_could_draft`);
    - plain steps decided ahead: while the choice is plain decoding, the steps until the next
      refresh of the step times or probe check are decided at once (`_coast`), and draftwise's
      engine takes them without calling the scheduler (`plain_ahead`, `coasted`).
    """

    MAX_POS, BINS = 16, 10
    FORGET = 0.98   # a timed step's weight after each later step at its batch size (~50 steps' memory)
    SHAPE_FORGET = 0.999   # the same for a wide step's price against the speed of its moment (~1000)
    SHAPE_PRIOR = 2.5      # wide steps the curve's price of width is worth (`_slope` says why)
    SMALL = 64      # (row, position) pairs up to which the per-step schedule runs on plain lists
    FAST_UNPROPOSED = True    # `_observe_unproposed` for steps nobody proposed in (False: the general path)

    def __init__(self, sps_curve: Optional[SPSLike] = None, alpha: float = 0.7, max_tokens: Optional[int] = None,
                 *, sps_for_batch: Optional[Callable[[int], SPSLike]] = None, learn: bool = True,
                 prior_weight: float = 4.0, probe_every: int = 8, padded: bool = True,
                 max_probe_interval: int = 256, probe_budget: float = 2.0, optimism: float = 2.0,
                 free_draft: float = 0.1, explore: float = 0.005,
                 draft_token_seconds: Optional[Callable[[int], float]] = None, static_batch: bool = True):
        if sps_curve is None and sps_for_batch is None:
            raise ValueError("give sps_curve or sps_for_batch")
        self.sps = _as_sps(sps_curve) if sps_curve is not None else None
        self._for_batch = sps_for_batch
        self._cache: dict[int, Callable[[float], float]] = {}
        self._prior: dict[tuple[int, int], list[float]] = {}   # (rows, widths) → the curve's step times
        self.alpha = float(alpha)
        self.max_tokens = max_tokens
        self.learn, self.prior_weight, self.probe_every = learn, float(prior_weight), int(probe_every)
        self.max_probe_interval = max(int(max_probe_interval), self.probe_every)
        self.probe_budget = float(probe_budget)
        self.optimism = float(optimism)
        self.free_draft = float(free_draft)   # drafting under this share of a plain step counts as free
        self.explore = float(explore)         # probes may cost at most this share of the time decoded
        self.padded = padded     # draftwise pads the verify block: cost follows the widest row
        # draftwise's batches are static (a row's tokens are worth what they take off the batch's
        # end, `static_worth`); False counts every token alike, as where finished rows are refilled
        self.static_batch = static_batch
        self.skips_idle = False  # set by the engine: a step drafting nothing costs the drafter nothing
        self.sees_emitted = False   # set by the engine: `observe` gets the tokens each row emitted (`_shadow`)
        self.draft_token_seconds = draft_token_seconds   # batch size → seconds a drafted token, measured ahead
        self.clock = time.perf_counter   # times `observe` itself (a test's fixed clock: decisions repeat)
        self.reset_stats()

    def reset_stats(self) -> None:
        # plain lists, neither torch nor numpy: a step updates a few dozen counts, where each torch
        # op's dispatch (~5 µs) added up to a millisecond a step and numpy's ~0.2 µs to 40 µs
        P, K = self.MAX_POS, self.BINS
        self._pos_n, self._pos_acc = [0.0] * P, [0.0] * P
        self._lag_n, self._lag_acc = [0.0] * P, [0.0] * P     # the same, rows furthest behind only
        self._bin_n, self._bin_acc = [[0.0] * K for _ in range(P)], [[0.0] * K for _ in range(P)]
        self._cost = [0.0] * 5     # decayed Σ1, ΣD, Σt, ΣD², ΣDt of drafter steps
        # the pricing steps' (tokens ≥ 1, tokens, seconds); None once priced (`_note_draft`)
        self._draft_held: Optional[list[tuple[float, float, float]]] = []
        self._observe_times: list[float] = []   # the scheduler's own seconds on the latest drafting steps
        self._own = 0.0     # seconds in `draft_cap` and the schedule since the last `observe`
        self._observe_n = 0
        self._free_fit: dict[int, list[float]] = {}   # batch size → decayed [steps, Σ seconds saved] (`_free_pays`)
        self._free_step = False    # this step drafts the most where drafting is free (its saving is noted)
        self._rows = [0.0, 0.0]    # rows offered a draft, rows that proposed anything
        self._pos_index: dict[int, np.ndarray] = {}        # draft position per column, for `_calibrate`
        self._phis: dict[int, tuple] = {}                  # (φ, β) per batch size, refreshed with `_times`
        self._tt: dict[tuple[int, int], list[float]] = {}   # (rows, width) → [count, seconds, clock then]
        self._clock: dict[int, int] = {}                   # steps timed per batch size
        self._tt_seen = 0
        self._ratio: dict[tuple[int, int], list[float]] = {}   # (rows, width) → [count, Σ t/level, clock then]
        self._levels: dict[int, float] = {}               # rows → a plain step's seconds, as last priced
        self._observed = 0
        self._times: dict[int, list[float]] = {}           # target_time per width, refreshed every 16 steps
        self._best: dict[tuple, Any] = {}      # decisions since the statistics last changed
        self._shape_best: dict[tuple[int, float], int] = {}   # `_shape_cap`'s, kept longer (see there)
        self._shape_count = 0.0                # proposals noted in `_shapes`
        # once the drafter is priced (the first step), the first probe check comes right away
        self._since_probe, self._interval, self._probing = self.probe_every - 1, self.probe_every, False
        self._futile = 0                       # probes in a row after which the choice stood (`_decide_cap`)
        self._probe_choice: Optional[int] = None   # the choice when the last probe was made
        # coasting (`draft_cap`): plain steps decided ahead at batch `_coast_b`, `_coast_left` more;
        # their observed steps are summed in `_coast_acc` ([steps, seconds aged as `observe`
        # ages them]) until folded in
        self._coast_b: Optional[int] = None
        self._coast_left = 0
        self._coast_acc = [0, 0.0]
        self._elapsed = self._explored = 0.0   # seconds decoded; seconds probes cost over the choice
        self._charge: Optional[tuple] = None   # a probe step's modelled seconds at the choice and at its D
        self._wait_until = 0.0                 # no probe before this much time decoded (budget)
        self._priced = False                   # the drafter's price is known (`_note_draft`)
        self._pending = 0.0                    # target prefill seconds the drafter has yet to absorb
        self._kappa = [0.0, 0.0]               # catch-ups seen: count, Σ drafter seconds / pending prefill
        self._raw: Optional[np.ndarray] = None    # raw confidences of the proposal being verified
        self._proposed: Optional[list[int]] = None    # per row, drafts the drafter made this step
        self._row_ids: Optional[list] = None   # per row, the engine's id of it this step (`draft_cap`)
        self._row_fit: dict = {}               # row id → [Σ accepted expected, Σ accepted, tokens left when first seen]
        self._age_fit = {True: [0.0, 0.0], False: [0.0, 0.0]}   # young row? → [Σ expected, Σ accepted], all rows
        self._young_rows: Optional[list] = None   # per row this step, whether it is young (None: no factor)
        self._cal: Optional[list] = None       # this step's calibrated confidences, as decided on
        self._remaining: Optional[list[int]] = None   # per row, tokens it may still generate this step
        self._lagging: Optional[list[bool]] = None    # per row, whether it has the most left (`_behind`)
        self._shapes: dict[tuple, list] = {}   # batch 1, drafting the most: confidence bins → [steps, raw row]
        self._full = False                     # this step drafts the most at batch 1 (its shape is noted)
        self._made_now: dict = {}              # row → its drafts left unverified this step (`_check_shadow`'s item)
        self._shadows: dict = {}               # row key → such lists still being checked (`_shadow`)
        self._one_hot = False                  # the last proposal drafted without probabilities
        self._shadow_probe = False             # this step is a probe that only drafts (`_decide_cap`)

    def refresh_curves(self) -> None:
        """Forget the curves looked up per batch size (a new one was measured); keeps what was learned."""
        self._fold_coast()
        self._cache.clear()
        self._prior.clear()
        self._times.clear()
        self._phis.clear()
        self._best.clear()
        self._shape_best.clear()

    # --- learned statistics --------------------------------------------------------------------
    def _bins(self, conf: np.ndarray) -> np.ndarray:
        return np.minimum((conf * self.BINS).astype(np.int64), self.BINS - 1)   # conf ∈ [0, 1]

    def calibrated(self, conf) -> np.ndarray:
        """Observed acceptance rate for these raw confidences [B, D] (prior: the raw value)."""
        return self._calibrate(_unit(_as_np(conf)))

    def _calibrate_rows(self, rows: list, z: float = 0.0) -> list:
        """`_calibrate` for a small batch, on lists; with z > 0, z standard errors above."""
        if not self.learn:
            return rows
        acc, n, w, K, P = self._bin_acc, self._bin_n, self.prior_weight, self.BINS, self.MAX_POS
        out = []
        for row in rows:
            cal = []
            for j, c in enumerate(row):
                p = j if j < P else P - 1
                b = int(c * K)
                b = b if b < K else K - 1
                m = n[p][b] + w
                v = (acc[p][b] + w * c) / m
                cal.append(min(1.0, v + z * math.sqrt(v * (1.0 - v) / m)) if z else v)
            out.append(cal)
        return out

    def _calibrate(self, conf: np.ndarray) -> np.ndarray:
        """`calibrated` for confidences already in [0, 1]."""
        if not self.learn or conf.size == 0:
            return conf
        D = conf.shape[1]
        pos = self._pos_index.get(D)
        if pos is None:
            pos = self._pos_index[D] = np.minimum(np.arange(D), self.MAX_POS - 1)[None, :]
        b = self._bins(conf)
        w = self.prior_weight
        return (np.asarray(self._bin_acc)[pos, b] + w * conf) / (np.asarray(self._bin_n)[pos, b] + w)

    def position_alpha(self, z: float = 0.0, behind: bool = False) -> list[float]:
        """Observed conditional acceptance per draft position (prior: `alpha`); with z > 0 its
        upper confidence bound, z standard errors above; `behind`: of the rows furthest behind.
        Plain Python: 16 positions, where numpy's conversions cost more than the arithmetic."""
        w, a0 = self.prior_weight, self.alpha
        ns, accs = (self._lag_n, self._lag_acc) if behind else (self._pos_n, self._pos_acc)
        out = []
        for n, a in zip(ns, accs):
            m = n + w
            p = (a + w * a0) / m
            out.append(min(1.0, p + z * math.sqrt(p * (1.0 - p) / m)) if z else p)
        return out

    def proposal_rate(self) -> float:
        """Share of rows offered a draft that proposed anything (prior: 1, weight `prior_weight`)."""
        offered, proposed = self._rows
        return (proposed + self.prior_weight) / (offered + self.prior_weight)

    PRICE_STEPS = 3        # drafting steps that price the drafter where the first looks implausible
    DRAFT_PLAUSIBLE = 0.5  # ... dearer a drafted token than this share of its step's other seconds
    DRAFT_CLIP = 2.0       # a drafting step's seconds count at most this many times what `_draft_line` expects

    def _note_draft(self, D: float, seconds: float, step_seconds: float) -> None:
        """A drafting step's drafter seconds (`step_seconds`: the rest of its step), for
        `_draft_line`. Drafting is timed only on steps that draft, so a price too high stays: one
        30 ms hiccup (a garbage collection, the OS) in the one pricing step made prompt lookup's
        drafts cost 60 ms each, and the scheduler decoded plain to the end. So a first step whose
        drafted token cost over `DRAFT_PLAUSIBLE` of the step's other seconds is not taken alone:
        the drafter is priced at the median of `PRICE_STEPS` (each scaled to the last one's length:
        a bound over the cost of a drafter flat in D, prompt lookup, and of one linear in it, a
        draft model). Pricing on three steps always cost 0.2–0.4 % of a round of prompt lookup at
        batch 1, 1k tokens (replayed, session 27). Once priced, each step counts at most
        `DRAFT_CLIP` times the line's price of its length: unclipped, a few slow steps of 8 drafts
        among steps of 0–1 (the scheduler's Python is timed in drafting) made each draft cost
        0.05–0.07 ms, 5 times its price; drafting 8 no longer counted as free, and 2 replays in 60
        of prompt lookup at batch 1, 256 tokens, decoded plain (0.82 of D = 2)."""
        held = self._draft_held
        if held is None:
            n, sd, st, sdd, _ = self._cost
            if n > 0.0 and sdd / n - (sd / n) ** 2 > 1e-9:
                slope, intercept = self._draft_line()
                ref = slope * D + intercept
            else:   # one length seen: the line cannot tell a flat cost from a linear one, so bound both
                ref = 0.0 if n <= 0.0 else st / n * (max(1.0, D * n / sd) if sd > 0.0 else 1.0)
            self._add_draft(D, min(seconds, self.DRAFT_CLIP * ref) if ref > 0.0 else seconds)
            return
        held.append((max(D, 1.0), D, seconds))
        if len(held) == 1 and not (step_seconds > 0.0 and seconds > self.DRAFT_PLAUSIBLE * max(D, 1.0) * step_seconds):
            self._add_draft(D, seconds)
        elif len(held) < self.PRICE_STEPS:
            return
        else:
            d, n, _ = held[-1]
            scaled = sorted(s * max(1.0, d / e) for e, _, s in held)
            self._add_draft(n, scaled[(len(scaled) - 1) // 2])
        self._draft_held = None
        self._priced = True

    def _add_draft(self, D: float, seconds: float) -> None:
        c = self._cost
        self._cost = [0.98 * c[0] + 1.0, 0.98 * c[1] + D, 0.98 * c[2] + seconds,
                      0.98 * c[3] + D * D, 0.98 * c[4] + D * seconds]

    def _draft_line(self) -> tuple[float, float]:
        """(seconds per drafted token, seconds per drafting step): a decayed least-squares line
        through the observed (tokens drafted, drafter time) of the steps the drafter ran."""
        n, sd, st, sdd, sdt = self._cost
        if n <= 0 or sd <= 0:
            return 0.0, 0.0
        var = sdd / n - (sd / n) ** 2
        if var <= 1e-9:          # one draft length seen so far: all of it per token
            return st / sd, 0.0
        slope = max(0.0, (sdt / n - sd * st / n ** 2) / var)
        return slope, max(0.0, (st - slope * sd) / n)

    def draft_time(self, D: int) -> float:
        """Drafter seconds a step spends because it drafts D tokens rather than none: the slope
        times D (a parallel drafter's slope comes out ≈ 0 by itself), plus the intercept — a draft
        model catching up on the accepted tokens — only where the engine skips a drafter that
        drafts nothing; otherwise every step pays it anyway."""
        return self._draft_cost()(D)

    def _draft_cost(self) -> Callable[[int], float]:
        """`draft_time` with the fitted line computed once (it is read for every D each step).
        Where the engine skips an idle drafter, a drafting step also pays `observe`'s full path
        (a plain step only sums its time, `_coast`): on a host whose plain step at batch 2 takes
        3.8 ms, that and the scheduler's calls in the drafting time were 0.14 ms a step, and
        drafting every step to verify one in a hundred lost 7 % to plain decoding (BENCHMARKS,
        session 25)."""
        slope, intercept = self._draft_line()
        fixed = intercept + self._observe_s if self.skips_idle else 0.0
        return lambda D: slope * D + fixed if D > 0 else 0.0

    def target_time(self, batch_size: int, width: int) -> float:
        """Seconds of a step (all but drafting) verifying `width` drafts in each of `batch_size`
        rows (`_target_times`). The curve comes from a profile or a measurement taken before
        decoding; on a shared machine the target's speed, and the price of a wider step, drift
        from it."""
        return self._width_times(batch_size, width)[width]

    def _width_times(self, batch_size: int, width: int) -> list[float]:
        """`target_time` for every width 0 … ≥ `width`, kept until the statistics next change."""
        times = self._times.get(batch_size)
        if times is None or width >= len(times):
            times = self._times[batch_size] = self._target_times(batch_size, max(width + 1, self.MAX_POS + 1))
        return times

    def _prior_times(self, batch_size: int, widths: int) -> list[float]:
        prior = self._prior.get((batch_size, widths))
        if prior is None:    # a cost-model curve takes ~0.4 ms a point: 7 ms a batch size, once
            curve = self.sps_at(batch_size)
            prior = self._prior[(batch_size, widths)] = _nondecreasing(
                [1.0 / curve(batch_size * (1 + w)) for w in range(widths)])
        return prior

    def _seen(self, batch_size: int, widths: int) -> list[tuple[float, float, int]]:
        """(count, seconds, width) of the steps timed at `batch_size`, every one aged by the steps
        timed since at that batch size, whatever their width. Aged only when its own width came
        round again, a width timed only in the first, slowest steps of a process (cold caches,
        first allocations) kept that price for good and made verifying at batch 2 look dear for
        the whole run (BENCHMARKS §5.0f)."""
        now, out = self._clock.get(batch_size, 0), []
        for (b, w), (n, t, at) in self._tt.items():
            if b == batch_size and w < widths:
                age = self.FORGET ** (now - at)
                out.append((n * age, t * age, w))
        return out

    def _level(self, batch_size: int, widths: int, rho: list) -> Optional[float]:
        """The machine's speed now at `batch_size`, as a plain step's seconds: the plain steps timed
        lately where there are some (an aged count of one or more), else every step timed, each
        divided by its width's price `rho`; None if none was timed."""
        seen = self._seen(batch_size, widths)
        plain = [(n, t) for n, t, w in seen if w == 0]
        if plain and plain[0][0] >= 1.0:
            return plain[0][1] / plain[0][0]
        den = sum(n * rho[w] for n, _, w in seen)
        return sum(t for _, t, _ in seen) / den if den > 0 else None

    def _timed_widths(self, batch_size: int) -> dict[int, tuple[float, float]]:
        """Per width timed at `batch_size`: (count, Σ t/level) of its steps, each timed against
        the speed of its moment and aged SHAPE_FORGET a step at its batch size."""
        now, out = self._clock.get(batch_size, 0), {}
        for (b, w), (n, sy, at) in self._ratio.items():
            if b == batch_size:
                age = self.SHAPE_FORGET ** (now - at)
                out[w] = (age * n, age * sy)
        return out

    @staticmethod
    def _curve_price(prior: list, slope: float) -> list[float]:
        """ρ_c(w) = 1 + c·(ρ_curve(w) − 1) for the curve's step times `prior`."""
        return [1.0 + slope * (p / prior[0] - 1.0) for p in prior]

    def _slope(self, batch_size: int, timed: Optional[dict] = None) -> float:
        """c of the price of width, ρ(w) = t(w)/t(0) = 1 + c·(ρ_curve(w) − 1): the curve's (c = 1,
        worth SHAPE_PRIOR wide steps) corrected by the wide steps timed (`_timed_widths`), fitted
        through the origin on x = ρ_curve(w) − 1. Fitted on raw times, which the machine's drift
        moves by ±10 % within minutes, the price of width had to age as fast as the speed
        (FORGET): an hour-old profile that put 4 drafts at batch 1, 1k tokens, at 1.8 plain steps
        where they cost 1.6 kept adaptive D at plain decoding where D = 4 gained 3.6 %, and at
        batch 2 priced 8 drafts at 1.13 where they cost 1.5.
        The prior's weight follows the noise: a step's time on this CPU scatters by ~15 % (sd of
        its log, every width alike), so one step of 5 drafts (x ≈ 0.7) says c to ±0.4, and a
        profile an hour old is off by ~0.25 — worth (0.4/0.25)² ≈ 2.5 steps. At 0.5, four steps
        of 5 drafts timed 20 % slow in the first 40 at batch 1 made c = 1.6 (4 drafts at 2.0 plain
        steps, where they cost 1.7); plain decoding then timed no wide step to correct it, and
        prompt lookup decoded plain to the end (the validation's 1k requests replayed in another
        order; in theirs, over 10 noise streams, 2.5 did as well or better in 9, BENCHMARKS,
        session 23)."""
        timed = self._timed_widths(batch_size) if timed is None else timed
        if not timed:
            return 1.0
        prior = self._prior_times(batch_size, max(max(timed) + 1, self.MAX_POS + 1))
        sxx = sxy = n = 0.0
        for w, (c, sy) in timed.items():
            x = prior[w] / prior[0] - 1.0
            if x >= 0.02:       # widths the curve prices as a plain step say nothing of c
                sxx, sxy, n = sxx + c * x * x, sxy + x * (sy - c), n + c
        if n <= 0.0:
            return 1.0
        k = self.SHAPE_PRIOR * sxx / n
        return min(4.0, max(0.0, (k + sxy) / (k + sxx)))

    def _note_width_price(self, batch_size: int, width: int, seconds: float) -> None:
        """A step of `width` drafts timed: its price against the speed of the moment, for `_slope`
        and `_width_price`."""
        if batch_size not in self._times:
            self._width_times(batch_size, width)        # the speed as of now
        level = self._levels.get(batch_size)
        if not level:
            return
        prior = self._prior_times(batch_size, max(width + 1, self.MAX_POS + 1))
        x = prior[width] / prior[0] - 1.0
        y = min(max(seconds / level - 1.0, -0.5), 2.0 * max(x, 0.0) + 1.0)    # one odd step clipped
        now = self._clock.get(batch_size, 0)
        n, sy, at = self._ratio.get((batch_size, width), (0.0, 0.0, now))
        age = self.SHAPE_FORGET ** (now - at)
        self._ratio[(batch_size, width)] = [age * n + 1.0, age * sy + 1.0 + y, now]

    WIDTH_PRIOR = 2.0      # steps of its own width that `_slope`'s price of a width is worth

    def _width_price(self, batch_size: int, prior: list) -> list[float]:
        """ρ(w), a step of w drafts in plain steps: the curve's price corrected by `_slope`, then by
        the steps of that width timed (`_timed_widths`).
        One c for every width cannot follow this CPU, whose step costs less at 8 tokens a row
        than at 7 or 9: at batch 1, 256 tokens, 6 and 8 drafts cost 15 ms where 7 cost 10.9
        (BENCHMARKS §5.0i). Kept a width at a time, a dear width stays dear for ~1000 steps; priced
        by raw times aged over ~50 steps, it was back at the curve's price before it was verified
        again, and prompt lookup verified 6 or 8 drafts in 177 of 2038 steps."""
        timed = self._timed_widths(batch_size)
        rho, k = self._curve_price(prior, self._slope(batch_size, timed)), self.WIDTH_PRIOR
        for w, (n, sy) in timed.items():
            if 0 < w < len(rho):
                rho[w] = (k * rho[w] + sy) / (k + n)
        return rho

    def _target_times(self, batch_size: int, widths: int) -> list[float]:
        """Per width, the speed now (`_level`) times the price of width (`_width_price`). Only the
        curve is kept nondecreasing: a width timed is priced as timed, dips included. On this CPU
        4 drafts at batch 1, 1k tokens, cost 9.3 ms where 1–3 cost 9.9–11.1 and 7 cost 9.8
        (BENCHMARKS §5.0i); fitted nondecreasing, 2–7 all came out ~9.8, so 7 looked as cheap as 4
        and prompt lookup verified 7 where its last three drafts added 2 % of the tokens for 5 %
        of the time: 0.972 of D = 4."""
        prior = self._prior_times(batch_size, widths)
        observed = {b for b, _ in self._tt}
        # a batch size not yet observed (the batch less one row, for `static_worth`) borrows the
        # drift and the price of width of the nearest one observed: the machine's drift is the
        # same for both. Taken raw next to a rescaled batch size, a drift of 10 % moved φ, the
        # worth of a token of a row ahead, by 0.3 at batch 4
        src = batch_size if batch_size in observed or not observed else \
            min(observed, key=lambda b: abs(math.log(b / batch_size)))
        if src == batch_size:
            rho = self._width_price(batch_size, prior)
            level = self._level(batch_size, widths, rho)
            if level is not None:
                self._levels[batch_size] = level
        else:
            slope = self._slope(src)
            rho = self._curve_price(prior, slope)
            sp = self._prior_times(src, widths)
            level = self._level(src, widths, self._curve_price(sp, slope))
            level = None if level is None else level * prior[0] / sp[0]
        base = prior[0] if level is None else level
        return [base * r for r in rho]

    def learned_sps(self, batch_size: int) -> Callable[[float], float]:
        """Steps/s against verified tokens N, from `target_time` (for the per-step schedulers)."""
        if not self.learn or not self._tt:
            return self.sps_at(batch_size)

        def sps(N: float) -> float:
            w = max(float(N) / batch_size - 1.0, 0.0)
            w0 = int(w)
            t = self.target_time(batch_size, w0)
            if w > w0:
                t += (w - w0) * (self.target_time(batch_size, w0 + 1) - t)
            return 1.0 / t
        return sps

    def _step_time(self, batch_size: int, price_z: float = 0.0) -> Callable[[int], float]:
        """Expected seconds of a step that offers every row D drafts: drafting, then verifying
        B·(1 + D) tokens unless no row proposes (probability (1 − r)^B), then B tokens; with
        `price_z`, each width priced that many errors cheaper (`_optimistic_width`)."""
        draft_time = self._draft_cost()
        share = verify_share(self.proposal_rate(), batch_size)
        plain = self.target_time(batch_size, 0)
        width = self._optimistic_width(batch_size, price_z) if price_z > 0 else \
            (lambda D: self.target_time(batch_size, D))
        return lambda D: (share * width(D) + (1 - share) * plain + draft_time(D)) if D else plain

    def _best_cap(self, batch_size: int, max_draft: int, z: float = 0.0, price_z: float = 0.0) -> int:
        key = (batch_size, max_draft, z, price_z)
        if key in self._best:       # nothing observed since: the same answer
            return self._best[key]
        best, best_v = 0, 0.0
        for D, v in enumerate(self.draft_values(batch_size, max_draft, z, price_z)):
            if v > best_v * (1 + 1e-9):
                best, best_v = D, v
        self._best[key] = best
        return best

    def draft_values(self, batch_size: int, max_draft: int, z: float = 0.0, price_z: float = 0.0) -> list[float]:
        """Per D = 0 … `max_draft`, a step's expected worth (in tokens of a row, `static_worth`)
        per second, from the acceptance per position learned (z standard errors above) and each
        width's price (`price_z` errors below, `_optimistic_width`) — what `draft_cap` maximises
        where drafting is not free."""
        # (`adaptive_replay.py --explain` calls this on older versions' schedulers too)
        step = self._step_time(batch_size, price_z) if price_z else self._step_time(batch_size)
        # a static batch, per row and plain step (`static_worth`): every row's draft is worth φ,
        # and β/B more where the rows at the back all accept it — the rows that accept least, whose
        # acceptance is learned apart. Counting every row alike, prompt lookup at batch 4 verified
        # drafts in 127 of 173 steps, mostly for rows that repeat themselves and finish early
        # anyway, and ran at 0.92× plain decoding; with the acceptance of the rows behind, 32
        # steps and 0.96×. At batch 1, φ = 1 and β = 0
        phi, beta = self._phi_beta(batch_size)
        back = beta / batch_size
        alpha = self.position_alpha(z)
        lag = self.position_alpha(z, behind=True) if back > 0 else alpha
        values, E, surv, surv_lag = [], 1.0, 1.0, 1.0
        for D in range(max_draft + 1):
            if D:
                surv *= alpha[min(D, self.MAX_POS) - 1]
                surv_lag *= lag[min(D, self.MAX_POS) - 1]
                E += phi * surv + back * surv_lag
            values.append(E / step(D))
        return values

    STEP_SD = 0.15      # sd of the log of one step's time on this CPU (`_slope`)

    def _optimistic_width(self, batch_size: int, z: float) -> Callable[[int], float]:
        """`target_time` with each width's price z standard errors cheaper, for `_could_draft`:
        the price of a width is learned from the steps timed at it (and the curve's, worth
        `SHAPE_PRIOR` + `WIDTH_PRIOR` of them), each off by ~`STEP_SD` in log. Optimistic on
        acceptance alone, a width of 1 timed at 1.21 plain steps in the first verifying steps,
        where the host charged ~1.12, made D = 1 look unable to pay even optimistically;
        drafting-only probes lost their pace, and prompt lookup at batch 4 decoded plain to the
        end in 12–18 of 48 replays of a host where D = 1 gained 8 %; with this, 2 of 48 (+0.5 ±
        0.4 % there, −0.1 % on a host that stays dear and on eighteen real hosts' replays;
        BENCHMARKS, session 44). Never below a plain step; the drafter's own price is not the
        width's and stays: discounted with it, a drafter whose drafts were never accepted went
        on being probed."""
        timed, plain = self._timed_widths(batch_size), self.target_time(batch_size, 0)
        k = self.SHAPE_PRIOR + self.WIDTH_PRIOR

        def width(D: int) -> float:
            n = timed.get(D, (0.0, 0.0))[0]
            return max(plain, self.target_time(batch_size, D) * math.exp(-z * self.STEP_SD / math.sqrt(n + k)))
        return width

    def draft_cap(self, batch_size: int, max_draft: int, remaining: Optional[Sequence[int]] = None,
                  catch_up: float = 0.0, rows: Optional[Sequence] = None) -> int:
        """How many tokens to draft this step (before drafting); `remaining`, per row, the tokens
        it may still generate (for `static_worth`); `catch_up`, the target's seconds to prefill what
        the drafter must absorb before it can propose (a catching-up drafter's prompts), 0 if none;
        `rows`, per row, an id the engine keeps for it across its steps and never gives another
        (for `_row_scale`). Timed: the engine counts it in the drafter's seconds (`observe`)."""
        t = self.clock()
        cap = self._draft_cap(batch_size, max_draft, remaining, catch_up, rows)
        self._own += self.clock() - t
        return cap

    def _draft_cap(self, batch_size: int, max_draft: int, remaining: Optional[Sequence[int]],
                   catch_up: float, rows: Optional[Sequence]) -> int:
        if self._coast_left > 0 and batch_size == self._coast_b:
            # plain decoding decided ahead (`_coast`): nothing it reads can change before then
            self._coast_left -= 1
            self._since_probe += 1
            return 0
        self._fold_coast()
        self._probing = self._full = self._free_step = False
        self._remaining = None if remaining is None else list(remaining)
        top = max(self._remaining, default=0) if remaining is not None else 0
        self._lagging = None if remaining is None else [r >= top for r in self._remaining]
        ids = self._row_ids = None if rows is None else list(rows)
        self._young_rows = None
        if ids is not None:
            fit = self._row_fit
            if len(fit) > len(ids):    # rows done: forget them
                fit = self._row_fit = {i: fit[i] for i in ids if i in fit}
            # rows sharing a step get a factor, and every row where its unverified drafts are seen
            # too (`_shadow`): a factor that locks a row into verifying nothing is then corrected
            # by the drafts it leaves
            add = len(ids) > 1 or self.sees_emitted
            if remaining is not None and len(self._remaining) == len(ids):
                young, Y = [], self.YOUNG
                for i, m in zip(ids, self._remaining):
                    e = fit.get(i)
                    if e is None and add:
                        e = fit[i] = [0.0, 0.0, None]
                    if e is not None and e[2] is None:
                        e[2] = m
                    young.append(None if e is None else e[2] - m < Y)
                self._young_rows = young
            elif add:
                for i in ids:
                    fit.setdefault(i, [0.0, 0.0, None])
        self._pending = float(catch_up)
        if not self.learn or max_draft <= 0:
            return max_draft
        if self.max_tokens is not None:
            max_draft = min(max_draft, self.max_tokens)
        cap = self._decide_cap(batch_size, max_draft)
        self._full = batch_size == 1 and cap == max_draft
        # (its saving is read by `_free_pays`, at batch 2 only)
        self._free_step = 1 < batch_size <= self.FREE_ROWS and cap == max_draft and not self._probing
        if cap == 0 and not self._probing and self.skips_idle:
            self._coast(batch_size)
        return cap

    COAST = 64      # plain steps decided at most at once (then the step times are folded in)

    def _coast(self, batch_size: int) -> None:
        """Decide the next plain steps now. While the choice is plain decoding and the engine skips
        the drafter, only step times change what `draft_cap` decides, and they are refreshed every
        16–64 timed steps: until the next refresh or probe check the answer is 0, so those steps
        skip the decision and `observe` only sums their time. Deciding and observing each of them
        cost 0.03–0.06 ms a step on this CPU (0.2–0.5 % of a plain step) where plain decoding won."""
        period = self._refresh_period()
        left = period - 1 - self._tt_seen % period          # timed steps before the next refresh
        due = self._interval - self._since_probe - 1        # draft_cap calls before a probe check
        if due < 0:     # a probe due but over its budget: plain steps until the budget covers it
            step = self.target_time(batch_size, 0)
            due = int((self._wait_until - self._elapsed) / step) - 1 if step > 0 else 0
        n = min(left, due, self.COAST)
        if n > 0:
            self._coast_b, self._coast_left = batch_size, n
            self._shadows = {}       # coasted steps are not looked at: what they emit goes unseen

    def plain_ahead(self, batch_size: int) -> int:
        """The plain steps `_coast` decided ahead at `batch_size`, handed to the engine: it takes
        them without calling `draft_cap` or `observe` (with the engine's arguments for them,
        ~0.2 % of a plain step at batch 4, 1k tokens, on caches a forward leaves cold) and hands
        their times back through `coasted` before it next calls either."""
        if batch_size != self._coast_b or self._coast_left <= 0:
            return 0
        n, self._coast_left = self._coast_left, 0
        return n

    def coasted(self, target_seconds: Sequence[float]) -> None:
        """The steps taken under `plain_ahead`, each as a coasted `draft_cap` and `observe` counts it."""
        acc, F = self._coast_acc, self.FORGET
        for t in target_seconds:
            self._elapsed += t
            acc[1] = acc[1] * F + t
        acc[0] += len(target_seconds)
        self._since_probe += len(target_seconds)

    def _fold_coast(self) -> None:
        """Fold the coasted plain steps' times into the step-time statistics exactly as `observe`
        would have one by one. Split evenly, a coast across a change of the machine's speed set
        the speed a later probe was priced against a little apart, and with the price of width
        kept a width at a time that moved a probe."""
        B, (k, secs) = self._coast_b, self._coast_acc
        self._coast_b, self._coast_left = None, 0
        if B is None or k == 0:
            return
        self._coast_acc = [0, 0.0]
        now = self._clock[B] = self._clock.get(B, 0) + k
        n, t, at = self._tt.get((B, 0), (0.0, 0.0, now))
        F = self.FORGET
        age, run = F ** (now - at), (1.0 - F ** k) / (1.0 - F)
        self._tt[(B, 0)] = [age * n + run, age * t + secs, now]
        self._count_timed(k)

    def _refresh_period(self) -> int:
        """Timed steps between two refreshes of the step times (`_count_timed`)."""
        return 16 if self._tt_seen < 512 else 64

    def _count_timed(self, k: int) -> None:
        """k more steps timed: where that crosses a refresh, decide afresh (timings move slowly;
        each refresh costs ~0.15 ms of Python)."""
        period = self._refresh_period()
        before, self._tt_seen = self._tt_seen, self._tt_seen + k
        if self._tt_seen // period > before // period:
            self._best.clear()
            self._shape_best.clear()
            self._times.clear()
            self._phis.clear()

    def _decide_cap(self, batch_size: int, max_draft: int) -> int:
        if not self._priced and self.draft_token_seconds is not None:
            # a profile measured this drafter: start from its price (worth `prior_weight` steps
            # drafting one token each) instead of paying a pricing step; probes, within their
            # budget, then learn the rest (a draft model's catch-up on the prompts included)
            t, w = float(self.draft_token_seconds(batch_size)), self.prior_weight
            self._cost = [w, w, w * t, w, w * t]
            self._priced, self._draft_held = True, None
        if not self._priced:
            # the drafter's price is unknown: draft one token to learn it (up to `PRICE_STEPS`
            # such steps, so one slow step cannot price drafting out). A full-length first
            # probe with a draft model at batch 8 (its catch-up on the prompt, 8 sequential
            # forwards, 72 tokens verified) cost 6 % of four batches of 48 tokens. Pricing needs no
            # verification, so the per-step schedule decides it: verified whatever the evidence,
            # the two pricing steps of prompt lookup (the first one catches up on the prompts) cost
            # 2 % of a cell at batch 8, 1k tokens, where a width of 1 costs 1.65 plain steps
            # (replayed, BENCHMARKS, session 24)
            self._charge = self._probe_prices(batch_size, 0, 1)
            return 1
        best = self._best_cap(batch_size, max_draft)
        # at batch 1 and 2, where drafting costs next to nothing (prompt lookup), the alternative to
        # the average's best D is drafting and verifying per step by the proposals seen
        free = (batch_size <= self.FREE_ROWS and best < max_draft and self._drafting_is_free(batch_size, max_draft)
                and self._free_pays(batch_size, max_draft))
        self._since_probe += 1
        # where drafting is free (prompt lookup): draft as the proposals seen say and leave what
        # to verify to the per-step scheduler, which sees the row's confidence — the average
        # behind `best` mixes strong proposals with weak ones
        choice = self._free_cap(batch_size, max_draft) if free else best
        if self._futile and choice != self._probe_choice:
            self._futile, self._probe_choice = 0, None     # a probe moved the choice: the whole budget again
        if self._since_probe >= self._interval and best < max_draft and self._elapsed >= self._wait_until:
            # probe past the choice and verify it, or a pessimistic estimate (or a position never
            # observed) could not recover — but only while the evidence leaves room for it to pay:
            # under optimistic acceptance (upper confidence bounds) the probe's length must beat
            # the choice. Once enough steps rule that out, probes stop costing anything.
            # where drafting is free and `_shadow` sees what each draft would have done, a probe
            # only drafts the most and leaves what to verify to the per-step schedule: drafting is
            # all it costs (~0.02 of a plain step for prompt lookup, where verifying 8 drafts costs
            # 0.86), so ~40 times as many fit the budget
            # — at any batch size where drafting is cheap, and whatever the optimistic test says
            # (it costs next to nothing and sees every draft). At batch 4 (prompt lookup, 256
            # tokens) only verifying probes, and only those the optimistic test let through, could
            # correct a first-draft acceptance learned at 0.12 from the first steps of a batch
            # (0.24 over the cell): none came, and adaptive D decoded plain where D = 1 and 2
            # gained 7 % (replayed, BENCHMARKS, session 24)
            shadow = choice < max_draft and self.sees_emitted and self._one_hot and (
                free or self._drafting_is_free(batch_size, max_draft))
            if shadow:
                draft = self._draft_cost()
                D, price = max_draft, draft(max_draft) - draft(choice) + self._catch_up_price(batch_size)
            else:
                full = self._probe_cost(batch_size, best, max_draft)
                D = max_draft if full <= self.probe_budget else best + 1
                cost = full if D == max_draft else self._probe_cost(batch_size, best, D)
                price = cost * self.target_time(batch_size, 0) + self._catch_up_price(batch_size)
            # each probe after which the choice stood shrinks the budget: after k of them in a row
            # probes may cost explore/(1 + k) of the time decoded, so where drafting never pays
            # their share falls as 1/√time instead of staying at `explore` (0.3–0.7 % of the
            # cells where plain decoding won, BENCHMARKS §5.0h). Not for shadow probes where
            # drafting is free (batch 1 and 2) and the choice is plain decoding: each costs a few
            # per cent of a step, so the whole budget still holds one in every ~10 steps, and their
            # period stays `probe_every`. Shrunk and doubled, they came once every ~200 steps, a
            # request that repeated itself went unseen, and prompt lookup at batch 1, 1k tokens,
            # stayed plain more often (this with session 27's pricing, against session 26's
            # scheduler: +0.9 % ± 0.35 in round 1 over 60 replays in rotated order, the worst 0.90
            # of the best fixed D against 0.85; BENCHMARKS, sessions 27–28)
            # Elsewhere (batch 3 and up, or where `_free_pays` says no), while the choice is plain
            # decoding, they keep that pace as long as D = 1 could still pay (`_could_draft`)
            keep = shadow and choice == 0 and (free or self._could_draft(batch_size))
            share = self.explore if keep else self.explore / (1 + self._futile)
            if self._explored + price > share * self._elapsed:
                # over the exploration budget: wait until it covers this probe (pricing it every
                # step while waiting cost ~25 µs a step, 0.1 % at batch 16)
                self._wait_until = (self._explored + price) / share if share > 0 else math.inf
            elif shadow or self._best_cap(batch_size, D, self.optimism) > best or (
                    free and batch_size == 1 and D == max_draft
                    and self._shape_cap(max_draft, self.optimism) > self._shape_cap(max_draft)):
                if self._probe_choice is not None:
                    self._futile = self._futile + 1 if choice == self._probe_choice else 0
                self._probe_choice = choice
                self._since_probe = 0
                doubled = min(2 * self._interval, self.max_probe_interval)
                self._interval = self.probe_every if best > 0 or keep else doubled
                if shadow:      # charged its model price: a step's noise would swamp a drafting cost
                    self._explored += price
                    self._shadow_probe = True
                    return D
                self._probing = True
                self._charge = self._probe_prices(batch_size, best, D)
                return D
            else:
                self._since_probe = 0
        if choice and not free and self._pending > 0.0 and self._remaining:
            choice = self._worth_catching_up(batch_size, choice)
        return choice

    COULD_Z = 1.0       # standard errors above the observed acceptance at which `_could_draft` prices D = 1

    def _could_draft(self, batch_size: int) -> bool:
        """Whether drafting one token a row could beat plain decoding under acceptance `COULD_Z`
        standard errors above the observed and a width of 1 as many below its price
        (`_optimistic_width`): while it could, drafting-only probes keep their pace
        (`_decide_cap`). Acceptance is learned mostly from those probes while the choice is plain
        decoding, and at batch 4 (prompt lookup, 1k tokens) their period doubled to 256 steps
        after a few: a first-draft acceptance learned at 0.21 from ~30 drafts (0.32 over the cell)
        then priced D = 1 at 0.99 of plain decoding where it gains 8 % (a host whose width of 1
        costs 1.12 plain steps), and adaptive D decoded plain to the end in 6 of 48 replays (4 of
        8 with the scheduler's own time left out), at 0.92 of D = 1; with this, 0–3 of 48
        (BENCHMARKS, session 42)."""
        return self._best_cap(batch_size, 1, self.COULD_Z, self.COULD_Z) > 0

    def _worth_catching_up(self, batch_size: int, choice: int) -> int:
        """`choice`, or 0 where what it saves over the rest of the batch does not cover the
        drafter's catch-up on the prompts it has yet to see. A draft model pays that once per
        batch before its first proposal; the average's best D does not see it, since it prices
        a step of a drafter already caught up. At 1k tokens, batch 4, the first step of each
        batch chose D = 1 and fed the draft model 4 × 1k tokens (0.11–0.13 s) where 48 plain
        steps take 0.25 s: one such step cost that cell 9 % (BENCHMARKS, session 31)."""
        values = self.draft_values(batch_size, choice)
        left = max(self._remaining) + 1       # steps the batch's end is from done, decoded plainly
        saved = left * (1.0 / values[0] - 1.0 / values[choice])
        return choice if saved > self._catch_up_price(batch_size) else 0

    # Batch sizes up to which drafting that costs next to nothing drafts the most whatever the
    # average's best D (`_decide_cap`). At batch 2 the average is learned mostly from the first
    # steps of each batch, where the rows are level and the batch's end moves only if both
    # accept; it locked prompt lookup at 1k tokens into plain decoding, 0.973–0.985 of D = 4,
    # where drafting the most every step reached 1.010–1.030 (replayed under noise, BENCHMARKS
    # §5.0k). In session 10, before the per-step schedule priced a static batch's tokens
    # (`static_worth`), the same cost 0.966 of D = 3 (§5.0e). At batch 4 and 8 the per-step
    # schedule verifies next to nothing, and drafting every step for it cost 0.8–1.8 % (replayed).
    FREE_ROWS = 2

    FREE_STEPS = 16     # such steps (a count decayed by FORGET: at most 50) before `_free_pays` may say no
    FREE_Z = 1.0        # standard errors above the calibrated acceptance at which `_free_pays` prices a saving

    def _free_pays(self, batch_size: int, max_draft: int) -> bool:
        """Whether drafting the most every step pays above batch 1 (where `_shape_cap` decides it):
        the seconds the per-step schedule could save on such steps lately (`_note_saving`), against
        what drafting them costs. "Free" drafting is not free on a fast host: at batch 2, 1k
        tokens, where a width of 1 costs 1.7 plain steps, the schedule verified 1 step in 100
        while drafting and its bookkeeping took 0.26 ms of every 3.9 ms step, at 0.93 of plain
        decoding (BENCHMARKS, session 25). The saving is priced at acceptance `FREE_Z` standard
        errors above the calibrated: priced at the calibrated, the first steps of a cell (young
        rows, a calibration still at its prior) saved nothing, the guard stopped drafting, and
        prompt lookup at batch 2 on session 15's prices went from 1.067 of the best fixed D to
        0.980 (replayed, 6 noise streams); at 2 errors above, the guard no longer stopped at 256
        tokens on this session's prices (0.973 of plain, against 0.996 at 1 or 0.5). Once it
        says no, the choice is the average's best D, and shadow probes (drafting only) keep
        noting what drafting could save."""
        if batch_size == 1:
            return True
        n, saved = self._free_fit.get(batch_size, (0.0, 0.0))
        return n < self.FREE_STEPS or saved / n > self._draft_cost()(max_draft)

    def _note_saving(self, batch_size: int, saved: float) -> None:
        """A step drafting the most (`_free_step`): the seconds its schedule could save over plain
        decoding (`_argmax_width`'s `saved`, at acceptance `FREE_Z` errors up; 0 where no row
        proposed), decayed as the step times are (FORGET)."""
        f = self._free_fit.setdefault(batch_size, [0.0, 0.0])
        f[0] = self.FORGET * f[0] + 1.0
        f[1] = self.FORGET * f[1] + saved

    def _free_cap(self, batch_size: int, max_draft: int) -> int:
        """What to draft where drafting is free: at batch 1 as the proposal shapes seen say
        (`_shape_cap`), else the most."""
        return self._shape_cap(max_draft) if batch_size == 1 else max_draft

    SHAPES = 64     # proposals seen at batch 1 before `_shape_cap` may draft less than the most

    def _shape_cap(self, max_draft: int, z: float = 0.0) -> int:
        """At batch 1, where drafting costs next to nothing (prompt lookup), how many tokens to
        draft when the per-step scheduler then verifies each proposal as its confidence says:
        for every cap d ≤ `max_draft`, each proposal shape seen (its confidence bins; a prompt
        lookup's matched length) cut to d, weighted by how often it came, verified at the width the
        scheduler would pick, that width's price plus drafting d's. With z, acceptance z standard
        errors above the observed (may a probe still find that more pays?).

        Not the average's best D: one match in fifteen is 3 tokens long and accepted 4 drafts in
        8, the rest accept a fifth of a first draft, so per position every fixed D gains ~2 % —
        a few probes decided between plain decoding and drafting, and two runs in three locked
        into plain where verifying per step gained 9 % (BENCHMARKS §5.0f). Until `SHAPES`
        proposals are seen it drafts the most (every such step notes one); after that only probes
        add shapes, so the shapes, not a few probes' acceptance, decide.

        Decided afresh after a probe and when the step times are refreshed (every 16–64 steps),
        not with the per-step decisions every 8: one decision costs ~0.1 ms a shape list, and
        the shapes' calibration moves slowly."""
        if self._shape_count < self.SHAPES:
            return max_draft
        key = (max_draft, z)
        cap = self._shape_best.get(key)
        if cap is None:
            cap = self._shape_best[key] = self._decide_shape_cap(max_draft, z)
        return cap

    def _decide_shape_cap(self, max_draft: int, z: float) -> int:
        """`_shape_cap`, decided afresh."""
        shapes = list(self._shapes.values())
        times = self._width_times(1, max_draft)
        draft = self._draft_cost()
        tokens, seconds = [0.0] * (max_draft + 1), [0.0] * (max_draft + 1)
        for n, row in shapes:
            cal = self._calibrate_rows([row[:max_draft]], z)[0]
            # the scheduler's width for the shape cut to d is the best width ≤ d: a running argmax
            tau, w_tau, best, surv = 1.0, 1.0, 1.0 / times[0], 1.0
            w = 0
            for d in range(max_draft + 1):
                if 0 < d <= len(cal):
                    surv *= cal[d - 1]
                    tau += surv
                    if tau / times[d] > best * (1 + 1e-9):
                        best, w, w_tau = tau / times[d], d, tau
                tokens[d] += n * w_tau
                seconds[d] += n * times[w]
        total = self._shape_count
        rate = [t / (s + total * draft(d)) for d, (t, s) in enumerate(zip(tokens, seconds))]
        return max(range(max_draft + 1), key=lambda d: (rate[d] * (1 - 1e-9 * d), -d))

    def _catch_up_price(self, batch_size: int) -> float:
        """Seconds the drafter would spend absorbing what it has yet to see, if it drafted now:
        the pending prefill times the drafter's cost relative to the target's — learned from the
        catch-ups observed, at first the ratio of a drafted token to a plain target step. A
        draft model's first probe in a batch of 8 × 256 tokens spent 115 ms feeding the prompts
        (a plain step: 14 ms); priced as one drafted token it fit the budget, and that cell ran at
        0.984 of plain decoding (BENCHMARKS §5.0f)."""
        if self._pending <= 0.0:
            return 0.0
        n, total = self._kappa
        prior = self._draft_cost()(1) / self.target_time(batch_size, 0)
        return self._pending * (total + prior) / (n + 1.0)

    def _drafting_is_free(self, batch_size: int, max_draft: int) -> bool:
        """Whether drafting `max_draft` costs under `free_draft` of a plain step (kept with `_best`)."""
        key = (batch_size, max_draft, -1.0)
        free = self._best.get(key)
        if free is None:
            free = self._best[key] = self._draft_cost()(max_draft) < self.free_draft * self.target_time(batch_size, 0)
        return free

    def static_worth(self, batch_size: int) -> Optional[StaticWorth]:
        """What this step's tokens are worth, for the per-step scheduler. draftwise's batches are
        static: with t(k) a plain step of k rows, plain decoding of what is left costs
        Σ_m t(rows with ≥ m tokens left), and a step is worth what it takes off that. For t linear
        in the rows (t(k) = f + k·Δ) that is exactly Δ for every token emitted plus f for every
        token the batch's end moves: in tokens of a row at batch B (t(B)/B), every emitted token
        1, every draft φ = B·Δ/t(B), and β = B·f/t(B) more for each draft position that every row
        at the back accepts while they stay behind the others (the first `gap` drafts; all of
        them where every row is level). A plain step is then worth B, its cost.

        Up to 409cf22 the row alone at the back counted 1 and every other row φ, which prices a
        plain step at 1 + (B − 1)·φ (1.5 at batch 2, not 2): a draft of a row that is ahead or
        level looked a third more worth verifying than it is, and prompt lookup at batch 2
        verified 7–8 drafts in 317 of 2049 steps, at 0.95 of D = 3 (BENCHMARKS §5.0g).
        None (every token 1) at batch 1."""
        rem = self._remaining
        if not self.static_batch or rem is None or batch_size < 2 or len(rem) != batch_size:
            return None
        phi, beta = self._phi_beta(batch_size)
        top = max(rem)
        back = tuple(r for r, b in enumerate(self._behind()) if b)
        runner_up = max((n for n in rem if n < top), default=0)
        return StaticWorth(phi, back, top - runner_up, beta)

    def _behind(self) -> Optional[list[bool]]:
        """Per row, whether it is furthest behind (most tokens left) this step (set by `draft_cap`,
        read up to three times a step)."""
        return self._lagging

    PHI_SPAN = 4    # plain step times, at batch B and the batch sizes below it, that Δ is fitted on

    def _phi_beta(self, batch_size: int) -> tuple[float, float]:
        """(φ, β) of `static_worth`: Δ, the slope of a least-squares line through the plain step
        times t(k) for the `PHI_SPAN` batch sizes k ≤ B, and f = t(1) − Δ, in tokens of a row at
        batch B; at batch 1, or where batches are not static, (1, 0).
        Δ was t(B) − t(B − 1): where a batch never loses a row (plain decoding keeps the rows level)
        t(B − 1) is never timed but read off the profile's curve, and one dip in it — this CPU's
        profile put 3 rows × 280 tokens at 16.2 ms, 4 rows at 16.0 — made φ = 0: a row ahead was
        then worth nothing and verifying paid only where all four rows accepted. With the
        profile's price of a width of 1 there (1.16 plain steps; the sweep measured 1.05), it kept
        prompt lookup at batch 4 decoding plain to the end where D = 1 gained 11 % (BENCHMARKS,
        session 23)."""
        if not self.static_batch:
            return 1.0, 0.0
        pb = self._phis.get(batch_size)
        if pb is None:      # kept until the step times are next refreshed
            full = self.target_time(batch_size, 0)
            one = self._rows_time(1, batch_size)
            if batch_size == 1:
                delta = full
            else:
                ks = range(max(1, batch_size - self.PHI_SPAN + 1), batch_size + 1)
                ts = [self._rows_time(k, batch_size) for k in ks]
                km, tm = sum(ks) / len(ks), sum(ts) / len(ts)
                delta = sum((k - km) * (t - tm) for k, t in zip(ks, ts)) / sum((k - km) ** 2 for k in ks)
            phi = min(1.0, max(0.0, batch_size * delta / full))
            pb = self._phis[batch_size] = (phi, max(0.0, batch_size * one / full - phi))
        return pb

    PHI_PRIOR = 16.0    # plain steps of k rows the curve's ratio t(k)/t(B) is worth to `_rows_time`

    def _rows_time(self, k: int, batch_size: int) -> float:
        """A plain step of k ≤ B rows, for `_phi_beta`: as timed at k rows, shrunk towards the
        batch size's own speed times the curve's ratio t(k)/t(B) by the steps timed at k (aged
        as `_seen` ages them), the curve's ratio worth `PHI_PRIOR` of them. A batch that decodes
        plain never loses a row before its end, so k rows are timed only in a probe's wake: one
        such step at batch 3, timed 26 % dearer than four rows, set the speed of 1–3 rows and
        made φ = 0.28 where the machine's steps say 0.44 (replayed, prompt lookup at batch 4,
        1k tokens; BENCHMARKS, session 40)."""
        own = self.target_time(k, 0)
        if k == batch_size:
            return own
        W = self.MAX_POS + 1
        lent = self.target_time(batch_size, 0) * self._prior_times(k, W)[0] / self._prior_times(batch_size, W)[0]
        n = sum(c for c, _, _ in self._seen(k, W))
        return (n * own + self.PHI_PRIOR * lent) / (n + self.PHI_PRIOR)

    def _probe_prices(self, batch_size: int, best: int, D: int) -> tuple[float, float]:
        """A probe's modelled step seconds at the choice it displaces and at its own D: `observe`
        charges the probe the share 1 − t(best)/t(D) of the step it measured."""
        step = self._step_time(batch_size)
        return step(best), step(D)

    def _probe_cost(self, batch_size: int, best: int, D: int) -> float:
        """Extra step time of drafting and verifying D tokens instead of `best`, in plain steps."""
        step = self._step_time(batch_size)
        return (step(D) - step(best)) / step(0)

    def observe(self, verified: Union[torch.Tensor, list], accepted: Union[torch.Tensor, list],
                draft_seconds: float = 0.0, drafted: int = 0, offered: Union[torch.Tensor, list, None] = None,
                target_seconds: float = 0.0, catch_up: bool = False, emitted: Optional[list] = None) -> None:
        """`_observe`, timed on the steps that drafted: the scheduler's own Python (this, and
        `draft_cap` and the schedule, which the engine counts in `draft_seconds`) is part of their
        price, at its median (`_observe_s`); the drafter's line (`_note_draft`) gets the rest."""
        t = self.clock()
        self._observe(verified, accepted, draft_seconds, drafted, offered, target_seconds, catch_up, emitted)
        if draft_seconds > 0 and self.learn:
            times, i = self._observe_times, self._observe_n % self.OBSERVE_TIMES
            own = self._own + self.clock() - t
            if i < len(times):
                times[i] = own
            else:
                times.append(own)
            self._observe_n += 1
        self._own = 0.0

    OBSERVE_TIMES = 15     # drafting steps whose scheduler seconds `_observe_s` takes the median of

    @property
    def _observe_s(self) -> float:
        """The scheduler's own seconds on a drafting step (`draft_cap`, the schedule, `observe`):
        the median of the latest (a step that first builds a batch size's curve, or first decides
        a draft length, takes milliseconds once), none until 3 are timed — the median of one is
        that one, and a scheduler priced out of drafting by it decodes plain and times no other
        (`test_one_slow_observe_does_not_price_drafting_out`). Left in the drafter's time, such
        one-off steps came where a draft length was first tried: the first step of 8 drafts at 3
        times the others made the line's drafts cost 0.05–0.07 ms each, 5 times their price;
        drafting 8 no longer counted as free, and about 1 replay in 20 of prompt lookup at batch 1,
        256 tokens, decoded plain from the first request on (0.82 of D = 2, session 27)."""
        times = self._observe_times
        return sorted(times)[len(times) // 2] if len(times) >= 3 else 0.0

    def _observe(self, verified: Union[torch.Tensor, list], accepted: Union[torch.Tensor, list],
                 draft_seconds: float = 0.0, drafted: int = 0, offered: Union[torch.Tensor, list, None] = None,
                 target_seconds: float = 0.0, catch_up: bool = False, emitted: Optional[list] = None) -> None:
        """The verdict of the step just verified: per row, verified drafts and accepted drafts;
        `offered`, per row, the drafts the drafter was asked for (the engine's caps); tensors or
        lists (the engine passes the lists it already made);
        `target_seconds`, the step's time besides drafting (verification and bookkeeping);
        `catch_up`, whether the drafter also absorbed the prompts this step (its first proposal
        in a batch); `emitted`, per row, the tokens it emitted this step (accepted drafts, then the
        target's own), from an engine that sets `sees_emitted` (`_shadow`)."""
        if not self.learn:
            return
        if self._coast_b is not None and self._raw is None and not draft_seconds and self._charge is None:
            self._elapsed += target_seconds          # a coasted plain step (`_coast`): summed only
            self._coast_acc[0] += 1
            self._coast_acc[1] = self._coast_acc[1] * self.FORGET + target_seconds
            return
        ver = verified if isinstance(verified, list) else verified.tolist()
        made_now, self._made_now = self._made_now, {}
        if emitted is not None and self.sees_emitted and (made_now or self._shadows):
            self._shadow(ver, accepted if isinstance(accepted, list) else accepted.tolist(), emitted, made_now)
        if self._shadow_probe:
            self._shadow_probe = False
            self._shape_best.clear()     # a probe: decide afresh with what its drafts showed
        self._elapsed += target_seconds + draft_seconds
        if self._charge is not None:
            # what the probe cost over the choice it displaced: the measured step, of which the
            # model prices the share (1 − choice/probe) as the probe's. Priced by the model alone,
            # a probe's one-off costs (a drafter catching up on the prompts, a step slower than the
            # curve) went uncounted, and prompt lookup at batch 16 spent 3.3 % on probes. Charged
            # the measured step less the modelled choice, it also paid for the machine running
            # slower than the profile: the pricing step at batch 4 (256 tokens) was charged 8.3 ms
            # of a 24 ms step whose width cost 1 ms, and no probe fit the budget for the next 150
            # steps (BENCHMARKS, session 24)
            was, now = self._charge
            self._explored += max((target_seconds + draft_seconds) * (1.0 - was / now), 1e-9)
            self._charge = None
            self._shape_best.clear()     # a probe: a shape verified in full, decide afresh
        if target_seconds > 0 and ver:
            B = len(ver)
            key = (B, max(ver))
            if key[1] > 0:      # against the speed before this step: it is not its own yardstick
                self._note_width_price(B, key[1], target_seconds)
            now = self._clock[B] = self._clock.get(B, 0) + 1
            n, t, at = self._tt.get(key, (0.0, 0.0, now))
            age = self.FORGET ** (now - at)
            self._tt[key] = [age * n + 1.0, age * t + target_seconds, now]
            self._count_timed(1)
        if catch_up and self._pending > 0.0 and self._priced and draft_seconds > 0:
            extra = draft_seconds - self._draft_cost()(drafted)
            self._kappa = [self._kappa[0] + 1.0, self._kappa[1] + max(extra, 0.0) / self._pending]
        if catch_up and not self._priced:
            # the pricing step of a drafter that first fed itself the prompts (a draft model's
            # prefill) measured that one-off, not drafting: a 1k-token prompt made one drafted
            # token look like several target steps, and nothing was drafted again to correct it.
            # Price it on the next step instead. Once priced, such steps count as they are: a
            # probe in a new batch does pay the catch-up.
            draft_seconds, drafted = 0.0, 0
        if draft_seconds > 0 or drafted > 0:     # the drafter's own seconds: the scheduler's are apart
            self._note_draft(float(drafted), max(draft_seconds - self._own, 0.0), target_seconds)
        raw, self._raw = self._raw, None
        made, self._proposed = self._proposed, None
        cal, self._cal = self._cal, None
        if raw is None:
            return
        if made is not None and self.FAST_UNPROPOSED and not any(made):
            self._observe_unproposed(offered)
            return
        acc = accepted if isinstance(accepted, list) else accepted.tolist()
        off = None if offered is None or made is None else offered if isinstance(offered, list) else offered.tolist()
        lagging = self._behind()
        lagging = lagging if lagging is not None and len(lagging) == len(ver) else None
        if lagging is not None and sum(lagging) > 1:
            # several rows level at the back: the batch's end moves with the one that accepts least
            # (as many are behind after the step as accepted least now), so only those rows count.
            # Counting all of them, rows level at the start of every batch made the pace of the
            # slowest row look like the average row's, and prompt lookup at batch 4 kept verifying
            seen = {r for r, b in enumerate(lagging) if b and (ver[r] > 0 or (off is not None and off[r] > 0))}
            low = min((acc[r] for r in seen), default=0)
            lagging = [r in seen and acc[r] == low for r in range(len(lagging))]
        self._count_observed()
        P = self.MAX_POS
        pos_n, pos_acc, lag_n, lag_acc = self._pos_n, self._pos_acc, self._lag_n, self._lag_acc
        rows = raw.tolist() if isinstance(raw, np.ndarray) else raw
        ids = self._row_ids if self._row_ids is not None and len(self._row_ids) == len(rows) else None
        # per row: proposed, every draft verified accepted, and some left unverified past them
        left = [made is not None and acc[r] == ver[r] < min(made[r], P) for r in range(len(rows))]
        unverified = any(left)
        if cal is None and (ids is not None or unverified):
            cal = self._calibrate_rows(rows)     # as decided on: before this step's verdict is learned
        if ids is not None:
            self._fit_rows(ids, cal, ver, acc)
        bin_n, bin_acc, K = self._bin_n, self._bin_acc, self.BINS
        for r, conf in enumerate(rows):
            a = acc[r]
            behind = lagging is None or lagging[r]
            for j in range(min(ver[r], a + 1, P, len(conf))):     # positions reached and verified
                # `_tally`, written out: it runs for every draft verified
                y, b = 1.0 if j < a else 0.0, int(conf[j] * K)
                if b >= K:
                    b = K - 1
                pos_n[j] += 1.0
                pos_acc[j] += y
                bin_n[j][b] += 1.0
                bin_acc[j][b] += y
                if behind:
                    lag_n[j] += 1.0
                    lag_acc[j] += y
            if left[r] and r not in made_now:     # (drafts `_shadow` follows are observed as they come)
                # proposed, reached, and left unverified by the per-step schedule: counted at the
                # acceptance calibrated for them. Left out, the acceptance per position was learned
                # from the proposals the schedule chose (and from rows proposing nothing, always
                # rejections), and the more it left out the lower it fell: prompt lookup at batch
                # 2 learned 0.13 for a first draft where verifying every proposal learned 0.17,
                # and stayed at plain decoding, where D = 3 gained 8 % (BENCHMARKS §5.0j). The
                # rows behind: below, as one
                surv, row = 1.0, cal[r]
                for j in range(ver[r], min(made[r], P, len(row))):
                    pos_n[j] += surv
                    pos_acc[j] += surv * row[j]
                    surv *= row[j]
            if off is not None and off[r] > 0:
                m = made[r]
                self._rows[0] += 1.0
                self._rows[1] += m > 0
                # the first position asked for but not proposed, all before it accepted: a
                # rejection as certain as a verified one
                if m < off[r] and a == m and ver[r] == m and m < P:
                    pos_n[m] += 1.0
                    if behind:
                        lag_n[m] += 1.0
        group = [r for r in range(len(rows)) if lagging is None or lagging[r]]
        # (a row alone at the back, or every row where none is known to be, `_shadow` observes)
        followed = made_now and (lagging is None or len(group) == 1) and all(r in made_now for r in group)
        if group and not followed and all(left[r] and ver[r] == 0 for r in group):
            # the rows behind, all proposing and none verified: their acceptance stands for the
            # batch's end, which moves only where every one of them accepts — one observation at
            # the product of their calibrated acceptances. Counted a row at a time at each row's
            # own, prompt lookup at batch 4 drafted in 494 steps of 960 and verified in 1
            reach = 1.0
            for j in range(min(P, max(made[r] for r in group))):
                both = 1.0
                for r in group:
                    both *= cal[r][j] if j < min(made[r], len(cal[r])) else 0.0
                lag_n[j] += reach
                lag_acc[j] += reach * both
                reach *= both
                if reach <= 0.0:
                    break

    def _tally(self, j: int, conf: float, y: float, behind: bool) -> None:
        """One draft at position j with raw confidence `conf` reached: accepted (y = 1) or not —
        for the acceptance per position, its calibration bin, and the rows behind."""
        b = min(int(conf * self.BINS), self.BINS - 1)
        self._pos_n[j] += 1.0
        self._pos_acc[j] += y
        self._bin_n[j][b] += 1.0
        self._bin_acc[j][b] += y
        if behind:
            self._lag_n[j] += 1.0
            self._lag_acc[j] += y

    def _shadow(self, ver: list, acc: list, emitted: list, made_now: dict) -> None:
        """Drafts left unverified, checked against what the target then emitted: a draft at
        position j is accepted exactly when it equals the token the target emits there, given the
        drafts before it matched (greedy: the same argmax; sampled, for a drafter without
        probabilities, the chance is p(x) either way). So every draft proposed is observed,
        verified or not, for the price of drafting it. Learned only from verified drafts, the
        calibration saw the proposals the schedule chose: where it left them all unverified
        (prompt lookup at batch 1 and 2, 1k tokens, replayed under noise: a 3-token match
        calibrated 0.35 for a first draft accepted 0.61 of the time) it never saw another and
        stayed plain.
        Decisions read only tokens already emitted, so output stays lossless. A row is followed
        across steps by the engine's row id (by its index alone at batch 1)."""
        ids = self._row_ids
        keys = ids if ids is not None and len(ids) == len(ver) else [0] if len(ver) == 1 else [None] * len(ver)
        kept: dict = {}
        for r, toks in enumerate(emitted):
            k = keys[r] if r < len(keys) else None
            if k is None or k not in self._shadows:
                continue
            left = [it for it in self._shadows[k] if self._check_shadow(it, toks)]
            if left:
                kept[k] = left
        for r, it in made_now.items():
            # the drafts after the verified ones were reached only if every verified one was accepted
            if r < len(emitted) and acc[r] == ver[r] and self._check_shadow(it, emitted[r][acc[r]:]):
                if keys[r] is not None:
                    kept.setdefault(keys[r], []).append(it)
        self._shadows = kept

    def _check_shadow(self, item: list, tokens: list) -> bool:
        """Observe the drafts of `item` ([position, drafts, raw confidences, behind, calibrated
        confidences, the row's `_row_fit`, its age's pooled fit and factor then]) the tokens
        emitted reach; True while some are left."""
        j, drafts, confs, behind, cal, fit, pool, f = item
        P, i = self.MAX_POS, 0
        for t in tokens:
            if i >= len(drafts) or j >= P:
                break
            y = 1.0 if t == drafts[i] else 0.0
            self._tally(j, confs[i], y, behind)
            if fit is not None:
                fit[0] += cal[i] * f
                fit[1] += y
            if pool is not None and cal is not None:
                pool[0] += cal[i]
                pool[1] += y
            if not y:
                return False
            i, j = i + 1, j + 1
        item[0], item[1], item[2] = j, drafts[i:], confs[i:]
        if cal is not None:
            item[4] = cal[i:]
        return bool(item[1]) and j < P

    def _count_observed(self) -> None:
        """One more step observed. The choice moves slowly once a few dozen steps are in: decide
        afresh every 8 steps, every 32 once 256 are in (one more observation then moves a
        position's acceptance by under 0.4 %; `draft_values` alone costs ~65 µs inside decoding,
        ~8 µs a step when decided every 8), and from the shapes seen (`_shape_cap`) every step
        only in the first 32."""
        self._observed += 1
        if self._observed < 32 or self._observed % (8 if self._observed < 256 else 32) == 0:
            self._best.clear()
            if self._observed < 32:
                self._shape_best.clear()

    def _observe_unproposed(self, offered) -> None:
        """`observe` of a step in which no row proposed anything (prompt lookup without a match:
        4 steps in 10 at batch 1): what the general path counts then, without its per-row
        machinery — every row offered a draft is one rejection at the first position. The general
        path took ~45 µs a step on caches cold from the forward, 0.8 % of a 6 ms plain step."""
        self._count_observed()
        if offered is None:
            return
        off = offered if isinstance(offered, list) else offered.tolist()
        lagging = self._behind()
        if lagging is not None and len(lagging) != len(off):
            lagging = None
        n = lag = 0
        for r, o in enumerate(off):
            if o > 0:
                n += 1
                lag += lagging is None or lagging[r]
        if n:
            self._rows[0] += n
            self._pos_n[0] += n
            self._lag_n[0] += lag

    ROW_PRIOR = 8.0     # accepted drafts expected of a row that its factor's prior (1) is worth

    def _fit_rows(self, ids: list, cal: list, ver: list, acc: list) -> None:
        """Per row (`ids`) that has shared a step with another (`draft_cap`), the drafts it accepted
        against those its calibrated confidences `cal` expected, for `_row_scale`."""
        fit, ys, K = self._row_fit, self._young_rows, self.ROW_PRIOR
        for r, (i, row, v, a) in enumerate(zip(ids, cal, ver, acc)):
            e = fit.get(i)
            if e is None or v <= 0:
                continue
            surv, expect = 1.0, 0.0
            for j in range(min(v, len(row))):
                surv *= row[j]
                expect += surv
            young = ys[r] if ys is not None and r < len(ys) else None     # `_young`
            if young is None:
                e[0] += expect
                e[1] += a
            else:
                pool = self._age_fit[young]
                e[0] += expect * ((pool[1] + K) / (pool[0] + K))       # `_age_factor`
                e[1] += a
                pool[0] += expect
                pool[1] += a

    # Tokens a row has generated while it counts as young (`_row_scale`). Prompt lookup's first
    # drafts in a response are accepted far less than later ones: a first draft 0.29 of the time
    # in the first 8 tokens against 0.52 later (1k tokens), 0.22 against 0.39 (tokens 8–15) and
    # 0.6–0.67 (256 tokens). 16 replayed better than 8 (BENCHMARKS, session 24)
    YOUNG = 16

    def _young(self, r: int) -> Optional[bool]:
        """Whether row r of this step has generated fewer than `YOUNG` tokens since first seen;
        None where the engine gave no tokens left per row."""
        ys = self._young_rows
        return ys[r] if ys is not None and r < len(ys) else None

    def _age_factor(self, young: Optional[bool]) -> float:
        """Accepted over expected drafts of every row while young (or grown), prior 1 worth
        `ROW_PRIOR` expected drafts; 1 where the age is not known."""
        if young is None:
            return 1.0
        x, y = self._age_fit[young]
        k = self.ROW_PRIOR
        return (y + k) / (x + k)

    def _row_scale(self, batch_size: int) -> Optional[list[float]]:
        """Per row, (accepted + k)/(expected + k) of its own steps so far (`_fit_rows`), with k =
        `ROW_PRIOR`: calibration pools every row, and the rows of a static batch are not alike.
        The row left last in a batch is the one that accepted least: alone at the end of batches
        of 2 (prompt lookup, 256 tokens) rows accepted 0.47–0.67 of the drafts their calibrated
        confidences expected, the rows of 2 1.09–1.18 (BENCHMARKS §5.0j). With a weaker prior
        (2, 4) a row's few first steps made its factor noise. A row alone in its batch from its
        first step keeps 1 unless its unverified drafts are seen (`_shadow`): learned from verified
        drafts alone its factor only locked it in — once low, its drafts went unverified and it
        never recovered (prompt lookup replayed at batch 1, 1k tokens: 0.962 of D = 4 with it,
        1.000 without; BENCHMARKS §5.0k). Seen, they keep correcting it, and a request that
        repeats itself is verified deeper than the pooled calibration says (replayed at batch 1,
        256 tokens, under noise: min 1.045 of the best fixed D over 8 runs with it, 1.009 over 6
        with the drafts seen but no factor; BENCHMARKS, session 22).
        Times the factor of the rows' age (`_age_factor`), learned over every row: each request
        starts at 1 otherwise, and its first drafts, accepted least, were verified at the
        pooled calibration — prompt lookup at batch 1, 1k tokens verified 54 one-token matches
        for 22 tokens, at 0.97 of D = 4 (replayed, BENCHMARKS, session 24). A row's own factor
        counts its steps against that age's expectation. None without row ids."""
        ids = self._row_ids
        if ids is None or len(ids) != batch_size:
            return None
        k, fit, out = self.ROW_PRIOR, self._row_fit, []
        for r, i in enumerate(ids):
            e = fit.get(i)
            # in steps of 1/32: at batch 1 a decision is kept per (shape, factor) (`_schedule`)
            out.append(1.0 if e is None else round(32.0 * self._age_factor(self._young(r)) * (e[1] + k) / (e[0] + k)) / 32.0)
        return out

    def sps_at(self, batch_size: int) -> Callable[[float], float]:
        """The SPS curve used for a batch of `batch_size` rows."""
        if self._for_batch is None:
            return self.sps
        if batch_size not in self._cache:
            self._cache[batch_size] = _as_sps(self._for_batch(batch_size))
        return self._cache[batch_size]

    @classmethod
    def from_planner(cls, target, hardware, context_length: int, batch_size: Optional[int] = None,
                     **kw) -> "AdaptiveDraftLength":
        """SPS from the planner's cost model (calibrated when `hardware` is a profile of `target`);
        without batch_size, one curve per batch size seen, built on first use."""
        from .cost import CostModel
        cm = CostModel(target, hardware)
        if batch_size is not None:
            return cls(cm.sps_curve(batch_size, context_length), **kw)
        return cls(sps_for_batch=lambda b: cm.sps_curve(b, context_length), **kw)

    @classmethod
    def from_profile(cls, path, batch_size: int, context_length: int, **kw) -> "AdaptiveDraftLength":
        """From the `sps_curves` of a `draftwise profile` JSON: the measured curve nearest to
        (batch_size, context_length) in log distance."""
        import json
        from pathlib import Path
        d = json.loads(Path(path).read_text())
        curves = d.get("sps_curves") or []
        if not curves:
            raise ValueError(f"{path} has no sps_curves (profile it with --target)")
        c = min(curves, key=lambda c: abs(math.log(c["B"] / batch_size)) + abs(math.log(c["L"] / context_length)))
        return cls(SPSCurve(c["points"]), **kw)

    def confidence(self, proposal) -> torch.Tensor:
        tokens = proposal.tokens
        if getattr(proposal, "confidence", None) is not None:
            return proposal.confidence
        if getattr(proposal, "probs", None) is not None and tokens.numel():
            # the peak of q at each position, never q of the sampled token: choosing how many
            # drafts to verify from the sampled values themselves would bias sampled output
            return proposal.probs.max(-1).values
        return torch.full(tokens.shape, self.alpha, dtype=torch.float32, device=tokens.device)

    def _note_shape(self, row: list) -> None:
        """Count a proposal drafted at full length at batch 1, by its confidence bins (for
        `_shape_cap`); `row` already in [0, 1]."""
        key = tuple(min(int(c * self.BINS), self.BINS - 1) for c in row)
        seen = self._shapes.get(key)
        if seen is not None:
            seen[0] += 1.0
        elif len(self._shapes) < 1024:     # a draft model's probabilities: shapes without end
            self._shapes[key] = [1.0, row]
        else:
            return
        self._shape_count += 1.0

    def __call__(self, proposal) -> torch.LongTensor:
        return torch.tensor(self.counts(proposal), dtype=torch.long, device=proposal.num_tokens.device)

    def counts(self, proposal) -> list[int]:
        """`__call__` as a list, which the engine takes as it is (it builds one tensor of the
        step's counts: each small tensor op here cost ~5–10 µs on caches the forward left cold)."""
        t = self.clock()
        out = self._schedule(proposal)
        self._one_hot = getattr(proposal, "probs", None) is None
        self._made_now = {}
        # (the schedule returns the proposal's own counts, `_proposed`, where it verifies every draft)
        if self.learn and self.sees_emitted and self._one_hot and self._proposed and out is not self._proposed:
            self._keep_unverified(proposal, out)
        self._own += self.clock() - t
        return out

    def _keep_unverified(self, proposal, ver: list) -> None:
        """Note the drafts proposed but left unverified this step, for `_shadow`."""
        made = self._proposed
        if all(v >= m for v, m in zip(ver, made)):
            return
        tokens, raw, behind, ids = proposal.tokens.tolist(), self._raw, self._behind(), self._row_ids
        alone = behind is not None and len(behind) == len(made) and sum(behind) == 1
        fits = [self._row_fit.get(i) for i in ids] if ids is not None and len(ids) == len(made) else [None] * len(made)
        for r, (v, m) in enumerate(zip(ver, made)):
            if v < m:
                conf = raw[r][v:m] if isinstance(raw, list) else [float(c) for c in raw[r][v:m]]
                cal = (self._cal[r] if self._cal is not None else self._calibrate_rows([list(raw[r][:m])])[0])[v:m] \
                    if fits[r] is not None else None
                young = self._young(r)
                self._made_now[r] = [v, tokens[r][v:m], conf, behind is None or (alone and behind[r]), cal, fits[r],
                                     None if young is None else self._age_fit[young], self._age_factor(young)]

    def _schedule(self, proposal) -> list[int]:
        """Per row, how many of its drafts to verify: `_proposed` itself (the same list) where
        every one."""
        proposed = proposal.num_tokens.tolist()
        if self.max_tokens is not None:
            proposed = [min(p, self.max_tokens) for p in proposed]
        self._proposed = proposed
        B, D = proposal.tokens.shape[0], proposal.tokens.shape[-1]
        if D == 0 or max(proposed, default=0) == 0:
            self._raw = [()] * B     # nothing proposed: nothing to calibrate or decide (`_observe_unproposed`)
            if self._free_step:
                self._note_saving(B, 0.0)
            if self._full:
                self._note_shape([])
            return proposed     # all zero
        conf = self.confidence(proposal)
        small = self.padded and B * D <= self.SMALL and not (self.learn and self._probing)
        if small:
            # plain Python end to end: a handful of (row, position) pairs, where numpy's per-call
            # cost made the scheduler ~0.25 ms of a 12 ms step at batch 2
            # each row cut to what it proposed: nothing past it is verified or learned from
            raw = self._raw = [[0.0 if c < 0.0 else 1.0 if c > 1.0 else c for c in row[:p]]
                               for row, p in zip(conf.tolist(), proposed)]
            if self._full:
                self._note_shape(raw[0])
            if B == 1:
                # one row: calibrated and searched afresh, a pass over its few drafts. Kept per
                # (shape, factor) until the statistics changed, the decision was found kept in 2
                # steps of 5, and looking it up cost as much as the pass (session 26)
                scale = self._row_scale(1)
                cal = self._cal = self._calibrate_rows(raw)
                w = _best_width_row(cal[0], self._width_times(1, D), 1.0 if scale is None else scale[0])
            else:
                # with what verifying could save, acceptance FREE_Z errors above, where drafting is free
                gain, gain_z = self._rows_gains(raw, B, self.FREE_Z if self._free_step else 0.0)
                times = self._width_times(B, D)
                w = _argmax_width(float(B), gain, times)
                if self._free_step:
                    self._note_saving(B, _argmax_width(float(B), gain_z, times, saved=True)[1])
            return proposed if w >= max(proposed) else [min(p, w) for p in proposed]
        raw = self._raw = _unit(_as_np(conf))
        if self._full:
            self._note_shape(raw[0, :proposed[0]].tolist())
        if self.learn and self._probing:    # a probe step decided by draft_cap (the engine drives it)
            # explore: verify everything drafted, or an uncalibrated pessimistic confidence would
            # never be verified and so never corrected (decided before verification: lossless)
            return proposed
        if not self.padded:
            num = torch.tensor(proposed, dtype=torch.long)
            return schedule_prefix(self.calibrated(raw), num, self.learned_sps(B)).tolist()
        w = _best_width(self._calibrate(raw), proposed, self._width_times(B, D), worth=self.static_worth(B),
                        scale=self._row_scale(B))
        return [min(p, w) for p in proposed]

    def _rows_gains(self, raw: list, B: int, z: float = 0.0) -> tuple[list, Optional[list]]:
        """The per-step schedule's gain per draft position (`_argmax_width`'s, τ = B) for a small
        batch of B ≥ 2 rows, each cut to what it proposed, in one pass: each row's drafts
        calibrated (`_calibrate_rows`), its chance of reaching each position scaled by its factor
        (`_row_scale`), each summed at what it is worth to a static batch (`static_worth`: φ a
        draft, β more for a position every row at the back accepts, within the first `gap`);
        with z > 0 also the gains at acceptance z errors above (`_note_saving`), else None.
        Sets `_cal`. Composed of those calls it cost ~16 µs a drafting step, and on caches the
        forward left cold ~2.5 times that: 0.4 % of a plain step at batch 4, 1k tokens
        (BENCHMARKS, session 45; tests/test_planner_adaptive.py holds the composition it
        matches to the bit)."""
        # `static_worth`
        rem, phi, beta, back, n = self._remaining, 1.0, 0.0, None, 0
        if self.static_batch and rem is not None and len(rem) == B:
            phi, beta = self._phis.get(B) or self._phi_beta(B)
            if beta > 0:
                top = max(rem)
                back = self._lagging
                n = top - max((m for m in rem if m < top), default=0)
        # `_row_scale`
        ids, ys = self._row_ids, self._young_rows
        scaled = ids is not None and len(ids) == B
        if scaled:
            fit, K = self._row_fit, self.ROW_PRIOR
            if ys is not None:
                ages = {a: (e[1] + K) / (e[0] + K) for a, e in self._age_fit.items()}
        learn = self.learn
        acc, cnt, wt, KB, P = self._bin_acc, self._bin_n, self.prior_weight, self.BINS, self.MAX_POS
        width = max(map(len, raw))
        n = min(n, width)
        gain, both = [0.0] * width, [1.0] * n if back is not None else None
        gain_z, both_z = ([0.0] * width, [1.0] * n if back is not None else None) if z else (None, None)
        cal = []
        for r, row in enumerate(raw):
            k = 1.0
            if scaled:
                e = fit.get(ids[r])
                if e is not None:
                    young = ys[r] if ys is not None and r < len(ys) else None
                    k = round(32.0 * (1.0 if young is None else ages[young]) * (e[1] + K) / (e[0] + K)) / 32.0
            out, surv, surv_z, lag = [], 1.0, 1.0, both is not None and back[r]
            for j, c in enumerate(row):
                o = c
                if learn:       # `_calibrate_rows`
                    p = j if j < P else P - 1
                    b = int(c * KB)
                    if b >= KB:
                        b = KB - 1
                    m = cnt[p][b] + wt
                    c = (acc[p][b] + wt * c) / m
                    if z:
                        o = min(1.0, c + z * math.sqrt(c * (1.0 - c) / m))
                out.append(c)
                surv *= c
                reach = surv if k == 1.0 else k * surv if k * surv < 1.0 else 1.0
                gain[j] += phi * reach
                if lag and j < n:
                    both[j] *= reach
                if z:
                    surv_z *= o
                    reach = surv_z if k == 1.0 else k * surv_z if k * surv_z < 1.0 else 1.0
                    gain_z[j] += phi * reach
                    if lag and j < n:
                        both_z[j] *= reach
            cal.append(out)
            if lag:
                for j in range(len(out), n):
                    both[j] = 0.0
                    if z:
                        both_z[j] = 0.0
        if both is not None:
            for j in range(n):
                gain[j] += beta * both[j]
                if z:
                    gain_z[j] += beta * both_z[j]
        self._cal = cal
        return gain, gain_z


def measure_sps_curve(runner, batch_size: int, context_length: int, max_tokens: int = 16,
                      repeats: int = 3) -> SPSCurve:
    """Steps/s of `runner` (a draftwise ModelRunner) verifying k = 1 … max_tokens+1 tokens per row
    on a cache of `context_length`, measured now on this machine (a quick self-profile)."""
    import time

    ks = [k for k in (1, 2, 3, 4, 5, 6, 8, 12, 17, 25, 33) if k <= max_tokens + 1]
    B = max(int(batch_size), 1)
    ctx = max(int(context_length), 1)
    dev = runner.device
    runner.reset(B)
    runner.forward(torch.zeros(B, ctx, dtype=torch.long, device=dev), torch.full((B,), ctx, device=dev))
    points = []
    for k in ks:
        best = float("inf")
        for _ in range(repeats + 1):  # the first is a warm-up
            runner.mark()
            t0 = time.perf_counter()
            runner.forward(torch.zeros(B, k, dtype=torch.long, device=dev), torch.full((B,), k, device=dev))
            best = min(best, time.perf_counter() - t0)
            runner.rollback(torch.zeros(B, dtype=torch.long, device=dev))
        points.append((B * k, 1.0 / best))
    runner.reset(0)
    return SPSCurve(points)
