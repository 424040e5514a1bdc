"""The `--versus` scheduler of the runs cap1_1 and cap1_2 (BENCHMARKS, session 43): adaptive D's
scheduler with its draft length held at 1 (no coasting plain), its per-step schedule still deciding
which steps verify (the engine calls `counts`, so `__call__` here is not reached). It prices what
the scheduler's own work costs a verifying step against fixed D = 1."""
from draftwise.planner.adaptive import AdaptiveDraftLength as _Adaptive


class AdaptiveDraftLength(_Adaptive):
    def draft_cap(self, batch_size, max_draft, **kw):
        super().draft_cap(batch_size, max_draft, **kw)
        self._probing, self._coast_b, self._coast_left = False, None, 0
        return min(1, max_draft)
