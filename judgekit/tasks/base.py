"""The task plug-in interface shared by mining and evaluation.

A task knows how to load its problems, turn one into a prompt, read the outcome of a completion,
compare two outcomes (mining: does a substitution change the result?) and grade an outcome against the
ground truth (evaluation). Outcomes are JSON-serialisable so they can be stored in Parquet.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

Outcome = Any  # JSON-serialisable: a normalised number string, a list of per-test booleans, None (no answer)


@dataclass(frozen=True)
class Problem:
    task: str
    problem_id: str
    question: str
    reference: Any  # ground truth: gold answer string, or tests; JSON-serialisable
    meta: dict = field(default_factory=dict, hash=False, compare=False)


class Task(ABC):
    name: str = ""
    source: str = ""  # where the problems come from by default (hub id, package file, generator)
    splits: tuple[str, ...] = ("test",)
    stop_strings: tuple[str, ...] = ()  # generation stops when one of these appears

    # The common load path: a local file (or files) in the task's official layout, or the default source.
    fields: tuple[str, ...] = ()  # fields every row of a local file must have
    hub: tuple[str, str | None] | None = None  # (hub id, config) of the default source, if it is on the hub

    def load(self, split: str = "test", limit: int | None = None, data_file: str | None = None) -> list[Problem]:
        """Problems of a split, from `data_file` (local JSONL/Parquet) when given, else the default source.

        Each row becomes a Problem through `make_problem`, which gets a `where` ("file: row N") to name in any
        error, so a bad row is one clear line, never a traceback or a silently wrong problem.
        """
        from judgekit.tasks.common import apply_limit, check_split, read_records, require_fields

        check_split(self.name, split, self.splits, data_file)
        if data_file:
            located: list[tuple[str, dict[str, Any]]] = []
            for path in self.data_files(data_file):
                rows = read_records(path)
                require_fields(rows, self.fields, str(path))
                located += [(f"{path}: row {i + 1}", row) for i, row in enumerate(rows)]
        else:
            located = [(f"{self.name} {split} row {i + 1}", row) for i, row in enumerate(self.default_rows(split))]
        return [self.make_problem(row, where, i, split) for i, (where, row) in enumerate(apply_limit(located, limit))]

    def data_files(self, data_file: str) -> list[Any]:
        """The local files behind `--data-file` (a task may accept a directory of several)."""
        return [data_file]

    def default_rows(self, split: str) -> list[dict[str, Any]]:
        """Rows of the default source (the hub data set named by `hub`)."""
        from judgekit.errors import JudgekitError
        from judgekit.tasks.common import load_hub

        if self.hub is None:
            raise JudgekitError(f"task {self.name} has no default source; pass --data-file")
        return load_hub(self.hub[0], self.hub[1], split)

    def make_problem(self, row: dict[str, Any], where: str, index: int, split: str) -> Problem:
        """One Problem from a row of the official layout; `where` names the row in errors."""
        raise NotImplementedError(f"{type(self).__name__} loads its problems itself")

    @abstractmethod
    def build_prompt(self, problem: Problem, tokenizer: Any = None, chat_template: bool = True,
                     few_shot: int = 0) -> str:
        """The text fed to the model; applies the tokenizer's chat template when it has one and it is asked."""

    @abstractmethod
    def extract_outcome(self, problem: Problem, completion: str) -> Outcome:
        """The outcome of a completion (final answer, or per-test pass/fail vector); None if there is none."""

    def outcome_fixed(self, completion: str) -> bool:
        """True once no further text can change the outcome (lets mining stop a rollout early)."""
        return any(s in completion for s in self.stop_strings)

    def outcome_key(self, completion: str) -> str:
        """The part of a completion its outcome depends on (code tasks: the program), so that mining scores
        completions that differ only elsewhere (e.g. in the prose before the code) once."""
        return completion

    def equivalent(self, a: Outcome, b: Outcome) -> bool:
        """Whether two outcomes count as the same result (mining's importance test)."""
        return a == b

    @abstractmethod
    def grade(self, problem: Problem, outcome: Outcome) -> bool:
        """Whether an outcome is correct against the problem's ground truth."""
