"""Reference-model zoo: corpus split, tokenizer, resumable training, HF folders, committed models.

Everything here runs on a few KB of text with tiny models; no Debian package or network needed.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

import torch

from draftwise.zoo import build, corpus, tokenizer  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ZOO = REPO / "zoo"

CODE = '''import os


def walk(root):
    """Yield every file below root."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames:
            yield os.path.join(dirpath, name)


class Counter:
    def __init__(self):
        self.n = 0

    def add(self, k=1):
        self.n += k
        return self.n
'''
PLAY = """HAMLET.
To be, or not to be, that is the question:
Whether 'tis nobler in the mind to suffer
The slings and arrows of outrageous fortune,

HORATIO.
My lord, I came to see your father's funeral.
"""
BIBLE = "\n".join(f"Ge1:{i} And God said, Let there be light number {i}: and there was light."
                  for i in range(1, 8)) + "\nEx1:1 Now these are the names of the children of Israel.\n"


def _text_dir(tmp: Path) -> Path:
    d = tmp / "texts"
    for sub, text, reps in (("code", CODE, 30), ("play", PLAY, 40)):
        (d / sub).mkdir(parents=True)
        for i in range(3):
            (d / sub / f"doc{i}.txt").write_text((text + "\n") * (reps // 3 + i))
    return d


def test_corpus_split_is_deterministic_and_disjoint(tmp_path):
    d = _text_dir(tmp_path)
    srcs = [corpus.Source(p.name, "text", "test", "tmp", (lambda p=p: corpus.load_text_dir(p)))
            for p in sorted(d.iterdir())]
    m1 = corpus.assemble(tmp_path / "c1", srcs, fraction=0.05)
    m2 = corpus.assemble(tmp_path / "c2", srcs, fraction=0.05)
    assert m1 == m2
    for name in ("code", "play"):
        tr = (tmp_path / "c1" / name / "train.txt").read_text()
        va = (tmp_path / "c1" / name / "val.txt").read_text()
        assert va.strip() and tr.strip()
        assert tr == (tmp_path / "c2" / name / "train.txt").read_text()
        assert m1[name]["val_bytes"] < m1[name]["train_bytes"]
    md = corpus.corpus_markdown(m1)
    assert "| code |" in md and "total" in md


def test_bible_parser_strips_verse_numbers():
    docs = list(corpus.load_bible_kjv(BIBLE))
    assert [n for n, _ in docs] == ["Ge", "Ex"]
    assert docs[0][1].startswith("CHAPTER 1\nAnd God said")
    assert "Ge1:" not in docs[0][1]


def test_safe_chunks_cover_text():
    text = (CODE + PLAY) * 50
    chunks = build._safe_chunks(text, target_chars=500)
    assert "".join(chunks) == text and len(chunks) > 5


@pytest.fixture(scope="module")
def tiny_tok(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tok")
    f = tmp / "train.txt"
    f.write_text((CODE + PLAY + BIBLE) * 20)
    tok = tokenizer.train_tokenizer([f], vocab_size=400)
    tokenizer.save_tokenizer(tok, tmp / "tok")
    return tok, tmp / "tok", f


def test_tokenizer_roundtrip_and_hf_loading(tiny_tok):
    from transformers import AutoTokenizer
    tok, folder, f = tiny_tok
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        assert (folder / name).exists()
    hf = AutoTokenizer.from_pretrained(str(folder))
    assert hf.eos_token == "<|endoftext|>" and hf.eos_token_id == 0
    assert hf.pad_token == "<|pad|>" and hf.pad_token_id == 1
    s = "def add(self, k=1):\n        return  é ünïcode\t€\n<|endoftext|>HAMLET.\n"
    ids = hf.encode(s, add_special_tokens=False)
    assert hf.decode(ids) == s
    assert 0 in ids  # the special token is one id
    text = f.read_text()
    whole = np.asarray(tok.encode(text, add_special_tokens=False).ids, dtype=np.uint16)
    assert np.array_equal(build.encode_text(tok, text), whole)


def _data(tiny_tok):
    tok, _, f = tiny_tok
    return build.encode_text(tok, f.read_text())


def test_resume_gives_identical_weights(tiny_tok, tmp_path):
    data = _data(tiny_tok)
    ms, _ = build.PRESETS["tiny"]
    ts = build.TrainSpec(tokens=8 * 2 * 32, seq_len=32, batch=2, warmup_steps=2, seed=7)
    kw = dict(compile=False, progress=False, threads=1)
    ref = build.train_model("t", ms, ts, data, 400, tmp_path / "a", ckpt_every_steps=100, **kw)
    stopped = build.train_model("t", ms, ts, data, 400, tmp_path / "b", ckpt_every_steps=3,
                                stop_after_steps=5, **kw)   # "killed" after step 5, last checkpoint at 3
    assert stopped is None
    state = json.loads((tmp_path / "b" / "state.json").read_text())
    assert state["step"] == 3 and not state["done"]
    resumed = build.train_model("t", ms, ts, data, 400, tmp_path / "b", ckpt_every_steps=3, **kw)
    a, b = ref.state_dict(), resumed.state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    # a mismatching configuration refuses to resume
    with pytest.raises(ValueError):
        build.train_model("t", ms, build.TrainSpec(tokens=999, seq_len=32, batch=2), data, 400,
                          tmp_path / "b", **kw)


def _args(**kw):
    ns = dict(out=None, work_dir=None, corpus_dir=None, text_dir=None, install=False, stage="all",
              preset="tiny", vocab_size=400, target_tokens=6 * 2 * 64, draft_tokens=6 * 2 * 64,
              target_lr=3e-3, draft_lr=3e-3, target_extend_tokens=3 * 2 * 64, target_extend_lr=1e-3, target_batch=2, draft_batch=2, seq_len=64, seed=1,
              ckpt_minutes=5.0, eval_tokens=256, threads=1, compile=False, bf16=False, no_progress=True)
    ns.update(kw)
    return argparse.Namespace(**ns)


def test_build_end_to_end_tiny(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    d = _text_dir(tmp_path)
    out, work = tmp_path / "zoo", tmp_path / "work"
    args = _args(out=str(out), work_dir=str(work), text_dir=[str(d / "code"), str(d / "play")])
    assert build.run_build(args) == 0
    for name in ("target", "draft"):
        folder = out / name
        for f in ("config.json", "model.safetensors", "generation_config.json", "tokenizer.json"):
            assert (folder / f).exists(), f
        m = AutoModelForCausalLM.from_pretrained(str(folder))
        assert m.dtype == torch.bfloat16 and m.config.num_key_value_heads == 1
        tok = AutoTokenizer.from_pretrained(str(folder))
        ids = tok("def walk(root):\n", return_tensors="pt").input_ids
        gen = m.generate(ids, max_new_tokens=5, do_sample=False, pad_token_id=1)
        assert gen.shape[1] <= ids.shape[1] + 5
        assert m.generation_config.eos_token_id == 0
    segs = json.loads((out / "target" / "training.json").read_text())["segments"]
    assert [s["steps"] for s in segs] == [6, 3] and all(s["done"] for s in segs)
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics["sources"]) == {"code", "play"}
    for s in metrics["sources"].values():
        assert 0.0 <= s["greedy_agreement"] <= 1.0 and s["target_ppl"] > 1.0
    assert (out / "README.md").read_text().startswith("# Reference models")
    assert (out / "CORPUS.md").exists()
    # a second run finds everything done and only re-evaluates
    before = (out / "target" / "model.safetensors").read_bytes()
    assert build.run_build(args) == 0
    assert (out / "target" / "model.safetensors").read_bytes() == before


def test_cli_registers_zoo_build():
    from draftwise.cli import build_parser
    args = build_parser().parse_args(["zoo", "build", "--stage", "tokenizer", "--vocab-size", "512"])
    assert args.func is build.run_build and args.vocab_size == 512




def _load_zoo():
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(ZOO / "target"))
    target = AutoModelForCausalLM.from_pretrained(str(ZOO / "target"), dtype=torch.float32)
    draft = AutoModelForCausalLM.from_pretrained(str(ZOO / "draft"), dtype=torch.float32)
    return tok, target.eval(), draft.eval()


def test_committed_zoo_loads_and_generates():
    tok, target, draft = _load_zoo()
    assert target.config.num_key_value_heads < target.config.num_attention_heads    # GQA
    assert draft.config.vocab_size == target.config.vocab_size == len(tok)
    assert tok.eos_token_id == target.generation_config.eos_token_id == 0 and tok.pad_token_id == 1
    n_t = sum(p.numel() for p in target.parameters())
    n_d = sum(p.numel() for p in draft.parameters())
    assert n_d < n_t
    ids = tok("And it came to pass", return_tensors="pt").input_ids
    with torch.inference_mode():
        for m in (target, draft):
            out = m.generate(ids, max_new_tokens=16, do_sample=False, pad_token_id=1)
            assert out.shape[1] == ids.shape[1] + 16 or out[0, -1] == 0
            assert any(c.isalpha() for c in tok.decode(out[0, ids.shape[1]:]))
        # the pair is a real (trained) pair: the draft agrees with the target far above chance
        x = tok("In the beginning God created the heaven and the earth. And the earth was without form, "
                "and void; and darkness was upon the face of the deep.", return_tensors="pt").input_ids
        agree = (target(x).logits.argmax(-1) == draft(x).logits.argmax(-1)).float().mean().item()
    assert agree > 0.2, agree
    total = sum(f.stat().st_size for f in ZOO.rglob("*") if f.is_file())
    assert total < 60e6


