"""Adaptive D told the host's state (BENCHMARKS, session 41): what a probe of the state would
be worth, for `adaptive_replay.py --times-other ... --versus benchmarks/host_oracle.py`.

The host of BENCHMARKS.md prices a step verifying drafts at one of two levels, switching after
stretches of seconds to a minute or two, while a plain step keeps its price
(`benchmarks/host_state.py`). Plain decoding cannot tell the states apart, and verifying is the
only way the scheduler learns the price of width: once the dear state has taught it that drafting
loses, it stops verifying and, within a run, does not see the cheap state return.
Here the replay tells the scheduler the state (`set_host_state`, called before every decision),
and the scheduler keeps one set of step timings per state: what it measured in the other state
neither drags this one's prices nor waits to be aged out. A real probe would have to read the
state from a small matrix product's time, with that measurement's noise and cost.
"""
from draftwise.planner.adaptive import AdaptiveDraftLength as _Kept

_TIMINGS = ("_tt", "_ratio", "_levels", "_clock")    # the step timings: per (rows, width), price of width, speed


class AdaptiveDraftLength(_Kept):
    def set_host_state(self, state: int) -> None:
        """Switch to the timings of `state` (fresh ones the first time: the prior curve's prices)."""
        now = getattr(self, "_host", 0)
        if now == state:
            return
        self._fold_coast()          # plain steps decided ahead belong to the state they ran in
        saved = self.__dict__.setdefault("_host_timings", {})
        saved[now] = {k: getattr(self, k) for k in _TIMINGS}
        for k, v in saved.get(state, {k: {} for k in _TIMINGS}).items():
            setattr(self, k, v)
        self._host = state
        self._coast_left = 0        # decide afresh in the new state
        for cache in (self._times, self._phis, self._best, self._shape_best):
            cache.clear()
