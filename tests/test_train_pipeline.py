"""The shared training pipeline: exact resume, data-parallel equivalence, hidden-state capture,
offline = online batches, the CLI, and the acceptance statistics of the evaluation."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import draftwise
from draftwise.train import eagle3 as t_eagle3
from draftwise.train.data import OfflineStream, OnlineStream, target_probs, teach, write_shards
from draftwise.train.trainer import ListStream, TrainConfig, acceptance_stats, train
from tiny_models import build

TOKENS = np.random.default_rng(0).integers(0, 128, 3000)


@pytest.fixture(scope="module")
def tgt():
    m = build("llama")
    m.generation_config.eos_token_id = None
    return draftwise.load_target(m)


def noisy_loss(model, batch):
    """The real loss times a random factor, so the RNG state matters to the result."""
    loss, logs = t_eagle3.loss_fn(model, batch)
    return loss * (1 + 0.1 * torch.rand(())), logs


class Killed(Exception):
    pass


class KillAt:
    """A stream that dies when asked for batch `at` (the process "crashes" mid-run)."""

    def __init__(self, stream, at):
        self.stream, self.at = stream, at

    def __iter__(self):
        for b in self.stream:
            if self.stream.index > self.at:
                raise Killed()
            yield b

    def state_dict(self):
        return self.stream.state_dict()

    def load_state_dict(self, s):
        self.stream.load_state_dict(s)


def _fresh(tgt):
    torch.manual_seed(0)
    return t_eagle3.build_model(tgt, ttt_steps=2)


def test_exact_resume(tgt, tmp_path):
    cfg = dict(steps=6, lr=3e-3, warmup_steps=2, checkpoint_every=3, progress=False, bf16=True, seed=3)
    stream = lambda: OnlineStream(tgt, TOKENS, (1, 2), batch_size=2, seq_len=12, regen="sample", seed=5)  # noqa: E731
    straight = _fresh(tgt)
    log_a = train(straight, noisy_loss, stream(), TrainConfig(**cfg), tmp_path / "a")
    killed = _fresh(tgt)
    with pytest.raises(Killed):
        train(killed, noisy_loss, KillAt(stream(), 3), TrainConfig(**cfg), tmp_path / "b")
    resumed = _fresh(tgt)
    log_b = train(resumed, noisy_loss, stream(), TrainConfig(**cfg, resume=True), tmp_path / "b")
    assert log_b["resumed_from_step"] == 3
    for (k, v), (k2, v2) in zip(straight.state_dict().items(), resumed.state_dict().items()):
        assert k == k2 and torch.equal(v, v2), k
    assert [h["loss"] for h in log_a["history"]] == [h["loss"] for h in log_b["history"]]
    saved = json.loads((tmp_path / "b" / "train_log.json").read_text())
    assert saved["tokens"] == log_a["tokens"] == 6 * 2 * 12 and saved["wall_time_s"] > 0


DDP_SCRIPT = textwrap.dedent("""
    import json, sys, torch
    sys.path.insert(0, {tests!r})
    torch.set_num_threads(1)
    import draftwise
    from draftwise.train import eagle3 as t
    from draftwise.train.trainer import ListStream, TrainConfig, train
    from tiny_models import build
    tgt = draftwise.load_target(build("llama"))
    batches = [{{k: (v if k != "hidden" else {{int(l): h for l, h in v.items()}}) for k, v in b.items()}}
               for b in torch.load({batches!r}, weights_only=True)]
    torch.manual_seed(0)
    model = t.build_model(tgt, ttt_steps=2)
    log = train(model, t.loss_fn, ListStream(batches), TrainConfig(steps=3, lr=3e-3, warmup_steps=1, bf16=False,
                progress=False), sys.argv[1])
""")


def test_ddp_two_processes_match_one(tgt, tmp_path):
    """torchrun --nproc_per_node 2 (gloo) with the same global batch gives the single-process curve."""
    stream = OnlineStream(tgt, TOKENS, (1, 2), batch_size=4, seq_len=12, regen="none", seed=1)
    it = iter(stream)
    batches = [next(it) for _ in range(3)]
    torch.save(batches, tmp_path / "batches.pt")  # test-only fixture file (the trainer itself never pickles)
    script = tmp_path / "ddp.py"
    script.write_text(DDP_SCRIPT.format(tests=str(Path(__file__).parent), batches=str(tmp_path / "batches.pt")))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]   # a free port
    r = subprocess.run(torchrun + [str(script), str(tmp_path / "two")], env=env, capture_output=True, text=True,
                       timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    torch.manual_seed(0)
    one = train(t_eagle3.build_model(tgt, ttt_steps=2), t_eagle3.loss_fn, ListStream(batches),
                TrainConfig(steps=3, lr=3e-3, warmup_steps=1, bf16=False, progress=False), tmp_path / "one")
    two = json.loads((tmp_path / "two" / "train_log.json").read_text())
    assert two["world_size"] == 2 and one["world_size"] == 1
    np.testing.assert_allclose([h["loss"] for h in two["history"]], [h["loss"] for h in one["history"]],
                               rtol=1e-5, atol=1e-6)
    from safetensors.torch import load_file
    w_two = load_file(str(tmp_path / "two" / "trainer_state" / "model.safetensors"))
    w_one = load_file(str(tmp_path / "one" / "trainer_state" / "model.safetensors"))
    for k in w_one:
        torch.testing.assert_close(w_two[k], w_one[k], rtol=1e-4, atol=1e-6)


def test_hidden_capture_matches_plain_and_engine_forward(tgt):
    """Training features = a plain HF forward = what the engine hands the drafter at decode time."""
    stream = OnlineStream(tgt, TOKENS, (0, 1, 2), batch_size=2, seq_len=10, regen="sample", seed=2)
    b = next(iter(stream))
    ids = b["input_ids"]
    with torch.no_grad():
        plain = tgt.model(ids, output_hidden_states=True)
    for l in (0, 1, 2):
        torch.testing.assert_close(b["hidden"][l], plain.hidden_states[l])
    torch.testing.assert_close(b["target_logprobs"], torch.log_softmax(plain.logits.float(), -1))
    # the engine's incremental, cached forward (prefill 6 tokens, then 4 more)
    tgt.reset(2)
    _, h1 = tgt.forward(ids[:, :6], torch.tensor([6, 6]), (1, 2))
    _, h2 = tgt.forward(ids[:, 6:], torch.tensor([4, 4]), (1, 2))
    for l in (1, 2):
        torch.testing.assert_close(torch.cat([h1[l], h2[l]], 1), b["hidden"][l], atol=1e-5, rtol=1e-5)
    # regenerated continuation = the target's own samples: prompt windows come from the corpus
    assert b["loss_mask"].shape == ids.shape


def test_offline_shards_feed_the_same_batches(tgt, tmp_path):
    online = OnlineStream(tgt, TOKENS, (1, 2), batch_size=3, seq_len=10, regen="greedy", topk=8, seed=4)
    meta = write_shards(tmp_path, online, 2)
    assert meta["num_sequences"] == 6 and meta["topk"] == 8
    ref = OnlineStream(tgt, TOKENS, (1, 2), batch_size=3, seq_len=10, regen="greedy", topk=8, seed=4)
    it = iter(ref)
    want = [next(it), next(it)]
    off = OfflineStream(tmp_path, batch_size=3, seed=0, layers=(1, 2))
    got = [off.batch(i) for i in range(2)]
    rows = {tuple(r.tolist()): (bi, ri) for bi, b in enumerate(want) for ri, r in enumerate(b["input_ids"])}
    for b in got:
        assert set(b) == set(want[0]) and set(b["hidden"]) == {1, 2}
        for r in range(3):
            bi, ri = rows[tuple(b["input_ids"][r].tolist())]
            torch.testing.assert_close(b["hidden"][1][r], want[bi]["hidden"][1][ri])
            torch.testing.assert_close(b["target_topk"]["values"][r], want[bi]["target_topk"]["values"][ri])
    p = target_probs(got[0], 128)
    torch.testing.assert_close(p.sum(-1), torch.ones(3, 10))
    with pytest.raises(ValueError, match="layers"):
        OfflineStream(tmp_path, batch_size=3, layers=(1, 2, 3))
    # greedy regeneration: every continuation token is the target's argmax
    b = want[0]
    with torch.no_grad():
        lg = tgt.model(b["input_ids"]).logits
    P = ref.prompt_len
    assert torch.equal(lg[:, P - 1:-1].argmax(-1), b["input_ids"][:, P:])


def test_acceptance_stats():
    class O:
        def __init__(self, acc, dr):
            self.accept_lengths, self.num_drafted = acc, dr
    st = acceptance_stats([O([3, 1, 4], [3, 3, 3]), O([2], [1])])
    # steps: (L=3,k=3): pos1 ok, pos2 ok, pos3 fail; (1,3): pos1 fail; (4,3): all ok; (2,1): pos1 ok
    assert st["tau"] == pytest.approx(10 / 4)
    assert st["alpha"] == [pytest.approx(3 / 4), pytest.approx(2 / 2), pytest.approx(1 / 2)]


@pytest.mark.parametrize("kind,mode", [("eagle3", "online"), ("mtp", "offline")])
def test_cli_trains_saves_and_loads(kind, mode, tgt, tmp_path):
    from draftwise.cli import main
    tdir = tmp_path / "target"
    tgt.model.save_pretrained(tdir)
    np.save(tmp_path / "tokens.npy", TOKENS)
    out = tmp_path / kind
    rc = main(["train", kind, "--target", str(tdir), "--out", str(out), "--steps", "2", "--data",
               str(tmp_path / "tokens.npy"), "--batch-size", "2", "--seq-len", "16", "--quiet", "--eval-prompts", "2", "--mode", mode,
               "-o", "eval_new_tokens=8"])
    assert rc == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["drafter_type"] == kind and cfg["training"]["tokens"] == 2 * 2 * 16
    if mode == "offline":
        assert (out / "shards" / "meta.json").is_file()
    log = json.loads((out / "train_log.json").read_text())
    assert log["evals"] and log["evals"][-1]["tau"] >= 1.0 and log["wall_time_s"] > 0
    res = draftwise.generate(tgt, [[1, 2, 3, 4]], drafter=f"{kind}:{out}", num_draft_tokens=3, max_new_tokens=8)
    ref = draftwise.generate(tgt, [[1, 2, 3, 4]], max_new_tokens=8)
    assert res[0].token_ids == ref[0].token_ids
