"""Adaptive D's own Python, this checkout's against another version, on the very calls a replay
makes (BENCHMARKS, session 45).

    python benchmarks/scheduler_speed.py --versus OLD.py [--ignore _free_step,_free_fit] \
        --dataset throughput-1k --batch-size 4 --adaptive benchmarks/results/planner_s38_run2/profile.json \
        [--times TABLE.json] [--seed 0] [--repeats 9]

A change meant to make the scheduler faster must not change what it decides. Here the scheduler's
clock is frozen (it prices its own calls at 0, so its decisions no longer depend on how fast its
code is), `adaptive_replay.py` replays the cell once with `--versus`'s version, and every call it
makes (`draft_cap`, `counts`, `observe`, …) is recorded. Both versions then get that exact call
sequence, each from a fresh scheduler: after every call their answers and their whole learned
state must be equal (`--ignore` lists attributes a change alters on purpose), and then each is
timed on the sequence `--repeats` times, alternating. The ratio is the code's speed alone, in a
hot loop; inside decoding, on caches the forward left cold, the same calls cost ~2.5 times more
(`adaptive_replay.py --python`).
"""
import argparse
import copy
import sys
import time

import adaptive_replay
from adaptive_ab import scheduler_class

from draftwise.planner.adaptive import AdaptiveDraftLength

CALLS = ("draft_cap", "counts", "observe", "coasted", "plain_ahead")
# not learned state: the curve callables and the clock
NOT_STATE = {"sps", "_for_batch", "_cache", "clock", "draft_token_seconds"}


def frozen(cls, log=None):
    """`cls` with its clock at 0 for good; with `log`, each scheduler built appends
    [(constructor args), [calls…]] to it and records every call it gets."""
    class Frozen(cls):
        def __init__(self, *a, **k):
            if log is not None:
                log.append(((a, k), []))
            super().__init__(*a, **k)
            self.clock = lambda: 0.0      # (the replay leaves it alone at --python 0)

    if log is not None:
        for name in CALLS:
            def call(self, *a, _name=name, **k):
                log[-1][1].append((_name, copy.deepcopy(a), copy.deepcopy(k)))
                return getattr(cls, _name)(self, *a, **k)
            setattr(Frozen, name, call)
    return Frozen


def fresh(cls, ctor):
    s = cls(*ctor[0], **ctor[1])
    s.skips_idle = s.sees_emitted = True      # as the replay (and the engine) set them
    for b in range(1, 17):     # the prior curves built ahead, alike for both (a cost model's: ms each)
        s._prior_times(b, s.MAX_POS + 1)
    return s


def state(s, ignore: set) -> dict:
    return {k: repr(v) for k, v in vars(s).items() if k not in NOT_STATE and k not in ignore}


def check(new, old, log, ignore: set) -> str:
    """'' where both versions answer and learn alike on every call, else the first difference."""
    for ctor, calls in log:
        a, b = fresh(new, ctor), fresh(old, ctor)
        for i, (name, args, kw) in enumerate(calls):
            ra = getattr(a, name)(*copy.deepcopy(args), **copy.deepcopy(kw))
            rb = getattr(b, name)(*copy.deepcopy(args), **copy.deepcopy(kw))
            sa, sb = state(a, ignore), state(b, ignore)
            if ra != rb or sa != sb:
                fields = sorted(k for k in sa.keys() | sb.keys() if sa.get(k) != sb.get(k))
                return f"call {i} ({name}): answers {ra!r} / {rb!r}, state differs in {fields}"
    return ""


def timed(cls, log) -> float:
    total = 0.0
    for ctor, calls in log:
        s = fresh(cls, ctor)
        t0 = time.perf_counter()
        for name, args, kw in calls:
            getattr(s, name)(*args, **kw)
        total += time.perf_counter() - t0
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--versus", required=True, metavar="PATH", help="the other adaptive.py")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--ignore", default="", help="comma-separated attributes left out of the state compared")
    args, replay_args = ap.parse_known_args()
    if "--versus" in replay_args or "--seeds" in replay_args:
        raise SystemExit("give the replay one --seed; --versus is this script's")
    old = scheduler_class(args.versus)
    log: list = []
    adaptive_replay.AdaptiveDraftLength = frozen(old, log)       # the replay runs the old version once
    sys.argv = [sys.argv[0]] + replay_args + ["--python", "0"]
    adaptive_replay.main()
    new, old = frozen(AdaptiveDraftLength), frozen(old)
    ignore = {x for x in args.ignore.split(",") if x}
    calls = sum(len(c) for _, c in log)
    diff = check(new, old, log, ignore)
    print(f"{calls} calls from {len(log)} scheduler(s): "
          + (f"NOT the same decisions: {diff}" if diff else "every answer and the learned state alike"
             + (f" (ignoring {', '.join(sorted(ignore))})" if ignore else "")))
    if diff:
        raise SystemExit("(no timing: the call sequence is the versus version's, and this checkout would "
                         "have been asked other calls)")
    times: dict = {"this checkout": [], "versus": []}
    for _ in range(args.repeats):
        times["this checkout"].append(timed(new, log))
        times["versus"].append(timed(old, log))
    for k, v in times.items():
        v.sort()
        print(f"  {k:14s} min {1e3 * v[0]:.1f} ms, median {1e3 * v[len(v) // 2]:.1f} ms "
              f"({1e6 * v[0] / calls:.1f} µs a call)")
    print(f"  this checkout / versus (min): {times['this checkout'][0] / times['versus'][0]:.3f}")


if __name__ == "__main__":
    main()
