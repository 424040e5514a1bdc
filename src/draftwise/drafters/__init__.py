"""Drafting mechanisms, one module each, all behind the protocol in `base`."""
from .base import REGISTRY, DraftContext, Drafter, build_drafter, register
from . import draft_model, ngram, suffix  # noqa: F401,E402 — register the built-in drafters

__all__ = ["REGISTRY", "DraftContext", "Drafter", "build_drafter", "register"]
