"""Semi-greedy counterfactual mining (AutoJudge, docs/design.md §3), made fast.

Per problem, with greedy decoding: the target answers (response R); the draft is teacher-forced over R; at
the leftmost mismatch m at or after the left border the draft token is substituted and the target
completes greedily from R[:m] + [draft token]; the mismatch is *unimportant* if the outcome is equivalent to
the target's own (then R becomes the alternative) and *important* otherwise (R stays); the border moves to
m + 1 and the mismatches are re-derived on the current R, until none is left.

Where judgekit differs from the reference procedure in cost, not in result:

* Each model keeps, per problem, its KV cache and the token ids it holds. A rollout or a teacher-forcing pass
  crops the cache to the longest common prefix with the sequence it needs and feeds only the rest, so the
  shared prefix is never recomputed (:mod:`judgekit.mine.rows`, on the decoder's KV rows).
* Independent problems advance together: their pending forwards run as one batched forward per model.
* A rollout stops as soon as the task says its outcome is fixed (e.g. the `#### N` line is complete).
* The feature — the target's hidden state at m *after reading the draft token*, which is exactly what the
  verification forward of speculative decoding computes — comes from the rollout's own first forward.

Choices that are ours (documented in mining/README.md):

* Outcomes are read from a completion cut at the point where the task says its outcome is fixed, and
  mismatches are only searched before that point of the current response: text after it cannot change the
  outcome, so such positions carry no label signal. The reference implementation applies the same rule.
* When the target's own answer is wrong, the problem is still mined: labels compare the alternative's
  outcome with the target's (a mismatch that changes a wrong answer is still important), and each record
  carries ``target_correct`` so training can filter or weight such problems.
* The draft feature (``--draft-features``) is the draft's hidden state after reading the context token
  before the mismatch: the state that proposed the draft token.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Generator, Iterator

import numpy as np
import torch

from judgekit.decode.backends import fast_models, make_rows
from judgekit.decode.engine import LookupDrafter, SeqState, StepConfig, StepResult, speculative_step
from judgekit.decode.engine import lookup_draft  # noqa: F401  (its home before the engine had a lookup drafter)
from judgekit.decode.rows import Row
from judgekit.decode.rules import make_rule
from judgekit.decode.sampling import SamplingConfig
from judgekit.mine.rows import RowFeeder
from judgekit.decode.generation import eos_ids, text_decoder
from judgekit.models import ModelPair, encode_prompt
from judgekit.tasks.base import Problem, Task


@dataclass(frozen=True)
class MineConfig:
    max_new_tokens: int = 256
    layers: tuple[int, ...] = (-1,)  # indexes into transformers' hidden_states tuple (-1 = final, after norm)
    draft_features: bool = False
    chat_template: bool = True
    lookahead: int = 8  # copy drafts verified per rollout forward (0 = one token per forward)


@dataclass
class MismatchRecord:
    position: int
    context_ids: list[int]
    draft_token: int
    target_token: int
    important: bool
    alt_outcome: Any
    rollout: int
    features: dict[int, np.ndarray]
    draft_hidden: np.ndarray | None = None


@dataclass
class ProblemResult:
    problem: Problem
    prompt_ids: list[int]
    response_ids: list[int]
    response_text: str
    target_outcome: Any
    target_correct: bool
    n_rollouts: int
    records: list[MismatchRecord] = field(default_factory=list)
    wall_time: float = 0.0

    def mismatch_rows(self, layers: tuple[int, ...]) -> list[dict]:
        p = self.problem
        rows = []
        for r in self.records:
            row = {
                "task": p.task, "problem_id": p.problem_id, "position": r.position,
                "prompt_len": len(self.prompt_ids), "context_ids": r.context_ids,
                "draft_token": r.draft_token, "target_token": r.target_token, "important": r.important,
                "target_outcome": json.dumps(self.target_outcome), "alt_outcome": json.dumps(r.alt_outcome),
                "target_correct": self.target_correct, "rollout": r.rollout,
            }
            for layer in layers:
                row[f"hidden_l{layer}"] = r.features[layer]
            if r.draft_hidden is not None:
                row["draft_hidden"] = r.draft_hidden
            rows.append(row)
        return rows

    def problem_row(self, rank: int) -> dict:
        p = self.problem
        return {
            "task": p.task, "problem_id": p.problem_id, "response": self.response_text,
            "response_ids": self.response_ids, "n_rollouts": self.n_rollouts,
            "n_mismatches": len(self.records), "n_important": sum(r.important for r in self.records),
            "target_outcome": json.dumps(self.target_outcome), "target_correct": self.target_correct,
            "wall_time": self.wall_time, "rank": rank,
        }


@dataclass
class _Score:
    """A request to score a completion with the task (may run a program's tests in the sandbox)."""

    problem: Problem
    text: str


@dataclass
class _Feed:
    """A request from a problem's mining coroutine: make ``model``'s cache hold ``seq`` and predict."""

    model: str  # "target" or "draft"
    seq: list[int]
    all_positions: bool = False
    hidden_layers: tuple[int, ...] = ()


@dataclass
class _Step:
    """A request from a rollout: one speculative step of its sequence, copy drafts from ``reference`` verified
    by the target (:class:`judgekit.decode.engine.LookupDrafter` on :func:`speculative_step`)."""

    seq: SeqState
    reference: list[int]


@dataclass
class _Slot:
    """A problem being mined: its coroutine, its models' row caches, its pending request, its scoring job."""

    steps: Generator
    caches: dict[str, Row]  # per model: its KV row
    request: _Feed | _Step | _Score
    scoring: Future | None = None


class Miner:
    """Mines problems with a target/draft pair on a task (greedy).

    The algorithm is written once, as a coroutine per problem that yields forward requests (:class:`_Feed`);
    a scheduler runs the pending requests of up to ``batch_size`` problems as one batched forward per
    model (:class:`judgekit.mine.rows.RowFeeder` on the pair's KV-rows backend, :mod:`judgekit.decode.backends`),
    so batch size 1 and batch size B share every line of the logic.
    """

    def __init__(self, pair: ModelPair, task: Task, config: MineConfig | None = None, batch_size: int = 1,
                 fast: bool | str = "auto"):
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        # On Llama / Qwen2 pairs the forwards run on the static-cache backend, else on transformers caches.
        self._fast = fast_models(pair, fast, compile=False)
        self.pair = pair
        self.task = task
        self.cfg = config or MineConfig()
        self.batch_size = batch_size
        self.eos = eos_ids(pair)
        self.tokenizer = pair.tokenizer
        self._decode = text_decoder(pair.tokenizer)
        self._generator = torch.Generator(device=pair.device)  # greedy steps draw nothing from it

    # -- outcomes -------------------------------------------------------------------------------------------
    def _text(self, completion: list[int]) -> str:
        return self._decode(completion)

    def _finished(self, completion: list[int]) -> bool:
        """The completion cannot change its outcome any more: EOS, a stop string, or a fixed outcome."""
        if completion and completion[-1] in self.eos:
            return True
        text = self._text(completion)
        return self.task.outcome_fixed(text) or any(s in text for s in self.task.stop_strings)

    def outcome(self, problem: Problem, completion: list[int]) -> Any:
        return self.task.extract_outcome(problem, self._text(completion))

    def _score(self, problem: Problem, completion: list[int], memo: dict):
        """The outcome, as a request the scheduler runs beside other problems' (code tests run in parallel);
        completions with the same outcome key (e.g. the same program) are scored once."""
        text = self._text(completion)
        key = self.task.outcome_key(text)
        if key not in memo:
            memo[key] = yield _Score(problem, text)
        return memo[key]

    # -- driving the coroutines -----------------------------------------------------------------------------
    def mine(self, problem: Problem) -> ProblemResult:
        return next(self.mine_many([problem]))

    def mine_many(self, problems) -> Iterator[ProblemResult]:
        """Results in completion order; up to ``batch_size`` problems advance together.

        Each step runs the pending forwards of all problems as one batched forward per model and kind;
        scoring requests go to a thread pool and overlap with the forwards (code tests are subprocesses).
        The pool lives as long as this generator: exhausting or closing it shuts the pool down.
        """
        with ThreadPoolExecutor(max_workers=self.batch_size, thread_name_prefix="judgekit-score") as pool:
            yield from self._run(iter(problems), pool)

    def _run(self, pending: Iterator[Problem], pool: ThreadPoolExecutor) -> Iterator[ProblemResult]:
        active: list[_Slot] = []
        vocab = self.pair.vocab_size
        max_len = 2 * self.cfg.max_new_tokens + 256  # static rows grow if a prompt is longer
        lms = self._fast or (None, None)
        rows = {name: RowFeeder(make_rows(model, vocab, lm, max_len))
                for name, model, lm in zip(("target", "draft"), (self.pair.target, self.pair.draft), lms)}
        lookup = LookupDrafter(vocab, self.pair.device)

        def start_next() -> bool:
            problem = next(pending, None)
            if problem is None:
                return False
            co = self._mine_steps(problem)
            active.append(_Slot(co, {name: r.acquire() for name, r in rows.items()}, next(co)))
            return True

        while len(active) < self.batch_size and start_next():
            pass
        while active:
            replies: dict[int, Any] = {}
            for slot in active:
                if isinstance(slot.request, _Score) and slot.scoring is None:
                    req = slot.request
                    slot.scoring = pool.submit(self.task.extract_outcome, req.problem, req.text)
            for name in ("target", "draft"):
                for group in self._groups(active, name):
                    idx = [i for i, _ in group]
                    reqs = [r for _, r in group]
                    out = rows[name].feed([active[i].caches[name] for i in idx], [r.seq for r in reqs],
                                          all_positions=reqs[0].all_positions,
                                          hidden_layers=tuple(sorted({l for r in reqs for l in r.hidden_layers})))
                    replies.update(zip(idx, out))
            replies.update(self._rollout_steps(active, rows["target"], lookup))
            futures = [slot.scoring for slot in active if slot.scoring is not None]
            if futures and not replies:  # nothing else to do: wait for a score
                wait(futures, return_when=FIRST_COMPLETED)
            for i, slot in enumerate(active):
                if slot.scoring is not None and slot.scoring.done():
                    replies[i] = slot.scoring.result()
                    slot.scoring = None
            still = []
            for i, slot in enumerate(active):
                if i not in replies:
                    still.append(slot)
                    continue
                try:
                    slot.request = slot.steps.send(replies[i])
                    still.append(slot)
                except StopIteration as done:
                    for name, r in rows.items():
                        r.release(slot.caches[name])
                    yield done.value
            active = still
            while len(active) < self.batch_size and start_next():
                pass

    _STEP = StepConfig(make_rule("lossless"), SamplingConfig())  # greedy: the rollout is the target's argmax

    def _rollout_steps(self, active: list[_Slot], target: RowFeeder, lookup: LookupDrafter) -> dict[int, StepResult]:
        """The pending rollout steps of all problems as one :func:`speculative_step` on the target's rows."""
        steps = [(i, slot.request) for i, slot in enumerate(active) if isinstance(slot.request, _Step)]
        if not steps:
            return {}
        for i, req in steps:
            req.seq.target = active[i].caches["target"]
        steps.sort(key=lambda e: e[1].seq.target.slot)  # slot order: the static cache runs as it is
        seqs = [req.seq for _, req in steps]
        lookup.references = {req.seq: req.reference for _, req in steps}
        results = speculative_step(self._STEP, target.rows, lookup, seqs, max(s.limit for s in seqs))
        for s in seqs:
            target.holds(s.target, s.ids[: s.t_len])
        return {i: res for (i, _), res in zip(steps, results)}

    @staticmethod
    def _groups(active: list[_Slot], name: str):
        """Requests for one model, split by kind (teacher forcing vs generation) so each runs as one forward."""
        kinds: dict[bool, list] = {}
        for i, slot in enumerate(active):
            req = slot.request
            if isinstance(req, _Feed) and req.model == name:
                kinds.setdefault(req.all_positions, []).append((i, req))
        return list(kinds.values())

    # -- the algorithm, one problem -------------------------------------------------------------------------
    def _rollout(self, prompt: list[int], completion: list[int], reference: list[int]):
        """Greedy target completion of prompt + completion, stopped once the outcome is fixed.

        Returns the generated tokens and the hidden states (requested layers) after reading the last given
        token. Greedy decoding is verified speculatively against copy drafts: after a substitution the target
        mostly re-joins the previous response, so each step (:class:`_Step`, one :func:`speculative_step` with
        a :class:`LookupDrafter` for every problem at once) checks up to ``lookahead`` copied tokens — the
        output is the plain greedy one, in far fewer forwards.
        """
        reply = yield _Feed("target", prompt + completion, hidden_layers=self.cfg.layers)
        hidden = {layer: h[0] for layer, h in reply.hidden.items()}
        generated: list[int] = []
        budget = self.cfg.max_new_tokens
        done = lambda: self._finished(completion + generated) or len(completion) + len(generated) >= budget  # noqa: E731
        new = [reply.argmax[-1]]  # greedy tokens known so far, first one verified by construction
        seq = None  # the rollout's sequence on the target's row (which holds all of it but the last token)
        while True:
            for tok in new:
                if done():
                    return generated, hidden
                generated.append(tok)
            if done():
                return generated, hidden
            if seq is None:
                seq = SeqState(prompt + completion + generated, self._generator)
            seq.limit = max(0, min(self.cfg.lookahead, budget - len(completion) - len(generated) - 1))
            step = yield _Step(seq, reference)
            new = step.emitted

    def _mine_steps(self, problem: Problem):
        start = time.perf_counter()
        prompt_text = self.task.build_prompt(problem, self.tokenizer, chat_template=self.cfg.chat_template)
        prompt = encode_prompt(self.tokenizer, prompt_text)
        response, _ = yield from self._rollout(prompt, [], prompt)
        memo: dict = {}
        target_outcome = yield from self._score(problem, response, memo)
        result = ProblemResult(problem, prompt, [], "", target_outcome,
                               bool(self.task.grade(problem, target_outcome)), n_rollouts=1)
        preds: list[int] = [-1]  # preds[i] = draft argmax for absolute position i (none for position 0)
        hiddens: list = [None]  # hiddens[i] = draft state that proposed position i
        draft_layers = (-1,) if self.cfg.draft_features else ()
        left = 0
        while left < len(response):
            # Teacher-force the draft; only positions after the cached common prefix are recomputed.
            reply = yield _Feed("draft", prompt + response, all_positions=True, hidden_layers=draft_layers)
            del preds[reply.common + 1:], hiddens[reply.common + 1:]
            preds.extend(reply.argmax)
            hiddens.extend(list(reply.hidden[-1]) if draft_layers else [None] * len(reply.argmax))
            base = len(prompt)
            m = next((i for i in range(left, len(response)) if preds[base + i] != response[i]), None)
            if m is None:
                break
            d = preds[base + m]
            alt_prefix = response[:m] + [d]
            generated, hidden = yield from self._rollout(prompt, alt_prefix, response[m + 1:] + prompt)
            alternative = alt_prefix + generated
            result.n_rollouts += 1
            alt_outcome = yield from self._score(problem, alternative, memo)
            important = not self.task.equivalent(target_outcome, alt_outcome)
            result.records.append(MismatchRecord(
                position=m, context_ids=prompt + response[:m], draft_token=d, target_token=response[m],
                important=important, alt_outcome=alt_outcome, rollout=result.n_rollouts, features=hidden,
                draft_hidden=hiddens[base + m] if self.cfg.draft_features else None,
            ))
            if not important:
                response = alternative
            left = m + 1
        result.response_ids = response
        result.response_text = self._text(response)
        result.wall_time = time.perf_counter() - start
        return result


def mine_to_dir(pair: ModelPair, task: Task, problems: list[Problem], out_dir: str, cfg: MineConfig, *,
                split: str, data_file: str | None = None, limit: int | None = None, rank: int = 0,
                world_size: int = 1, resume: bool = False, flush_every: int = 4, progress: bool = True,
                batch_size: int = 1, compact: bool = True, started: float | None = None) -> dict:
    """Mine this rank's share of problems into out_dir, skipping those already committed by any rank.

    Results are committed every ``flush_every`` problems (mismatch shard, then problem shard as the commit
    marker), so a run killed at any moment and resumed yields exactly the records of an uninterrupted run.
    With ``compact``, the rank that finishes last compacts the directory (:mod:`judgekit.store.compact`).
    ``started``: ``time.monotonic()`` when the command started, so the recorded wall time covers model loading.
    """
    from tqdm.auto import tqdm

    from judgekit.dist import my_share
    from judgekit.errors import JudgekitError
    from judgekit.store.mined import DirectoryBusy, RunSettings, ShardWriter, check_compatible, read_problems
    from judgekit.store.compact import compact_dir

    ids = [p.problem_id for p in problems]
    if len(set(ids)) != len(ids):
        raise JudgekitError(f"task {task.name!r} yields duplicate problem ids; cannot mine resumably")
    settings = RunSettings(
        task=task.name, target=pair.target_name, draft=pair.draft_name, split=split, data_file=data_file,
        max_new_tokens=cfg.max_new_tokens, layers=tuple(cfg.layers), draft_features=cfg.draft_features,
        hidden_size=int(pair.target.config.hidden_size),
        draft_hidden_size=int(pair.draft.config.hidden_size) if cfg.draft_features else None, limit=limit,
    )
    # Every refusal happens before anything is written: a refused command leaves the directory as it was.
    # Single process: refuse to continue silently. Under a launcher, ranks start at different moments and a
    # late rank may see its peers' first shards, so there the settings check of the manifest is the guard.
    if check_compatible(out_dir, settings) and not resume and world_size == 1 and \
            read_problems(out_dir, columns=["problem_id"]).num_rows:
        raise JudgekitError(f"{out_dir} already holds a mining run; pass --resume to continue it or choose another --out")
    totals = {"mined": 0, "skipped": 0, "mismatches": 0, "important": 0, "compaction": None}
    with ShardWriter(out_dir, settings, rank=rank, world_size=world_size, started=started) as writer:
        done = writer.done_problem_ids()
        share = my_share(problems, rank, world_size)
        mine = [p for p in share if p.problem_id not in done]
        totals["skipped"] = len(share) - len(mine)
        pending: list[ProblemResult] = []

        def flush() -> None:
            if pending:
                writer.write([row for r in pending for row in r.mismatch_rows(cfg.layers)],
                             [r.problem_row(rank) for r in pending])
                pending.clear()

        bar = tqdm(total=len(mine), desc=f"mine {task.name} r{rank}", unit="problem", disable=not progress,
                   dynamic_ncols=True)
        for result in Miner(pair, task, cfg, batch_size=batch_size).mine_many(mine):
            bar.update(1)
            pending.append(result)
            totals["mined"] += 1
            totals["mismatches"] += len(result.records)
            totals["important"] += sum(r.important for r in result.records)
            bar.set_postfix(mismatches=totals["mismatches"], important=totals["important"])
            if len(pending) >= flush_every:
                flush()
        flush()
        bar.close()
    if compact:
        try:
            totals["compaction"] = compact_dir(out_dir, in_run=True)
        except DirectoryBusy:
            totals["compaction"] = "other ranks are still writing; the last one to finish compacts"
    return totals
