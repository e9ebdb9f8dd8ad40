"""Tree specs and their tensors (judgekit.decode.tree): parsing, validation, order, mask, positions."""

from __future__ import annotations

import pytest
import torch

from judgekit.decode.tree import EAGLE_PATHS, from_paths, parse_tree
from judgekit.errors import JudgekitError


def _ancestors_by_hand(paths):
    nodes = [()] + list(paths)
    index = {p: i for i, p in enumerate(nodes)}
    return [[index[p[:k]] for k in range(len(p) + 1)] for p in nodes]


def test_branching_spec_counts_and_order():
    spec = parse_tree("2,2,1,1")
    assert spec.n_nodes == 2 + 4 + 4 + 4 and spec.depth == 4 and spec.widths() == [2, 4, 4, 4]
    assert spec.paths[:6] == ((0,), (1,), (0, 0), (0, 1), (1, 0), (1, 1))
    t = spec.tensors()
    assert t.n == 15 and t.width == 2
    # parents precede children, siblings are contiguous in rank order
    assert (t.parent[1:] < torch.arange(1, t.n)).all()
    assert t.depth.tolist() == [0, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4]
    assert t.children[0].tolist() == [1, 2] and t.children[1].tolist() == [3, 4]
    assert t.children[7].tolist() == [11, -1] and t.children[14].tolist() == [-1, -1]
    assert t.internal.tolist() == list(range(11))
    # per rank: which internal nodes have an i-th child, and for which of them it is the last
    (local0, last0, go0), (local1, last1, go1) = t.ranks
    assert local0.tolist() == list(range(11)) and local1.tolist() == [0, 1, 2]
    assert go0.tolist() == [0, 1, 2] and last0.tolist() == list(range(3, 11))
    assert last1.tolist() == [0, 1, 2] and go1.tolist() == []


@pytest.mark.parametrize("text", ["2,2,1,1", "3", "1,1,1", "4,2", "eagle"])
def test_mask_positions_and_ancestors_match_the_paths(text):
    spec = parse_tree(text)
    t = spec.tensors()
    by_hand = _ancestors_by_hand(spec.paths)
    for i, anc in enumerate(by_hand):
        assert t.ancestors[i, : len(anc)].tolist() == anc and (t.ancestors[i, len(anc):] == -1).all()
        want = torch.zeros(t.n, dtype=torch.bool)
        want[anc] = True
        assert torch.equal(t.mask[i], want), i  # each node sees exactly its ancestors and itself
        assert int(t.depth[i]) == len(anc) - 1  # the position offset from the root
        if i:
            assert int(t.parent[i]) == anc[-2] and int(t.rank[i]) == spec.paths[i - 1][-1]
    # children table is the inverse of (parent, rank)
    for node in range(t.n):
        for r, c in enumerate(t.children[node].tolist()):
            if c >= 0:
                assert int(t.parent[c]) == node and int(t.rank[c]) == r


def test_eagle_default_tree():
    spec = parse_tree("EAGLE")
    assert spec.spec == "eagle" and spec.n_nodes == 25 and spec.depth == 5
    assert spec.widths() == [4, 8, 8, 3, 2]
    assert set(spec.paths) == set(EAGLE_PATHS)
    assert spec.describe() == {"tree": "eagle", "tree_nodes": 25, "tree_depth": 5, "tree_widths": [4, 8, 8, 3, 2]}


def test_chain_is_a_tree():
    spec = parse_tree("1,1,1,1")
    assert spec.is_chain and spec.n_nodes == 4
    t = spec.tensors()
    assert torch.equal(t.mask, torch.tril(torch.ones(5, 5, dtype=torch.bool)))
    assert not parse_tree("2,1").is_chain


@pytest.mark.parametrize("text,msg", [
    ("", "bad tree"), ("a,b", "bad tree"), ("2,,1", "bad tree"), ("0", "at least one child"),
    ("2,-1", "at least one child"), ("10,10,10,10", "more than 1024"), ("beagle", "bad tree"),
])
def test_bad_specs_raise(text, msg):
    with pytest.raises(JudgekitError, match=msg):
        parse_tree(text)


@pytest.mark.parametrize("paths,msg", [
    ([], "no nodes"), ([(0,), (0,)], "twice"), ([(0,), (0, 1)], "sibling of rank 0"),
    ([(1,)], "sibling of rank 0"), ([(0, 0)], "no parent"), ([()], "root"), ([(0,), (-1,)], "negative"),
    ([("x",)], "integer ranks"),
])
def test_bad_paths_raise(paths, msg):
    with pytest.raises(JudgekitError, match=msg):
        from_paths(paths)


def test_tensors_on_a_device_keep_the_layout():
    t = parse_tree("3,2").tensors("cpu")
    assert t.mask.dtype == torch.bool and t.parent.dtype == torch.long and t.mask.shape == (10, 10)


def test_sibling_law_suffix():
    spec = parse_tree("2,2,1,1:topk")
    assert spec.siblings == "topk" and spec.spec == "2,2,1,1:topk" and spec.paths == parse_tree("2,2,1,1").paths
    assert parse_tree("EAGLE:Sample").spec == "eagle:sample" and parse_tree("eagle").siblings is None
    assert spec.describe()["tree"] == "2,2,1,1:topk"
    with pytest.raises(JudgekitError, match="sibling law"):
        parse_tree("2,1:beam")
    with pytest.raises(JudgekitError, match="bad tree"):
        parse_tree("x:topk")
