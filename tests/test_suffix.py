"""The suffix trie's binary-searched match equals the exhaustive longest-first search."""
from hypothesis import given, settings, strategies as st

from draftwise.drafters.suffix import SuffixTrie


def brute_match(trie: SuffixTrie, context):
    for m in range(min(len(context), trie.depth - 1), 0, -1):
        node = trie._walk(context[-m:])
        if node is not None and node["c"]:
            return m, node
    return 0, None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(0, 3), max_size=30), min_size=1, max_size=3),
       st.lists(st.integers(0, 3), min_size=1, max_size=12), st.integers(2, 8))
def test_match_equals_exhaustive_search(texts, context, depth):
    trie = SuffixTrie(depth)
    for t in texts:
        trie.extend(t)
        trie.end_sequence()
    m, node = trie.match(context)
    bm, bnode = brute_match(trie, context)
    assert m == bm and node is bnode
