"""DSpark: greedy exactness (untrained and briefly trained), inference = training forward, the Markov
head's drafted distributions are exact processed softmaxes, sampling losslessness (with top-k),
confidences through the protocol, checkpoints and load-time checks, training reduces the loss."""
import os

import pytest
import torch

import draftwise
from block_drafter_common import (PROMPTS, check_greedy_exact, check_inference_matches_training,
                                  check_sampling_lossless, fresh_model, target, trained_model)
from draftwise.drafters.dspark import DSparkDrafter
from draftwise.sampling import process_logits
from draftwise.types import SamplingParams

DRAWS = int(os.environ.get("DRAFTWISE_LOSSLESS_DRAWS", "100000"))


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
@pytest.mark.parametrize("batch", [1, 4])
def test_greedy_exact_untrained(arch, batch):
    tgt, _ = target(arch)
    check_greedy_exact("dspark", arch, batch, fresh_model("dspark", tgt))


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_greedy_exact_trained(arch):
    model, _ = trained_model("dspark", arch)
    assert check_greedy_exact("dspark", arch, 4, model) > 0


def test_inference_matches_training_forward():
    assert check_inference_matches_training("dspark", "qwen3") > 0


def test_training_reduces_loss_and_learns_markov_head():
    model, log = trained_model("dspark", "llama")
    h = [r["loss"] for r in log["history"]]
    assert sum(h[-3:]) / 3 < 0.9 * sum(h[:3]) / 3, h
    assert float(model.markov_out.weight.detach().abs().max()) > 0  # W2 starts at zero
    assert {"ce", "tv", "bce"} <= set(log["history"][-1])


@pytest.mark.parametrize("params", [SamplingParams(0.0), SamplingParams(0.8, top_k=20, top_p=0.9)])
def test_proposal_is_exact_markov_softmax(params):
    """q_k = process_logits(U_k + W2·W1[x_{k−1}]) with x_0 the pending token; confidences σ(l_k / T_k)."""
    tgt, _ = target("llama")
    model, _ = trained_model("dspark", "llama")
    model.set_temperatures([0.5 + 0.25 * k for k in range(model.block_size - 1)])
    try:
        drafter = DSparkDrafter(model)
        ctx = draftwise.drafters.DraftContext(sequences=[list(p) for p in PROMPTS], params=params,
                                              generator=torch.Generator().manual_seed(0))
        # feed the prompts through the target as the engine does
        tgt.reset(len(PROMPTS))
        L = torch.tensor([len(p) - 1 for p in PROMPTS])
        toks = torch.zeros(len(PROMPTS), int(L.max()), dtype=torch.long)
        for i, p in enumerate(PROMPTS):
            toks[i, : len(p) - 1] = torch.tensor(p[:-1])
        _, ctx.hidden = tgt.forward(toks, L, drafter.hidden_layers)
        ctx.num_hidden = L
        drafter.start(ctx)
        prop = drafter.propose(ctx, torch.tensor([5, 2, 7, 0]))
        assert prop.num_tokens.tolist() == [5, 2, 7, 0]
        _, h = drafter.last_block
        U = model.logits(h)
        prev = torch.tensor([p[-1] for p in PROMPTS])
        for k in range(prop.tokens.shape[1]):
            with torch.inference_mode():
                logits, c = model.head_step(U[:, k], h[:, k], prev)
                if params.greedy:
                    assert torch.equal(prop.tokens[:, k], logits.argmax(-1))
                    assert prop.probs is None
                else:
                    torch.testing.assert_close(prop.probs[:, k], process_logits(logits, params))
                    assert bool((prop.probs[:, k].gather(-1, prop.tokens[:, k, None]) > 0).all())
                torch.testing.assert_close(prop.confidence[:, k], torch.sigmoid(c / model.conf_temps[k]))
                prev = prop.tokens[:, k]
    finally:
        model.set_temperatures([1.0] * (model.block_size - 1))


def test_sampling_lossless_with_top_k():
    check_sampling_lossless("dspark", temperature=0.8, top_k=6, n=DRAWS, seed=1)


def test_checkpoint_round_trip_and_temperatures(tmp_path):
    from draftwise.drafters.dflash import save
    tgt, refs = target("qwen3")
    model, _ = trained_model("dspark", "qwen3")
    model.set_temperatures([1.5] * (model.block_size - 1))
    try:
        save(model, tmp_path / "ck")
    finally:
        model.set_temperatures([1.0] * (model.block_size - 1))
    loaded = draftwise.build_drafter(f"dspark:{tmp_path / 'ck'}", tgt)
    assert isinstance(loaded, DSparkDrafter)
    assert loaded.model.conf_temps.tolist() == [1.5] * (model.block_size - 1)
    for k, v in model.state_dict().items():
        assert torch.equal(v, loaded.model.state_dict()[k]), k
    out = draftwise.generate(tgt, PROMPTS, drafter=loaded, num_draft_tokens=4, max_new_tokens=20)
    assert [o.token_ids for o in out] == refs


def test_dspark_checkpoint_is_not_a_dflash_one(tmp_path):
    from draftwise.drafters.dflash import save
    tgt, _ = target("llama")
    save(fresh_model("dspark", tgt), tmp_path / "ck")
    with pytest.raises(ValueError, match="dspark checkpoint, not dflash"):
        draftwise.build_drafter(f"dflash:{tmp_path / 'ck'}", tgt)
