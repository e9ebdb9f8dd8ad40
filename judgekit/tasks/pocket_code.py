"""pocket-code: seeded LiveCodeBench-shaped function-writing tasks graded by running hidden tests.

A problem is a family (sum_if, fizz, join_rev, ...) and its parameters (threshold, divisor, separator ...);
the split is a hash of (family, parameters), so train and test are disjoint by construction. Each family has
several equivalent implementations (loop / comprehension / builtin, different variable names, `x > 7` vs
`7 < x`), so a model trained on them makes harmless mismatches (another form) and answer-changing ones
(another operator or constant). The answer is one ```python fenced block; the outcome is the per-test
pass/fail vector, computed only inside the sandbox (`judgekit.sandbox.run_program`).
"""

from __future__ import annotations

import random
import re
import string
from dataclasses import dataclass
from typing import Any, Callable

from judgekit.tasks.pocket_common import Chooser, Style, get_style, problems_from_file, split_of, split_rng, stable_hash
from judgekit.tasks.base import Outcome, Problem
from judgekit.tasks.common import check_split
from judgekit.tasks.pocket_math import _EOS_MARKERS, PocketTask

TEST_FRACTION = 0.25
DEFAULT_SIZES = {"train": 2000, "test": 200}
_FENCE_RE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)
_CLOSED_RE = re.compile(r"```(?:python|py)?[ \t]*\n.*?```", re.DOTALL)
_MARK = "@@POCKET"

CMP_WORDS = {">": "greater than", "<": "less than", ">=": "at least", "<=": "at most"}
FLIP = {">": "<", "<": ">", ">=": "<=", "<=": ">="}
OPS = {">": lambda a, b: a > b, "<": lambda a, b: a < b, ">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b}
WORDS = ("Fizz", "Buzz", "Foo", "Bar")
SEPS = (" ", "-", ",", "_", "+", "/", ".")
LEXICON = ("cat", "dog", "sun", "tree", "apple", "river", "moon", "banana", "sky", "pen", "garden", "a",
           "blue", "orange", "kite", "zebra", "lemon", "fox", "house", "it")

Names = dict[str, str]


def _names(ch: Chooser, **pools: tuple[str, ...]) -> Names:
    """Variable names: the first of each pool when canonical, else weighted towards the style's favourite."""
    out = {}
    for key, pool in pools.items():
        weights = [0.6] + [0.4 / (len(pool) - 1)] * (len(pool) - 1)
        out[key] = ch.pick(list(zip(weights, pool)))
    return out


def _pick(ch: Chooser, options: list[tuple[float, Callable[[], str]]]) -> str:
    return ch.pick(options)()


def _int_lists(rng: random.Random, k: int, hi: int = 25, must: tuple[int, ...] = ()) -> list[list[int]]:
    lists = [[rng.randint(0, hi) for _ in range(rng.randint(1, 7))] for _ in range(k)]
    for i, m in enumerate(must):  # boundary values, so > and >= (or off-by-one constants) are told apart
        lists[i % k].append(m)
    return lists


def _sentences(rng: random.Random, k: int) -> list[str]:
    return [" ".join(rng.choice(LEXICON) for _ in range(rng.randint(1, 6))) for _ in range(k)]


@dataclass(frozen=True)
class Family:
    """One kind of task: parameters, question, reference behaviour, test inputs, equivalent solutions."""

    func: Callable[[tuple], str]  # entry-point name
    params: Callable[[random.Random], tuple]
    question: Callable[[tuple], str]
    reference: Callable[[tuple], Callable[[Any], Any]]
    inputs: Callable[[tuple, random.Random], list]
    solution: Callable[[tuple, Chooser], str]  # one equivalent implementation, in the chooser's style


# ---- sum_if: sum of the numbers passing a comparison -------------------------------------------------
def _cond(it: str, cmp: str, k: int, ch: Chooser) -> str:
    flipped = ch.chance("flip_cond", 0.2)
    return f"{k} {FLIP[cmp]} {it}" if flipped else f"{it} {cmp} {k}"


def _sum_loop(fn: str, cond: str, n: Names) -> str:
    return (f"def {fn}(xs):\n    {n['acc']} = 0\n    for {n['it']} in xs:\n        if {cond}:\n"
            f"            {n['acc']} += {n['it']}\n    return {n['acc']}")


def _sum_solution(fn: str, make_cond: Callable[[str], str], ch: Chooser) -> str:
    n = _names(ch, acc=("total", "result", "s"), it=("x", "n", "v"))
    cond = make_cond(n["it"])
    return _pick(ch, [
        (0.5, lambda: _sum_loop(fn, cond, n)),
        (0.35, lambda: f"def {fn}(xs):\n    return sum({n['it']} for {n['it']} in xs if {cond})"),
        (0.15, lambda: f"def {fn}(xs):\n    return sum([{n['it']} for {n['it']} in xs if {cond}])"),
    ])


def _count_solution(fn: str, seq: str, it_pool: tuple[str, ...], make_cond: Callable[[str], str],
                    ch: Chooser, arg: str = "xs") -> str:
    n = _names(ch, acc=("count", "total", "c"), it=it_pool)
    cond = make_cond(n["it"])
    return _pick(ch, [
        (0.5, lambda: f"def {fn}({arg}):\n    {n['acc']} = 0\n    for {n['it']} in {seq}:\n        if {cond}:\n"
                      f"            {n['acc']} += 1\n    return {n['acc']}"),
        (0.3, lambda: f"def {fn}({arg}):\n    return sum(1 for {n['it']} in {seq} if {cond})"),
        (0.2, lambda: f"def {fn}({arg}):\n    return len([{n['it']} for {n['it']} in {seq} if {cond}])"),
    ])


SUM_IF = Family(
    func=lambda p: "sum_if",
    params=lambda r: (r.choice(sorted(CMP_WORDS)), r.randint(0, 30)),
    question=lambda p: f"Write a function sum_if(xs) that returns the sum of the numbers in xs that are "
                       f"{CMP_WORDS[p[0]]} {p[1]}.",
    reference=lambda p: lambda xs: sum(x for x in xs if OPS[p[0]](x, p[1])),
    inputs=lambda p, r: [[xs] for xs in _int_lists(r, 5, must=(p[1], p[1] + 1, max(p[1] - 1, 0)))],
    solution=lambda p, c: _sum_solution("sum_if", lambda it: _cond(it, p[0], p[1], c), c),
)

DIV = Family(
    func=lambda p: f"{p[0]}_div",
    params=lambda r: (r.choice(("count", "sum")), r.randint(2, 12)),
    question=lambda p: (f"Write a function count_div(xs) that returns how many numbers in xs are divisible "
                        f"by {p[1]}." if p[0] == "count" else
                        f"Write a function sum_div(xs) that returns the sum of the numbers in xs that are "
                        f"divisible by {p[1]}."),
    reference=lambda p: (lambda xs: sum(1 for x in xs if x % p[1] == 0)) if p[0] == "count" else
                        (lambda xs: sum(x for x in xs if x % p[1] == 0)),
    inputs=lambda p, r: [[xs] for xs in _int_lists(r, 5, hi=40, must=(p[1], 2 * p[1], p[1] + 1))],
    solution=lambda p, c: (_count_solution("count_div", "xs", ("x", "n", "v"), lambda it: f"{it} % {p[1]} == 0", c)
                           if p[0] == "count" else
                           _sum_solution("sum_div", lambda it: f"{it} % {p[1]} == 0", c)),
)

_TWORDS = {"*": "multiplied by", "+": "increased by", "-": "decreased by"}


def _transform_solution(p: tuple, ch: Chooser) -> str:
    op, k = p
    n = _names(ch, acc=("result", "out", "ys"), it=("x", "n", "v"))
    it, acc = n["it"], n["acc"]
    return _pick(ch, [
        (0.5, lambda: f"def transform(xs):\n    return [{it} {op} {k} for {it} in xs]"),
        (0.35, lambda: f"def transform(xs):\n    {acc} = []\n    for {it} in xs:\n        {acc}.append({it} {op} {k})"
                       f"\n    return {acc}"),
        (0.15, lambda: f"def transform(xs):\n    return list(map(lambda {it}: {it} {op} {k}, xs))"),
    ])


TRANSFORM = Family(
    func=lambda p: "transform",
    params=lambda r: (r.choice(("*", "+", "-")), r.randint(2, 30)),
    question=lambda p: f"Write a function transform(xs) that returns a new list with each number in xs "
                       f"{_TWORDS[p[0]]} {p[1]}.",
    reference=lambda p: lambda xs: [{"*": x * p[1], "+": x + p[1], "-": x - p[1]}[p[0]] for x in xs],
    inputs=lambda p, r: [[xs] for xs in _int_lists(r, 4)] + [[[]]],
    solution=_transform_solution,
)


def _count_char_solution(p: tuple, ch: Chooser) -> str:
    c = p[0]
    if ch.rng is None or ch.chance("count_builtin", 0.5):
        return f"def count_char(s):\n    return s.count('{c}')"
    return _count_solution("count_char", "s", ("ch", "c", "letter"), lambda it: f"{it} == '{c}'", ch, arg="s")


COUNT_CHAR = Family(
    func=lambda p: "count_char",
    params=lambda r: (r.choice(string.ascii_lowercase),),
    question=lambda p: f"Write a function count_char(s) that returns how many times the letter '{p[0]}' "
                       f"appears in s.",
    reference=lambda p: lambda s: s.count(p[0]),
    inputs=lambda p, r: [[s + " " + p[0] * i] for i, s in enumerate(_sentences(r, 5))],
    solution=_count_char_solution,
)

_LWORDS = {">": "more than", "<": "fewer than"}
COUNT_LONG = Family(
    func=lambda p: "count_long",
    params=lambda r: (r.choice((">", "<")), r.randint(1, 9)),
    question=lambda p: f"Write a function count_long(s) that returns how many words in s have {_LWORDS[p[0]]} "
                       f"{p[1]} letters.",
    reference=lambda p: lambda s: sum(1 for w in s.split() if OPS[p[0]](len(w), p[1])),
    inputs=lambda p, r: [[s + " " + "x" * p[1]] for s in _sentences(r, 5)],
    solution=lambda p, c: _count_solution("count_long", "s.split()", ("w", "word", "t"),
                                          lambda it: f"len({it}) {p[0]} {p[1]}", c, arg="s"),
)


def _fizz_params(rng: random.Random) -> tuple:
    a, b = rng.sample(range(2, 10), 2)
    w1, w2 = rng.sample(WORDS, 2)
    return a, b, w1, w2


def _fizz_solution(p: tuple, ch: Chooser) -> str:
    a, b, w1, w2 = p
    return _pick(ch, [
        (0.5, lambda: f"def fizz(n):\n    if n % {a} == 0:\n        return '{w1}'\n    elif n % {b} == 0:\n"
                      f"        return '{w2}'\n    else:\n        return str(n)"),
        (0.3, lambda: f"def fizz(n):\n    if n % {a} == 0:\n        return '{w1}'\n    if n % {b} == 0:\n"
                      f"        return '{w2}'\n    return str(n)"),
        (0.2, lambda: f"def fizz(n):\n    return '{w1}' if n % {a} == 0 else '{w2}' if n % {b} == 0 else str(n)"),
    ])


FIZZ = Family(
    func=lambda p: "fizz",
    params=_fizz_params,
    question=lambda p: f"Write a function fizz(n) that returns '{p[2]}' if n is divisible by {p[0]}, else "
                       f"'{p[3]}' if n is divisible by {p[1]}, else str(n).",
    reference=lambda p: lambda n: p[2] if n % p[0] == 0 else p[3] if n % p[1] == 0 else str(n),
    inputs=lambda p, r: [[p[0] * r.randint(1, 5)], [p[1] * r.randint(1, 5)], [p[0] * p[1]],
                         [p[0] * p[1] + 1], [r.randint(1, 60)]],
    solution=_fizz_solution,
)


def _extreme_solution(p: tuple, ch: Chooser) -> str:
    kind, k = p
    cmp, idx = (">", -1) if kind == "max" else ("<", 0)
    n = _names(ch, acc=("best", "m", "top"), it=("x", "n", "v"))
    acc, it = n["acc"], n["it"]
    return _pick(ch, [
        (0.5, lambda: f"def extreme(xs):\n    return {kind}(xs) + {k}"),
        (0.3, lambda: f"def extreme(xs):\n    {acc} = xs[0]\n    for {it} in xs:\n        if {it} {cmp} {acc}:\n"
                      f"            {acc} = {it}\n    return {acc} + {k}"),
        (0.2, lambda: f"def extreme(xs):\n    return sorted(xs)[{idx}] + {k}"),
    ])


EXTREME = Family(
    func=lambda p: "extreme",
    params=lambda r: (r.choice(("max", "min")), r.randint(1, 20)),
    question=lambda p: f"Write a function extreme(xs) that returns the {'largest' if p[0] == 'max' else 'smallest'} "
                       f"number in xs plus {p[1]}.",
    reference=lambda p: lambda xs: (max if p[0] == "max" else min)(xs) + p[1],
    inputs=lambda p, r: [[xs] for xs in _int_lists(r, 5, hi=50)],
    solution=_extreme_solution,
)


def _join_rev_solution(p: tuple, ch: Chooser) -> str:
    sep, upper = p
    src = "s.upper().split()" if upper else "s.split()"
    w = _names(ch, acc=("words", "parts", "ws"))["acc"]
    return _pick(ch, [
        (0.45, lambda: f"def join_rev(s):\n    return '{sep}'.join(reversed({src}))"),
        (0.35, lambda: f"def join_rev(s):\n    return '{sep}'.join({src}[::-1])"),
        (0.2, lambda: f"def join_rev(s):\n    {w} = {src}\n    {w}.reverse()\n    return '{sep}'.join({w})"),
    ])


JOIN_REV = Family(
    func=lambda p: "join_rev",
    params=lambda r: (r.choice(SEPS), r.random() < 0.5),
    question=lambda p: f"Write a function join_rev(s) that returns the words of s"
                       f"{' in upper case' if p[1] else ''} in reverse order, joined by '{p[0]}'.",
    reference=lambda p: lambda s: p[0].join(reversed((s.upper() if p[1] else s).split())),
    inputs=lambda p, r: [[s] for s in _sentences(r, 5)],
    solution=_join_rev_solution,
)


def _first_solution(p: tuple, ch: Chooser) -> str:
    cmp, k = p
    it = _names(ch, it=("x", "n", "v"))["it"]
    return _pick(ch, [
        (0.6, lambda: f"def first_index(xs):\n    for i, {it} in enumerate(xs):\n        if {_cond(it, cmp, k, ch)}:\n"
                      f"            return i\n    return -1"),
        (0.4, lambda: f"def first_index(xs):\n    for i in range(len(xs)):\n        if {_cond('xs[i]', cmp, k, ch)}:\n"
                      f"            return i\n    return -1"),
    ])


def _first_ref(p: tuple) -> Callable[[list], int]:
    return lambda xs: next((i for i, x in enumerate(xs) if OPS[p[0]](x, p[1])), -1)


FIRST = Family(
    func=lambda p: "first_index",
    params=lambda r: (r.choice((">", "<")), r.randint(0, 30)),
    question=lambda p: f"Write a function first_index(xs) that returns the index of the first number in xs "
                       f"{CMP_WORDS[p[0]]} {p[1]}, or -1 if there is none.",
    reference=_first_ref,
    inputs=lambda p, r: [[xs] for xs in _int_lists(r, 4, must=(p[1],))] + [[[p[1]] * 3]],
    solution=_first_solution,
)

FAMILIES: dict[str, Family] = {
    "sum_if": SUM_IF, "div": DIV, "transform": TRANSFORM, "count_char": COUNT_CHAR, "count_long": COUNT_LONG,
    "fizz": FIZZ, "extreme": EXTREME, "join_rev": JOIN_REV, "first_index": FIRST,
}


def extract_code(completion: str) -> str | None:
    """The first ```python fenced block (an unclosed block runs to the end); None when there is none."""
    m = _FENCE_RE.search(completion)
    return m.group(1) if m else None


def harness_program(code: str, tests: list[str]) -> str:
    """A program that defines the solution and prints one marker line per test, so a crash, a syntax
    error or a timeout in one test still leaves the results of the others readable."""
    return (
        "import sys\n"
        f"SOL = {code!r}\nTESTS = {tests!r}\n"
        "ns = {'__name__': '__solution__'}\n"
        "try:\n    exec(compile(SOL, '<solution>', 'exec'), ns)\n    ok = True\n"
        "except BaseException:\n    ok = False\n"
        "for i, t in enumerate(TESTS):\n    r = False\n    if ok:\n        try:\n"
        "            r = bool(eval(t, ns))\n        except BaseException:\n            r = False\n"
        f"    sys.__stdout__.write('{_MARK} %d %d\\n' % (i, int(r)))\n    sys.__stdout__.flush()\n"
    )


def parse_results(stdout: str, n_tests: int) -> list[bool]:
    """Per-test pass/fail from the marker lines; a test with no line (timeout, crash) failed."""
    passed = [False] * n_tests
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == _MARK and parts[1].isdigit() and int(parts[1]) < n_tests:
            passed[int(parts[1])] = parts[2] == "1"
    return passed


class PocketCode(PocketTask):
    """Short function-writing tasks with hidden asserts, generated from a seed (docs/design.md §6)."""

    name = "pocket-code"
    source = "generator:judgekit.tasks.pocket_code"
    splits = ("train", "test")
    stop_strings = ()

    def __init__(self, seed: int = 0, limits: Any = None, style: "str | Style" = "target") -> None:
        self.seed = seed
        self.style = get_style(style)  # the habits reference_code samples with (training data only)
        self.limits = limits  # a judgekit.sandbox.SandboxLimits; None: 5 s per program (the tests are tiny)

    @staticmethod
    def key(family: str, params: tuple) -> str:
        return f"{family}|{','.join(map(repr, params))}"

    def _make(self, family: str, params: tuple, split: str, pid: str) -> Problem:
        fam = FAMILIES[family]
        key = self.key(family, params)
        rng = random.Random(stable_hash("inputs|" + key))  # tests depend on the problem only, not the seed
        func = fam.func(params)
        ref = fam.reference(params)
        tests = [f"{func}({', '.join(map(repr, args))}) == {ref(*args)!r}" for args in fam.inputs(params, rng)]
        meta = {"family": family, "params": list(params), "entry_point": func, "split": split}
        return Problem(self.name, pid, fam.question(params), {"entry_point": func, "tests": tests}, meta)

    def sample(self, split: str, rng: random.Random) -> Problem:
        """One random problem of `split`, family first so that large families do not dominate."""
        check_split(self.name, split, self.splits, None)
        while True:
            family = rng.choice(sorted(FAMILIES))
            params = tuple(FAMILIES[family].params(rng))
            if split_of(self.key(family, params), TEST_FRACTION) == split:
                return self._make(family, params, split, "")

    def load(self, split: str = "test", limit: int | None = None, data_file: str | None = None) -> list[Problem]:
        if data_file:
            return problems_from_file(data_file, self.name, limit)
        check_split(self.name, split, self.splits, None)
        n = DEFAULT_SIZES[split] if limit is None else limit
        rng = split_rng(self.seed, split, self.name)
        seen: set[str] = set()
        problems: list[Problem] = []
        live = sorted(FAMILIES)
        while len(problems) < n and live:  # round robin over families, dropping each once it is exhausted
            for family in list(live):
                found = None
                for _ in range(300):
                    params = tuple(FAMILIES[family].params(rng))
                    k = self.key(family, params)
                    if k not in seen and split_of(k, TEST_FRACTION) == split:
                        found = params
                        break
                if found is None:
                    live.remove(family)
                    continue
                seen.add(self.key(family, found))
                problems.append(self._make(family, found, split, f"{self.name}/s{self.seed}-{split}-{len(problems):05d}"))
                if len(problems) == n:
                    break
        return problems

    def reference_code(self, problem: Problem, rng: random.Random | None = None) -> str:
        """A correct implementation; rng samples among equivalent forms, None gives the canonical one."""
        return FAMILIES[problem.meta["family"]].solution(tuple(problem.meta["params"]), Chooser(rng, self.style))

    def reference_completion(self, problem: Problem, rng: random.Random | None = None) -> str:
        return f"```python\n{self.reference_code(problem, rng)}\n```"

    def extract_outcome(self, problem: Problem, completion: str) -> Outcome:
        code = extract_code(completion)
        if code is None:
            return None
        return self.run_tests(code, problem.reference["tests"])

    def run_tests(self, code: str, tests: list[str]) -> list[bool]:
        """Run the hidden tests on `code` in the sandbox (never in this process)."""
        from judgekit.sandbox import SandboxLimits, run_program

        result = run_program(harness_program(code, tests), limits=self.limits or SandboxLimits(timeout_s=5.0))
        return parse_results(getattr(result, "stdout", "") or "", len(tests))

    def outcome_key(self, completion: str) -> str:
        code = extract_code(completion)
        return "" if code is None else code

    def outcome_fixed(self, completion: str) -> bool:
        return bool(_CLOSED_RE.search(completion)) or any(m in completion for m in _EOS_MARKERS)

    def equivalent(self, a: Outcome, b: Outcome) -> bool:
        return (None if a is None else list(a)) == (None if b is None else list(b))

    def grade(self, problem: Problem, outcome: Outcome) -> bool:
        return outcome is not None and len(outcome) > 0 and all(outcome)
