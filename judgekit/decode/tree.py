"""Static draft-tree shapes: parsing a `--tree` spec and the tensors a tree step needs (docs/design.md §2.1).

A tree is given either as per-depth branching, ``"2,2,1,1"`` (2 children of the root, each with 2 children,
each of those with 1, ...), or by name (``"eagle"``: EAGLE-1's default static tree, 25 drafted nodes, depth 5).
A suffix ``:topk`` or ``:sample`` fixes how siblings are drafted when sampling (``2,2,1,1:topk``): by default
a sampled tree's siblings are draws without replacement from the draft and a greedy tree's the draft's
top-m; ``:topk`` takes the top-m under sampling too (EAGLE's expansion, the tree of the paper's Theorem 1,
KL_EAGLE). Greedy decoding always takes the top-m. Internally it is the list of drafted nodes as *paths of sibling ranks* from the root: ``(0,)`` is the root's
first child (the draft's most likely token, or its first draw), ``(0, 1)`` that child's second child.

The flattened order puts the root (the committed token whose target row verifies the first drafted level) at
index 0 and the drafted nodes after it, by depth, then by parent, then by rank, so parents precede children
and siblings are contiguous in rank order. :class:`TreeTensors` holds, as long/bool tensors over that order,
the parents, depths (= position offsets from the root), sibling ranks, a [nodes, width] child table, the
ancestor paths and the attention mask (each node sees its ancestors and itself; the committed prefix is
visible to all and is not part of the mask).
"""

from __future__ import annotations

from dataclasses import dataclass
import torch
from torch import Tensor

from judgekit.errors import JudgekitError

MAX_NODES = 1024  # a target forward over more tree nodes than this is never what anyone wants

# EAGLE-1's default static tree (its `mc_sim_7b_63` choices): 25 drafted nodes, widths 4/8/8/3/2 by depth.
EAGLE_PATHS: tuple[tuple[int, ...], ...] = (
    (0,), (1,), (2,), (3,),
    (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0), (2, 1), (3, 0),
    (0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 1, 0), (0, 1, 1), (0, 2, 0), (0, 2, 1), (1, 0, 0),
    (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 0, 2),
    (0, 0, 0, 0, 0), (0, 0, 0, 0, 1),
)

NAMED_TREES: dict[str, tuple[tuple[int, ...], ...]] = {"eagle": EAGLE_PATHS}


@dataclass(frozen=True)
class TreeSpec:
    """A validated static tree: drafted nodes as sorted rank paths, plus the spec text it came from."""

    paths: tuple[tuple[int, ...], ...]
    spec: str
    siblings: str | None = None  # "topk" | "sample" under sampling; None: sample (greedy: always top-m)

    @property
    def n_nodes(self) -> int:
        """Drafted nodes (the root is not drafted)."""
        return len(self.paths)

    @property
    def depth(self) -> int:
        return max(len(p) for p in self.paths)

    @property
    def is_chain(self) -> bool:
        return all(r == 0 for p in self.paths for r in p)

    def widths(self) -> list[int]:
        """Drafted nodes at each depth 1..D."""
        return [sum(len(p) == d for p in self.paths) for d in range(1, self.depth + 1)]

    def describe(self) -> dict:
        """What a record says about the tree that ran."""
        return {"tree": self.spec, "tree_nodes": self.n_nodes, "tree_depth": self.depth,
                "tree_widths": self.widths()}

    def tensors(self, device: torch.device | str = "cpu") -> "TreeTensors":
        return TreeTensors.build(self, torch.device(device))


def from_paths(paths, spec: str = "paths") -> TreeSpec:
    """Validate rank paths: non-empty, no duplicates, every node's parent present, and sibling ranks
    contiguous from 0 (a node's m children are its first m draws, which the sampled drafter and the
    without-replacement correction of tree verification rely on)."""
    try:
        norm = [tuple(int(r) for r in p) for p in paths]
    except (TypeError, ValueError):
        raise JudgekitError(f"tree {spec!r}: every node must be a sequence of integer ranks") from None
    if not norm:
        raise JudgekitError(f"tree {spec!r} has no nodes")
    if any(len(p) == 0 for p in norm):
        raise JudgekitError(f"tree {spec!r}: the empty path is the root, which is not drafted")
    if len(set(norm)) != len(norm):
        raise JudgekitError(f"tree {spec!r} lists a node twice")
    if len(norm) > MAX_NODES:
        raise JudgekitError(f"tree {spec!r} has {len(norm)} nodes; at most {MAX_NODES} are supported")
    have = set(norm)
    for p in norm:
        if any(r < 0 for r in p):
            raise JudgekitError(f"tree {spec!r}: negative rank in node {list(p)}")
        if len(p) > 1 and p[:-1] not in have:
            raise JudgekitError(f"tree {spec!r}: node {list(p)} has no parent {list(p[:-1])}")
        if p[-1] > 0 and p[:-1] + (p[-1] - 1,) not in have:
            raise JudgekitError(f"tree {spec!r}: node {list(p)} has no sibling of rank {p[-1] - 1} "
                                "(sibling ranks must be contiguous from 0)")
    return TreeSpec(tuple(sorted(norm, key=lambda p: (len(p), p))), spec)


def from_branching(branching: list[int], spec: str | None = None) -> TreeSpec:
    """Per-depth branching: every node at depth d - 1 gets branching[d - 1] children."""
    spec = spec or ",".join(map(str, branching))
    if not branching or any(b < 1 for b in branching):
        raise JudgekitError(f"tree {spec!r}: every depth needs at least one child per node")
    total, level = 0, 1
    for b in branching:
        level *= b
        total += level
        if total > MAX_NODES:
            raise JudgekitError(f"tree {spec!r} has more than {MAX_NODES} nodes")
    paths: list[tuple[int, ...]] = []
    frontier: list[tuple[int, ...]] = [()]
    for b in branching:
        frontier = [p + (r,) for p in frontier for r in range(b)]
        paths += frontier
    return from_paths(paths, spec)


SIBLINGS = ("topk", "sample")


def parse_tree(text: str) -> TreeSpec:
    """A `--tree` value: a name (``eagle``) or per-depth branching (``2,2,1,1``), optionally with a sibling
    law (``:topk`` / ``:sample``)."""
    from dataclasses import replace

    shape, _, siblings = text.strip().partition(":")
    if siblings:
        if siblings.strip().lower() not in SIBLINGS:
            raise JudgekitError(f"bad tree {text!r}: the sibling law after ':' is {' or '.join(SIBLINGS)}")
        base = _parse_shape(shape)
        law = siblings.strip().lower()
        return replace(base, spec=f"{base.spec}:{law}", siblings=law)
    return _parse_shape(shape)


def _parse_shape(text: str) -> TreeSpec:
    spec = text.strip()
    if spec.lower() in NAMED_TREES:
        return from_paths(NAMED_TREES[spec.lower()], spec.lower())
    try:
        branching = [int(v) for v in spec.split(",")]
    except ValueError:
        raise JudgekitError(f"bad tree {text!r}: give per-depth branching like 2,2,1,1 or a name "
                            f"({', '.join(NAMED_TREES)})") from None
    return from_branching(branching, spec)


@dataclass(frozen=True)
class TreeTensors:
    """A tree as tensors over the flattened node order (root = 0, then the drafted nodes)."""

    spec: TreeSpec
    parent: Tensor  # [N+1] long, -1 at the root
    depth: Tensor  # [N+1] long: the position offset of each node from the root
    rank: Tensor  # [N+1] long: sibling rank (0 at the root)
    children: Tensor  # [N+1, W] long: children in rank order, -1 padded
    ancestors: Tensor  # [N+1, D+1] long: the path root..node, -1 padded after the node
    mask: Tensor  # [N+1, N+1] bool: mask[i, j] = node i attends to node j (j is i or an ancestor of i)
    internal: Tensor  # [nI] long: the nodes with at least one child (where a verification decision is made)
    # per sibling rank i: (positions in ``internal`` of the nodes with an i-th child; positions within that
    # list of the nodes whose i-th child is their last, and of those with more) — static index tensors, so
    # verification finds them without a host sync
    ranks: tuple[tuple[Tensor, Tensor, Tensor], ...]

    @staticmethod
    def build(spec: TreeSpec, device: torch.device) -> "TreeTensors":
        index = {(): 0} | {p: i + 1 for i, p in enumerate(spec.paths)}
        n = len(index)
        parent = torch.tensor([-1] + [index[p[:-1]] for p in spec.paths], dtype=torch.long)
        depth = torch.tensor([0] + [len(p) for p in spec.paths], dtype=torch.long)
        rank = torch.tensor([0] + [p[-1] for p in spec.paths], dtype=torch.long)
        # ancestor paths level by level (parents precede children): a node's path is its parent's plus itself
        anc = torch.full((n, spec.depth + 1), -1, dtype=torch.long)
        anc[0, 0] = 0
        for d in range(1, spec.depth + 1):
            nodes = torch.nonzero(depth == d).squeeze(1)
            anc[nodes] = anc[parent[nodes]]
            anc[nodes, d] = nodes
        mask = torch.zeros(n, n, dtype=torch.bool)
        rows = torch.arange(n).unsqueeze(1).expand_as(anc)
        valid = anc >= 0
        mask[rows[valid], anc[valid]] = True
        width = int(rank.max()) + 1
        children = torch.full((n, width), -1, dtype=torch.long)
        children[parent[1:], rank[1:]] = torch.arange(1, n)
        internal = torch.nonzero(children[:, 0] >= 0).squeeze(1)
        n_kids = (children[internal] >= 0).sum(1)
        t = lambda x: x.to(device)  # noqa: E731
        ranks = []
        for i in range(width):
            local = torch.nonzero(n_kids > i).squeeze(1)
            last = n_kids[local] == i + 1
            ranks.append((t(local), t(torch.nonzero(last).squeeze(1)), t(torch.nonzero(~last).squeeze(1))))
        return TreeTensors(spec, t(parent), t(depth), t(rank), t(children), t(anc), t(mask), t(internal),
                           tuple(ranks))

    @property
    def n(self) -> int:
        """Nodes including the root."""
        return int(self.parent.shape[0])

    @property
    def width(self) -> int:
        return int(self.children.shape[1])
