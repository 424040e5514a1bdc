"""The host's state, read without verifying a draft.

On the shared 2-core CPU of BENCHMARKS.md a step verifying drafts costs one price in some
stretches and another in others, switching every 10–60 s, while a plain step keeps its own: at
batch 4, 1k tokens, a width of 1 costs 1.12–1.16 plain steps in one state and 1.30–1.35 in the
other, and a plain step moves 2 % (§5.0, session 41; `benchmarks/host_state.py`). Plain decoding
therefore never learns which state it is in, and adaptive D learns the price of width only by
verifying: once the dear state has taught it that drafting loses, it never sees the cheap state
come back. A small matrix product's time follows the state (correlation 0.91 with the price of a
width of 1 over 2-s windows): `HostProbe` times one, `HostState` reads the state off its times.
"""
from __future__ import annotations

import math
import time
from typing import Callable

import torch


class HostProbe:
    """Seconds of a (rows × dim) by (dim × dim) float32 product on every thread, the median of
    `repeats`: on that host 1.16 ms in the cheap state and 1.48 ms in the dear one for 64 × 1024.
    One product tells the states apart 76 % of the time; the median of three has a robust spread
    of 0.05 in log, against 0.27 between the states."""

    def __init__(self, rows: int = 64, dim: int = 1024, repeats: int = 3,
                 clock: Callable[[], float] = time.perf_counter):
        g = torch.Generator().manual_seed(0)
        self.x, self.w = torch.randn(rows, dim, generator=g), torch.randn(dim, dim, generator=g)
        self.repeats, self.clock = repeats, clock

    def __call__(self) -> float:
        times = []
        for _ in range(self.repeats):
            t = self.clock()
            torch.mm(self.x, self.w)
            times.append(self.clock() - t)
        return sorted(times)[len(times) // 2]


class HostState:
    """Which of two states the host is in (0: its floor, 1: dear), from probe times. A probe more
    than `GAP` (in log) above the host's floor — the `FLOOR` quantile of the latest `KEEP` probes
    — says dear; the state changes only when `AGREE` probes in a row say so (the probe's times have
    heavy tails). On the host of BENCHMARKS §5.0 (session 41) the median of three 64-row products
    spreads 0.05–0.07 (robust, in log) within a state, and the states are 0.27 apart. A host that
    never leaves one state stays at 0 but for its outliers, whichever state that is."""

    GAP = 0.16
    KEEP = 64
    FLOOR = 0.1
    AGREE = 2
    MIN_PROBES = 8   # before which the state stays 0

    def __init__(self) -> None:
        self.logs: list[float] = []
        self.state = 0
        self._says = 0      # probes in a row, up to the latest, that said the other state

    def note(self, seconds: float) -> int:
        """One probe's time; returns the state."""
        if not seconds > 0.0:
            return self.state
        x = math.log(seconds)
        self.logs.append(x)
        del self.logs[:-self.KEEP]
        if len(self.logs) < self.MIN_PROBES:
            return self.state
        floor = sorted(self.logs)[int(self.FLOOR * len(self.logs))]
        if int(x > floor + self.GAP) == self.state:
            self._says = 0
        else:
            self._says += 1
            if self._says >= self.AGREE:
                self.state, self._says = 1 - self.state, 0
        return self.state
