"""Drafting mechanisms, one module each, all behind the protocol in `base`."""
from .base import REGISTRY, DraftContext, Drafter, build_drafter, register
from . import draft_model, ngram, suffix  # noqa: F401,E402 — model-free and draft-model drafters
from . import eagle3, mtp  # noqa: F401,E402 — learned chain drafters (eagle3:PATH, mtp:PATH)
from . import dflash, dspark  # noqa: F401,E402 — learned parallel block drafters (dflash:PATH, dspark:PATH)

__all__ = ["REGISTRY", "DraftContext", "Drafter", "build_drafter", "register"]
