"""`judgekit eval` for long runs and for other tools: progress bars (forced, and off with --quiet), several tasks
in one command, and records that keep the prompt and the reference answer."""

from __future__ import annotations

import io
import json

from judgekit.cli import main
from judgekit.progress import EvalProgress

POCKET = ["--target", "pocket-target", "--draft", "pocket-draft", "--threads", "1", "--max-new-tokens", "24",
          "--rule", "lossless", "--limit", "2"]


class _Gen:
    class stats:  # noqa: N801 - the shape of a Generation's stats
        new_tokens = 10


def test_progress_bars_count_problems_and_stay_off_without_a_terminal():
    stream = io.StringIO()  # not a TTY: off unless forced
    bars = EvalProgress(0, stream=stream)
    bars.start_point("lossless", 2)
    bars.problem_done(_Gen)
    bars.close()
    assert not bars.enabled and stream.getvalue() == ""
    stream = io.StringIO()
    bars = EvalProgress(0, enabled=True, stream=stream)
    bars.overall.reset(total=3)
    bars.start_point("lenience l=0.5", 3)
    for _ in range(3):
        bars.problem_done(_Gen)
    assert bars.overall.n == 3 and bars.bar.n == 3 and bars.bar.postfix.endswith("tok/s")
    bars.close()
    text = stream.getvalue()
    assert "lenience l=0.5" in text and "3/3" in text


def test_eval_progress_forced_quiet_silent_and_two_tasks(tmp_path, capsys):
    out = tmp_path / "runs"
    assert main(["eval", "--task", "pocket-math,pocket-code", *POCKET, "--out", str(out), "--progress"]) == 0
    err = capsys.readouterr().err
    assert "pair/s" in err and "lossless T=0 g=8" in err  # tqdm's bars (overall, per point), forced onto a pipe
    for task in ("pocket-math", "pocket-code"):
        manifest = json.loads((out / task / "eval.json").read_text())
        assert manifest["settings"]["task"] == task and (out / task / "summary.md").is_file()
    assert main(["eval", "--task", "pocket-math", *POCKET, "--out", str(tmp_path / "q"), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "pair/s" not in err and "lossless T=0 g=8" not in err and "[1/1]" not in err  # no bars, no point lines
    from judgekit.store.records import read_records
    from judgekit.tasks import get_task

    records = read_records(out / "pocket-math").to_pylist()
    problems = {p.problem_id: p for p in get_task("pocket-math").load("test", limit=2)}
    assert len(records) == 2
    for r in records:
        assert r["prompt"] == problems[r["problem"]].question
        assert json.loads(r["reference"]) == problems[r["problem"]].reference
