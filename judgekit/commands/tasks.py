"""`judgekit tasks`: list the task plug-ins and their sources; `tasks show TASK` prints prompts and references."""

from __future__ import annotations

import argparse
import json
from typing import Any

from judgekit.commands._args import add_task_args
from judgekit.config import task_options
from judgekit.errors import JudgekitError

MAX_REFERENCE_CHARS = 600


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("tasks", help="list tasks, or show a task's prompts and references")
    sub = parser.add_subparsers(dest="tasks_command", metavar="ACTION")
    show = sub.add_parser("show", help="print the prompts and references of a few problems")
    show.add_argument("task", help="task name (see `judgekit tasks`)")
    show.add_argument("--split", default="test", help="split to read (default: test)")
    show.add_argument("--limit", type=int, default=2, help="number of problems (default: 2)")
    show.add_argument("--data-file", help="local JSONL/Parquet file (or LiveCodeBench / BFCL directory) instead of the hub")
    show.add_argument("--few-shot", type=int, default=0, help="number of worked examples in the prompt")
    add_task_args(show)
    show.add_argument("--tokenizer", help="local tokenizer directory whose chat template formats the prompt")
    show.add_argument("--json", action="store_true", help="one JSON object per problem")
    show.set_defaults(func=_show)
    parser.set_defaults(func=_list)


def task_rows() -> list[dict[str, Any]]:
    """Name, source and splits of every registered task; a task whose module is missing is 'unavailable'."""
    from judgekit.tasks import get_task, task_names

    rows = []
    for name in task_names():
        try:
            task = get_task(name)
            rows.append({"name": name, "source": task.source, "splits": list(task.splits), "available": True})
        except (ImportError, AttributeError, JudgekitError) as err:
            rows.append({"name": name, "source": f"unavailable ({type(err).__name__}: {err})", "splits": [],
                         "available": False})
    return rows


def _list(args: argparse.Namespace) -> int:
    rows = task_rows()
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        splits = f"  [{', '.join(r['splits'])}]" if r["splits"] else ""
        print(f"{r['name']:<{width}}  {r['source']}{splits}")
    return 0


def _load_tokenizer(path: str | None) -> Any:
    if not path:
        return None
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as err:  # noqa: BLE001
        raise JudgekitError(f"cannot load a tokenizer from {path!r} ({type(err).__name__})") from None


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if len(text) > MAX_REFERENCE_CHARS:
        text = text[:MAX_REFERENCE_CHARS] + f"... [{len(text) - MAX_REFERENCE_CHARS} more characters]"
    return text


def _show(args: argparse.Namespace) -> int:
    from judgekit.tasks import get_task

    if args.limit < 0:
        raise JudgekitError("--limit must be non-negative")
    try:
        task = get_task(args.task, **task_options(args))
    except ImportError as err:
        raise JudgekitError(f"task {args.task} is unavailable ({err})") from None
    tokenizer = _load_tokenizer(args.tokenizer)
    problems = task.load(split=args.split, limit=args.limit, data_file=args.data_file)
    for i, problem in enumerate(problems):
        prompt = task.build_prompt(problem, tokenizer=tokenizer, chat_template=tokenizer is not None,
                                   few_shot=args.few_shot)
        if args.json:
            print(json.dumps({"task": problem.task, "problem_id": problem.problem_id, "prompt": prompt,
                              "reference": problem.reference}, ensure_ascii=False))
            continue
        if i:
            print()
        print(f"=== {problem.task} {problem.problem_id} ===")
        print("--- prompt ---")
        print(prompt)
        print("--- reference ---")
        print(_short(problem.reference))
    if not problems:
        print(f"(no problems in {args.task} split {args.split})")
    return 0
