"""Leviathan's closed form: E[τ] = (1 − α^{D+1})/(1 − α), S(D) = E[τ]/(cD + 1), D* = argmax S."""
import pytest

from draftwise.planner import leviathan, leviathan_expected_tokens, plan
from draftwise.planner.acceptance import Acceptance
from draftwise.planner.schedule import leviathan_speedup


def brute_E(alpha, D):
    return sum(alpha ** k for k in range(D + 1))


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.6, 0.8, 0.95, 1.0])
@pytest.mark.parametrize("D", [0, 1, 2, 5, 16])
def test_expected_tokens_closed_form(alpha, D):
    assert leviathan_expected_tokens(alpha, D) == pytest.approx(brute_E(alpha, D), rel=1e-12)
    # per-position form with constant α gives the same
    assert Acceptance([alpha] * 20, name="x").expected_tokens(D) == pytest.approx(brute_E(alpha, D), rel=1e-12)


def test_hand_values():
    r = leviathan(0.8, 0.05)
    assert r["best_num_draft_tokens"] == 8
    assert r["expected_tokens_per_step"] == pytest.approx((1 - 0.8 ** 9) / 0.2)
    assert r["speedup"] == pytest.approx((1 - 0.8 ** 9) / (0.2 * 1.4))
    assert r["speedup"] == pytest.approx(3.09208, abs=1e-4)
    # E[τ] ceiling 1/(1 − α)
    assert r["expected_tokens_ceiling"] == pytest.approx(5.0)


@pytest.mark.parametrize("alpha", [0.1, 0.4, 0.6, 0.75, 0.9, 0.99])
@pytest.mark.parametrize("c", [0.0, 0.01, 0.05, 0.2, 0.5, 1.0, 3.0])
def test_argmax_matches_brute_force(alpha, c):
    r = leviathan(alpha, c, max_draft=16)
    S = [(1 - alpha ** (D + 1)) / ((1 - alpha) * (c * D + 1)) for D in range(17)]
    best = max(range(17), key=lambda D: (S[D], -D))
    got = r["best_num_draft_tokens"]
    assert S[got] >= S[best] * (1 - 1e-12)              # optimal up to rounding
    if all(S[best] - S[D] > 1e-9 for D in range(17) if D != best):
        assert got == best                               # a clear optimum is found exactly
    assert r["speedup"] == pytest.approx(S[got], rel=1e-12)
    # speculation helps iff α > c
    assert (best > 0) == (alpha > c)


def test_alpha_one():
    assert leviathan_expected_tokens(1.0, 7) == 8
    r = leviathan(1.0, 0.05, max_draft=16)
    assert r["best_num_draft_tokens"] == 16          # S = (D+1)/(cD+1) grows: the cap binds
    assert r["speedup"] == pytest.approx(17 / 1.8)
    assert leviathan(1.0, 1.0)["best_num_draft_tokens"] == 0   # S ≡ 1: smallest D on ties
    assert leviathan(1.0, 2.0)["best_num_draft_tokens"] == 0
    assert leviathan(1.0, 0.1)["expected_tokens_ceiling"] is None     # unbounded


def test_large_cost_ratio_gives_zero():
    r = leviathan(0.9, 5.0)
    assert r["best_num_draft_tokens"] == 0
    assert r["speedup"] == 1.0
    assert r["expected_tokens_per_step"] == 1.0
    assert leviathan(0.0, 0.0)["best_num_draft_tokens"] == 0


def test_plan_dispatches_to_leviathan():
    r = plan(alpha=0.7, cost_ratio=0.1)
    assert r == leviathan(0.7, 0.1)
    assert leviathan_speedup(0.7, 0.1, 3) == pytest.approx(brute_E(0.7, 3) / 1.3)
    with pytest.raises(ValueError):
        plan(alpha=0.7)
    with pytest.raises(ValueError):
        leviathan(1.5, 0.1)
