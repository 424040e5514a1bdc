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


def test_a_draft_token_is_timed_as_decoding_pays_it(monkeypatch):
    # a draft forward right after a target forward costs 2× one after another draft forward (its
    # weights left the CPU's caches): the profile must time the drafts after a target forward
    import draftwise.planner.profile as prof
    import draftwise.target as target_mod

    clock = {"now": 0.0, "last": None}

    class Runner:
        def __init__(self, model, lean=None):
            self.model = model

        def reset(self, B):
            pass

        def mark(self):
            pass

        def rollback(self, n):
            pass

        def forward(self, tok, n):
            if self.model.kind == "draft":
                clock["now"] += 0.002 if clock["last"] == "target" else 0.001
            clock["last"] = self.model.kind

    monkeypatch.setattr(target_mod, "ModelRunner", Runner)
    monkeypatch.setattr(prof.time, "perf_counter", lambda: clock["now"])
    draft = SimpleNamespace(kind="draft", config=SimpleNamespace(vocab_size=16))
    tgt = SimpleNamespace(kind="target", config=SimpleNamespace(vocab_size=16))
    alone = prof.measure_draft_steps(draft, [1], [8], repeats=3)
    after = prof.measure_draft_steps(draft, [1], [8], repeats=3, target=tgt)
    assert abs(alone[0]["seconds"] - 0.001) < 1e-9
    assert abs(after[0]["seconds"] - 0.00125) < 1e-9    # (2 + 1 + 1 + 1) ms over 4 tokens
