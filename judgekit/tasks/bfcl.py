"""BFCL (Berkeley Function Calling Leaderboard), the single-turn Python categories, graded by BFCL's own AST
checker.

Data: the `bfcl-eval` package ships every category as `data/BFCL_v4_<category>.json` (JSON lines: `id`,
`question` = one turn of chat messages, `function` = the function docs) with the accepted answers in
`data/possible_answer/BFCL_v4_<category>.json` (`id`, `ground_truth`: one {function: {argument: [accepted
values]}} per expected call; "" among the values marks an argument that may be left out). The paper's subset
is `parallel_multiple` (200 items). `--data-file` takes a directory in that layout or one question file whose
`possible_answer/` sits beside it.

Prompt: what BFCL's harness gives a chat model in prompting mode (not native function calling): the
default system prompt (`formulate_system_prompt` with `ret_fmt=python&tool_call_tag=False&func_doc_fmt=json&
prompt_fmt=plaintext&style=classic`) holding the function docs as JSON, each description ending with the
Python language hint, then the question's messages, rendered with the model's chat template.

Grading follows BFCL's `_evaluate_single_ast_entry`: the completion is decoded as its
`default_decode_ast_prompting` does (strip backticks/newlines, wrap in [...], parse as a Python expression
whose elements are calls with keyword arguments) and the calls go to BFCL's `ast_checker`. The decoding is
judgekit's port of that code, because BFCL's own `eval()`s the text of an arithmetic argument (`x=2*3`): here
an arithmetic expression is folded only when it holds literals alone (numbers, strings, containers; sizes
bounded), which is what BFCL's eval computes for them; a name or call inside arithmetic (`x^2` unquoted)
counts as undecodable, as it does in BFCL, where the eval raises NameError. The checker itself is BFCL's
code, run from the installed package: its module imports the model registry (and with it every API SDK)
only to ask whether a native function-calling API renamed `a.b` to `a_b`; judgekit loads it with a stand-in
registry answering "no", which is the answer for every prompting model.

The outcome is the checker's verdict plus the decoded calls, so mining tells a harmless mismatch (argument
order, quote style, another accepted value: the verdict stays "valid") from an important one.
"""

from __future__ import annotations

import ast
import copy
import importlib.util
import json
import operator
import sys
import threading
import types
from pathlib import Path
from typing import Any

from judgekit.errors import JudgekitError
from judgekit.tasks.base import Outcome, Problem, Task
from judgekit.tasks.common import apply_limit, check_split, encode_value, read_records, render_prompt, require_fields

INSTALL_HINT = "pip install --no-deps bfcl-eval"
DEFAULT_SUBSET = "parallel_multiple"
# The categories BFCL grades with the Python AST checker (Java/JavaScript need its tree-sitter parsers;
# irrelevance, multi-turn, memory and web search are not graded by the AST checker).
PYTHON_AST_SUBSETS = ("simple_python", "multiple", "parallel", "parallel_multiple", "live_simple",
                      "live_multiple", "live_parallel", "live_parallel_multiple")
QUESTION_FIELDS = ("id", "question", "function")
ANSWER_FIELDS = ("id", "ground_truth")
PROMPT_FORMAT = "ret_fmt=python&tool_call_tag=False&func_doc_fmt=json&prompt_fmt=plaintext&style=classic"
PYTHON_HINT = " Note that the provided function is in Python 3 syntax."  # BFCL's _get_language_specific_hint
MODEL_NAME = "judgekit-prompting"  # what the checker is told; only the stand-in registry reads it


def _package_dir() -> Path | None:
    """The installed bfcl_eval package directory (found without importing it), or None."""
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _need_package() -> Path:
    root = _package_dir()
    if root is None:
        raise JudgekitError(f"task bfcl needs the bfcl-eval package (its data and its AST checker): {INSTALL_HINT}")
    return root


# --------------------------------------------------------------------------- decoding (BFCL's, without eval)

class DecodeError(ValueError):
    """The completion is not what BFCL's decoder accepts (its `ast_decoder:decoder_failed`)."""


MAX_LITERAL_ITEMS = 1_000_000  # a folded str/list/tuple/bytes may not be longer
MAX_INT_BITS = 100_000  # nor an int wider: BFCL's eval would take minutes or all memory on `9**9**9`

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
           ast.LShift: operator.lshift, ast.RShift: operator.rshift, ast.BitOr: operator.or_,
           ast.BitXor: operator.xor, ast.BitAnd: operator.and_, ast.MatMult: operator.matmul}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_, ast.Invert: operator.invert}


def _too_big(op: type, left: Any, right: Any) -> bool:
    """Whether an operation on literals would build an oversized value (refused instead of computed)."""
    ints = isinstance(left, int) and isinstance(right, int)
    if op is ast.Pow and ints and right > 0 and abs(left) > 1:
        return right * abs(left).bit_length() > MAX_INT_BITS
    if op is ast.LShift and ints:
        return right > MAX_INT_BITS
    if op is ast.Mult:
        for seq, n in ((left, right), (right, left)):
            if isinstance(seq, (str, bytes, list, tuple)) and isinstance(n, int):
                return len(seq) * n > MAX_LITERAL_ITEMS
    return False


def _fold(node: ast.AST) -> Any:
    """The value Python gives a literal-only expression (what BFCL's `eval(ast.unparse(node))` returns)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        items = [_fold(e) for e in node.elts]
        return {ast.List: list, ast.Tuple: tuple, ast.Set: set}[type(node)](items)
    if isinstance(node, ast.Dict) and None not in node.keys:
        return {_fold(k): _fold(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_fold(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _fold(node.left), _fold(node.right)
        if _too_big(type(node.op), left, right):
            raise DecodeError("arithmetic result too large")
        return _BINOPS[type(node.op)](left, right)
    raise DecodeError(f"{type(node).__name__} in an arithmetic argument (BFCL would eval it)")


def _value(node: ast.AST) -> Any:
    """An argument's value, case for case as BFCL's `resolve_ast_by_type`."""
    if isinstance(node, ast.Constant):
        return "..." if node.value is Ellipsis else node.value
    if isinstance(node, ast.UnaryOp):
        # BFCL negates the operand's constant whatever the operator (`+5` -> -5); anything else fails there
        if isinstance(node.operand, ast.Constant) and isinstance(node.operand.value, (int, float, complex)):
            return -node.operand.value
        raise DecodeError("unary operator on a non-number")
    if isinstance(node, ast.List):
        return [_value(v) for v in node.elts]
    if isinstance(node, ast.Dict):
        if None in node.keys:
            raise DecodeError("** inside a dict")
        return {_value(k): _value(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.BinOp):
        return _fold(node)
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Call):
        return ast.unparse(node) if not node.keywords else _call(node)
    if isinstance(node, ast.Tuple):
        return tuple(_value(v) for v in node.elts)
    if isinstance(node, ast.Subscript):
        return ast.unparse(node.value) + "[" + ast.unparse(node.slice) + "]"
    # Lambda fails in BFCL too (it indexes the lambda's body); Attribute, Set, Compare, f-strings... are
    # "Unsupported AST type" there.
    raise DecodeError(f"unsupported argument syntax {type(node).__name__}")


def _call(node: ast.Call) -> dict[str, dict]:
    """{dotted.name: {keyword: value}} as BFCL's `resolve_ast_call` (positional arguments are dropped)."""
    parts = []
    func = node.func
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    return {".".join(reversed(parts)): {kw.arg: _value(kw.value) for kw in node.keywords}}


def decode_calls(completion: str) -> list[dict[str, dict]]:
    """The calls of a completion as BFCL's `default_decode_ast_prompting` (Python) decodes them, without eval;
    raises DecodeError where BFCL's decoder raises."""
    text = completion.strip("`\n ")
    if not text.startswith("["):
        text = "[" + text
    if not text.endswith("]"):
        text = text + "]"
    try:
        body = ast.parse(text.strip().strip("'"), mode="eval").body
        if isinstance(body, ast.Call):
            return [_call(body)]
        if not isinstance(body, (ast.List, ast.Tuple, ast.Set)):
            raise DecodeError(f"a {type(body).__name__}, not a list of calls")
        calls = []
        for elem in body.elts:
            if not isinstance(elem, ast.Call):
                raise DecodeError(f"a {type(elem).__name__} among the calls")
            calls.append(_call(elem))
        return calls
    except DecodeError:
        raise
    except (SyntaxError, ValueError, TypeError, ArithmeticError, RecursionError, MemoryError) as err:
        # a syntax error, null bytes, an unhashable dict key, 1/0, 'a'-1, nesting too deep: BFCL fails on each
        raise DecodeError(f"{type(err).__name__}: {err}") from None


# --------------------------------------------------------------------------- BFCL's checker

class _PromptingModels(dict):
    """Stand-in for BFCL's MODEL_CONFIG_MAPPING: every model is a prompting model, which keeps dotted
    function names (`underscore_to_dot` False), the only thing the AST checker asks of it."""

    def __missing__(self, key: str) -> types.SimpleNamespace:
        return types.SimpleNamespace(underscore_to_dot=False)


_CHECKER: tuple[Any, Any] | None = None
_CHECKER_LOCK = threading.Lock()
_CHECKER_MODULE = "bfcl_eval.eval_checker.ast_eval.ast_checker"
_REGISTRY_MODULE = "bfcl_eval.constants.model_config"


def official_checker() -> tuple[Any, Any]:
    """(BFCL's `ast_checker` function, its `Language.PYTHON`), loaded once from the installed package.

    The checker module is executed privately (not registered in sys.modules) with the stand-in registry in
    place only while it imports, so a later `import bfcl_eval...` elsewhere still gets the real modules."""
    global _CHECKER
    with _CHECKER_LOCK:
        if _CHECKER is None:
            _need_package()
            from bfcl_eval.constants.enums import Language

            spec = importlib.util.find_spec(_CHECKER_MODULE)
            if spec is None or spec.loader is None:
                raise JudgekitError(f"the installed bfcl-eval has no {_CHECKER_MODULE}; {INSTALL_HINT}")
            stand_in = types.ModuleType(_REGISTRY_MODULE)
            stand_in.MODEL_CONFIG_MAPPING = _PromptingModels()
            saved = sys.modules.get(_REGISTRY_MODULE)
            sys.modules[_REGISTRY_MODULE] = stand_in
            try:
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
            except ImportError as err:
                raise JudgekitError(f"cannot load BFCL's AST checker ({err}); {INSTALL_HINT}") from None
            finally:
                if saved is None:
                    sys.modules.pop(_REGISTRY_MODULE, None)
                else:
                    sys.modules[_REGISTRY_MODULE] = saved
            _CHECKER = (module.ast_checker, Language.PYTHON)
        return _CHECKER


def check_calls(calls: list[dict[str, dict]], functions: list[dict], ground_truth: list[dict],
                category: str) -> dict[str, Any]:
    """BFCL's verdict {valid, error, error_type} on decoded calls (a checker crash counts as invalid)."""
    checker, python = official_checker()
    try:
        return checker(copy.deepcopy(functions), calls, copy.deepcopy(ground_truth), python, category, MODEL_NAME)
    except Exception as err:  # noqa: BLE001 - BFCL's runner would stop here; one bad output is just wrong
        return {"valid": False, "error": [f"checker error {type(err).__name__}: {err}"],
                "error_type": f"checker_error:{type(err).__name__}"}


# --------------------------------------------------------------------------- the prompt

def system_prompt(functions: list[dict]) -> str:
    """BFCL's default system prompt for a prompting model (`formulate_system_prompt` with PROMPT_FORMAT),
    built from the installed package's templates."""
    _need_package()
    from bfcl_eval.constants.default_prompts import (
        OUTPUT_FORMAT_MAPPING,
        PARAM_TYPE_MAPPING,
        PROMPT_STYLE_TEMPLATES,
        PROMPT_TEMPLATE_MAPPING,
    )

    fmt = dict(part.split("=") for part in PROMPT_FORMAT.split("&"))  # json docs, no tool-call tag: built below
    style = PROMPT_STYLE_TEMPLATES[fmt["style"]]
    return PROMPT_TEMPLATE_MAPPING[fmt["prompt_fmt"]].format(
        persona=style["persona"], task=style["task"],
        tool_call_format=style["tool_call_no_tag"].format(output_format=OUTPUT_FORMAT_MAPPING[fmt["ret_fmt"]],
                                                          param_types=PARAM_TYPE_MAPPING[fmt["ret_fmt"]]),
        multiturn_behavior=style["multiturn_behavior"],
        available_tools=style["available_tools"].format(format=fmt["func_doc_fmt"],
                                                        functions=json.dumps(functions, indent=4)),
    )


def with_python_hint(functions: list[dict]) -> list[dict]:
    """The function docs as BFCL's generation step shows them (`_func_doc_language_specific_pre_processing`
    for a Python category: the hint appended to each description)."""
    docs = copy.deepcopy(functions)
    for doc in docs:
        doc["description"] = doc.get("description", "") + PYTHON_HINT
    return docs


# --------------------------------------------------------------------------- the task

def encode_call(call: dict[str, dict]) -> dict[str, Any]:
    """A decoded call as JSON: {function, arguments: {name: value tagged as `encode_value` tags it}} (a
    `**spread` keyword is stored under "**")."""
    (name, args), = call.items()
    return {"function": name, "arguments": {"**" if k is None else k: encode_value(v) for k, v in args.items()}}


def _canon(obj: Any) -> Any:
    """Tagged JSON with dict entries and set members sorted, so that order never tells two values apart."""
    if isinstance(obj, list):
        return [_canon(x) for x in obj]
    if not isinstance(obj, dict):
        return obj
    if set(obj) == {"d"}:
        return {"d": sorted(([_canon(k), _canon(v)] for k, v in obj["d"]), key=json.dumps)}
    if set(obj) in ({"s"}, {"fs"}):
        (tag, items), = obj.items()
        return {tag: sorted((_canon(x) for x in items), key=json.dumps)}
    return {k: _canon(v) for k, v in obj.items()}


def _canonical_calls(calls: list | None) -> list[str] | None:
    """Calls as an order-free list of JSON texts: BFCL's parallel checker ignores call order, and keyword
    order never matters."""
    if calls is None:
        return None
    return sorted(json.dumps(_canon(c), sort_keys=True) for c in calls)


class BFCL(Task):
    name = "bfcl"
    splits = ("test",)
    stop_strings = ()

    def __init__(self, subset: str = DEFAULT_SUBSET) -> None:
        if subset not in PYTHON_AST_SUBSETS:
            raise JudgekitError(f"unknown BFCL subset {subset!r}; judgekit grades the Python AST categories: "
                                f"{', '.join(PYTHON_AST_SUBSETS)}")
        self.subset = subset
        self.source = (f"bfcl-eval package: BFCL_v4_{subset}.json + possible_answer/ (--subset; default "
                       f"{DEFAULT_SUBSET}, 200 items)")

    # ------------------------------------------------------------------ loading
    def files(self, data_file: str | None) -> tuple[Path, Path]:
        """(question file, answer file): the package's copy of the subset, or the local layout given."""
        if data_file is None:
            return self._in_dir(_need_package() / "data")
        path = Path(data_file)
        if path.is_dir():
            return self._in_dir(path)
        answers = path.parent / "possible_answer" / path.name
        if not answers.is_file():
            raise JudgekitError(f"{data_file}: no possible_answer/{path.name} beside it (BFCL's layout)")
        return path, answers

    def _in_dir(self, folder: Path) -> tuple[Path, Path]:
        found = sorted(folder.glob(f"BFCL_v*_{self.subset}.json"), key=lambda p: p.name)
        if not found:
            raise JudgekitError(f"{folder}: no BFCL_v*_{self.subset}.json (BFCL's layout: the question file and "
                                "possible_answer/ with the same name)")
        questions = found[-1]  # the newest version
        answers = folder / "possible_answer" / questions.name
        if not answers.is_file():
            raise JudgekitError(f"{folder}: no possible_answer/{questions.name}")
        return questions, answers

    def load(self, split: str = "test", limit: int | None = None, data_file: str | None = None) -> list[Problem]:
        check_split(self.name, split, self.splits, data_file)
        q_path, a_path = self.files(data_file)
        questions, answers = read_records(q_path), read_records(a_path)
        require_fields(questions, QUESTION_FIELDS, str(q_path))
        require_fields(answers, ANSWER_FIELDS, str(a_path))
        truth = {str(r["id"]): r["ground_truth"] for r in answers}
        problems = []
        for i, row in enumerate(apply_limit(questions, limit)):
            where = f"{q_path}: row {i + 1}"
            pid = str(row["id"])
            if pid not in truth:
                raise JudgekitError(f"{where}: id {pid!r} has no entry in {a_path}")
            problems.append(self._problem(row, truth[pid], where))
        return problems

    def _problem(self, row: dict[str, Any], ground_truth: Any, where: str) -> Problem:
        turns, functions = row["question"], row["function"]
        if not (isinstance(turns, list) and len(turns) == 1 and isinstance(turns[0], list)):
            raise JudgekitError(f"{where}: question must hold exactly one turn (a list of messages)")
        messages = turns[0]
        roles = [m.get("role") if isinstance(m, dict) else None for m in messages]
        if roles not in (["user"], ["system", "user"]) or not all(isinstance(m.get("content"), str) for m in messages):
            raise JudgekitError(f"{where}: the turn must be [user] or [system, user] messages with text content, "
                                f"got roles {roles}")
        if not (isinstance(functions, list) and functions and all(isinstance(f, dict) and "name" in f
                                                                  for f in functions)):
            raise JudgekitError(f"{where}: function must be a non-empty list of function docs")
        if not (isinstance(ground_truth, list) and all(isinstance(c, dict) and len(c) == 1 for c in ground_truth)):
            raise JudgekitError(f"{where}: ground_truth must be a list of {{function: {{argument: values}}}}")
        return Problem(task=self.name, problem_id=str(row["id"]), question=messages[-1]["content"],
                       reference={"ground_truth": ground_truth, "function": functions},
                       meta={"messages": messages, "subset": self.subset})

    # ------------------------------------------------------------------ prompting
    def build_prompt(self, problem: Problem, tokenizer: Any = None, chat_template: bool = True,
                     few_shot: int = 0) -> str:
        system = system_prompt(with_python_hint(problem.reference["function"]))
        messages = problem.meta["messages"]
        if messages[0]["role"] == "system":  # BFCL puts its prompt first and keeps the question's own after it
            system = system + "\n\n" + messages[0]["content"]
        user = messages[-1]["content"]
        return render_prompt(user, tokenizer, chat_template, system=system, plain=f"{system}\n\n{user}\n\n")

    # ------------------------------------------------------------------ outcomes
    def extract_outcome(self, problem: Problem, completion: str) -> Outcome:
        """{valid, error_type, calls}: BFCL's verdict and the decoded calls (values tagged as JSON; None when
        the completion does not decode)."""
        try:
            calls = decode_calls(completion)
        except DecodeError:
            return {"valid": False, "error_type": "ast_decoder:decoder_failed", "calls": None}
        verdict = check_calls(calls, problem.reference["function"], problem.reference["ground_truth"], self.subset)
        return {"valid": bool(verdict.get("valid")), "error_type": None if verdict.get("valid") else
                verdict.get("error_type"), "calls": [encode_call(c) for c in calls]}

    def outcome_key(self, completion: str) -> str:
        return completion.strip("`\n ")  # all the decoder reads

    def equivalent(self, a: Outcome, b: Outcome) -> bool:
        """Same verdict, and when both are wrong the same calls (call and keyword order aside)."""
        if a is None or b is None:
            return a is None and b is None
        if a["valid"] != b["valid"]:
            return False
        return a["valid"] or _canonical_calls(a["calls"]) == _canonical_calls(b["calls"])

    def grade(self, problem: Problem, outcome: Outcome) -> bool:
        return isinstance(outcome, dict) and outcome.get("valid") is True
