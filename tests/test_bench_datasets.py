"""Dataset loaders: SPEED-Bench parquet / JSONL, placeholders, Spec-Bench, bundled sets, selection."""
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from draftwise.bench._testing import ByteTokenizer, PLAIN_CHAT_TEMPLATE
from draftwise.bench.datasets import (
    PLACEHOLDER_PREFIX, PlaceholderDataError, build_throughput, first_messages, load_dataset, load_path,
    load_qualitative, parse_throughput_name, render_conversation, select_stratified,
)
from draftwise.bench.metrics import QUALITATIVE_CATEGORIES


def _rows(n=6, placeholder_at=()):
    rows = []
    for i in range(n):
        turn = f"{PLACEHOLDER_PREFIX}\n\nTemplate {{x}}" if i in placeholder_at else f"prompt {i}"
        rows.append({"question_id": f"{i:032d}", "category": ["coding", "math", "writing"][i % 3],
                     "sub_category": "s", "turns": [turn] + (["second"] if i == 0 else []), "source": "src",
                     "src_id": str(i), "difficulty": "easy", "multiturn": i == 0})
    return rows


def test_parquet_dir_and_file(tmp_path):
    d = tmp_path / "data" / "speed" / "qualitative"
    d.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(_rows()), d / "test.parquet")
    for path in (d, d / "test.parquet"):
        reqs = load_path(path)
        assert len(reqs) == 6
        assert reqs[0].turns == ["prompt 0", "second"] and reqs[0].multiturn
        assert reqs[1].category == "math" and reqs[1].question_id == "0" * 31 + "1"
        assert reqs[2].src_id == "2" and reqs[2].difficulty == "easy" and reqs[2].source == "src"


def test_placeholder_rows_refused(tmp_path):
    p = tmp_path / "test.parquet"
    pq.write_table(pa.Table.from_pylist(_rows(placeholder_at=(3, 4))), p)
    with pytest.raises(PlaceholderDataError) as e:
        load_path(p)
    msg = str(e.value)
    assert "row 3" in msg and "0" * 31 + "3" in msg and "1 more" in msg
    assert "prepare_data.py" in msg and "specdec_bench" in msg
    j = tmp_path / "speed.jsonl"
    j.write_text("\n".join(json.dumps({"question_id": "q", "category": "qa",
                                       "messages": [{"role": "user", "content": PLACEHOLDER_PREFIX}]})
                           for _ in range(2)))
    with pytest.raises(PlaceholderDataError, match="row 0"):
        load_path(j)


def test_messages_jsonl_and_spec_bench(tmp_path):
    j = tmp_path / "qualitative.jsonl"
    j.write_text(json.dumps({"question_id": "a", "category": "rag", "sub_category": "x", "multiturn": True,
                             "messages": [{"role": "system", "content": "be brief"},
                                          {"role": "user", "content": "one"},
                                          {"role": "assistant", "content": "ignored"},
                                          {"role": "user", "content": "two"}]}) + "\n\n")
    (r,) = load_path(j)
    assert r.turns == ["one", "two"] and r.system == "be brief" and r.multiturn
    sb = tmp_path / "spec" / "question.jsonl"
    sb.parent.mkdir()
    sb.write_text(json.dumps({"question_id": 81, "category": "writing", "turns": ["t1", "t2"]}) + "\n" +
                  json.dumps({"question_id": 82, "category": "translation", "turns": ["t"], "reference": ["r"]}) + "\n")
    reqs = load_path(sb.parent)
    assert [r.question_id for r in reqs] == ["81", "82"] and reqs[0].multiturn and reqs[1].reference == ["r"]


def test_stratified_round_robin():
    reqs = load_qualitative()
    sel = select_stratified(reqs, 13)
    assert [r.category for r in sel[:11]] == list(QUALITATIVE_CATEGORIES)
    assert [r.category for r in sel[11:]] == ["coding", "humanities"]
    assert sel[11] is [r for r in reqs if r.category == "coding"][1]
    assert select_stratified(reqs, None) == reqs


def test_bundled_qualitative():
    reqs = load_qualitative()
    cats = {}
    for r in reqs:
        cats.setdefault(r.category, 0)
        cats[r.category] += 1
        assert len(r.question_id) == 32 and r.turns and all(t.strip() for t in r.turns)
    assert set(cats) == set(QUALITATIVE_CATEGORIES) and min(cats.values()) >= 10
    assert len({r.question_id for r in reqs}) == len(reqs)
    assert any(r.multiturn for r in reqs)


def test_throughput_exact_length():
    assert parse_throughput_name("throughput-1k") == 1000
    assert parse_throughput_name("throughput_2k") == 2000
    assert parse_throughput_name("throughput-256") == 256
    assert parse_throughput_name("qualitative") is None
    with pytest.raises(ValueError):
        parse_throughput_name("throughput-64k")
    tok = ByteTokenizer()
    reqs = build_throughput(tok, 300, per_tier=2)
    assert [r.category for r in reqs] == ["low_entropy"] * 2 + ["mixed"] * 2 + ["high_entropy"] * 2
    assert all(len(r.prompt_token_ids) == 300 for r in reqs)
    assert reqs[0].prompt_token_ids != reqs[1].prompt_token_ids
    sel = load_dataset("throughput-256", tokenizer=tok, num_requests=4)
    assert [r.category for r in sel] == ["low_entropy", "mixed", "high_entropy", "low_entropy"]


def test_render_conversation():
    tok = ByteTokenizer()
    from draftwise.bench.datasets import Request

    r = Request("q", "c", ["Hi", "More"])
    msgs = first_messages(r, 1, ["Hello"])
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"]
    assert tok.decode(render_conversation(tok, msgs)) == "User: Hi\nAssistant: Hello\nUser: More\nAssistant:"
    assert tok.decode(render_conversation(tok, msgs, "raw")) == "Hi\n\nHello\n\nMore"

    class Chat(ByteTokenizer):
        chat_template = PLAIN_CHAT_TEMPLATE

        def apply_chat_template(self, messages, add_generation_prompt, tokenize):
            assert add_generation_prompt and tokenize
            text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant:"
            return {"input_ids": self.encode(text)}

    assert Chat().decode(render_conversation(Chat(), msgs)).endswith("user: More\nassistant:")
