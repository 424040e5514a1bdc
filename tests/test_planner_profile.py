"""`draftwise profile`'s step grid under a machine whose speed drifts while it measures."""
from types import SimpleNamespace

from draftwise.planner.profile import measure_steps


class DriftingRunner:
    """A runner whose forward costs `cost(width)` seconds times a speed that slows 2 % with every
    forward (a shared CPU drifting over seconds), on a fake clock."""

    def __init__(self, cost):
        self.cost, self.now, self.forwards = cost, 0.0, 0

    def clock(self):
        return self.now

    def reset(self, B):
        pass

    def mark(self):
        pass

    def rollback(self, n):
        pass

    def forward(self, tok, n):
        self.forwards += 1
        self.now += self.cost(tok.shape[1]) * (1 + 0.02 * self.forwards)


def test_every_width_sees_the_same_drift():
    # widths 1…9 all cost the same: a profile must say so, whatever the order it times them in
    r = DriftingRunner(lambda width: 0.01)
    model = SimpleNamespace(config=SimpleNamespace(vocab_size=16))
    pts = measure_steps(model, [1], list(range(9)), [8], repeats=3, passes=3, runner=r, clock=r.clock)
    secs = [p["seconds"] for p in pts]
    assert max(secs) / min(secs) < 1.08, secs


def test_a_dear_width_stays_dear():
    # and a real difference in cost survives the shuffling: width 3 at 1.5× its neighbours
    r = DriftingRunner(lambda width: 0.015 if width == 3 else 0.01)
    model = SimpleNamespace(config=SimpleNamespace(vocab_size=16))
    pts = {p["D"]: p["seconds"] for p in measure_steps(model, [1], list(range(5)), [8], repeats=5, passes=2,
                                                        runner=r, clock=r.clock)}
    assert all(pts[2] > 1.3 * pts[d] for d in (0, 1, 3, 4)), pts
