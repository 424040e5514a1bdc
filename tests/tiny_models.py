"""Tiny random-initialised models of several architectures, built from configs (no downloads).

Random models collapse into repeating one token unless initialised with a larger range and untied
embeddings; these settings give varied greedy outputs, so exactness tests exercise real branching.
"""
from __future__ import annotations

import torch
import transformers as T
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from draftwise.drafters.draft_model import perturbed_copy

VOCAB = 128
COMMON = dict(vocab_size=VOCAB, initializer_range=0.1, tie_word_embeddings=False, max_position_embeddings=512)

CONFIGS = {
    "llama": lambda: T.LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                   intermediate_size=128, **COMMON),
    "qwen3": lambda: T.Qwen3Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                   head_dim=16, intermediate_size=128, **COMMON),
    "gpt2": lambda: T.GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=512,
                                 initializer_range=0.1, tie_word_embeddings=False),
    "mixtral": lambda: T.MixtralConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                       intermediate_size=96, num_local_experts=4, num_experts_per_tok=2, **COMMON),
    "qwen3_next": lambda: T.Qwen3NextConfig(
        hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        intermediate_size=96, linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=16,
        linear_value_head_dim=16, linear_conv_kernel_dim=4, num_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=48, shared_expert_intermediate_size=48, **COMMON),
    "mamba2": lambda: T.Mamba2Config(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, state_size=16, num_heads=8,
                                     head_dim=16, n_groups=1, expand=2, conv_kernel=4, initializer_range=0.1,
                                     tie_word_embeddings=False),
    "falcon_h1": lambda: T.FalconH1Config(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        intermediate_size=128, mamba_d_ssm=128, mamba_n_heads=8, mamba_d_head=16, mamba_d_state=16,
        mamba_n_groups=1, mamba_d_conv=4, **COMMON),
    "mistral_swa": lambda: T.MistralConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                           num_key_value_heads=2, intermediate_size=128, sliding_window=256, **COMMON),
    "phi3": lambda: T.Phi3Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                 intermediate_size=128, pad_token_id=0, **COMMON),
}


def build(arch: str, seed: int = 0, dtype=torch.float32):
    torch.manual_seed(seed)
    model = T.AutoModelForCausalLM.from_config(CONFIGS[arch]()).to(dtype).eval()
    return model


def noisy_copy(model, scale: float = 0.1, seed: int = 1):
    """A draft that agrees with the target most of the time: the target's weights plus relative noise."""
    return perturbed_copy(model, scale, seed)


TEXT = ("def add(a, b):\n    return a + b\n" * 20 + "In the beginning was the word, and the word was with God.\n" * 20
        + "To be, or not to be, that is the question.\n" * 20)


def make_tokenizer(vocab_size, extra=""):
    """A byte-level BPE trained on a few lines of code, scripture and Shakespeare."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([TEXT + extra], trainer)
    return T.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")


def save_model(tmp_path, name, vocab, tokenizer=None, seed=0, max_positions=64):
    """A tiny Llama folder (config + safetensors [+ tokenizer]) as a user would have on disk."""
    torch.manual_seed(seed)
    cfg = T.LlamaConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        num_key_value_heads=1, intermediate_size=64, initializer_range=0.1,
                        tie_word_embeddings=False, max_position_embeddings=max_positions)
    path = tmp_path / name
    T.LlamaForCausalLM(cfg).save_pretrained(path)
    if tokenizer is not None:
        tokenizer.save_pretrained(path)
    return path
