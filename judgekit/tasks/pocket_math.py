"""pocket-math: seeded GSM8K-shaped word problems (2-4 arithmetic steps, chain of thought, `#### N`).

Each problem comes from a template and a tuple of small numbers; the split ("train"/"test") is a hash of
(template, numbers), so the splits are disjoint by construction and a test problem's arithmetic never
appears in training under the same template. Reference solutions are sampled among equivalent phrasings
(lead words, operand order, `*` vs `x`, an optional "The answer is" line) so that a model trained on them
makes both harmless mismatches (phrasing) and answer-changing ones (digits).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any, Callable

from judgekit.tasks.pocket_common import Chooser, Style, get_style, problems_from_file, split_of, split_rng
from judgekit.tasks.base import Outcome, Problem, Task
from judgekit.tasks.common import check_split, normalize_number, render_prompt

TEST_FRACTION = 0.2
DEFAULT_SIZES = {"train": 20000, "test": 500}
_ANSWER_RE = re.compile(r"####\s*(-?[\d,]*\.?\d+)")
_FIXED_RE = re.compile(r"####\s*-?[\d,]*\.?\d+[ \t]*\n")
_EOS_MARKERS = ("<|eos|>", "</s>", "<|endoftext|>")

NAMES = (("Mia", "she"), ("Leo", "he"), ("Ana", "she"), ("Sam", "he"), ("Zoe", "she"), ("Max", "he"),
         ("Eva", "she"), ("Tom", "he"), ("Ivy", "she"), ("Ben", "he"), ("Lily", "she"), ("Omar", "he"))
ITEMS = ("apples", "pens", "cookies", "stickers", "marbles", "books", "cards", "shells")
THINGS = ("pencils", "notebooks", "erasers", "markers")


@dataclass(frozen=True)
class Step:
    """One arithmetic step: `a op b`, rendered as "<lead> <expr> <unit>." with one of several leads."""

    a: int
    op: str
    b: int
    leads: tuple[tuple[float, str], ...]
    unit: str

    @property
    def result(self) -> int:
        return {"+": self.a + self.b, "-": self.a - self.b, "*": self.a * self.b, "/": self.a // self.b}[self.op]


@dataclass(frozen=True)
class Deco:
    """Decoration that does not change the arithmetic: who and what."""

    name: str
    pron: str
    item: str
    things: str

    @property
    def Pron(self) -> str:  # noqa: N802 - sentence-initial pronoun
        return self.pron.capitalize()

    @property
    def poss(self) -> str:
        return "her" if self.pron == "she" else "his"

    @property
    def Poss(self) -> str:  # noqa: N802 - sentence-initial possessive
        return self.poss.capitalize()


def _r(rng: random.Random, lo: int, hi: int) -> int:
    return rng.randint(lo, hi)


def _lead(*leads: str) -> tuple[tuple[float, str], ...]:
    """The first lead is dominant (greedy models pick it); the others share the rest."""
    rest = (0.4 / (len(leads) - 1)) if len(leads) > 1 else 0.0
    return tuple([(0.6, leads[0])] + [(rest, s) for s in leads[1:]])


# Each template: sample(rng) -> numbers (or None to reject), build(numbers, deco) -> (question, steps).
def _shop_sample(rng):
    a, b = _r(rng, 2, 9), _r(rng, 2, 9)
    return a, b, _r(rng, 1, a * b - 1)


def _shop_build(n, d):
    a, b, c = n
    q = (f"{d.name} buys {a} packs of {d.item}. Each pack has {b} {d.item}. {d.Pron} gives {c} {d.item} "
         f"to a friend. How many {d.item} does {d.name} have now?")
    s1 = Step(a, "*", b, _lead(f"{d.name} buys", "That is", f"{d.Pron} gets"), d.item)
    s2 = Step(s1.result, "-", c, _lead(f"Now {d.pron} has", "So", "That leaves"), d.item)
    return q, [s1, s2]


def _share_sample(rng):
    a, b, k = _r(rng, 5, 40), _r(rng, 2, 30), _r(rng, 2, 9)
    return (a, b, k) if (a + b) % k == 0 else None


def _share_build(n, d):
    a, b, k = n
    q = (f"{d.name} has {a} {d.item}. {d.Pron} gets {b} more and shares them equally among {k} friends. "
         f"How many {d.item} does each friend get?")
    s1 = Step(a, "+", b, _lead(f"{d.name} has", "In total there are", "Together that is"), d.item)
    s2 = Step(s1.result, "/", k, _lead("Each friend gets", "So each gets", "That means each friend gets"), d.item)
    return q, [s1, s2]


def _ages_sample(rng):
    return _r(rng, 3, 15), _r(rng, 1, 9), _r(rng, 2, 5), (_r(rng, 10, 30) if rng.random() < 0.5 else 0)


def _ages_build(n, d):
    a, b, k, c = n
    poss = "Her" if d.pron == "she" else "His"
    q = (f"{d.name} is {a} years old. {poss} brother is {b} years older. "
         f"Their mother is {k} times as old as the brother.")
    q += f" Their grandfather is {c} years older than the mother. How old is the grandfather?" if c else \
        " How old is the mother?"
    s1 = Step(a, "+", b, _lead("The brother is", "So the brother is", "He is"), "years old")
    s2 = Step(s1.result, "*", k, _lead("The mother is", "So the mother is", "That means the mother is"),
              "years old")
    steps = [s1, s2]
    if c:
        steps.append(Step(s2.result, "+", c, _lead("The grandfather is", "So the grandfather is"), "years old"))
    return q, steps


def _savings_sample(rng):
    a, w = _r(rng, 2, 12), _r(rng, 2, 9)
    return a, w, _r(rng, 1, a * w - 1), (_r(rng, 1, 20) if rng.random() < 0.5 else 0)


def _savings_build(n, d):
    a, w, c, e = n
    q = f"{d.name} saves {a} dollars each week for {w} weeks. Then {d.pron} spends {c} dollars on a gift."
    q += (f" Later {d.pron} earns {e} dollars." if e else "") + f" How many dollars does {d.name} have now?"
    s1 = Step(a, "*", w, _lead(f"{d.name} saves", "That is", "In total"), "dollars")
    s2 = Step(s1.result, "-", c, _lead("After the gift there are", f"Then {d.pron} has", "So"), "dollars")
    steps = [s1, s2]
    if e:
        steps.append(Step(s2.result, "+", e, _lead(f"Now {d.pron} has", "So"), "dollars"))
    return q, steps


def _garden_sample(rng):
    r, c, p = _r(rng, 2, 9), _r(rng, 2, 9), _r(rng, 1, 20)
    return r, c, p, _r(rng, 1, r * c + p - 1)


def _garden_build(n, d):
    r, c, p, k = n
    q = (f"A garden has {r} rows with {c} flowers in each row. {d.name} plants {p} more flowers and picks "
         f"{k} flowers. How many flowers are in the garden now?")
    s1 = Step(r, "*", c, _lead("The garden has", "At first there are", "That is"), "flowers")
    s2 = Step(s1.result, "+", p, _lead("After planting there are", "Then there are"), "flowers")
    s3 = Step(s2.result, "-", k, _lead("Now there are", "So"), "flowers")
    return q, [s1, s2, s3]


def _bus_sample(rng):
    a = _r(rng, 5, 40)
    b, c = _r(rng, 1, a - 1), _r(rng, 1, 20)
    return a, b, c, _r(rng, 1, a - b + c - 1), (_r(rng, 1, 15) if rng.random() < 0.5 else 0)


def _bus_build(n, d):
    a, b, c, k, e = n
    q = (f"A bus has {a} people. At the first stop {b} people get off and {c} people get on. "
         f"At the second stop {k} people get off.")
    q += (f" At the third stop {e} people get on." if e else "") + " How many people are on the bus now?"
    s1 = Step(a, "-", b, _lead("After some get off there are", "Then there are"), "people")
    s2 = Step(s1.result, "+", c, _lead("After some get on there are", "So there are"), "people")
    s3 = Step(s2.result, "-", k, _lead("At the second stop it has", "Then there are"), "people")
    steps = [s1, s2, s3]
    if e:
        steps.append(Step(s3.result, "+", e, _lead("Now there are", "So"), "people"))
    return q, steps


def _change_sample(rng):
    p, k, c = _r(rng, 2, 9), _r(rng, 2, 9), _r(rng, 2, 20)
    m = rng.choice((20, 50, 100))
    return (p, k, c, m) if m > p * k + c else None


def _change_build(n, d):
    p, k, c, m = n
    q = (f"{d.things.capitalize()} cost {p} dollars each. {d.name} buys {k} {d.things} and a book that costs "
         f"{c} dollars. {d.Pron} pays with {m} dollars. How much change does {d.name} get?")
    s1 = Step(p, "*", k, _lead(f"The {d.things} cost", "That is"), "dollars")
    s2 = Step(s1.result, "+", c, _lead("With the book that is", "In total"), "dollars")
    s3 = Step(m, "-", s2.result, _lead(f"{d.name} gets", "The change is"), "dollars")
    return q, [s1, s2, s3]


def _baking_sample(rng):
    t, k, j = _r(rng, 2, 6), _r(rng, 2, 9), _r(rng, 2, 6)
    e = _r(rng, 1, t * k - 1)
    return (t, k, e, j) if (t * k - e) % j == 0 else None


def _baking_build(n, d):
    t, k, e, j = n
    q = (f"{d.name} bakes {t} trays of cookies with {k} cookies on each tray. {d.Pron} eats {e} cookies and "
         f"puts the rest equally into {j} boxes. How many cookies are in each box?")
    s1 = Step(t, "*", k, _lead(f"{d.name} bakes", "That is"), "cookies")
    s2 = Step(s1.result, "-", e, _lead("After eating there are", "Then there are"), "cookies")
    s3 = Step(s2.result, "/", j, _lead("Each box gets", "So each box has"), "cookies")
    return q, [s1, s2, s3]


def _reading_sample(rng):
    a, k = _r(rng, 3, 20), _r(rng, 2, 4)
    return a, k, _r(rng, 1, a * k - 1)


def _reading_build(n, d):
    a, k, b = n
    q = (f"{d.name} reads {a} pages on Monday. On Tuesday {d.pron} reads {k} times as many pages. "
         f"On Wednesday {d.pron} reads {b} fewer pages than on Tuesday. "
         f"How many pages does {d.name} read in the three days?")
    s1 = Step(a, "*", k, _lead("On Tuesday it is", f"{d.Pron} reads"), "pages")
    s2 = Step(s1.result, "-", b, _lead("On Wednesday it is", "Then"), "pages")
    s3 = Step(a, "+", s1.result, _lead("Monday and Tuesday make", "So far"), "pages")
    s4 = Step(s3.result, "+", s2.result, _lead("In total", "All together"), "pages")
    return q, [s1, s2, s3, s4]


Sampler = Callable[[random.Random], Any]
Builder = Callable[[tuple, Deco], tuple[str, list[Step]]]
TEMPLATES: dict[str, tuple[Sampler, Builder]] = {
    "shop": (_shop_sample, _shop_build),
    "share": (_share_sample, _share_build),
    "ages": (_ages_sample, _ages_build),
    "savings": (_savings_sample, _savings_build),
    "garden": (_garden_sample, _garden_build),
    "bus": (_bus_sample, _bus_build),
    "change": (_change_sample, _change_build),
    "baking": (_baking_sample, _baking_build),
    "reading": (_reading_sample, _reading_build),
}


# ---- the hard level (`pocket-math-hard`): 4-5 steps, a 2-digit running amount with carries, one distractor ----
# How a real small draft fails on GSM8K: a wrong digit where a carry or borrow is needed, an intermediate result
# copied from the wrong line, the question's irrelevant number used instead of the relevant one. The hard level
# is built to give exactly those chances: every add/subtract carries (or borrows) at least once, intermediate
# results are reused several lines later, and the question states one number that no step uses. The running
# amount stays below HARD_MAX and every operand has at most two digits. Two wider versions were tried first
# (amounts below 1000, then below 300): the fine-tuned ~1M target stayed at 0 % and then 14 %, its first error
# mostly a wrong 3-digit sum or product (data/pocket/README.md); below 100 its line arithmetic is right 88 % of
# the time within 200 steps, and what is left to learn is keeping its place in a 4-5 event question.
HARD_MAX = 100
HARD_START = (20, 60)  # the opening amount
HARD_GAIN = (12, 60)  # a gain or a loss
HARD_TIMES = (2, 3)  # "k times as large"
HARD_BOX = ((2, 9), (2, 9))  # x per box, y boxes
HARD_STEPS = (4, 5)  # arithmetic steps per problem (a box event is two)


def _carries(a: int, b: int, op: str) -> bool:
    """Whether `a op b` (op + or -) needs a carry or a borrow in some digit column."""
    while a or b:
        x, y = a % 10, b % 10
        if (op == "+" and x + y >= 10) or (op == "-" and x < y):
            return True
        a, b = a // 10, b // 10
    return False


# One event changes the running amount: (code, argument, second argument); codes index _EVENT_KINDS.
_EVENT_KINDS = ("gain", "loss", "weekly", "times", "split")
_DISTRACTORS = (
    lambda d, x: f"{d.Pron} is {x} years old.",
    lambda d, x: f"The shop is {x} meters from {d.poss} home.",
    lambda d, x: f"{d.Poss} bag weighs {x} grams.",
    lambda d, x: f"Last year {d.pron} had {x} {d.things}.",
)
HARD_STORIES = {  # story -> (opening sentence, question), both with {name}, {pron}, {unit}
    "store": ("{Name} has {a} {unit} in the store.", "How many {unit} does {Name} have now?"),
    "wallet": ("{Name} has {a} dollars in a jar.", "How many dollars does {Name} have now?"),
    "farm": ("A farm has {a} {unit}.", "How many {unit} are on the farm now?"),
}


def _event_sample(rng: random.Random, cur: int) -> tuple[int, int, int] | None:
    """One event that keeps the running amount in 1..HARD_MAX-1, with a carry/borrow when it adds or subtracts."""
    kind = rng.choice(range(len(_EVENT_KINDS)))
    if kind == 0:
        b = _r(rng, *HARD_GAIN)
        return (0, b, 0) if cur + b < HARD_MAX and _carries(cur, b, "+") else None
    if kind == 1:
        b = _r(rng, *HARD_GAIN)
        return (1, b, 0) if 0 < cur - b and _carries(cur, b, "-") else None
    if kind == 2:  # two steps: a * w (a product that carries), then added to the running amount
        a, w = _r(rng, *HARD_BOX[0]), _r(rng, *HARD_BOX[1])
        return (2, a, w) if cur + a * w < HARD_MAX and _carries(cur, a * w, "+") and a % 10 * w >= 10 else None
    if kind == 3:
        k = _r(rng, *HARD_TIMES)
        return (3, k, 0) if cur * k < HARD_MAX and cur >= 12 else None
    k = _r(rng, 2, 9)
    return (4, k, 0) if cur % k == 0 and cur // k >= 10 else None


def _event_value(event: tuple[int, int, int], cur: int) -> int:
    code, x, y = event
    return (cur + x, cur - x, cur + x * y, cur * x, cur // x)[code]


def _hard_sample(rng: random.Random, story: int) -> tuple | None:
    """(story, start, distractor kind, distractor position, distractor value, then each event's three ints):
    a problem of HARD_STEPS arithmetic steps, or None to reject."""
    start = cur = _r(rng, *HARD_START)
    events: list[tuple[int, int, int]] = []
    want, steps = _r(rng, *HARD_STEPS), 0
    for _ in range(40):
        if steps == want:
            break
        e = _event_sample(rng, cur)
        size = 2 if e is not None and e[0] == 2 else 1
        if e is None or (events and e[0] == events[-1][0]) or steps + size > want:
            continue
        events.append(e)
        steps += size
        cur = _event_value(e, cur)
    if steps != want:
        return None
    return (story, start, rng.randrange(len(_DISTRACTORS)), rng.randrange(len(events) + 1), _r(rng, 3, 90),
            *[v for e in events for v in e])


_EVENT_TEXT = {  # code -> (sentence, leads of its step); {x}, {y} are the event's arguments
    0: ("{Pron} gets {x} more {unit}.", ("Then {pron} has", "After that there are", "So")),
    1: ("{Pron} gives away {x} {unit}.", ("Now {pron} has", "That leaves", "So")),
    3: ("Then the number of {unit} becomes {x} times as large.", ("That makes", "Now there are", "So")),
    4: ("{Pron} splits the {unit} equally into {x} groups and keeps one group.",
        ("One group has", "Each group has", "So")),
}


def _hard_build(n: tuple, d: Deco) -> tuple[str, list[Step]]:
    story, start, dk, dpos, dval, *flat = n
    events = [tuple(flat[i:i + 3]) for i in range(0, len(flat), 3)]
    unit = "dollars" if story == 1 else d.item
    fmt = dict(Name=d.name, pron=d.pron, Pron=d.Pron, unit=unit, a=start)
    opening, question = list(HARD_STORIES.values())[story]
    sentences = [opening.format(**fmt)]
    steps: list[Step] = []
    cur = start
    for code, x, y in events:
        if code == 2:
            sentences.append(f"{d.Pron} then earns {x} {unit} a day for {y} days." if story == 1 else
                             f"{d.Pron} then adds {y} boxes with {x} {unit} in each box.")
            s1 = Step(x, "*", y, _lead("The new ones are", "That adds", "That is"), unit)
            steps += [s1, Step(cur, "+", s1.result, _lead("Now there are", "In total", "So"), unit)]
        else:
            text, leads = _EVENT_TEXT[code]
            sentences.append(text.format(x=x, **fmt))
            steps.append(Step(cur, "+-?*/"[code], x, _lead(*(lead.format(**fmt) for lead in leads)), unit))
        cur = steps[-1].result
    sentences.insert(1 + dpos, _DISTRACTORS[dk](d, dval))
    return " ".join(sentences + [question.format(**fmt)]), steps


HARD_TEMPLATES: dict[str, tuple[Sampler, Builder]] = {
    f"hard-{story}": (lambda rng, i=i: _hard_sample(rng, i), _hard_build) for i, story in enumerate(HARD_STORIES)}
LEVELS = {"easy": TEMPLATES, "hard": HARD_TEMPLATES}


def render_expr(step: Step, swap: bool = False, times: str = "*") -> str:
    """`a op b = r`; commutative ops may be written either way round, `*` also as `x`."""
    a, b = (step.b, step.a) if swap and step.op in "+*" else (step.a, step.b)
    op = times if step.op == "*" else step.op
    return f"{a} {op} {b} = {step.result}"


def render_solution(steps: list[Step], rng: random.Random | None = None, style: "str | Style" = "target") -> str:
    """A chain of thought ending in `#### N`; rng=None gives the canonical (all-dominant) variant, `style`
    the habits the variants are drawn with (pocket_common.STYLES)."""
    ch = Chooser(rng, get_style(style))
    times = ch.pick(((0.75, "*"), (0.25, "x")))
    lines = []
    for step in steps:
        lead = ch.pick(step.leads)
        swap = ch.chance("swap", 0.35)
        lines.append(f"{lead} {render_expr(step, swap, times)} {step.unit}.")
    answer = steps[-1].result
    if ch.chance("answer_line", 0.2):
        lines.append(f"The answer is {answer}.")
    lines.append(f"#### {answer}")
    return "\n".join(lines)


class PocketTask(Task):
    """What the two pocket generators share: sampling equivalent solutions and building prompts."""

    def reference_completion(self, problem: Problem, rng: random.Random | None = None) -> str:
        raise NotImplementedError

    def solutions(self, problem: Problem, rng: random.Random, n: int = 4) -> list[str]:
        """Up to n distinct equivalent reference solutions."""
        out: list[str] = []
        for _ in range(6 * n):
            s = self.reference_completion(problem, rng)
            if s not in out:
                out.append(s)
            if len(out) == n:
                break
        return out

    def build_prompt(self, problem: Problem, tokenizer: Any = None, chat_template: bool = True,
                     few_shot: int = 0) -> str:
        shots = self.load("train", limit=few_shot) if few_shot else []
        pairs = [(s.question, self.reference_completion(s)) for s in shots]
        return format_prompt(problem.question, tokenizer, chat_template, pairs)


class PocketMath(PocketTask):
    """GSM8K-shaped arithmetic word problems generated from a seed (docs/design.md §6)."""

    name = "pocket-math"
    source = "generator:judgekit.tasks.pocket_math"
    splits = ("train", "test")
    stop_strings = ()

    level = "easy"  # which template set (LEVELS); PocketMathHard is the same generator at level "hard"

    def __init__(self, seed: int = 0, style: "str | Style" = "target") -> None:
        self.seed = seed
        self.style = get_style(style)  # the habits reference_completion samples with (training data only)
        self.templates = LEVELS[self.level]

    # ---- generation -------------------------------------------------------------------------------
    @staticmethod
    def key(template: str, numbers: tuple) -> str:
        """The canonical problem: template and numbers (names and items are decoration)."""
        return f"{template}|{','.join(map(str, numbers))}"

    def sample(self, split: str, rng: random.Random) -> Problem:
        """One random problem of `split` (may repeat earlier ones; training uses this directly)."""
        check_split(self.name, split, self.splits, None)
        while True:
            template = rng.choice(sorted(self.templates))
            sampler, _ = self.templates[template]
            numbers = sampler(rng)
            if numbers is None or split_of(self.key(template, numbers), TEST_FRACTION) != split:
                continue
            name, pron = rng.choice(NAMES)
            deco = Deco(name, pron, rng.choice(ITEMS), rng.choice(THINGS))
            return self._make(template, tuple(numbers), deco, split, "")

    def _make(self, template: str, numbers: tuple, deco: Deco, split: str, pid: str) -> Problem:
        question, steps = self.templates[template][1](numbers, deco)
        meta = {"template": template, "numbers": list(numbers), "deco": [deco.name, deco.pron, deco.item,
                deco.things], "split": split, "steps": len(steps)}
        return Problem(self.name, pid, question, str(steps[-1].result), meta)

    def load(self, split: str = "test", limit: int | None = None, data_file: str | None = None) -> list[Problem]:
        if data_file:
            return problems_from_file(data_file, self.name, limit)
        check_split(self.name, split, self.splits, None)
        n = DEFAULT_SIZES[split] if limit is None else limit
        rng = split_rng(self.seed, split, self.name)
        seen: set[str] = set()
        problems: list[Problem] = []
        while len(problems) < n:
            p = self.sample(split, rng)
            k = self.key(p.meta["template"], tuple(p.meta["numbers"]))
            if k in seen:
                continue
            seen.add(k)
            problems.append(Problem(p.task, f"{self.name}/s{self.seed}-{split}-{len(problems):05d}", p.question,
                                    p.reference, p.meta))
        return problems

    def steps(self, problem: Problem) -> list[Step]:
        deco = Deco(*problem.meta["deco"])
        return self.templates[problem.meta["template"]][1](tuple(problem.meta["numbers"]), deco)[1]

    def reference_completion(self, problem: Problem, rng: random.Random | None = None) -> str:
        """A correct chain of thought; rng samples among equivalent phrasings, None gives the canonical one."""
        return render_solution(self.steps(problem), rng, self.style)

    # ---- prompting and scoring --------------------------------------------------------------------
    def extract_outcome(self, problem: Problem, completion: str) -> Outcome:
        matches = _ANSWER_RE.findall(completion)
        return normalize_number(matches[-1]) if matches else None

    def outcome_fixed(self, completion: str) -> bool:
        return bool(_FIXED_RE.search(completion)) or any(m in completion for m in _EOS_MARKERS)

    def grade(self, problem: Problem, outcome: Outcome) -> bool:
        return outcome is not None and outcome == normalize_number(str(problem.reference))


class PocketMathHard(PocketMath):
    """pocket-math at the hard level: 4-5 steps over a 2-digit running amount with carries and borrows, reused
    intermediate results and one distractor sentence whose number no step uses (see HARD_TEMPLATES)."""

    name = "pocket-math-hard"
    level = "hard"


def format_prompt(question: str, tokenizer: Any = None, chat_template: bool = True,
                  shots: list[tuple[str, str]] | None = None) -> str:
    """Chat template when the tokenizer has one (and it is asked), else "Question: ...\\nAnswer: "."""
    shots = shots or []
    prefix = "".join(f"Question: {q}\nAnswer: {a}\n\n" for q, a in shots)
    return render_prompt(question, tokenizer, chat_template, shots=shots,
                         plain=f"{prefix}Question: {question}\nAnswer: ")
