"""What a model costs to run: a per-layer description built from a Hugging Face config.

`describe(x)` takes a `PretrainedConfig`, a config dict, a path to a config.json or a model folder,
or the name of a bundled config (`src/draftwise/data/planner/models/NAME.json`, see
`bundled_models()`), and returns a `ModelDesc`: for every layer its token mixer (full /
sliding-window / MLA attention, or a linear-recurrent mixer: gated delta net, Mamba2; FalconH1
layers carry both) and its MLP (dense, or MoE with n experts, top-k and shared experts), with
parameter counts, weight bytes, KV bytes per token, recurrent state bytes per sequence and FLOPs.

`drafter_desc(kind, target, ...)` describes what each drafter type adds per step (a draft model, an
n-gram / suffix matcher, EAGLE-3, MTP, DFlash, DSpark).

Counts ignore biases and norm weights (well under 0.1 % of any model here).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Optional

_DTYPE_BYTES = {
    "float32": 4, "fp32": 4, "float": 4, "float16": 2, "fp16": 2, "half": 2, "bfloat16": 2, "bf16": 2,
    "float8": 1, "fp8": 1, "float8_e4m3fn": 1, "e4m3": 1, "int8": 1, "int4": 0.5, "fp4": 0.5, "nvfp4": 0.5,
}


def dtype_bytes(name: Any, default: float = 2) -> float:
    """Bytes per element of a dtype name ("bfloat16", "torch.float32", "fp8" …)."""
    if name is None:
        return default
    s = str(name).replace("torch.", "").lower()
    if s not in _DTYPE_BYTES:
        raise ValueError(f"unknown dtype {name!r}; known: {sorted(_DTYPE_BYTES)}")
    return _DTYPE_BYTES[s]


# --------------------------------------------------------------------------------------------
# layer pieces


@dataclass
class AttentionDesc:
    """Softmax attention of one layer.

    kind: "full" | "sliding" | "mla". For MLA the cache holds one latent of kv_elems per token that
    every query head reads (weight-absorbed decode), so the group size is all query heads.
    qk_dim / v_dim: per-head dimension of the score dot product and of the value sum as computed
    at decode time (MLA absorbed: kv_lora_rank + rope, kv_lora_rank).
    """

    kind: str
    num_heads: int
    num_kv_heads: int
    qk_dim: int
    v_dim: int
    kv_elems_per_token: int
    params: int
    window: Optional[int] = None

    @property
    def group_size(self) -> float:
        return self.num_heads / max(1, self.num_kv_heads)

    def context(self, length: int) -> int:
        """Cached tokens a query attends to at context `length`."""
        return min(length, self.window) if (self.kind == "sliding" and self.window) else length

    def flops_per_token(self, length: int) -> float:
        return 2.0 * self.num_heads * self.context(length) * (self.qk_dim + self.v_dim)


@dataclass
class RecurrentDesc:
    """A linear-recurrent token mixer (gated delta net, Mamba2): constant state per sequence."""

    kind: str
    state_elems: int          # recurrent state + convolution window, per sequence
    params: int
    flops_per_token: float    # state update + read-out, excluding the projections in `params`


@dataclass
class MLPDesc:
    """kind "dense": `dense_params` only; "moe": n_experts of expert_params each, top_k routed per
    token, plus always-on shared experts (dense_params) and the router (router_params)."""

    kind: str
    dense_params: int = 0
    n_experts: int = 0
    top_k: int = 0
    expert_params: int = 0
    router_params: int = 0

    @property
    def total_params(self) -> int:
        return self.dense_params + self.n_experts * self.expert_params + self.router_params

    @property
    def active_params(self) -> int:
        return self.dense_params + self.top_k * self.expert_params + self.router_params

    def expected_experts(self, tokens: float) -> float:
        return expected_experts(self.n_experts, self.top_k, tokens)


def expected_experts(n: int, k: int, tokens: float) -> float:
    """Expected distinct experts touched by `tokens` tokens routing top-k of n uniformly:
    n·(1 − (1 − k/n)^tokens)."""
    if n <= 0 or tokens <= 0:
        return 0.0
    return n * (1.0 - (1.0 - k / n) ** tokens)


@dataclass
class LayerDesc:
    index: int
    attention: Optional[AttentionDesc] = None
    recurrent: Optional[RecurrentDesc] = None
    mlp: Optional[MLPDesc] = None

    @property
    def kind(self) -> str:
        parts = []
        if self.attention:
            parts.append(self.attention.kind)
        if self.recurrent:
            parts.append(self.recurrent.kind)
        if self.mlp:
            parts.append("moe" if self.mlp.kind == "moe" else "dense")
        return "+".join(parts)

    @property
    def dense_params(self) -> int:
        """Weights every token multiplies with (projections, dense MLP, shared experts, router)."""
        p = (self.attention.params if self.attention else 0) + (self.recurrent.params if self.recurrent else 0)
        if self.mlp:
            p += self.mlp.dense_params + self.mlp.router_params
        return p

    @property
    def total_params(self) -> int:
        p = (self.attention.params if self.attention else 0) + (self.recurrent.params if self.recurrent else 0)
        return p + (self.mlp.total_params if self.mlp else 0)

    @property
    def active_params(self) -> int:
        p = (self.attention.params if self.attention else 0) + (self.recurrent.params if self.recurrent else 0)
        return p + (self.mlp.active_params if self.mlp else 0)


@dataclass
class ModelDesc:
    name: str
    model_type: str
    hidden_size: int
    vocab_size: int
    layers: list[LayerDesc]
    embed_params: int
    head_params: int               # LM head rows × hidden, read every step (tied or not)
    tied_embeddings: bool = False
    weight_bytes_per_param: float = 2
    kv_bytes_per_elem: float = 2
    state_bytes_per_elem: float = 2
    intermediate_size: int = 0     # dense MLP width (drafters built from this target copy it)
    num_mtp_layers: int = 0
    config: dict = field(default_factory=dict, repr=False)

    # ---- parameter counts
    @property
    def total_params(self) -> int:
        emb = self.embed_params + (0 if self.tied_embeddings else self.head_params)
        return emb + sum(l.total_params for l in self.layers)

    @property
    def active_params(self) -> int:
        """Parameters a token multiplies with (LM head included, embedding lookup not)."""
        return self.head_params + sum(l.active_params for l in self.layers)

    @property
    def weight_bytes(self) -> float:
        return self.total_params * self.weight_bytes_per_param

    # ---- caches
    @property
    def kv_elems_per_token(self) -> int:
        """KV elements per cached token over layers whose cache grows with context (full, MLA)."""
        return sum(l.attention.kv_elems_per_token for l in self.layers
                   if l.attention and l.attention.kind != "sliding")

    @property
    def kv_bytes_per_token(self) -> float:
        return self.kv_elems_per_token * self.kv_bytes_per_elem

    def kv_bytes_per_sequence(self, length: int) -> float:
        """KV (all attention layers, sliding windows capped) + recurrent state of one sequence."""
        kv = sum(l.attention.kv_elems_per_token * l.attention.context(length)
                 for l in self.layers if l.attention)
        return kv * self.kv_bytes_per_elem + self.state_bytes_per_sequence

    @property
    def state_bytes_per_sequence(self) -> float:
        return sum(l.recurrent.state_elems for l in self.layers if l.recurrent) * self.state_bytes_per_elem

    # ---- compute
    def flops_per_token(self, context_length: int = 0) -> float:
        f = 2.0 * self.active_params
        for l in self.layers:
            if l.attention:
                f += l.attention.flops_per_token(context_length)
            if l.recurrent:
                f += l.recurrent.flops_per_token
        return f

    def layer_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for l in self.layers:
            out[l.kind] = out.get(l.kind, 0) + 1
        return out

    @property
    def attention_group_size(self) -> Optional[float]:
        gs = [l.attention.group_size for l in self.layers if l.attention]
        return max(gs) if gs else None

    @property
    def moe(self) -> Optional[MLPDesc]:
        for l in self.layers:
            if l.mlp and l.mlp.kind == "moe":
                return l.mlp
        return None

    def summary(self) -> dict:
        moe = self.moe
        return {
            "name": self.name,
            "model_type": self.model_type,
            "num_layers": len(self.layers),
            "layer_kinds": self.layer_counts(),
            "hidden_size": self.hidden_size,
            "vocab_size": self.vocab_size,
            "total_params": self.total_params,
            "active_params": self.active_params,
            "weight_bytes": self.weight_bytes,
            "weight_bytes_per_param": self.weight_bytes_per_param,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "state_bytes_per_sequence": self.state_bytes_per_sequence,
            "attention_group_size": self.attention_group_size,
            "moe": None if moe is None else {"experts": moe.n_experts, "top_k": moe.top_k,
                                             "expert_params": moe.expert_params,
                                             "shared_params": moe.dense_params},
            "flops_per_token_at_context_0": self.flops_per_token(0),
        }


# --------------------------------------------------------------------------------------------
# loading configs


def bundled_models() -> list[str]:
    d = resources.files("draftwise") / "data" / "planner" / "models"
    try:
        return sorted(p.name[:-5] for p in d.iterdir() if p.name.endswith(".json"))
    except FileNotFoundError:  # pragma: no cover
        return []


def load_config(source: Any) -> tuple[dict, str]:
    """(config dict, display name) from a PretrainedConfig, dict, config.json, folder or bundled name."""
    if hasattr(source, "to_dict"):
        cfg = source.to_dict()
        return cfg, cfg.get("_name_or_path") or cfg.get("model_type", "model")
    if isinstance(source, dict):
        return dict(source), source.get("_name_or_path") or source.get("name") or source.get("model_type", "model")
    s = str(source)
    p = Path(s)
    if p.is_dir():
        p = p / "config.json"
    if p.is_file():
        return json.loads(p.read_text()), (p.parent.name if p.name == "config.json" else p.stem)
    names = {n.lower(): n for n in bundled_models()}
    key = s.lower().split("/")[-1]
    if key in names:
        f = resources.files("draftwise") / "data" / "planner" / "models" / f"{names[key]}.json"
        cfg = json.loads(f.read_text())
        return cfg, names[key]
    raise FileNotFoundError(f"no model config at {s!r} (not a file, folder or bundled name; "
                            f"bundled: {', '.join(bundled_models())})")


def _get(cfg: dict, *names: str, default: Any = None) -> Any:
    for n in names:
        if cfg.get(n) is not None:
            return cfg[n]
    return default


def describe(source: Any, *, weight_dtype: Any = None, kv_dtype: Any = None,
             name: Optional[str] = None) -> ModelDesc:
    """Model description from a config (see module docstring). `weight_dtype` / `kv_dtype`
    override the config's dtype ("bfloat16", "fp8", "float32" …)."""
    if isinstance(source, ModelDesc):
        return source
    cfg, disp = load_config(source)
    if isinstance(cfg.get("text_config"), dict) and "hidden_size" not in cfg:
        outer = cfg
        cfg = dict(cfg["text_config"])
        cfg.setdefault("torch_dtype", outer.get("torch_dtype") or outer.get("dtype"))
    mt = str(cfg.get("model_type", "")).lower()
    if mt == "gpt2" or "n_embd" in cfg:
        cfg = _from_gpt2(cfg)
        mt = "gpt2"

    cfg_dtype = _get(cfg, "torch_dtype", "dtype", default="bfloat16")
    wb = dtype_bytes(weight_dtype) if weight_dtype is not None else dtype_bytes(cfg_dtype)
    q = cfg.get("quantization_config") or {}
    if weight_dtype is None and isinstance(q, dict):
        qm = str(q.get("quant_method", "")).lower()
        fmt = str(q.get("fmt", q.get("quant_type", ""))).lower()
        if qm == "fp8" or "e4m3" in fmt:
            wb = 1
        elif q.get("bits") in (4, 8):
            wb = q["bits"] / 8
    kvb = dtype_bytes(kv_dtype) if kv_dtype is not None else dtype_bytes(cfg_dtype)

    d = int(cfg["hidden_size"])
    vocab = int(cfg["vocab_size"])
    n_layers = int(_get(cfg, "num_hidden_layers", "n_layer", "num_layers"))
    tied = bool(cfg.get("tie_word_embeddings", mt == "gpt2"))
    layer_types = _layer_types(cfg, mt, n_layers)

    layers = []
    for i, lt in enumerate(layer_types):
        layer = LayerDesc(index=i)
        if lt in ("full_attention", "sliding_attention", "attention", "hybrid"):
            layer.attention = _attention(cfg, mt, d, sliding=(lt == "sliding_attention"))
        if lt in ("linear_attention",):
            layer.recurrent = _gated_delta_net(cfg, d)
        if lt in ("mamba", "hybrid", "mamba_only"):
            layer.recurrent = _mamba2(cfg, d, mt)
        if not (mt in ("mamba2", "mamba") or lt == "mamba_only"):
            layer.mlp = _mlp(cfg, mt, d, i)
        layers.append(layer)

    return ModelDesc(
        name=name or disp, model_type=mt, hidden_size=d, vocab_size=vocab, layers=layers,
        embed_params=vocab * d, head_params=vocab * d, tied_embeddings=tied,
        weight_bytes_per_param=wb, kv_bytes_per_elem=kvb, state_bytes_per_elem=kvb,
        intermediate_size=int(_get(cfg, "intermediate_size", default=4 * d)),
        num_mtp_layers=int(_get(cfg, "num_nextn_predict_layers", "mtp_num_hidden_layers", default=0)),
        config=cfg,
    )


def _from_gpt2(cfg: dict) -> dict:
    c = dict(cfg)
    d = c.get("n_embd", c.get("hidden_size"))
    c.update(hidden_size=d, num_hidden_layers=c.get("n_layer"), num_attention_heads=c.get("n_head"),
             num_key_value_heads=c.get("n_head"), intermediate_size=c.get("n_inner") or 4 * d,
             _mlp_matrices=2, model_type="gpt2")
    return c


def _layer_types(cfg: dict, mt: str, n: int) -> list[str]:
    if mt in ("mamba2", "mamba"):
        return ["mamba_only"] * n
    if mt == "falcon_h1":
        return ["hybrid"] * n
    lt = cfg.get("layer_types")
    if isinstance(lt, list) and len(lt) >= n:
        out = []
        for t in lt[:n]:
            t = str(t).lower()
            if t in ("linear_attention", "gated_delta_net", "linear"):
                out.append("linear_attention")
            elif t in ("mamba", "mamba2", "ssm", "m"):
                out.append("mamba")
            elif "sliding" in t or t in ("local", "local_attention", "chunked_attention"):
                out.append("sliding_attention")
            else:
                out.append("full_attention")
        return out
    if mt == "qwen3_next" and cfg.get("full_attention_interval"):
        k = int(cfg["full_attention_interval"])
        return ["full_attention" if (i + 1) % k == 0 else "linear_attention" for i in range(n)]
    if cfg.get("sliding_window") and cfg.get("use_sliding_window", mt in ("mistral", "mixtral")):
        max_w = int(cfg.get("max_window_layers", n) or n)
        if mt.startswith("qwen"):  # Qwen: layers from max_window_layers on use the window
            return ["full_attention" if i < max_w else "sliding_attention" for i in range(n)]
        return ["sliding_attention"] * n
    return ["full_attention"] * n


def _attention(cfg: dict, mt: str, d: int, sliding: bool) -> AttentionDesc:
    h = int(cfg["num_attention_heads"])
    if cfg.get("kv_lora_rank"):  # MLA (DeepSeek-V2/V3, Kimi K2 …)
        r_kv = int(cfg["kv_lora_rank"])
        r_q = cfg.get("q_lora_rank")
        nope, rope, vd = int(cfg["qk_nope_head_dim"]), int(cfg["qk_rope_head_dim"]), int(cfg["v_head_dim"])
        q_params = (d * int(r_q) + int(r_q) * h * (nope + rope)) if r_q else d * h * (nope + rope)
        params = q_params + d * (r_kv + rope) + r_kv * h * (nope + vd) + h * vd * d
        return AttentionDesc("mla", h, 1, qk_dim=r_kv + rope, v_dim=r_kv,
                             kv_elems_per_token=r_kv + rope, params=params)
    hkv = int(_get(cfg, "num_key_value_heads", default=h))
    hd = int(_get(cfg, "head_dim", default=d // h))
    q_out = h * hd * (2 if mt == "qwen3_next" else 1)  # Qwen3-Next: gated attention output
    params = d * q_out + 2 * d * hkv * hd + h * hd * d
    window = cfg.get("sliding_window") if sliding else None
    return AttentionDesc("sliding" if sliding else "full", h, hkv, qk_dim=hd, v_dim=hd,
                         kv_elems_per_token=2 * hkv * hd, params=params,
                         window=int(window) if window else None)


def _gated_delta_net(cfg: dict, d: int) -> RecurrentDesc:
    nk, nv = int(cfg["linear_num_key_heads"]), int(cfg["linear_num_value_heads"])
    dk, dv = int(cfg["linear_key_head_dim"]), int(cfg["linear_value_head_dim"])
    kern = int(cfg.get("linear_conv_kernel_dim", 4))
    key_dim, value_dim = nk * dk, nv * dv
    conv_dim = 2 * key_dim + value_dim
    params = d * (2 * key_dim + 2 * value_dim) + d * 2 * nv + conv_dim * kern + value_dim * d
    state = nv * dk * dv + conv_dim * (kern - 1)
    # delta rule per token and value head: S·k, rank-1 update, S·q → ~3 matvecs of dk×dv
    return RecurrentDesc("gated_delta_net", state, params, flops_per_token=6.0 * nv * dk * dv)


def _mamba2(cfg: dict, d: int, mt: str) -> RecurrentDesc:
    if mt == "falcon_h1":
        nh, hd = int(cfg["mamba_n_heads"]), int(cfg["mamba_d_head"])
        d_inner = int(cfg.get("mamba_d_ssm") or nh * hd)
        ng, n_state, kern = int(cfg["mamba_n_groups"]), int(cfg["mamba_d_state"]), int(cfg["mamba_d_conv"])
    else:
        d_inner = int(cfg.get("expand", 2) * d)
        nh = int(cfg.get("num_heads") or d_inner // int(cfg.get("head_dim", 64)))
        hd = d_inner // nh
        ng, n_state, kern = int(cfg.get("n_groups", 1)), int(cfg.get("state_size", 128)), int(cfg.get("conv_kernel", 4))
    conv_dim = d_inner + 2 * ng * n_state
    params = d * (2 * d_inner + 2 * ng * n_state + nh) + conv_dim * kern + d_inner * d
    state = nh * hd * n_state + conv_dim * (kern - 1)
    return RecurrentDesc("mamba2", state, params, flops_per_token=6.0 * nh * hd * n_state)


def _mlp(cfg: dict, mt: str, d: int, i: int) -> MLPDesc:
    mats = int(cfg.get("_mlp_matrices", 3))
    inter = int(_get(cfg, "intermediate_size", default=4 * d))
    n_exp = int(_get(cfg, "n_routed_experts", "num_experts", "num_local_experts", default=0) or 0)
    if n_exp <= 0 or not _is_moe_layer(cfg, i):
        return MLPDesc("dense", dense_params=mats * d * inter)
    k = int(_get(cfg, "num_experts_per_tok", "moe_topk", default=2))
    e_inter = int(_get(cfg, "moe_intermediate_size", default=inter))
    shared = 0
    if cfg.get("n_shared_experts"):
        shared = int(cfg["n_shared_experts"]) * mats * d * e_inter
    elif cfg.get("shared_expert_intermediate_size"):
        shared = mats * d * int(cfg["shared_expert_intermediate_size"]) + d  # + sigmoid gate
    return MLPDesc("moe", dense_params=shared, n_experts=n_exp, top_k=k,
                   expert_params=mats * d * e_inter, router_params=n_exp * d)


def _is_moe_layer(cfg: dict, i: int) -> bool:
    if i < int(cfg.get("first_k_dense_replace", 0) or 0):
        return False
    if i in (cfg.get("mlp_only_layers") or []):
        return False
    step = int(cfg.get("decoder_sparse_step", 1) or 1)
    freq = int(cfg.get("moe_layer_freq", 1) or 1)
    if "decoder_sparse_step" in cfg:
        return (i + 1) % step == 0
    return (i % freq) == 0


# --------------------------------------------------------------------------------------------
# drafters

DRAFTER_KINDS = ("draft_model", "ngram", "suffix", "eagle3", "mtp", "dflash", "dspark")
PARALLEL_DRAFTERS = ("dflash", "dspark")
FREE_DRAFTERS = ("ngram", "suffix")


@dataclass
class DrafterDesc:
    """What one drafter adds to a speculation round.

    autoregressive drafters run `layers` + head once per drafted token (D sequential passes);
    parallel drafters (DFlash, DSpark) run them once over a block of 1 + D positions; free drafters
    (n-gram, suffix) cost a small host-side constant. `once_params`: weights used once per round
    (EAGLE-3's fusion FC over the target's hidden states, DFlash's context projection).
    `head_params`: draft LM head (shared with the target for MTP/DFlash/DSpark, so no extra memory,
    but it is still read). `extra_weight_params`: weights that add to memory use.
    """

    kind: str
    layers: list[LayerDesc] = field(default_factory=list)
    head_params: int = 0
    once_params: int = 0
    extra_weight_params: int = 0
    per_token_head_flops: float = 0.0   # e.g. DSpark's Markov head: 2·rank·vocab per drafted token
    model: Optional[ModelDesc] = None    # the draft model itself, for kind "draft_model"
    host_seconds: float = 30e-6          # host-side cost per round for free drafters
    name: str = ""

    @property
    def parallel(self) -> bool:
        return self.kind in PARALLEL_DRAFTERS

    @property
    def free(self) -> bool:
        return self.kind in FREE_DRAFTERS

    @property
    def params_per_pass(self) -> int:
        return sum(l.active_params for l in self.layers) + self.head_params

    def summary(self) -> dict:
        return {"kind": self.kind, "name": self.name or self.kind, "parallel": self.parallel,
                "free": self.free, "num_layers": len(self.layers),
                "params_per_pass": self.params_per_pass if not self.model else self.model.active_params,
                "extra_weight_params": self.extra_weight_params}


def _dense_layer_like(target: ModelDesc, *, input_mult: int = 1, mlp: str = "dense") -> LayerDesc:
    """A decoder layer shaped like the target's first softmax-attention layer, dense MLP of the
    target's intermediate size (or a copy of the target's MoE MLP when mlp == "target")."""
    src = next((l for l in target.layers if l.attention), None)
    d = target.hidden_size
    if src is not None:
        a = src.attention
        att = AttentionDesc(a.kind if a.kind != "sliding" else "full", a.num_heads, a.num_kv_heads,
                            a.qk_dim, a.v_dim, a.kv_elems_per_token, a.params, None)
        if input_mult > 1 and a.kind != "mla":  # EAGLE-3: q, k, v read [embedding; fused] = 2d
            qkv = a.params - a.num_heads * a.v_dim * d
            att.params = a.params + (input_mult - 1) * qkv
    else:  # no softmax attention in the target (pure SSM): a small MHA layer
        h = max(1, d // 128)
        att = AttentionDesc("full", h, h, 128, 128, 2 * h * 128, (2 + input_mult * 2) * d * d)
    if mlp == "target":
        m = next((l.mlp for l in reversed(target.layers) if l.mlp), MLPDesc("dense", 3 * d * target.intermediate_size))
    else:
        inter = target.intermediate_size or 4 * d
        if target.moe and target.config.get("intermediate_size") is None:
            inter = 4 * d
        m = MLPDesc("dense", dense_params=3 * d * inter)
    return LayerDesc(index=0, attention=att, mlp=m)


def drafter_desc(kind: str, target: ModelDesc, *, config: Any = None, num_layers: Optional[int] = None,
                 draft_vocab_size: Optional[int] = None, markov_rank: int = 256) -> DrafterDesc:
    """Describe a drafter of `kind` for `target`. `config`: the draft model's config (kind
    "draft_model", or a trained EAGLE-3 / DFlash config to read layer shapes from)."""
    kind = kind.lower().replace("-", "_")
    aliases = {"eagle": "eagle3", "eagle_3": "eagle3", "draft": "draft_model", "model": "draft_model",
               "pld": "ngram", "prompt_lookup": "ngram", "nextn": "mtp", "suffixdecoding": "suffix"}
    kind = aliases.get(kind, kind)
    if kind not in DRAFTER_KINDS:
        raise ValueError(f"unknown drafter {kind!r}; known: {', '.join(DRAFTER_KINDS)}")
    d, V = target.hidden_size, target.vocab_size
    if kind in FREE_DRAFTERS:
        return DrafterDesc(kind, name=kind)
    if kind == "draft_model":
        if config is None:
            raise ValueError("drafter 'draft_model' needs the draft model's config (--draft-model)")
        m = describe(config)
        return DrafterDesc(kind, model=m, extra_weight_params=m.total_params, name=m.name)
    if kind == "eagle3":
        dv = draft_vocab_size or (32000 if V > 32000 else V)
        layer = _dense_layer_like(target, input_mult=2)
        fuse = 3 * d * d
        return DrafterDesc(kind, layers=[layer], head_params=dv * d, once_params=fuse,
                           extra_weight_params=layer.total_params + fuse + dv * d, name="eagle3")
    if kind == "mtp":
        n = num_layers or max(1, target.num_mtp_layers)
        layer = _dense_layer_like(target, mlp="target")
        proj = 2 * d * d
        return DrafterDesc(kind, layers=[layer], head_params=V * d, once_params=0,
                           extra_weight_params=n * (layer.total_params + proj), name=f"mtp{n}",
                           per_token_head_flops=2.0 * proj)
    # DFlash / DSpark: ~5 layers over a block, context projection from ~5 target layers, shared head
    n = num_layers or 5
    layers = [_dense_layer_like(target) for _ in range(n)]
    ctx = 5 * d * d
    extra = sum(l.total_params for l in layers) + ctx
    per_tok = 0.0
    if kind == "dspark":
        extra += 2 * markov_rank * V + 2 * d
        per_tok = 2.0 * markov_rank * V  # Markov head bias W1[x]·W2 per drafted token
    return DrafterDesc(kind, layers=layers, head_params=V * d, once_params=ctx,
                       extra_weight_params=extra, per_token_head_flops=per_tok, name=kind)
