import os
import sys

import pytest
import torch

# Tiny models are dominated by per-op overhead; extra threads only contend with each other.
torch.set_num_threads(1)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
