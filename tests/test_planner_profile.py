"""`draftwise profile`'s timings on a fake clock: a machine that drifts while it measures, and a
draft model that costs more right after the target ran."""
from types import SimpleNamespace

import pytest

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
    pts = measure_steps(fake_model(), [1], list(range(9)), [8], repeats=3, passes=3, runner=r, clock=r.now,
                        plain_run=0)
    secs = [p["seconds"] for p in pts]
    assert max(secs) / min(secs) < 1.08, secs


def test_a_dear_width_stays_dear():
    # and a real difference in cost survives the shuffling: width 3 at 1.5× its neighbours
    r = DriftingRunner(lambda width: 0.015 if width == 3 else 0.01)
    pts = {p["D"]: p["seconds"] for p in measure_steps(fake_model(), [1], list(range(5)), [8], repeats=5,
                                                        passes=2, runner=r, clock=r.now, plain_run=0)}
    assert all(pts[2] > 1.3 * pts[d] for d in (0, 1, 3, 4)), pts


class RunRunner(FakeRunner):
    """One token a row costs 2 ms right after a one-token forward, 3 ms after a wider one (plain
    decoding's run of equal steps against a speculative run's mix); width w costs 3 + w ms."""

    def __init__(self):
        super().__init__()
        self.t, self.last = 0.0, None

    def now(self):
        return self.t

    def forward(self, tok, n):
        w = tok.shape[1]
        self.t += (0.002 if self.last == 1 else 0.003) if w == 1 else 0.003 + 0.001 * w
        self.last = w


def test_plain_decoding_is_timed_in_a_run_of_plain_steps():
    r = RunRunner()
    pts = {p["D"]: p for p in measure_steps(fake_model(), [1], [0, 1, 2], [8], repeats=4, passes=2, runner=r,
                                            clock=r.now, plain_run=16)}
    # the run follows untimed plain steps: none of its steps pays the way back from a wider one
    assert abs(pts[0]["plain_run_seconds"] - 0.002) < 1e-9
    assert 0.002 <= pts[0]["seconds"] <= 0.003 + 1e-9 and abs(pts[2]["seconds"] - 0.006) < 1e-9
    assert "plain_run_seconds" not in pts[1] and "plain_run_seconds" not in pts[2]
    assert all("plain_run_seconds" not in p for p in measure_steps(fake_model(), [1], [0, 1], [8], repeats=1,
                                                                     passes=1, runner=RunRunner(), plain_run=0))


class CacheClock(FakeRunner):
    """Forwards of a target and a draft model on one shared fake clock; `cost(kind, last kind)`
    says what a forward costs (the CPU's caches remember who ran last)."""
    clock = {"now": 0.0, "last": None}
    cost = staticmethod(lambda kind, last: 0.0)

    @classmethod
    def now(cls):
        return CacheClock.clock["now"]

    def forward(self, tok, n):
        c = CacheClock.clock
        c["now"] += self.cost(self.model.kind, c["last"])
        c["last"] = self.model.kind


class CachedRunner(CacheClock):
    """A draft forward costs 2 ms right after a target forward (its weights left the CPU's caches),
    1 ms after another draft forward; target forwards cost nothing on the clock."""
    cost = staticmethod(lambda kind, last: (0.002 if last == "target" else 0.001) if kind == "draft" else 0.0)


def test_a_draft_token_is_timed_as_decoding_pays_it(monkeypatch):
    monkeypatch.setattr(target_mod, "ModelRunner", CachedRunner)
    monkeypatch.setattr(prof.time, "perf_counter", CachedRunner.now)
    alone = prof.measure_draft_steps(fake_model("draft"), [1], [8], repeats=3)
    after = prof.measure_draft_steps(fake_model("draft"), [1], [8], repeats=3, target=fake_model())
    assert abs(alone[0]["seconds"] - 0.001) < 1e-9
    assert abs(after[0]["seconds"] - 0.00125) < 1e-9    # (2 + 1 + 1 + 1) ms over 4 tokens


class WideRunner(CacheClock):
    """A draft forward costs 1 ms, 0.5 ms more for a second token a row; targets cost nothing."""
    cost = staticmethod(lambda kind, last: 0.0)

    def forward(self, tok, n):
        c = CacheClock.clock
        if self.model.kind == "draft":
            c["now"] += 0.001 + 0.0005 * (tok.shape[1] - 1)
        c["last"] = self.model.kind


def test_a_second_token_in_the_drafts_first_forward_is_timed(monkeypatch):
    """`catch_up_seconds`: what two tokens a row cost the draft's first forward of a step over one
    (a row that accepted every draft feeds both its last draft and the bonus token)."""
    monkeypatch.setattr(target_mod, "ModelRunner", WideRunner)
    monkeypatch.setattr(prof.time, "perf_counter", WideRunner.now)
    pts = prof.measure_draft_steps(fake_model("draft"), [1, 2], [8], repeats=3, target=fake_model())
    assert [p["catch_up_seconds"] for p in pts] == pytest.approx([0.0005, 0.0005])
    monkeypatch.setattr(target_mod, "ModelRunner", CachedRunner)
    monkeypatch.setattr(prof.time, "perf_counter", CachedRunner.now)
    flat = prof.measure_draft_steps(fake_model("draft"), [1], [8], repeats=3, target=fake_model())
    assert flat[0]["catch_up_seconds"] == pytest.approx(0.0)      # as dear at one token as at two


class EvictingRunner(CacheClock):
    """A target forward costs 1 ms, 1.5 ms right after a draft forward (the draft evicted its
    weights); draft forwards cost nothing on the clock."""
    cost = staticmethod(lambda kind, last: (0.0015 if last == "draft" else 0.001) if kind == "target" else 0.0)


def test_the_target_after_draft_tokens_is_timed_as_decoding_pays_it(monkeypatch):
    monkeypatch.setattr(target_mod, "ModelRunner", EvictingRunner)
    monkeypatch.setattr(prof.time, "perf_counter", EvictingRunner.now)
    pts = prof.measure_draft_steps(fake_model("draft"), [1, 2], [8], repeats=3, target=fake_model())
    assert [p["target_factor"] for p in pts] == pytest.approx([1.5, 1.5])
    assert "target_factor" not in prof.measure_draft_steps(fake_model("draft"), [1], [8], repeats=3)[0]
