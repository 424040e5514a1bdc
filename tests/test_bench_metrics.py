"""Metric functions on hand-computed cases (specdec_bench and aiperf definitions)."""
import math

import pytest

import draftwise.bench
from draftwise.bench.metrics import (
    acceptance_metrics, aiperf_acceptance, break_even, length_counts_from_per_position, pareto_frontier,
    rates_from_histogram, record_timing, speedup, summary_stats, system_tps, timing_metrics,
)

KEYS = {"Request_AL", "Category_AL", "Average_AL", "Acceptance_Length_Histogram",
        "Conditional_Acceptance_Rate", "Joint_Acceptance_Rate"}


def test_reexported():
    assert draftwise.bench.acceptance_metrics is acceptance_metrics


def test_hand_computed():
    reqs = [
        {"question_id": "a", "category": "x", "step_lengths": [1, 3, 3]},
        {"question_id": "b", "category": "x", "step_lengths": [2]},
        {"question_id": "c", "category": "y", "step_lengths": [1, 1, 4]},
    ]
    m = acceptance_metrics(reqs)
    assert set(m) == KEYS
    assert m["Request_AL"] == pytest.approx({"a": 7 / 3, "b": 2.0, "c": 2.0})
    assert m["Category_AL"] == pytest.approx({"x": 13 / 6, "y": 2.0})
    assert m["Average_AL"] == pytest.approx(19 / 9)
    assert m["Acceptance_Length_Histogram"] == {1: 3, 2: 1, 3: 2, 4: 1}
    assert m["Conditional_Acceptance_Rate"] == pytest.approx({1: 1.0, 2: 4 / 7, 3: 3 / 4, 4: 1 / 3})
    assert m["Joint_Acceptance_Rate"] == pytest.approx({1: 1.0, 2: 4 / 7, 3: 3 / 7, 4: 1 / 7})


def test_lengths_that_never_occur_are_not_shifted():
    m = acceptance_metrics([{"question_id": "q", "category": "c", "step_lengths": [1, 1, 4, 4]}])
    assert m["Acceptance_Length_Histogram"] == {1: 2, 4: 2}
    # L=2 and L=3 never occur: every step that reached position 1 went on to L=4
    assert m["Conditional_Acceptance_Rate"] == pytest.approx({1: 1.0, 2: 0.5, 3: 1.0, 4: 1.0})
    assert m["Joint_Acceptance_Rate"] == pytest.approx({1: 1.0, 2: 0.5, 3: 0.5, 4: 0.5})
    # only L = 1 (plain decoding)
    m = acceptance_metrics([{"question_id": "q", "category": "c", "step_lengths": [1, 1]}])
    assert m["Conditional_Acceptance_Rate"] == {1: 1.0} and m["Average_AL"] == 1.0
    # only long steps: rates at k <= 3 are 1
    cond, joint = rates_from_histogram({3: 5})
    assert cond == {1: 1.0, 2: 1.0, 3: 1.0} and joint == {1: 1.0, 2: 1.0, 3: 1.0}


def test_turns_pool_and_empty_requests_skip():
    m = acceptance_metrics([
        {"question_id": "q", "category": "c", "step_lengths": [2]},
        {"question_id": "q", "category": "c", "step_lengths": [4, 3]},
        {"question_id": "e", "category": "d", "step_lengths": []},
    ])
    assert m["Request_AL"] == {"q": 3.0}
    assert m["Category_AL"] == {"c": 3.0}
    assert m["Average_AL"] == 3.0


def test_category_order_canonical():
    reqs = [{"question_id": str(i), "category": c, "step_lengths": [1]}
            for i, c in enumerate(["zeta", "writing", "coding", "mixed", "low_entropy"])]
    assert list(acceptance_metrics(reqs)["Category_AL"]) == ["coding", "writing", "low_entropy", "mixed", "zeta"]


def test_aiperf_convention():
    reqs = [{"question_id": "a", "category": "x", "step_lengths": [1, 3, 3], "drafted": [3, 3, 3]},
            {"question_id": "b", "category": "y", "step_lengths": [2], "drafted": 3}]
    a = aiperf_acceptance(reqs)
    assert a["Token_Weighted_AL"] == pytest.approx(1 + 5 / 4)
    assert a["Draft_Acceptance_Rate"] == pytest.approx(5 / 12)
    assert a["Category_Token_Weighted_AL"] == pytest.approx({"x": 1 + 4 / 3, "y": 2.0})
    assert a["Category_Draft_Acceptance_Rate"] == pytest.approx({"x": 4 / 9, "y": 1 / 3})
    assert aiperf_acceptance([{"question_id": "a", "category": "x", "step_lengths": [2]}])["Draft_Acceptance_Rate"] is None


def test_per_position_counters_rebuild_histogram():
    # steps: L = 1,1,1,2,3,3,4 -> per position accepted: pos0: 4, pos1: 3, pos2: 1
    assert length_counts_from_per_position(7, [4, 3, 1]) == {1: 3, 2: 1, 3: 2, 4: 1}
    assert length_counts_from_per_position(3, [3, 0]) == {2: 3}
    with pytest.raises(ValueError):
        length_counts_from_per_position(2, [3])
    m = acceptance_metrics([{"question_id": "q", "category": "c", "length_counts": {1: 3, 2: 1, 3: 2, 4: 1}}])
    assert m["Average_AL"] == pytest.approx(15 / 7)


def test_timing():
    s = summary_stats([4, 1, 3, 2])
    assert s["min"] == 1 and s["max"] == 4 and s["mean"] == 2.5
    assert s["std"] == pytest.approx(math.sqrt(1.25))
    assert (s["0.25"], s["0.5"], s["0.75"]) == pytest.approx((1.75, 2.5, 3.25))
    assert summary_stats([]) is None
    r = record_timing(10.0, [10.5, 10.5, 11.0, 11.5], 4)  # 2 tokens in the first chunk
    assert r["ttft"] == pytest.approx(0.5) and r["e2e"] == pytest.approx(1.5)
    assert r["step_times"] == pytest.approx([0.5, 0.5])
    assert r["user_tps"] == pytest.approx(3 / 1.0)
    assert record_timing(0.0, [1.0], 1)["user_tps"] is None
    # one window: 10 tokens over (3 - 0); a second window adds 6 tokens over 2 s
    assert system_tps([[(0.0, 2.0, 4), (1.0, 3.0, 6)]]) == pytest.approx(10 / 3)
    assert system_tps([[(0.0, 2.0, 4), (1.0, 3.0, 6)], [(100.0, 102.0, 6)]]) == pytest.approx(16 / 5)
    t = timing_metrics([{"t0": 0.0, "chunk_times": [0.1, 0.2, 0.3], "num_tokens": 3, "window": 1},
                        {"t0": 0.0, "chunk_times": [0.2, 0.6], "num_tokens": 5, "window": 1}])
    assert t["system_tps"] == pytest.approx(8 / 0.6)
    assert t["ttft"]["mean"] == pytest.approx(0.15)
    assert t["user_tps"]["mean"] == pytest.approx((2 / 0.2 + 4 / 0.4) / 2)


def test_speedup_break_even_pareto():
    sp = speedup({"user_tps": {"mean": 30.0}, "system_tps": 60.0}, {"user_tps": {"mean": 20.0}, "system_tps": 80.0})
    assert sp == pytest.approx({"user": 1.5, "system": 0.75})
    assert break_even({1: 2.0, 4: 1.2, 8: 0.9, 16: 0.7}) == 8
    assert break_even({1: 2.0, 4: 1.1}) is None
    assert break_even({1: 0.8}) == 1
    pts = [(1, 10), (2, 8), (3, 3), (1.5, 7), (3, 2)]
    assert pareto_frontier(pts) == [0, 1, 2]
