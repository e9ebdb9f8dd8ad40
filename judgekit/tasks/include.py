"""INCLUDE: multilingual four-option multiple choice from regional exams, 44 languages.

Data: the hub data sets `CohereLabs/include-base-44` (about 550 questions per language) and
`CohereLabs/include-lite-44` (`--subset lite`), one config per language (`Albanian` ... `Vietnamese`), split
`test`; rows hold `language`, `country`, `domain`, `subject`, `regional_feature`, `level`, `question`,
`option_a` ... `option_d` and `answer` (the index 0-3 of the right option). `--data-file` takes rows in that
layout (any languages; `--language` then picks among them).

Prompt: lm-evaluation-harness's `include_base_44_<language>_<domain>` tasks (0-shot, the `default` variant):
the description "The following is multiple-choice question about <domain>." then
`{question}\\nA. ..\\nB. ..\\nC. ..\\n D. ..\\nAnswer:` (the space before "D." is in lm-eval's template,
which folds a YAML line there). With a chat template the description is the system turn, as lm-eval's
`fewshot_context` makes it; without one the two are joined with nothing between them, also as lm-eval does.
lm-eval scores the four letters by log-likelihood; a decoder generates instead, so the outcome is the letter
the completion gives: a leading letter (" B", "(B)", "**B**. Paris"), else the last "answer is B" /
"Answer: B"; graded by exact equality with the gold letter.
"""

from __future__ import annotations

import re
from typing import Any

from judgekit.errors import JudgekitError
from judgekit.tasks.base import Outcome, Problem, Task
from judgekit.tasks.common import apply_limit, check_split, load_hub, read_records, render_prompt, require_fields
from judgekit.tasks.common import text_field

HUB_IDS = {"base": "CohereLabs/include-base-44", "lite": "CohereLabs/include-lite-44"}
# The hub configs, as lm-eval's include tasks name them (dataset_name).
LANGUAGES = ("Albanian", "Arabic", "Armenian", "Azerbaijani", "Basque", "Belarusian", "Bengali", "Bulgarian",
             "Chinese", "Croatian", "Dutch", "Estonian", "Finnish", "French", "Georgian", "German", "Greek",
             "Hebrew", "Hindi", "Hungarian", "Indonesian", "Italian", "Japanese", "Kazakh", "Korean",
             "Lithuanian", "Malay", "Malayalam", "Nepali", "North Macedonian", "Persian", "Polish", "Portuguese",
             "Russian", "Serbian", "Spanish", "Tagalog", "Tamil", "Telugu", "Turkish", "Ukrainian", "Urdu",
             "Uzbek", "Vietnamese")
LETTERS = "ABCD"
OPTIONS = ("option_a", "option_b", "option_c", "option_d")
FIELDS = ("language", "domain", "question", *OPTIONS, "answer")
DESCRIPTION = "The following is multiple-choice question about {domain}."
DOC_TO_TEXT = "{question}\nA. {option_a}\nB. {option_b}\nC. {option_c}\n D. {option_d}\nAnswer:"

# A letter at the start (after spaces, markdown emphasis or an opening bracket) not followed by a word
# character: the direct continuation of "Answer:".
_LEADING_RE = re.compile(r"^[\s*_(\[]*([ABCD])(?!\w)")
_STATED_RE = re.compile(r"(?i:answer)(?:\s+(?i:is))?\s*[:\uff1a]?\s*[*_(\[]*([ABCD])(?!\w)")


def extract_letter(completion: str) -> str | None:
    """The option letter a completion gives: a leading letter, else the last 'answer is X' / 'Answer: X'."""
    m = _LEADING_RE.match(completion)
    if m:
        return m.group(1)
    stated = _STATED_RE.findall(completion)
    return stated[-1] if stated else None


def select_languages(language: str | list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """Hub config names from `--language`: "all" (or None) or a comma list, any case."""
    if language is None or (isinstance(language, str) and language.strip().lower() == "all"):
        return LANGUAGES
    names = [x.strip() for x in language.split(",")] if isinstance(language, str) else list(language)
    by_lower = {name.lower(): name for name in LANGUAGES}
    chosen = []
    for name in names:
        if not name:
            continue
        if name.lower() not in by_lower:
            raise JudgekitError(f"unknown INCLUDE language {name!r}; choose from all, {', '.join(LANGUAGES)}")
        if by_lower[name.lower()] not in chosen:
            chosen.append(by_lower[name.lower()])
    if not chosen:
        raise JudgekitError("--language names no language (use all or a comma list such as German,Greek)")
    return tuple(chosen)


def _option(row: dict[str, Any], key: str, where: str) -> str:
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise JudgekitError(f"{where}: field {key!r} must be text, got {type(value).__name__}")
    return str(value)


class Include(Task):
    name = "include"
    splits = ("test",)
    stop_strings = ()
    fields = FIELDS

    def __init__(self, language: str | list[str] | None = None, subset: str = "base",
                 per_language: int | None = None) -> None:
        if subset not in HUB_IDS:
            raise JudgekitError(f"unknown INCLUDE subset {subset!r}; choose from {', '.join(HUB_IDS)}")
        if per_language is not None and (isinstance(per_language, bool) or not isinstance(per_language, int)
                                         or per_language < 1):
            raise JudgekitError(f"--per-language must be a positive integer, got {per_language!r}")
        self.languages = select_languages(language)
        self.all_languages = self.languages == LANGUAGES
        self.subset, self.per_language = subset, per_language
        self.source = (f"{HUB_IDS[subset]} (--subset base|lite; one config per language, --language all or a "
                       "comma list; --per-language N)")

    # ------------------------------------------------------------------ loading
    def load(self, split: str = "test", limit: int | None = None, data_file: str | None = None) -> list[Problem]:
        """The chosen languages' rows in order (first `per_language` of each), then the first `limit`."""
        check_split(self.name, split, self.splits, data_file)
        located: list[tuple[str, dict[str, Any]]] = []
        if data_file:
            rows = read_records(data_file)
            require_fields(rows, FIELDS, data_file)
            wanted = {name.lower(): name for name in self.languages}
            for i, row in enumerate(rows):
                if self.all_languages or str(row["language"]).lower() in wanted:
                    located.append((f"{data_file}: row {i + 1}", row))
        else:
            for language in self.languages:
                for i, row in enumerate(load_hub(HUB_IDS[self.subset], language, split)):
                    row.setdefault("language", language)
                    located.append((f"{HUB_IDS[self.subset]}/{language} {split} row {i + 1}", row))
        seen: dict[str, int] = {}
        problems = []
        for where, row in located:
            language = text_field(row, "language", where)
            index = seen[language] = seen.get(language, -1) + 1
            if self.per_language is None or index < self.per_language:
                problems.append(self.make_problem(row, where, index, split))
        return apply_limit(problems, limit)

    def make_problem(self, row: dict[str, Any], where: str, index: int, split: str) -> Problem:
        """`index` counts the language's rows in source order, so ids stay put under --limit/--per-language;
        lite ids carry the subset (`lite/German/0`), since the two data sets number different questions alike."""
        answer = row["answer"]
        if isinstance(answer, bool) or not isinstance(answer, int) or not 0 <= answer < len(LETTERS):
            raise JudgekitError(f"{where}: field 'answer' must be the option index 0-3, got {answer!r}")
        language = text_field(row, "language", where)
        meta = {k: row.get(k) for k in ("language", "country", "domain", "subject", "regional_feature", "level")}
        meta["options"] = [_option(row, k, where) for k in OPTIONS]
        prefix = "" if self.subset == "base" else f"{self.subset}/"
        return Problem(task=self.name, problem_id=f"{prefix}{language}/{index}",
                       question=text_field(row, "question", where),
                       reference=LETTERS[answer], meta={**meta, "domain": text_field(row, "domain", where)})

    # ------------------------------------------------------------------ prompting
    def build_prompt(self, problem: Problem, tokenizer: Any = None, chat_template: bool = True,
                     few_shot: int = 0) -> str:
        description = DESCRIPTION.format(domain=problem.meta["domain"])
        text = DOC_TO_TEXT.format(question=problem.question.strip(), **dict(zip(OPTIONS, problem.meta["options"])))
        return render_prompt(text, tokenizer, chat_template, system=description, plain=description + text)

    # ------------------------------------------------------------------ outcomes
    def extract_outcome(self, problem: Problem, completion: str) -> Outcome:
        return extract_letter(completion)

    def outcome_fixed(self, completion: str) -> bool:
        """A leading letter followed by anything is final (a later 'answer is' cannot override it)."""
        m = _LEADING_RE.match(completion)
        return m is not None and m.end() < len(completion)

    def grade(self, problem: Problem, outcome: Outcome) -> bool:
        return outcome is not None and outcome == problem.reference
