"""Summaries of a mining directory for `judgekit data stats` (docs/design.md §3): what was mined, and how fast.

Timing is reported as the run's wall time per rank, from the writer's commit records (each commit stores the
seconds since its run started; a resumed run adds a session). Per-problem timers overlap when problems are
mined in batches, so their sum is labelled as what it is and never called the run's time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from judgekit.store.mined import (
    META_SESSION,
    SCHEMA_VERSION,
    _json_meta,
    feature_columns,
    list_shards,
    load_settings,
    read_mismatches,
    read_problems,
    scan,
)


def _summary(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "min": None, "max": None}
    return {"mean": sum(values) / len(values), "min": min(values), "max": max(values)}


def _rate(num: float, den: float | None) -> float | None:
    return num / den if den else None


def run_sessions(out_dir: str | Path) -> tuple[dict[str, dict[str, Any]], bool, float | None, float]:
    """(session id -> {rank, elapsed}, whether every commit carries timing, seconds of the last compaction,
    seconds of compactions that ended runs).

    A session is one process of one rank; its elapsed time runs from the process's start to its last commit.
    """
    sessions: dict[str, dict[str, Any]] = {}
    complete = True
    compact_s = None
    run_compact_s = 0.0
    for commit in scan(out_dir).commits:
        if commit.marker.rank < 0:
            found = dict(commit.info.get("sessions") or {})
            complete &= bool(commit.info.get("timed", False))
            compact_s = commit.info.get("compact_s", compact_s)
            run_compact_s += float(commit.info.get("run_compact_s", 0.0))
        else:
            one = _json_meta(commit.marker.path, META_SESSION)
            found = {one["id"]: one} if one else {}
            complete &= one is not None
        for sid, s in found.items():
            old = sessions.get(sid)
            if old is None or s["elapsed"] > old["elapsed"]:
                sessions[sid] = {"rank": int(s["rank"]), "elapsed": float(s["elapsed"])}
    return sessions, complete, compact_s, run_compact_s


def dir_stats(out_dir: str | Path) -> dict[str, Any]:
    """Plain-JSON summary of a mining directory: sizes, label balance, rollout cost, timing, features, files."""
    out_dir = Path(out_dir)
    settings = load_settings(out_dir)
    probs = read_problems(out_dir, ["task", "problem_id", "n_rollouts", "n_mismatches", "target_correct",
                                    "wall_time", "rank"])
    mism = read_mismatches(out_dir, ["task", "important"])
    layout = scan(out_dir)

    by_task: dict[str, dict[str, Any]] = {}
    for task in probs.column("task").to_pylist():
        by_task.setdefault(task, {"problems": 0, "mismatches": 0, "important": 0})["problems"] += 1
    for task, important in zip(mism.column("task").to_pylist(), mism.column("important").to_pylist()):
        entry = by_task.setdefault(task, {"problems": 0, "mismatches": 0, "important": 0})
        entry["mismatches"] += 1
        entry["important"] += bool(important)
    for entry in by_task.values():
        entry["important_rate"] = _rate(entry["important"], entry["mismatches"])

    n_problems, n_mismatches = probs.num_rows, mism.num_rows
    n_important = sum(e["important"] for e in by_task.values())
    correct = sum(bool(x) for x in probs.column("target_correct").to_pylist())

    sessions, timed, compact_s, run_compact_s = run_sessions(out_dir)
    per_rank: dict[int, dict[str, Any]] = {}
    for rank in probs.column("rank").to_pylist():
        per_rank.setdefault(rank, {"problems": 0, "wall_time_s": 0.0, "sessions": 0})["problems"] += 1
    for s in sessions.values():
        entry = per_rank.setdefault(s["rank"], {"problems": 0, "wall_time_s": 0.0, "sessions": 0})
        entry["wall_time_s"] += s["elapsed"]
        entry["sessions"] += 1
    for entry in per_rank.values():
        if not timed:
            entry["wall_time_s"] = None
        entry["problems_per_s"] = _rate(entry["problems"], entry["wall_time_s"])
    # Ranks run side by side, so the run took as long as its slowest rank, plus the compaction that ended it.
    wall = max((e["wall_time_s"] for e in per_rank.values()), default=0.0) + run_compact_s if timed else None
    problem_times = probs.column("wall_time").to_pylist()
    files = list_shards(out_dir)
    return {
        "dir": str(out_dir),
        "schema_version": SCHEMA_VERSION,
        "settings": settings.to_dict(),
        "problems": n_problems,
        "mismatches": n_mismatches,
        "important": n_important,
        "important_rate": _rate(n_important, n_mismatches),
        "by_task": dict(sorted(by_task.items())),
        "rollouts_per_problem": _summary(probs.column("n_rollouts").to_pylist()),
        "mismatches_per_problem": _summary(probs.column("n_mismatches").to_pylist()),
        "target_correct": correct,
        "target_accuracy": _rate(correct, n_problems),
        "features": {"layers": list(settings.layers), "columns": feature_columns(settings), "dtype": "float16"},
        "ranks": len(per_rank),
        "commits": len(layout.commits),
        "compacted": any(c.marker.rank < 0 for c in layout.commits),
        "data_files": len(files),
        "uncommitted_shards": len(layout.leftovers),
        "wall_time_s": wall,  # the run's wall time (its slowest rank); None for shards without timing records
        "problems_per_s": _rate(n_problems, wall),
        "per_rank": {str(k): v for k, v in sorted(per_rank.items())},
        "compaction_s": compact_s,
        # Latency of each problem from its first forward to its last; they overlap under --batch-size > 1.
        "problem_latency_s": {**_summary(problem_times), "sum": float(sum(problem_times))},
        "size_bytes": sum(s.path.stat().st_size for s in files),
    }


def _fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    if seconds < 60:
        return f"{seconds:.1f}s"
    seconds = round(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h {m:02d}m {s:02d}s" if h else f"{m}m {s:02d}s"


def _fmt_pct(rate: float | None) -> str:
    return "n/a" if rate is None else f"{100 * rate:.1f}%"


def _fmt_summary(s: dict[str, float | None]) -> str:
    if s["mean"] is None:
        return "n/a"
    return f"mean {s['mean']:.2f}, min {s['min']:g}, max {s['max']:g}"


def _fmt_rate(rate: float | None) -> str:
    return "n/a" if rate is None else f"{rate:.2f} problems/s"


def format_stats(stats: dict[str, Any]) -> str:
    """Multi-line human summary of dir_stats, for `judgekit data stats`."""
    st = stats["settings"]
    limit = "none" if st["limit"] is None else st["limit"]
    source = f" (data file {st['data_file']})" if st["data_file"] else ""
    layout = "compacted" if stats["compacted"] else "not compacted"
    lines = [
        f"mining directory {stats['dir']} (store schema v{stats['schema_version']})",
        f"  run          task {st['task']}, split {st['split']}{source}, limit {limit}, "
        f"max_new_tokens {st['max_new_tokens']}",
        f"  models       target {st['target']}, draft {st['draft']}",
        f"  problems     {stats['problems']} from {stats['ranks']} rank(s); {stats['data_files']} data file(s), "
        f"{stats['commits']} commit(s), {layout}, {stats['size_bytes'] / 2**20:.1f} MiB",
        f"  wall time    {_fmt_duration(stats['wall_time_s'])}, {_fmt_rate(stats['problems_per_s'])}"
        + ("" if stats["wall_time_s"] is not None else " (shards written without timing records)"),
    ]
    if len(stats["per_rank"]) > 1:
        for rank, e in stats["per_rank"].items():
            lines.append(f"    rank {rank:<5} {e['problems']} problems in {_fmt_duration(e['wall_time_s'])}, "
                         f"{_fmt_rate(e['problems_per_s'])}")
    lat = stats["problem_latency_s"]
    if lat["mean"] is not None:
        lines.append(f"  latency      {lat['mean']:.2f}s mean per problem (overlapping when mined in batches; "
                     f"summed {_fmt_duration(lat['sum'])})")
    if stats["compaction_s"] is not None:
        lines.append(f"  compaction   {_fmt_duration(stats['compaction_s'])}")
    lines += [
        f"  target acc   {_fmt_pct(stats['target_accuracy'])} ({stats['target_correct']}/{stats['problems']})",
        f"  rollouts     {_fmt_summary(stats['rollouts_per_problem'])} per problem",
        f"  mismatches   {stats['mismatches']} ({_fmt_summary(stats['mismatches_per_problem'])} per problem)",
        f"  important    {stats['important']}/{stats['mismatches']} ({_fmt_pct(stats['important_rate'])})",
    ]
    for task, e in stats["by_task"].items():
        lines.append(f"    {task:<10} {e['important']}/{e['mismatches']} important "
                     f"({_fmt_pct(e['important_rate'])}) over {e['problems']} problem(s)")
    cols = ", ".join(f"{name}[{size}]" for name, size in stats["features"]["columns"].items())
    lines.append(f"  features     {cols} {stats['features']['dtype']}")
    if stats["uncommitted_shards"]:
        lines.append(f"  note         {stats['uncommitted_shards']} uncommitted or replaced file(s) ignored "
                     "(a crash mid-commit or mid-compaction; the next writer or compaction removes them)")
    return "\n".join(lines)
