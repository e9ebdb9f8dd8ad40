"""pocket-math and pocket-code: determinism, disjoint splits, outcome extraction, grading, equivalent variants."""

import json
import random

import pytest

from judgekit.errors import JudgekitError
from judgekit.tasks.pocket_common import split_of
from judgekit.tasks import get_task
from judgekit.tasks.pocket_code import PocketCode, extract_code, parse_results, harness_program
from judgekit.tasks.pocket_math import PocketMath


def _keys(task, problems):
    if task.name.startswith("pocket-math"):
        return {task.key(p.meta["template"], tuple(p.meta["numbers"])) for p in problems}
    return {task.key(p.meta["family"], tuple(p.meta["params"])) for p in problems}


@pytest.mark.parametrize("name", ["pocket-math", "pocket-code", "pocket-math-hard"])
def test_deterministic_for_a_seed(name):
    a = get_task(name, seed=3).load("test", limit=30)
    b = get_task(name, seed=3).load("test", limit=30)
    assert [(p.problem_id, p.question, p.reference) for p in a] == [(p.problem_id, p.question, p.reference) for p in b]
    c = get_task(name, seed=4).load("test", limit=30)
    assert [p.question for p in a] != [p.question for p in c]
    rng_a, rng_b = random.Random(1), random.Random(1)
    task = get_task(name)
    assert [task.reference_completion(p, rng_a) for p in a] == [task.reference_completion(p, rng_b) for p in a]


@pytest.mark.parametrize("name,frac", [("pocket-math", 0.2), ("pocket-code", 0.25), ("pocket-math-hard", 0.2)])
def test_splits_are_disjoint(name, frac):
    task = get_task(name)
    train, test = task.load("train", limit=600), task.load("test", limit=150)
    ktrain, ktest = _keys(task, train), _keys(task, test)
    assert ktrain and ktest and not (ktrain & ktest)
    assert all(split_of(k, frac) == "test" for k in ktest)
    # another seed draws other problems but never crosses the split
    assert not (_keys(task, get_task(name, seed=9).load("train", limit=600)) & ktest)
    assert len({p.problem_id for p in test}) == len(test)


def _solve_hard(question: str) -> tuple[int, list[int]]:
    """An independent reading of a pocket-math-hard question: the answer, and the numbers of the sentences
    that do not change the amount (the distractors)."""
    import re

    cur, ignored = None, []
    for sentence in re.split(r"(?<=\.) ", question):
        nums = [int(x) for x in re.findall(r"\d+", sentence)]
        if sentence.endswith("?"):
            continue
        if cur is None:
            cur = nums[0]
        elif " more " in sentence:
            cur += nums[0]
        elif "gives away" in sentence:
            cur -= nums[0]
        elif " a day for " in sentence or " boxes with " in sentence:
            x, y = (nums if " a day for " in sentence else nums[::-1])
            cur += x * y
        elif "times as large" in sentence:
            cur *= nums[0]
        elif "equally into" in sentence:
            assert cur % nums[0] == 0
            cur //= nums[0]
        else:
            ignored += nums
    return cur, ignored


def test_hard_math_is_harder_and_its_gold_answers_are_right():
    from judgekit.tasks.pocket_math import HARD_MAX, PocketMathHard

    task = get_task("pocket-math-hard")
    assert isinstance(task, PocketMathHard) and task.name == "pocket-math-hard"
    problems = task.load("test", limit=120)
    assert {p.meta["steps"] for p in problems} == {4, 5}
    rng = random.Random(0)
    for p in problems:
        answer, ignored = _solve_hard(p.question)
        assert str(answer) == p.reference, p.question
        assert len(ignored) == 1, p.question  # exactly one distractor sentence, with one number
        for s in task.steps(p):
            assert 0 < s.result < HARD_MAX
            if s.op in "+-":  # every addition and subtraction carries or borrows in some column
                a, b, carried = s.a, s.b, False
                while a or b:
                    carried |= (a % 10 + b % 10 >= 10) if s.op == "+" else (a % 10 < b % 10)
                    a, b = a // 10, b // 10
                assert carried, (s, p.question)
        for style in ("target", "draft"):
            text = get_task("pocket-math-hard", style=style).reference_completion(p, rng)
            assert task.grade(p, task.extract_outcome(p, text)) and text.rstrip().endswith(f"#### {p.reference}")
    # the hard level is longer than the easy one (every problem at least as long as the longest easy one, and
    # longer on average), its answers larger on average, and every operand at most two digits (HARD_MAX 100)
    easy = get_task("pocket-math").load("test", limit=120)
    assert min(p.meta["steps"] for p in problems) >= max(p.meta["steps"] for p in easy)
    assert sum(p.meta["steps"] for p in problems) > 1.2 * sum(p.meta["steps"] for p in easy) * len(problems) / len(easy)
    assert sum(int(p.reference) for p in problems) > 1.5 * sum(int(p.reference) for p in easy)
    assert HARD_MAX == 100 and all(s.a < 100 and s.b < 100 for p in problems for s in task.steps(p))


EASY_TEMPLATES_BEFORE, EASY_REFERENCES_BEFORE = ["bus", "bus", "reading"], ["37", "14", "21"]


def test_the_easy_level_is_unchanged_by_the_hard_one():
    """The shipped pair's training stream: the easy generator's problems must not move (checked against
    values recorded before the hard level existed)."""
    p = PocketMath().load("test", limit=3)
    assert [q.meta["template"] for q in p] == EASY_TEMPLATES_BEFORE
    assert [q.reference for q in p] == EASY_REFERENCES_BEFORE


def test_unknown_split_is_refused():
    with pytest.raises(JudgekitError):
        PocketMath().load("validation")


def test_problems_are_json_serialisable():
    for task in (PocketMath(), PocketCode()):
        for p in task.load("test", limit=5):
            json.dumps([p.question, p.reference, p.meta])


# ---- pocket-math ---------------------------------------------------------------------------------------
def test_math_solutions_are_varied_and_all_correct():
    task = PocketMath()
    rng = random.Random(0)
    problems = task.load("test", limit=40)
    steps = {len(task.steps(p)) for p in problems}
    assert steps == {2, 3, 4}
    variants = 0
    for p in problems:
        sols = task.solutions(p, rng, n=4)
        variants += len(sols) > 1
        for s in sols + [task.reference_completion(p)]:
            assert s.splitlines()[-1] == f"#### {p.reference}"
            assert task.grade(p, task.extract_outcome(p, s))
        outs = {task.extract_outcome(p, s) for s in sols}
        assert len(outs) == 1  # equivalent phrasings -> one outcome
    assert variants > 30


def test_math_extraction_and_fixed():
    task = PocketMath()
    p = task.load("test", limit=1)[0]
    assert task.extract_outcome(p, "So 3 + 4 = 7.\n#### 1,200") == "1200"
    assert task.extract_outcome(p, "#### 12.0") == "12"
    assert task.extract_outcome(p, "no answer") is None
    assert task.extract_outcome(p, "#### 3\n#### 5") == "5"
    assert not task.outcome_fixed("So 3 + 4 = 7.\n#### 1")
    assert task.outcome_fixed("#### 12\n")
    assert task.outcome_fixed("#### 12<|eos|>")
    assert task.grade(p, p.reference) and not task.grade(p, None)
    assert task.equivalent("7", "7") and not task.equivalent("7", "8")


def test_math_prompt_plain_and_chat():
    task = PocketMath()
    p = task.load("test", limit=1)[0]
    assert task.build_prompt(p) == f"Question: {p.question}\nAnswer: "

    class Tok:
        chat_template = "x"

        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            assert not tokenize and add_generation_prompt
            return "<|user|>\n" + messages[-1]["content"] + "\n<|assistant|>\n"

    assert task.build_prompt(p, Tok()) == f"<|user|>\n{p.question}\n<|assistant|>\n"
    assert task.build_prompt(p, Tok(), chat_template=False).startswith("Question: ")


def test_math_data_file(tmp_path):
    task = PocketMath()
    probs = task.load("test", limit=3)
    f = tmp_path / "p.jsonl"
    f.write_text("\n".join(json.dumps({"problem_id": p.problem_id, "question": p.question,
                                       "reference": p.reference, "meta": p.meta}) for p in probs))
    again = task.load(data_file=str(f), limit=2)
    assert [p.question for p in again] == [p.question for p in probs[:2]]


# ---- pocket-code ---------------------------------------------------------------------------------------
def test_code_extraction():
    assert extract_code("Here:\n```python\ndef f():\n    return 1\n```\nmore") == "def f():\n    return 1\n"
    assert extract_code("```python\ndef f():\n    return") == "def f():\n    return"  # unclosed: to the end
    assert extract_code("def f(): pass") is None
    task = PocketCode()
    assert task.outcome_fixed("```python\nx = 1\n```")
    assert not task.outcome_fixed("```python\nx = 1\n")
    assert parse_results("@@POCKET 0 1\nnoise\n@@POCKET 2 1\n", 3) == [True, False, True]


def test_code_families_have_several_forms():
    task = PocketCode()
    rng = random.Random(0)
    fams = {}
    for p in task.load("train", limit=200):
        fams.setdefault(p.meta["family"], set()).update(task.solutions(p, rng, n=3))
    assert len(fams) == 9
    assert all(len(s) >= 2 for s in fams.values())


@pytest.mark.parametrize("seed", [0])
def test_code_variants_pass_and_wrong_code_fails(seed):
    """Runs in the sandbox: every equivalent form passes every test; an operator slip changes the vector."""
    pytest.importorskip("judgekit.sandbox")
    task = PocketCode(seed=seed)
    rng = random.Random(seed)
    problems = task.load("test", limit=9)  # one per family (round robin)
    assert len({p.meta["family"] for p in problems}) == 9
    for p in problems:
        n = len(p.reference["tests"])
        sols = task.solutions(p, rng, n=2)
        outs = [task.extract_outcome(p, s) for s in sols]
        assert all(o == [True] * n for o in outs), (p.question, sols, outs)
        assert task.grade(p, outs[0]) and task.equivalent(outs[0], outs[-1])
    p = next(p for p in problems if p.meta["family"] == "sum_if")
    wrong = task.reference_completion(p).replace(f" {p.meta['params'][0]} ", " == ")
    bad = task.extract_outcome(p, wrong)
    assert bad is not None and not all(bad) and not task.grade(p, bad)
    assert task.extract_outcome(p, "no code") is None and not task.grade(p, None)
    broken = task.extract_outcome(p, "```python\ndef sum_if(xs):\n    return (\n```")
    assert broken == [False] * len(p.reference["tests"])


def test_test_program_is_plain_source():
    src = harness_program("def f():\n    return 1", ["f() == 1"])
    compile(src, "<t>", "exec")  # the harness itself always compiles, whatever the solution


def test_styles_prefer_different_equivalent_forms():
    """The draft's training style reverses the target's preferred habits but never changes the answer."""
    from judgekit.tasks.pocket_common import Chooser, get_style

    with pytest.raises(JudgekitError):
        PocketMath(style="sloppy")
    tgt, drf = PocketMath(), PocketMath(style="draft")
    rng_t, rng_d = random.Random(0), random.Random(1)  # independent streams, as in training
    problems = tgt.load("train", limit=300)
    sol_t = [tgt.reference_completion(p, rng_t) for p in problems]
    sol_d = [drf.reference_completion(p, rng_d) for p in problems]
    for p, s in zip(problems, sol_d):
        assert drf.grade(p, drf.extract_outcome(p, s))
    assert drf.reference_completion(problems[0]) == tgt.reference_completion(problems[0])  # canonical = target's

    def share(sols, needle):
        return sum(needle in s for s in sols) / len(sols)

    assert share(sol_t, "The answer is") < 0.3 < 0.5 < share(sol_d, "The answer is")
    times = [s for s in sol_t + sol_d if " * " in s or " x " in s]
    assert share([s for s in sol_t if s in times], " x ") < 0.4 and share([s for s in sol_d if s in times], " x ") > 0.6
    lead_t = [s.split("\n")[0].split(" ")[:2] for s in sol_t]
    lead_d = [s.split("\n")[0].split(" ")[:2] for s in sol_d]
    assert sum(a != b for a, b in zip(lead_t, lead_d)) > 150  # the first line's lead usually differs
    # reversal: the last listed option becomes the dominant one
    pick = Chooser(random.Random(1), get_style("draft"))
    draws = [pick.pick([(0.9, "a"), (0.1, "b")]) for _ in range(200)]
    assert draws.count("b") > 150


def test_code_draft_style_is_correct_and_prefers_other_forms():
    pytest.importorskip("judgekit.sandbox")
    tgt, drf = PocketCode(), PocketCode(style="draft")
    problems = tgt.load("test", limit=9)
    rng = random.Random(2)
    for p in problems:
        s = drf.reference_completion(p, rng)
        assert drf.grade(p, drf.extract_outcome(p, s)), (p.question, s)
    train = tgt.load("train", limit=200)
    rng_t, rng_d = random.Random(3), random.Random(4)
    sums = [p for p in train if p.meta["family"] in ("sum_if", "div")]
    loop_t = sum("    for " in tgt.reference_code(p, rng_t) for p in sums) / len(sums)
    loop_d = sum("    for " in drf.reference_code(p, rng_d) for p in sums) / len(sums)
    assert loop_t > 0.35 and loop_d < 0.3  # the target mostly loops, the draft mostly uses sum(...)


def test_tasks_do_not_import_the_pocket_models_package():
    """tasks/ is below pocket/ (the trainer imports the generators, never the other way round)."""
    import subprocess
    import sys

    code = ("import sys, judgekit.tasks.pocket_math, judgekit.tasks.pocket_code, judgekit.tasks; "
            "bad = [m for m in sys.modules if m.startswith('judgekit.pocket')]; assert not bad, bad")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0
