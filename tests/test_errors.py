"""Bad input gets one clear error that names the problem and the fix."""
import json

import pytest
import torch
import transformers as T

import draftwise
from tiny_models import build, make_tokenizer, save_model

@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("models")
    tok = make_tokenizer(300)
    target = save_model(tmp, "target", len(tok), tok)
    return tmp, tok, target


def test_tokenizer_mismatch(pair):
    tmp, tok, target = pair
    other = make_tokenizer(300, extra="completely different text zzz qqq " * 30)
    draft = save_model(tmp, "draft_other_tok", len(other), other, seed=1)
    with pytest.raises(ValueError, match="different tokenizer"):
        draftwise.generate(str(target), "def add", drafter=f"draft-model:{draft}", max_new_tokens=4)


def test_padding_only_vocab_difference_works(pair):
    tmp, tok, target = pair
    padded = save_model(tmp, "draft_padded", len(tok) + 12, tok, seed=1)  # same tokenizer, 12 padding rows
    ref = draftwise.generate(str(target), "def add", max_new_tokens=8, ignore_eos=True)
    out = draftwise.generate(str(target), "def add", drafter=f"draft-model:{padded}", max_new_tokens=8,
                             ignore_eos=True)
    assert out[0].token_ids == ref[0].token_ids


@pytest.mark.parametrize("kwargs,match", [
    ({"num_draft_tokens": -1}, r"num_draft_tokens \(D\) must be an integer ≥ 0"),
    ({"temperature": -0.5}, "temperature must be ≥ 0"),
    ({"top_p": 0.0}, r"top_p must be in \(0, 1\]"),
    ({"top_p": 1.5}, r"top_p must be in \(0, 1\]"),
    ({"top_k": 0}, "top_k must be an integer ≥ 1"),
    ({"max_new_tokens": 0}, "max_new_tokens must be an integer ≥ 1"),
    ({"max_new_tokens": 100}, "positions but the target has 64"),
])
def test_bad_arguments(pair, kwargs, match):
    _, _, target = pair
    args = {"max_new_tokens": 4, **kwargs}
    with pytest.raises(ValueError, match=match):
        draftwise.generate(str(target), "def add", **args)


def test_empty_prompt(pair):
    _, _, target = pair
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        draftwise.generate(str(target), ["def", []], max_new_tokens=4)
    with pytest.raises(ValueError, match="prompt 0 is empty"):
        draftwise.generate(str(target), [""], max_new_tokens=4)


def test_missing_path():
    with pytest.raises(FileNotFoundError, match="does not exist"):
        draftwise.generate("/nonexistent/model", "hi", max_new_tokens=4)


def test_not_a_causal_lm(tmp_path):
    cfg = T.ViTConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, image_size=8,
                      patch_size=4)
    T.ViTModel(cfg).save_pretrained(tmp_path / "vit")
    with pytest.raises(ValueError, match="not a causal language model"):
        draftwise.generate(str(tmp_path / "vit"), [[1, 2]], max_new_tokens=4)


def test_not_a_model_folder(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no config.json"):
        draftwise.generate(str(tmp_path / "empty"), [[1, 2]], max_new_tokens=4)


def test_corrupt_checkpoint(pair, tmp_path):
    _, tok, target = pair
    bad = save_model(tmp_path, "bad", len(tok), tok)
    (bad / "model.safetensors").write_bytes(b"\x00garbage" * 100)
    with pytest.raises(ValueError, match="could not load weights"):
        draftwise.generate(str(bad), "def", max_new_tokens=4)


def test_unknown_drafter(pair):
    _, _, target = pair
    with pytest.raises(ValueError, match="unknown drafter 'medusa'"):
        draftwise.generate(str(target), "def", drafter="medusa", max_new_tokens=4)


def test_text_prompt_without_tokenizer():
    model = build("llama")
    with pytest.raises(ValueError, match="text prompts need a tokenizer"):
        draftwise.generate(model, "hello", max_new_tokens=4)


def test_token_outside_vocabulary():
    model = build("llama")
    with pytest.raises(ValueError, match="outside the target's vocabulary"):
        draftwise.generate(model, [[1, 5000]], max_new_tokens=4)


def test_stop_strings_eos_and_streaming(pair):
    _, tok, target = pair
    seen = {}
    out = draftwise.generate(str(target), ["def add", "In the"], drafter="ngram", max_new_tokens=20,
                             stream=lambda i, toks: seen.setdefault(i, []).extend(toks), ignore_eos=True)
    for i, o in enumerate(out):
        assert seen[i] == o.token_ids
        assert o.finish_reason == "length" and len(o.token_ids) == 20
    text = out[0].text
    stop = text[3:6] if len(text) > 6 else None
    if stop and stop.strip():
        cut = draftwise.generate(str(target), ["def add"], drafter="ngram", max_new_tokens=20, stop=stop,
                                 ignore_eos=True)[0]
        assert cut.finish_reason == "stop" and stop not in cut.text
        assert out[0].token_ids[: len(cut.token_ids)] == cut.token_ids
    # EOS ends a request and is kept in token_ids
    eos = tok.eos_token_id
    model = draftwise.load_target(str(target))
    forced = draftwise.generate(model, [[1, 2, 3]], max_new_tokens=20, ignore_eos=True)[0].token_ids
    model.model.generation_config.eos_token_id = forced[4]
    ended = draftwise.generate(model, [[1, 2, 3]], max_new_tokens=20)[0]
    assert ended.finish_reason == "eos" and ended.token_ids == forced[: forced.index(forced[4]) + 1]
    assert eos is not None


def test_cli_generate(pair, capsys):
    from draftwise.cli import main

    _, _, target = pair
    rc = main(["generate", "--target", str(target), "--drafter", "ngram", "-D", "3", "--max-new-tokens", "6",
               "--prompt", "def add", "--json"])
    assert rc == 0
    line = capsys.readouterr().out.strip().splitlines()[0]
    rec = json.loads(line)
    assert len(rec["token_ids"]) <= 6 and rec["prompt"] == "def add"
    rc = main(["generate", "--target", "/nonexistent", "--prompt", "x"])
    assert rc == 2
