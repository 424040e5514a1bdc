"""`draftwise profile`'s timings on a fake clock: a machine that drifts while it measures, and a
draft model that costs more right after the target ran."""
from types import SimpleNamespace

import draftwise.planner.profile as prof
import draftwise.target as target_mod
from draftwise.planner.profile import measure_steps


def fake_model(kind: str = "target"):
    return SimpleNamespace(kind=kind, config=SimpleNamespace(vocab_size=16))


class FakeRunner:
    """The runner's interface; subclasses say what a forward costs on their fake clock."""

    def __init__(self, model=None, lean=None):
        self.model = model

    def reset(self, B):
        pass

    def mark(self):
        pass

    def rollback(self, n):
        pass


class DriftingRunner(FakeRunner):
    """A forward costs `cost(width)` seconds times a speed that slows 2 % with every forward (a
    shared CPU drifting over seconds)."""

    def __init__(self, cost):
        super().__init__()
        self.cost, self.forwards, self.t = cost, 0, 0.0

    def now(self):
        return self.t

    def forward(self, tok, n):
        self.forwards += 1
        self.t += self.cost(tok.shape[1]) * (1 + 0.02 * self.forwards)


def test_every_width_sees_the_same_drift():
    # widths 1…9 all cost the same: a profile must say so, whatever the order it times them in
    # (timed width after width, as before, they came out up to 1.35× apart)
    r = DriftingRunner(lambda width: 0.01)
    pts = measure_steps(fake_model(), [1], list(range(9)), [8], repeats=3, passes=3, runner=r, clock=r.now)
    secs = [p["seconds"] for p in pts]
    assert max(secs) / min(secs) < 1.08, secs


def test_a_dear_width_stays_dear():
    # and a real difference in cost survives the shuffling: width 3 at 1.5× its neighbours
    r = DriftingRunner(lambda width: 0.015 if width == 3 else 0.01)
    pts = {p["D"]: p["seconds"] for p in measure_steps(fake_model(), [1], list(range(5)), [8], repeats=5,
                                                        passes=2, runner=r, clock=r.now)}
    assert all(pts[2] > 1.3 * pts[d] for d in (0, 1, 3, 4)), pts


class CachedRunner(FakeRunner):
    """A draft forward costs 2 ms right after a target forward (its weights left the CPU's caches),
    1 ms after another draft forward; target forwards cost nothing on the clock."""
    clock = {"now": 0.0, "last": None}

    @staticmethod
    def now():
        return CachedRunner.clock["now"]

    def forward(self, tok, n):
        c = CachedRunner.clock
        if self.model.kind == "draft":
            c["now"] += 0.002 if c["last"] == "target" else 0.001
        c["last"] = self.model.kind


def test_a_draft_token_is_timed_as_decoding_pays_it(monkeypatch):
    monkeypatch.setattr(target_mod, "ModelRunner", CachedRunner)
    monkeypatch.setattr(prof.time, "perf_counter", CachedRunner.now)
    alone = prof.measure_draft_steps(fake_model("draft"), [1], [8], repeats=3)
    after = prof.measure_draft_steps(fake_model("draft"), [1], [8], repeats=3, target=fake_model())
    assert abs(alone[0]["seconds"] - 0.001) < 1e-9
    assert abs(after[0]["seconds"] - 0.00125) < 1e-9    # (2 + 1 + 1 + 1) ms over 4 tokens
