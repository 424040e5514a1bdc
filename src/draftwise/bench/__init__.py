"""SPEED-Bench-compatible benchmarking: datasets, sweeps, metrics, reports and server mode.

``draftwise.bench.acceptance_metrics(requests)`` computes specdec_bench's acceptance metrics from
per-step acceptance lengths grouped by request and category (see :mod:`draftwise.bench.metrics`).
"""
from draftwise.bench.metrics import acceptance_metrics, aiperf_acceptance, timing_metrics

__all__ = ["acceptance_metrics", "aiperf_acceptance", "timing_metrics"]
