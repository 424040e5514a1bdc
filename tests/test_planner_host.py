"""The host's state (planner/host.py) and adaptive D's step timings kept per state."""
import math
import random

import pytest

from draftwise.planner.adaptive import AdaptiveDraftLength
from draftwise.planner.host import HostProbe, HostState

CHEAP, DEAR = 1.16e-3, 1.48e-3      # the 64-row product's median on the host of BENCHMARKS §5.0 (session 41)


def _probe_time(rng: random.Random, level: float) -> float:
    """A probe's time (the median of three products): log-normal spread 0.05 around the state's
    level, one in twenty an outlier a third longer (the products' times have heavy tails)."""
    t = level * math.exp(rng.gauss(0.0, 0.05))
    return t * 1.33 if rng.random() < 0.05 else t


@pytest.mark.parametrize("level", [CHEAP, DEAR])
def test_a_host_in_one_state_stays_in_it(level):
    """One state's spread and outliers are not two states: the state read stays 0 but for a rare
    pair of outliers in a row."""
    rng, host = random.Random(0), HostState()
    read = [host.note(_probe_time(rng, level)) for _ in range(500)]
    assert sum(read) <= 5, sum(read)


def test_a_host_that_switches_is_followed():
    """Stretches of 20 probes in each state: after the first few probes, the state read is the
    host's, but for the probe or two each switch takes to be believed."""
    rng, host = random.Random(1), HostState()
    truth = [(i // 20) % 2 for i in range(400)]
    read = [host.note(_probe_time(rng, DEAR if s else CHEAP)) for s in truth]
    right = sum(r == s for r, s in zip(read[20:], truth[20:])) / len(truth[20:])
    assert right > 0.85, right
    switches = sum(a != b for a, b in zip(read, read[1:]))
    assert switches <= 21, switches      # 19 real ones, no flapping


def test_the_probe_times_a_product():
    probe = HostProbe(rows=8, dim=64)
    assert 0.0 < probe() < 1.0


def test_adaptive_d_keeps_step_timings_per_host_state():
    """A width of 1 timed at 1.14 plain steps in the cheap state and at 1.33 in the dear one: back
    in the cheap state, adaptive D prices it at the cheap state's 1.14, not at a blend of the two
    (or at the dear price, which it would keep until it verified again — and it verifies only
    where it thinks that pays)."""
    price = lambda k, w: 0.006 + 0.001 * k + 0.00035 * k * w     # noqa: E731  (1.14 at batch 4)
    sched = AdaptiveDraftLength(sps_for_batch=lambda b: (lambda N: 1.0 / price(b, N / b - 1)),
                                draft_token_seconds=lambda b: 1e-6, probe_every=10 ** 6)
    sched.clock = lambda: 0.0
    sched.HOST_EVERY = 1
    rng, level = random.Random(2), [CHEAP]
    sched.host_probe = lambda: _probe_time(rng, level[0])

    def stretch(state_level: float, width_price: float, steps: int = 40) -> None:
        level[0] = state_level
        for _ in range(steps):
            sched.draft_cap(4, 1)
            sched.observe([0] * 4, [0] * 4, target_seconds=0.010)
            sched.observe([1] * 4, [0] * 4, target_seconds=0.010 * width_price)

    def width_price() -> float:
        return sched.target_time(4, 1) / sched.target_time(4, 0)

    stretch(CHEAP, 1.14)
    assert sched._host_now == 0 and width_price() == pytest.approx(1.14, abs=0.02)
    stretch(DEAR, 1.33)
    assert sched._host_now == 1 and width_price() == pytest.approx(1.33, abs=0.03)
    stretch(CHEAP, 1.14, steps=4)
    assert sched._host_now == 0 and width_price() == pytest.approx(1.14, abs=0.02)
