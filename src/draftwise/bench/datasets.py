"""Benchmark datasets: SPEED-Bench (specdec_bench-prepared parquet or NeMo-Skills/aiperf JSONL),
Spec-Bench ``question.jsonl``, the bundled qualitative set and synthetic throughput sets.

Accepted ``--dataset`` values:

* ``qualitative`` – the bundled set (``draftwise/data/bench/qualitative.jsonl``): the eleven
  SPEED-Bench categories, prompts written for this project.
* ``throughput-256``, ``throughput-1k``, ``throughput-2k`` … ``throughput-32k`` (also ``throughput_1k``
  or any ``throughput-<n>``): three entropy tiers (low_entropy, mixed, high_entropy) at an exact
  input length, counted with the *target's own tokenizer* (SPEED-Bench counts with tiktoken
  o200k_base; ``k`` means 1000 tokens as in SPEED-Bench). Built from bundled seed texts padded by
  repeating a tier filler passage, then truncated to the exact count; the prompt is sent as token
  ids, without a chat template, so its length is exact.
* a directory holding ``test.parquet`` (specdec_bench ``data/speed/<config>/``), a ``.parquet`` file,
  a ``.jsonl`` file with ``turns`` (SPEED-Bench / Spec-Bench ``question.jsonl``) or ``messages``
  (NeMo-Skills / aiperf / vLLM form), or a directory holding ``question.jsonl``.

Rows whose turns are still SPEED-Bench placeholders are refused (never benchmarked silently).
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Optional, Sequence

from draftwise.bench.metrics import category_order

PLACEHOLDER_PREFIX = "FULL BENCHMARK DATA SHOULD BE FETCHED FROM THE SOURCE USING SPECDEC_BENCH"
MAX_THROUGHPUT_TOKENS = 32_768


@dataclass
class Request:
    """One benchmark conversation. ``turns``: the user messages, in order. ``prompt_token_ids``:
    an exact pre-tokenised single-turn prompt (throughput sets); sent as is when set."""

    question_id: str
    category: str
    turns: list[str]
    sub_category: str = ""
    source: str = ""
    src_id: str = ""
    difficulty: str = ""
    multiturn: bool = False
    system: Optional[str] = None
    prompt_token_ids: Optional[list[int]] = None
    reference: Optional[list[str]] = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if d["prompt_token_ids"] is None:
            d.pop("prompt_token_ids")
        return d


class PlaceholderDataError(ValueError):
    """The dataset still holds SPEED-Bench placeholder rows instead of prompts."""


# --------------------------------------------------------------------------------- row parsing

def _as_str(v: Any) -> str:
    return "" if v is None else str(v)


def _row_to_request(row: dict[str, Any], index: int) -> Request:
    system = None
    if row.get("turns") is not None:
        turns = [str(t) for t in list(row["turns"])]
    elif row.get("messages") is not None:
        turns = []
        for m in row["messages"]:
            role, content = m.get("role"), m.get("content")
            if isinstance(content, list):  # OpenAI content parts
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            if role == "user":
                turns.append(str(content))
            elif role == "system" and system is None:
                system = str(content)
    elif row.get("prompt") is not None:
        turns = [str(row["prompt"])]
    else:
        raise ValueError(f"row {index}: neither 'turns' nor 'messages' (nor 'prompt') present")
    if not turns:
        raise ValueError(f"row {index}: no user turn")
    qid = row.get("question_id", row.get("id", index))
    multiturn = row.get("multiturn")
    ref = row.get("reference")
    return Request(
        question_id=_as_str(qid),
        category=_as_str(row.get("category")) or "default",
        turns=turns,
        sub_category=_as_str(row.get("sub_category")),
        source=_as_str(row.get("source")),
        src_id=_as_str(row.get("src_id")),
        difficulty=_as_str(row.get("difficulty")),
        multiturn=bool(multiturn) if multiturn is not None else len(turns) > 1,
        system=system,
        reference=[str(x) for x in ref] if isinstance(ref, (list, tuple)) else None,
    )


def check_placeholders(requests: Sequence[Request], origin: str) -> None:
    bad = [(i, r) for i, r in enumerate(requests)
           if any(t.lstrip().startswith(PLACEHOLDER_PREFIX) for t in r.turns)]
    if not bad:
        return
    i, r = bad[0]
    raise PlaceholderDataError(
        f"{origin}: row {i} (question_id={r.question_id}, category={r.category}) and "
        f"{len(bad) - 1} more of {len(requests)} rows are SPEED-Bench placeholders "
        f"('{PLACEHOLDER_PREFIX} …'), not prompts. Resolve them first: run specdec_bench's "
        f"prepare_data.py (NVIDIA Model-Optimizer, examples/specdec_bench) for this config, which "
        f"fetches the prompts from their upstream sources, then pass the prepared directory "
        f"(data/speed/<config>/) or its test.parquet to --dataset.")


def load_jsonl(path: str | Path) -> list[Request]:
    path = Path(path)
    rows = []
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f):
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{n + 1}: not JSON ({exc})") from None
    reqs = [_row_to_request(r, i) for i, r in enumerate(rows)]
    check_placeholders(reqs, str(path))
    return reqs


def load_parquet(path: str | Path) -> list[Request]:
    import pyarrow.parquet as pq

    path = Path(path)
    rows = pq.read_table(path).to_pylist()
    reqs = [_row_to_request(r, i) for i, r in enumerate(rows)]
    check_placeholders(reqs, str(path))
    return reqs


def load_spec_bench(path: str | Path) -> list[Request]:
    """Spec-Bench ``question.jsonl``: {question_id, category, turns[, reference]}."""
    return load_jsonl(path)


def load_path(path: str | Path) -> list[Request]:
    path = Path(path)
    if path.is_dir():
        for name in ("test.parquet", "question.jsonl"):
            if (path / name).is_file():
                return load_path(path / name)
        files = sorted(path.glob("*.parquet")) or sorted(path.glob("*.jsonl"))
        if len(files) == 1:
            return load_path(files[0])
        raise FileNotFoundError(f"{path}: expected test.parquet, question.jsonl or one .parquet/.jsonl file")
    if not path.is_file():
        raise FileNotFoundError(f"dataset not found: {path}")
    if path.suffix == ".parquet":
        return load_parquet(path)
    if path.suffix in (".jsonl", ".json"):
        return load_jsonl(path)
    raise ValueError(f"{path}: unknown dataset format (want .parquet or .jsonl)")


# ----------------------------------------------------------------------------------- selection

def select_stratified(requests: Sequence[Request], num_requests: Optional[int]) -> list[Request]:
    """Round-robin over categories (canonical order), keeping the dataset order inside each
    category, until ``num_requests`` are taken (all when None or larger than the set)."""
    if num_requests is None or num_requests >= len(requests):
        return list(requests)
    groups: dict[str, list[Request]] = {}
    for r in requests:
        groups.setdefault(r.category, []).append(r)
    order = category_order(groups)
    out: list[Request] = []
    i = 0
    while len(out) < num_requests:
        for c in order:
            if i < len(groups[c]) and len(out) < num_requests:
                out.append(groups[c][i])
        i += 1
    return out


# ------------------------------------------------------------------------------- bundled data

DATA_DIR = Path(__file__).resolve().parent.parent / "data" / "bench"


def _data_text(name: str) -> str:
    """A bundled file of ``draftwise/data/bench`` (package data)."""
    path = DATA_DIR / name
    if path.is_file():
        return path.read_text(encoding="utf-8")
    return resources.files("draftwise").joinpath("data", "bench", name).read_text(encoding="utf-8")


def load_qualitative() -> list[Request]:
    reqs = [_row_to_request(json.loads(l), i)
            for i, l in enumerate(_data_text("qualitative.jsonl").splitlines()) if l.strip()]
    check_placeholders(reqs, "qualitative.jsonl")
    return reqs


_THROUGHPUT_RE = re.compile(r"^throughput[-_](\d+)(k?)$")


def parse_throughput_name(name: str) -> Optional[int]:
    """'throughput-1k' -> 1000, 'throughput-256' -> 256; None when not a throughput name."""
    m = _THROUGHPUT_RE.match(name.strip().lower())
    if not m:
        return None
    n = int(m.group(1)) * (1000 if m.group(2) else 1)
    if not 16 <= n <= MAX_THROUGHPUT_TOKENS:
        raise ValueError(f"{name}: throughput input length must be between 16 and {MAX_THROUGHPUT_TOKENS} tokens")
    return n


def _encode(tokenizer, text: str) -> list[int]:
    try:
        return list(tokenizer.encode(text, add_special_tokens=False))
    except TypeError:  # a bare tokenizers.Tokenizer
        enc = tokenizer.encode(text)
        return list(getattr(enc, "ids", enc))


def _decode(tokenizer, ids: Sequence[int]) -> str:
    try:
        return tokenizer.decode(list(ids), skip_special_tokens=False)
    except TypeError:
        return tokenizer.decode(list(ids))


def build_throughput(tokenizer, num_tokens: int, per_tier: int = 8) -> list[Request]:
    """``per_tier`` prompts per entropy tier, each exactly ``num_tokens`` tokens of ``tokenizer``.

    Prompt i of a tier = tier instruction + seed passage i (cycling) + the tier's filler passage
    repeated, truncated so that head + closing instruction is exactly ``num_tokens`` ids.
    """
    seeds = json.loads(_data_text("throughput_seeds.json"))
    out: list[Request] = []
    for tier in ("low_entropy", "mixed", "high_entropy"):
        spec = seeds[tier]
        tail_ids = _encode(tokenizer, spec["closing"])
        if len(tail_ids) >= num_tokens:
            raise ValueError(f"throughput-{num_tokens}: too short for the closing instruction "
                             f"({len(tail_ids)} tokens)")
        filler_ids = _encode(tokenizer, "\n\n" + spec["filler"])
        for i in range(per_tier):
            seed = spec["seeds"][i % len(spec["seeds"])]
            head_text = spec["instruction"] + "\n\n" + seed
            # later seeds of the tier follow, then the filler, so prompts differ beyond the first seed
            for j in range(1, len(spec["seeds"])):
                head_text += "\n\n" + spec["seeds"][(i + j) % len(spec["seeds"])]
            head = _encode(tokenizer, head_text)
            budget = num_tokens - len(tail_ids)
            while len(head) < budget:
                head += filler_ids
            ids = head[:budget] + tail_ids
            assert len(ids) == num_tokens
            out.append(Request(
                question_id=f"throughput-{num_tokens}-{tier}-{i:03d}",
                category=tier,
                turns=[_decode(tokenizer, ids)],
                sub_category=spec.get("sub_category", ""),
                source="draftwise/data/bench/throughput_seeds.json",
                src_id=f"{tier}:{i % len(spec['seeds'])}",
                difficulty="",
                multiturn=False,
                prompt_token_ids=ids,
            ))
    return out


def load_dataset(name: str, tokenizer=None, num_requests: Optional[int] = None,
                 per_tier: Optional[int] = None) -> list[Request]:
    """Resolve a ``--dataset`` value into the selected requests (stratified by category)."""
    n = parse_throughput_name(name)
    if n is not None:
        if tokenizer is None:
            raise ValueError(f"{name}: building a throughput set needs the target's tokenizer")
        if per_tier is None:
            per_tier = max(1, -(-num_requests // 3)) if num_requests else 8
        reqs = build_throughput(tokenizer, n, per_tier=per_tier)
    elif name == "qualitative":
        reqs = load_qualitative()
    else:
        reqs = load_path(name)
    return select_stratified(reqs, num_requests)


# ------------------------------------------------------------------------------- conversations

def has_chat_template(tokenizer) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def render_conversation(tokenizer, messages: list[dict[str, str]], prompt_format: str = "auto") -> list[int]:
    """Token ids of a conversation ending with a user message, ready for generation.

    ``auto``: the tokenizer's chat template (``add_generation_prompt=True``; the ids are not
    re-encoded, so no special tokens are added twice) when it has one, else ``plain``.
    ``plain``: "User: …\\nAssistant: …\\n" lines ending in "Assistant:" (system text first, if any).
    ``raw``: the turns and replies joined by blank lines, no role labels (for base models trained
    on plain text: the prompt is continued as text).
    """
    if prompt_format == "chat" or (prompt_format == "auto" and has_chat_template(tokenizer)):
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        if ids and isinstance(ids[0], list):
            ids = ids[0]
        return [int(x) for x in ids]
    if prompt_format == "raw":
        text = "\n\n".join(m["content"] for m in messages if m["role"] != "system")
        return _encode(tokenizer, text)
    if prompt_format not in ("plain", "auto"):
        raise ValueError(f"unknown prompt format {prompt_format!r} (auto, chat, plain, raw)")
    parts = []
    for m in messages:
        if m["role"] == "system":
            parts.append(m["content"] + "\n")
        elif m["role"] == "user":
            parts.append(f"User: {m['content']}\n")
        else:
            parts.append(f"Assistant: {m['content']}\n")
    parts.append("Assistant:")
    return _encode(tokenizer, "".join(parts))


def first_messages(req: Request, turn: int, replies: Sequence[str]) -> list[dict[str, str]]:
    """History up to and including user turn ``turn`` (0-based) with the earlier replies."""
    msgs = []
    if req.system:
        msgs.append({"role": "system", "content": req.system})
    for i in range(turn + 1):
        msgs.append({"role": "user", "content": req.turns[i]})
        if i < turn:
            msgs.append({"role": "assistant", "content": replies[i]})
    return msgs
