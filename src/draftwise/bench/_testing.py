"""Tiny random models for tests and smoke runs of the benchmark (not part of the public API)."""
from __future__ import annotations

from pathlib import Path

from draftwise.bench.datasets import DATA_DIR

PLAIN_CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def corpus_text() -> str:
    """Some text to train a tokenizer on: the bundled prompts and seed passages."""
    import json

    parts = []
    for line in (DATA_DIR / "qualitative.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            parts += json.loads(line)["turns"]
    seeds = json.loads((DATA_DIR / "throughput_seeds.json").read_text(encoding="utf-8"))
    for tier in seeds.values():
        parts += tier["seeds"] + [tier["filler"], tier["instruction"], tier["closing"]]
    return "\n\n".join(parts)


def make_tiny_target(out_dir: str | Path, vocab_size: int = 400, hidden: int = 32, layers: int = 2,
                     max_positions: int = 1024, chat_template: bool = False, seed: int = 0) -> Path:
    """A random Llama (initializer_range 0.1, untied embeddings) with a byte-level BPE tokenizer."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([corpus_text()], trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                   unk_token="<|endoftext|>", pad_token="<|endoftext|>",
                                   model_max_length=max_positions)
    if chat_template:
        fast.chat_template = PLAIN_CHAT_TEMPLATE
    fast.save_pretrained(str(out))
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(fast), hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=max_positions, initializer_range=0.1, tie_word_embeddings=False,
                      bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
                      pad_token_id=fast.pad_token_id)
    model = LlamaForCausalLM(cfg)
    model.save_pretrained(str(out))
    return out


class ByteTokenizer:
    """A dependency-free tokenizer (one id per UTF-8 byte) without a chat template."""

    chat_template = None
    eos_token_id = None

    def encode(self, text, add_special_tokens=False):
        return list(text.encode("utf-8"))

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": self.encode(text)}

    def decode(self, ids, skip_special_tokens=False):
        return bytes(int(i) % 256 for i in ids).decode("utf-8", errors="replace")


class FakeBackend:
    """Deterministic stand-in for the engine: the generated tokens depend only on the prompt (so
    every drafter is 'lossless'), step lengths on (prompt, drafter, D). ``fail_after`` raises
    RuntimeError after that many generate calls (to simulate a kill)."""

    def __init__(self, tokenizer=None, max_positions=100_000, fail_after=None, step_time=0.0):
        self.tokenizer = tokenizer or ByteTokenizer()
        self.max_positions = max_positions
        self.fail_after = fail_after
        self.calls = 0
        self.step_time = step_time
        self.prompts_seen: list[list[int]] = []

    def generate(self, prompts, drafter, D, max_new_tokens, temperature=0.0, top_k=None, top_p=None,
                 seed=None, ignore_eos=False, stop=None, stream=None):
        import random

        if self.fail_after is not None and self.calls >= self.fail_after:
            raise RuntimeError("simulated kill")
        self.calls += 1
        outs = []
        for row, p in enumerate(prompts):
            self.prompts_seen.append(list(p))
            rng = random.Random(sum(p) * 31 + len(p))
            toks = [97 + rng.randrange(26) for _ in range(max_new_tokens)]
            srng = random.Random(f"{sum(p)}-{drafter}-{D}")
            steps, left = [], max_new_tokens - 1
            while left > 0:
                L = 1 if drafter in (None, "none") else min(left, srng.randint(1, D + 1))
                steps.append(L)
                left -= L
            t = 0.001
            times = [t]
            for L in steps:
                t += 0.001 + self.step_time
                times += [t] * L
            if stream is not None:
                stream(row, toks[:1])
                pos = 1
                for L in steps:
                    stream(row, toks[pos:pos + L])
                    pos += L
            outs.append({"token_ids": toks, "text": self.tokenizer.decode(toks), "accept_lengths": steps,
                         "num_drafted": [0 if drafter in (None, "none") else D for _ in steps],
                         "token_times": times, "finish_reason": "length"})
        return outs
