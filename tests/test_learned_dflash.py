"""DFlash: block mask, greedy exactness (untrained and briefly trained), inference = training forward,
sampling losslessness, checkpoints and their load-time checks, training reduces the loss."""
import json
import os

import pytest
import torch
import transformers as T

import draftwise
from block_drafter_common import (PROMPTS, batches, check_greedy_exact, check_inference_matches_training,
                                  check_sampling_lossless, fresh_model, target, trained_model)
from draftwise.drafters.dflash import DFlashDrafter, block_mask, dflash_layer_ids
from draftwise.train import dflash as tdf

DRAWS = int(os.environ.get("DRAFTWISE_LOSSLESS_DRAWS", "100000"))


def test_block_mask_small_case():
    # T = 5 context tokens, block 3, anchors at 1 and 3
    m = block_mask(torch.tensor([[1, 3]]), 5, 3)[0].int()
    ctx = [[1, 0, 0, 0, 0]] * 3 + [[1, 1, 1, 0, 0]] * 3
    blk = [[1, 1, 1, 0, 0, 0]] * 3 + [[0, 0, 0, 1, 1, 1]] * 3
    expected = torch.tensor([c + b for c, b in zip(ctx, blk)])
    assert torch.equal(m, expected)
    # an anchor at 0 sees no context, only its own block
    m0 = block_mask(torch.tensor([[0]]), 4, 2)[0]
    assert not m0[:, :4].any() and m0[:, 4:].all()


def test_layer_ids():
    assert dflash_layer_ids(2) == (1, 2)
    assert dflash_layer_ids(8) == (1, 2, 4, 5)
    assert dflash_layer_ids(36) == (1, 12, 22, 33)


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
@pytest.mark.parametrize("batch", [1, 4])
def test_greedy_exact_untrained(arch, batch):
    tgt, _ = target(arch)
    check_greedy_exact("dflash", arch, batch, fresh_model("dflash", tgt))


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_greedy_exact_trained(arch):
    model, _ = trained_model("dflash", arch)
    accepted = check_greedy_exact("dflash", arch, 4, model)
    assert accepted > 0  # the trained drafter gets drafts accepted, so rollback paths run


def test_inference_matches_training_forward():
    assert check_inference_matches_training("dflash", "llama") > 0


def test_training_reduces_loss():
    _, log = trained_model("dflash", "llama")
    h = [r["loss"] for r in log["history"]]
    assert sum(h[-3:]) / 3 < 0.8 * sum(h[:3]) / 3, h


def test_confidence_is_peak_draft_probability():
    tgt, _ = target("llama")
    model, _ = trained_model("dflash", "llama")
    seen = []

    def sched(prop):
        seen.append(prop)
        return prop.num_tokens
    draftwise.generate(tgt, PROMPTS[:2], drafter=DFlashDrafter(model), num_draft_tokens=4, max_new_tokens=6,
                       scheduler=sched)
    p = seen[0]
    assert p.confidence.shape == p.tokens.shape and p.probs is None
    assert bool(((p.confidence > 0) & (p.confidence <= 1)).all())
    first = len(seen)
    draftwise.generate(tgt, PROMPTS[:2], drafter=DFlashDrafter(model), num_draft_tokens=4, max_new_tokens=6,
                       scheduler=sched, temperature=0.9, seed=1)
    q = seen[first]
    # sampled drafts: the peak of q, never q of the sampled token (that would let the adaptive
    # scheduler select drafts by value and bias the output)
    torch.testing.assert_close(q.confidence, q.probs.max(-1).values)


def test_sampling_lossless():
    check_sampling_lossless("dflash", temperature=1.0, n=DRAWS)


def test_checkpoint_round_trip(tmp_path):
    tgt, refs = target("llama")
    model, _ = trained_model("dflash", "llama")
    tdf_save(model, tmp_path / "ck")
    cfg = json.loads((tmp_path / "ck" / "config.json").read_text())
    assert cfg["drafter_type"] == "dflash" and cfg["target"]["vocab_size"] == 128
    loaded = draftwise.build_drafter(f"dflash:{tmp_path / 'ck'}", tgt)
    assert isinstance(loaded, DFlashDrafter)
    for k, v in model.state_dict().items():
        assert torch.equal(v, loaded.model.state_dict()[k]), k
    a = draftwise.generate(tgt, PROMPTS, drafter=f"dflash:{tmp_path / 'ck'}", num_draft_tokens=3, max_new_tokens=20)
    b = draftwise.generate(tgt, PROMPTS, drafter=DFlashDrafter(model), num_draft_tokens=3, max_new_tokens=20)
    assert [o.token_ids for o in a] == refs
    assert [o.accept_lengths for o in a] == [o.accept_lengths for o in b]


def tdf_save(model, path):
    from draftwise.drafters.dflash import save
    save(model, path)


def test_wrong_type_or_target_is_a_clear_error(tmp_path):
    tgt, _ = target("llama")
    tdf_save(fresh_model("dflash", tgt), tmp_path / "ck")
    with pytest.raises(ValueError, match="dflash checkpoint, not dspark"):
        draftwise.generate(tgt, PROMPTS, drafter=f"dspark:{tmp_path / 'ck'}", max_new_tokens=4)
    torch.manual_seed(0)
    other = T.AutoModelForCausalLM.from_config(T.LlamaConfig(
        vocab_size=96, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=128, max_position_embeddings=128)).eval()
    with pytest.raises(ValueError, match="different target"):
        draftwise.generate(other, [[1, 2, 3]], drafter=f"dflash:{tmp_path / 'ck'}", max_new_tokens=4)
    with pytest.raises(ValueError, match="needs a checkpoint"):
        draftwise.build_drafter("dflash", tgt)


def test_options_are_checked():
    tgt, _ = target("llama")
    with pytest.raises(ValueError, match="unknown dflash options"):
        tdf.build_model(tgt, blok_size=4)
    with pytest.raises(ValueError, match="block_size"):
        tdf.build_model(tgt, block_size=1)


def test_anchors_do_not_depend_on_batch_composition():
    """Each sequence draws its anchors from its own tokens: a 2-rank slice sees the same blocks."""
    tgt, _ = target("llama")
    b = batches(tgt, (1, 2), n=1)[0]
    a_full, v_full = tdf.sample_anchors(b["input_ids"], b["loss_mask"], 8)
    a_half, v_half = tdf.sample_anchors(b["input_ids"][2:], b["loss_mask"][2:], 8)
    assert torch.equal(a_full[2:], a_half) and torch.equal(v_full[2:], v_half)
    assert bool(b["loss_mask"].gather(1, a_full)[v_full].bool().all())  # anchors predict a label


@pytest.mark.parametrize("kind", ["dflash", "dspark"])
def test_loss_is_a_mean_over_examples(kind):
    """What makes 2-rank data parallelism reproduce the 1-process loss: loss(batch) = mean of the
    losses of its equal halves."""
    from block_drafter_common import module
    tgt, _ = target("llama")
    model = fresh_model(kind, tgt)
    b = batches(tgt, model.hidden_layers, n=1)[0]
    half = lambda sl: {k: ({l: h[sl] for l, h in v.items()} if isinstance(v, dict) else v[sl]) for k, v in b.items()}
    with torch.no_grad():
        full, _ = module(kind).loss_fn(model, b)
        a, _ = module(kind).loss_fn(model, half(slice(0, 2)))
        c, _ = module(kind).loss_fn(model, half(slice(2, 4)))
    torch.testing.assert_close(full, (a + c) / 2, rtol=1e-5, atol=1e-6)


def test_checkpoint_holds_only_the_drafters_own_weights(tmp_path):
    """A tied target shares one tensor as embedding and head; neither name goes into the drafter's file."""
    from safetensors import safe_open

    from draftwise.drafters.dflash import save

    cfg = T.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                        num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)
    tgt = draftwise.load_target(T.LlamaForCausalLM(cfg).eval())
    model = fresh_model("dflash", tgt)
    save(model, tmp_path)
    keys = set(safe_open(str(tmp_path / "model.safetensors"), "pt").keys())
    assert keys and not any(k.split(".")[0] in ("embed", "head") for k in keys), sorted(keys)


def test_add_drafter_ships_bf16_copy_that_loads(tmp_path):
    from safetensors.torch import load_file

    from draftwise.zoo.ship import add_drafter

    tgt, _ = target("llama")
    save_dir = tmp_path / "run"
    from draftwise.drafters.dflash import save
    save(fresh_model("dflash", tgt), save_dir)
    add_drafter(save_dir, tmp_path / "zoo" / "dflash")
    a, b = load_file(save_dir / "model.safetensors"), load_file(tmp_path / "zoo" / "dflash" / "model.safetensors")
    assert a.keys() == b.keys() and all(v.dtype == torch.bfloat16 for v in b.values() if v.is_floating_point())
    draftwise.build_drafter(f"dflash:{tmp_path / 'zoo' / 'dflash'}", tgt)   # loads against its target
    with pytest.raises(FileNotFoundError, match="not a drafter checkpoint"):
        add_drafter(tmp_path / "nothing", tmp_path / "zoo" / "x")
