"""The speculative step — the only one (docs/design.md §8) — and the drafters that feed it.

:func:`speculative_step` advances a batch of sequences by one block: the drafter proposes up to k tokens per
sequence, the target reads ``[last committed token, d_1 .. d_k]`` on its KV rows in one forward (which also
yields the hidden states a judge reads), the rule decides the whole batch at once
(:func:`judgekit.decode.verify.verify_batch`), and one host sync reads the accepted lengths, emitted tokens and
drafts. Rollback is a per-row length: each row's next forward starts at its kept length (the KV-rows
protocol's crop-to-start, :mod:`judgekit.decode.rows`), on either backend.

Row invariant between steps: the target rows hold a sequence's committed tokens but the last one
(``t_len = len(ids) - 1``); a drafter's rows hold ``d_len`` of them, and it reads the rest first.

A drafter is anything with ``admit`` / ``propose`` / ``commit`` / ``retire``. :class:`ModelDrafter` drafts
with the draft model on its own rows; :class:`LookupDrafter` copies a given continuation (prompt-lookup
decoding: the miner's rollouts). A draft tree (:class:`judgekit.decode.treedecode.TreeDrafter`) brings its
own verify form: a drafter with a ``step`` method is handed the whole step (one tree-masked target forward,
:func:`judgekit.decode.tree_verify.verify_tree`, ``keep_path`` on the rows), the rows and the rest as here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence

import torch
from torch import Tensor

from judgekit.decode.rows import KVRows, Row, last_cols, pad_ids
from judgekit.decode.rules import Rule, RuleContext, sample
from judgekit.decode.sampling import SamplingConfig, to_probs
from judgekit.decode.verify import verify_batch


@dataclass(eq=False)
class SeqState:
    """One sequence being decoded: its committed ids and where each model's rows stand."""

    ids: list[int]
    generator: torch.Generator
    target: Row | None = None
    t_len: int = 0  # tokens of ids the target rows hold
    draft: Row | None = None
    d_len: int = 0  # tokens of ids the drafter's rows hold
    limit: int = 0  # this step's draft limit (budget), set by the caller


@dataclass
class Proposal:
    """A drafted block for B sequences: tokens [B, k], draft rows q [B, k, V] (one-hot when greedy), the
    shapes some rules read (greedy: temperature-1 softmax) and, for a target+draft judge, the draft state
    that proposed each token [B, k, H_d]."""

    tokens: Tensor
    q: Tensor
    q_shape: Tensor | None = None
    hidden: Tensor | None = None
    limits: list[int] | None = None  # per row, drafts proposed when fewer than its limit (a lookup drafter)


@dataclass
class StepResult:
    """What one step did to one sequence (host values)."""

    n_accepted: int
    emitted: list[int] = field(default_factory=list)  # accepted drafts, then the residual / bonus token


class Drafter(Protocol):
    def admit(self, seqs: Sequence[SeqState]) -> None: ...  # new sequences: rows, prefill

    def propose(self, seqs: Sequence[SeqState], k: int) -> Proposal: ...

    def commit(self, seq: SeqState, base: int, n_accepted: int, k: int) -> None: ...  # after the step

    def retire(self, seq: SeqState) -> None: ...


def prefill(rows: KVRows, row_of, seqs: Sequence[SeqState]) -> None:
    """``rows`` read all but the last token of each sequence, in one forward (those with one token skip)."""
    todo = [s for s in seqs if len(s.ids) > 1]
    if not todo:
        return
    ids, lengths = pad_ids([s.ids[:-1] for s in todo], _device(todo))
    rows.forward([row_of(s) for s in todo], ids, [0] * len(todo), lengths, logit_cols=last_cols(lengths, ids.device))


def _device(seqs: Sequence[SeqState]):
    return seqs[0].generator.device


class DraftRowsLifecycle:
    """A drafter that owns one row of the draft model's KV rows per sequence (chains and trees alike):
    a row is acquired and prefilled on admission and released on retirement."""

    rows: KVRows

    def admit(self, seqs: Sequence[SeqState]) -> None:
        for s in seqs:
            s.draft = self.rows.acquire()
            s.d_len = len(s.ids) - 1
        prefill(self.rows, lambda s: s.draft, seqs)

    def retire(self, seq: SeqState) -> None:
        self.rows.release(seq.draft)


class ModelDrafter(DraftRowsLifecycle):
    """Drafts with a draft model on its own KV rows: k forwards per step (the first reads each row's unread
    tokens, 1 or 2, the rest one token), sampling with each sequence's generator (greedy: the argmax)."""

    def __init__(self, rows: KVRows, sampling: SamplingConfig, need_shape: bool = False, need_hidden: bool = False,
                 hidden_size: int = 0):
        self.rows, self.sampling = rows, sampling
        self.need_shape, self.need_hidden, self.hidden_size = need_shape, need_hidden, hidden_size

    def propose(self, seqs: Sequence[SeqState], k: int) -> Proposal:
        dev, B, V = _device(seqs), len(seqs), self.rows.vocab
        if k == 0:
            hidden = torch.zeros(B, 0, self.hidden_size, device=dev) if self.need_hidden else None
            return Proposal(torch.zeros(B, 0, dtype=torch.long, device=dev), torch.zeros(B, 0, V, device=dev),
                            None, hidden)
        rows = [s.draft for s in seqs]
        layers = (-1,) if self.need_hidden else ()
        ids, lengths = pad_ids([s.ids[s.d_len:] for s in seqs], dev)
        starts = [s.d_len for s in seqs]
        cols = last_cols(lengths, dev)
        logits, states = self.rows.forward(rows, ids, starts, lengths, logit_cols=cols, hidden_layers=layers,
                                           replay=True)
        state = states[0][torch.arange(B, device=dev), cols[:, 0]] if layers else None
        nxt = [st + n for st, n in zip(starts, lengths)]  # where each row's next draft token is written
        tokens, qs, shapes, hiddens = [], [], [], []
        for i in range(k):
            if self.sampling.greedy:  # q's one-hot rows are built once, after the loop
                tok = logits[:, 0].float().argmax(-1)
                probs = None
                shape = torch.softmax(logits[:, 0].float(), -1) if self.need_shape else None
            else:  # rows past their own limit take the argmax: their random stream stays that of batch 1
                probs, shape = to_probs(logits[:, 0], self.sampling, self.need_shape)
                tok = torch.cat([sample(probs[b: b + 1], s.generator) if i < s.limit else probs[b: b + 1].argmax(-1)
                                 for b, s in enumerate(seqs)])
            tokens.append(tok)
            qs.append(probs)
            shapes.append(shape)
            hiddens.append(state)
            if i + 1 < k:
                logits, states = self.rows.forward(rows, tok[:, None], [p + i for p in nxt], hidden_layers=layers,
                                                   replay=True)
                state = states[0][:, -1] if layers else None
        x = torch.stack(tokens, 1)
        q = (torch.zeros(B, k, V, device=dev).scatter_(-1, x[..., None], 1.0) if self.sampling.greedy
             else torch.stack(qs, 1))
        return Proposal(x, q,
                        torch.stack(shapes, 1) if shapes[0] is not None else None,
                        torch.stack(hiddens, 1) if self.need_hidden else None)

    def commit(self, seq: SeqState, base: int, n_accepted: int, k: int) -> None:
        # The draft read the committed sequence and k - 1 drafts (the last draft was never fed).
        if k > 0:
            seq.d_len = base + min(n_accepted, k - 1)


def lookup_draft(seq: list[int], reference: list[int], k: int, ngram: int = 3) -> list[int]:
    """Up to k tokens that followed the latest occurrence of seq's last n-gram (n = ngram..1) in reference
    or in seq itself (prompt-lookup decoding); [] if there is none. Pure and cheap: a few list scans."""
    if k <= 0:
        return []
    for n in range(min(ngram, len(seq)), 0, -1):
        tail = seq[-n:]
        for source, stop in ((reference, len(reference)), (seq, len(seq) - 1)):
            for i in range(stop - n, -1, -1):
                if source[i: i + n] == tail:
                    follow = list(source[i + n: i + n + k])
                    if follow:
                        return follow
    return []


class LookupDrafter:
    """Drafts by copying instead of with a model (:func:`lookup_draft`): each sequence proposes what followed
    its last n-gram in its reference (``references[seq]``, set by the caller before a step) or in itself.
    No rows and no forwards; proposals are one-hot, so it serves greedy rules that read neither shapes nor
    draft states (the miner's rollouts, which mostly re-join an earlier response). A row with no match
    proposes nothing: its block is the target's own next token, as a plain greedy step."""

    def __init__(self, vocab: int, device, ngram: int = 3):
        self.vocab, self.device, self.ngram = vocab, device, ngram
        self.references: dict[SeqState, list[int]] = {}

    def admit(self, seqs: Sequence[SeqState]) -> None:
        pass

    def retire(self, seq: SeqState) -> None:
        self.references.pop(seq, None)

    def propose(self, seqs: Sequence[SeqState], k: int) -> Proposal:
        drafts = [lookup_draft(s.ids, self.references.get(s, []), min(k, s.limit), self.ngram) for s in seqs]
        width = max(map(len, drafts))
        x = torch.tensor([d + [0] * (width - len(d)) for d in drafts], dtype=torch.long,
                         device=self.device).view(len(seqs), width)  # padding after a row's drafts: never accepted
        q = torch.zeros(len(seqs), width, self.vocab, device=self.device).scatter_(-1, x[..., None], 1.0)
        return Proposal(x, q, limits=[len(d) for d in drafts])

    def commit(self, seq: SeqState, base: int, n_accepted: int, k: int) -> None:
        pass


@dataclass
class StepConfig:
    """What the step needs to know about the rule besides the rule itself."""

    rule: Rule
    sampling: SamplingConfig
    hidden_layer: int | None = None  # the target layer a judge reads (None: the rule reads no hidden state)
    need_shape: bool = False


def speculative_step(cfg: StepConfig, target: KVRows, drafter: Drafter, seqs: Sequence[SeqState],
                     k: int) -> list[StepResult]:
    """One speculative step for ``seqs`` (each with its ``limit`` <= k set): draft, verify with one target
    forward, apply the rule to the batch, sync once, and move every row to its kept length."""
    own = getattr(drafter, "step", None)
    if own is not None:  # a drafter with its own verify form: a draft tree (judgekit.decode.treedecode)
        return own(cfg, target, seqs, k)
    dev = _device(seqs)
    proposal = drafter.propose(seqs, k)
    x = proposal.tokens
    last = torch.tensor([s.ids[-1] for s in seqs], device=dev)
    layers = () if cfg.hidden_layer is None else (cfg.hidden_layer,)
    logits, states = target.forward([s.target for s in seqs], torch.cat([last[:, None], x], 1),
                                    [len(s.ids) - 1 for s in seqs], hidden_layers=layers, replay=True)
    p, p_shape = to_probs(logits, cfg.sampling, cfg.need_shape)
    hidden = states[0][:, 1:] if layers else None  # the target's state after reading each drafted token
    ctx = RuleContext(p_shape, proposal.q_shape, hidden, draft_hidden=proposal.hidden)
    limits = proposal.limits if proposal.limits is not None else [s.limit for s in seqs]
    n, nxt = verify_batch(cfg.rule, p, proposal.q, x, ctx, limits, cfg.sampling.greedy,
                          [s.generator for s in seqs])
    host = torch.cat([n[:, None], nxt[:, None], x], 1).tolist()  # the one host sync of the step
    out = []
    for s, row in zip(seqs, host):
        n_acc = row[0]
        base = len(s.ids)
        emitted = row[2: 2 + n_acc] + [row[1]]
        s.ids.extend(emitted)
        s.t_len = base + n_acc
        drafter.commit(s, base, n_acc, k)
        out.append(StepResult(n_acc, emitted))
    return out
