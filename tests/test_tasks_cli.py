"""`judgekit tasks` lists every registered task (missing modules shown as unavailable); `tasks show` prints
prompts and references from local files."""

from __future__ import annotations

import json
from pathlib import Path

from judgekit.cli import main
from judgekit.commands.tasks import task_rows
from judgekit.tasks import task_names

FIX = Path(__file__).parent / "fixtures"


def test_tasks_lists_all(capsys):
    assert main(["tasks"]) == 0
    out = capsys.readouterr().out
    for name in task_names():
        assert name in out
    assert "openai/gsm8k" in out and "HuggingFaceH4/MATH-500" in out


def test_missing_task_module_is_unavailable(monkeypatch):
    import judgekit.tasks as tasks

    monkeypatch.setitem(tasks._REGISTRY, "ghost", "judgekit.tasks.does_not_exist:Ghost")
    rows = {r["name"]: r for r in task_rows()}
    assert rows["ghost"]["available"] is False and "unavailable" in rows["ghost"]["source"]
    assert rows["gsm8k"]["available"] is True


def test_tasks_show_gsm8k(capsys):
    rc = main(["tasks", "show", "gsm8k", "--data-file", str(FIX / "gsm8k_sample.jsonl"), "--limit", "2"])
    out = capsys.readouterr().out
    assert rc == 0
    assert out.count("=== gsm8k") == 2 and "--- prompt ---" in out and "Natalia" in out and "72" in out


def test_tasks_show_json_livecodebench(capsys):
    rc = main(["tasks", "show", "livecodebench", "--data-file", str(FIX / "livecodebench"), "--limit", "1",
               "--json"])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rc == 0 and len(rows) == 1 and rows[0]["problem_id"] == "abc001_a"


def test_tasks_show_errors(capsys):
    assert main(["tasks", "show", "nope"]) == 2
    assert "unknown task" in capsys.readouterr().err
    assert main(["tasks", "show", "gsm8k", "--data-file", "/nonexistent.jsonl"]) == 2
    assert main(["tasks", "show", "gsm8k", "--data-file", str(FIX / "gsm8k_sample.jsonl"), "--limit", "-1"]) == 2
