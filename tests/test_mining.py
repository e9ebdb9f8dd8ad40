"""Semi-greedy mining: agreement with the plain reference procedure, features, resumability, sharding."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from judgekit.mine.miner import MineConfig, Miner
from judgekit.mine.reference import ReferenceMiner, label_agreement
from judgekit.store.mined import read_mismatches, read_problems, validate_dir
from judgekit.tasks.base import Problem, Task


class PrefixTask(Task):
    """Outcome = the first 10 characters; fixed once 14 are written: early mismatches matter, late ones not."""

    name = "prefix-toy"

    def load(self, split="test", limit=None, data_file=None):
        qs = ["Tom has", "def add", "The quick", "Spec", "fox jumps", "brown dog"]
        return [Problem(self.name, f"p{i}", q, None) for i, q in enumerate(qs)][:limit]

    def build_prompt(self, problem, tokenizer=None, chat_template=True, few_shot=0):
        return problem.question

    def extract_outcome(self, problem, completion):
        return completion[:10]

    def outcome_fixed(self, completion):
        return len(completion) >= 14

    def grade(self, problem, outcome):
        return outcome is not None and outcome.startswith("T")


@pytest.fixture(scope="module")
def pair(tiny_models):  # the shared tiny llama pair of tests/conftest.py (its directories: `tiny_dirs`)
    return tiny_models.pair("llama")


def test_matches_reference_procedure(pair):
    task, cfg = PrefixTask(), MineConfig(max_new_tokens=40)
    problems = task.load()
    ours = [Miner(pair, task, cfg).mine(p) for p in problems]
    ref = [ReferenceMiner(pair, task, cfg).mine(p) for p in problems]
    agreement, same, union = label_agreement(ours, ref)
    assert union > 20 and agreement == 1.0
    labels = {r.important for res in ours for r in res.records}
    assert labels == {True, False}
    for a, b in zip(ours, ref):
        assert a.response_ids == b.response_ids
        assert a.n_rollouts == b.n_rollouts == len(a.records) + 1
        for ra, rb in zip(a.records, b.records):
            np.testing.assert_allclose(ra.features[-1].astype(np.float32), rb.features[-1].astype(np.float32),
                                       atol=2e-2, rtol=1e-2)


def test_semi_greedy_invariants(pair):
    """Unimportant substitutions stay in the running response, important ones do not; borders advance."""
    task, cfg = PrefixTask(), MineConfig(max_new_tokens=40)
    for problem in task.load():
        res = Miner(pair, task, cfg).mine(problem)
        positions = [r.position for r in res.records]
        assert positions == sorted(set(positions))
        final = res.response_ids
        for r in res.records:
            assert r.draft_token != r.target_token
            assert r.context_ids[: len(res.prompt_ids)] == res.prompt_ids
            assert len(r.context_ids) == len(res.prompt_ids) + r.position
            if r.position < len(final):
                assert final[r.position] == (r.target_token if r.important else r.draft_token)
            assert r.important == (r.alt_outcome != res.target_outcome)


def test_feature_is_target_state_after_reading_draft_token(pair):
    task = PrefixTask()
    res = Miner(pair, task, MineConfig(max_new_tokens=40, layers=(-1, 1), draft_features=True)).mine(task.load()[0])
    assert res.records
    for r in res.records[:5]:
        seq = torch.tensor([r.context_ids + [r.draft_token]])
        with torch.no_grad():
            hs = pair.target(seq, output_hidden_states=True).hidden_states
            dhs = pair.draft(torch.tensor([r.context_ids]), output_hidden_states=True).hidden_states
        for layer in (-1, 1):
            np.testing.assert_allclose(r.features[layer].astype(np.float32), hs[layer][0, -1].numpy(), atol=1e-2, rtol=1e-2)
        np.testing.assert_allclose(r.draft_hidden.astype(np.float32), dhs[-1][0, -1].numpy(), atol=1e-2, rtol=1e-2)


N_PROBLEMS = 10


def _mine_cmd(tiny_dirs, out, *extra):
    t, d = tiny_dirs
    return [sys.executable, "-m", "judgekit", "mine", "--task", "pocket-math", "--target", str(t), "--draft", str(d),
            "--out", str(out), "--limit", str(N_PROBLEMS), "--max-new-tokens", "24", "--device", "cpu", "--flush-every", "1",
            "--threads", "1", "--quiet", *extra]


def _records(out) -> list[tuple]:
    validate_dir(out)
    mm = read_mismatches(out).drop_columns([]).to_pylist()
    pr = read_problems(out).to_pylist()
    key = lambda r: tuple((k, str(v)) for k, v in sorted(r.items()) if k not in ("wall_time", "rank"))
    return sorted(map(key, mm)), sorted(map(key, pr))


def _env(**extra):
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", **extra)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        if k not in extra:
            env.pop(k, None)
    return env


@pytest.fixture(scope="module")
def uninterrupted(tiny_dirs, tmp_path_factory):
    out = tmp_path_factory.mktemp("full") / "run"
    start = time.perf_counter()
    proc = subprocess.run(_mine_cmd(tiny_dirs, out), check=True, env=_env(), capture_output=True, text=True, timeout=600)
    return _records(out), time.perf_counter() - start, out, proc.stdout


def _committed(out) -> int:
    return len(list(out.glob("problems-*.parquet"))) if out.exists() else 0


@pytest.mark.slow
def test_kill_and_resume_yields_exactly_the_uninterrupted_records(tiny_dirs, uninterrupted, tmp_path):
    """SIGKILL at random moments (during start-up, and right after a commit: mid-forward or mid-write),
    resume each time, and compare the final records with a clean run's."""
    records = uninterrupted[0]
    out = tmp_path / "run"
    rng = random.Random(7)
    mid_run_kills = 0
    for attempt in range(4):
        before = _committed(out)
        proc = subprocess.Popen(_mine_cmd(tiny_dirs, out, "--resume"), env=_env(),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if attempt == 0:
            time.sleep(rng.uniform(0.2, 1.5))  # most likely still importing / loading
        else:
            deadline = time.monotonic() + 300
            while proc.poll() is None and _committed(out) <= before and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(rng.uniform(0.0, 0.15))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            mid_run_kills += 0 < _committed(out) < N_PROBLEMS
        proc.wait()
    subprocess.run(_mine_cmd(tiny_dirs, out, "--resume"), check=True, env=_env(), capture_output=True, timeout=600)
    assert mid_run_kills >= 1
    assert _records(out) == records


@pytest.mark.slow
def test_two_ranks_union_equals_single_process(tiny_dirs, uninterrupted, tmp_path):
    records = uninterrupted[0]
    out = tmp_path / "run"
    procs = [subprocess.Popen(_mine_cmd(tiny_dirs, out), env=_env(RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
    ranks = set(read_problems(out).column("rank").to_pylist())
    assert ranks == {0, 1}
    assert _records(out) == records
    assert len(_data_files(out)) == 2  # whichever rank finished last compacted the directory


def _dir_state(out) -> list[tuple]:
    return sorted((p.name, p.read_bytes(), p.stat().st_mtime_ns) for p in out.iterdir())


@pytest.mark.slow
def test_rerun_without_resume_and_changed_settings_are_refused_and_change_nothing(tiny_dirs, tmp_path):
    out = tmp_path / "run"
    cmd = _mine_cmd(tiny_dirs, out)
    cmd[cmd.index(str(N_PROBLEMS))] = "1"  # --limit 1
    subprocess.run(cmd, check=True, env=_env(), capture_output=True, timeout=600)
    state = _dir_state(out)
    again = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=600)
    assert again.returncode == 2 and "--resume" in again.stderr
    more = list(cmd)
    more[more.index("1")] = "2"  # a larger --limit without --resume (the manifest used to be rewritten first)
    refused = subprocess.run(more, env=_env(), capture_output=True, text=True, timeout=600)
    assert refused.returncode == 2 and "--resume" in refused.stderr
    other = subprocess.run(cmd + ["--resume", "--layers", "-1,1"], env=_env(), capture_output=True, text=True, timeout=600)
    assert other.returncode == 2 and "layers" in other.stderr and "Traceback" not in other.stderr
    assert _dir_state(out) == state


def _data_files(out) -> list[str]:
    return sorted(p.name for p in out.glob("*.parquet"))


@pytest.mark.slow  # needs the whole mining run of `uninterrupted`
def test_completed_run_is_compacted_and_reports_its_wall_time(uninterrupted):
    from judgekit.store.stats import dir_stats

    _, elapsed, out, stdout = uninterrupted
    # --flush-every 1 committed 10 shard pairs; the completed run rewrote them into one pair.
    assert _data_files(out) == ["mismatches-c000001-p000.parquet", "problems-c000001.parquet"]
    assert "compacted 10 commits into 2 data files" in stdout
    s = dir_stats(out)
    assert s["problems"] == N_PROBLEMS and s["compacted"]
    # Recorded from the command's start to its last commit: within the measured time of the whole process.
    assert 0.5 * elapsed <= s["wall_time_s"] <= elapsed
    assert s["problems_per_s"] == pytest.approx(N_PROBLEMS / s["wall_time_s"])


def test_threads_must_be_positive(tiny_dirs, tmp_path, capsys):
    from judgekit.cli import main

    assert main(_mine_cmd(tiny_dirs, tmp_path / "x", "--threads", "0")[3:]) == 2
    assert "--threads must be >= 1" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def _scorers():
    import threading

    return [t for t in threading.enumerate() if t.name.startswith("judgekit-score")]


def test_scoring_pool_is_shut_down(pair):
    task, cfg = PrefixTask(), MineConfig(max_new_tokens=20)
    miner = Miner(pair, task, cfg, batch_size=2)
    assert len(list(miner.mine_many(task.load(limit=3)))) == 3
    assert _scorers() == []
    gen = miner.mine_many(task.load(limit=3))
    next(gen)  # abandoned half-way: closing the generator shuts the pool down too
    gen.close()
    assert _scorers() == []


def test_scoring_pool_is_shut_down_when_mining_fails(pair):
    class BrokenGrader(PrefixTask):
        def extract_outcome(self, problem, completion):
            if problem.problem_id == "p1":
                raise RuntimeError("grader broke")
            return super().extract_outcome(problem, completion)

    task = BrokenGrader()
    with pytest.raises(RuntimeError, match="grader broke"):  # raised in a scoring thread, re-raised here
        list(Miner(pair, task, MineConfig(max_new_tokens=20), batch_size=2).mine_many(task.load(limit=3)))
    assert _scorers() == []


def test_union_of_pocket_math_and_pocket_code_runs_shares_no_problem_id(pair, tmp_path):
    """Ids are namespaced by task at the source, so two tasks' runs can be pooled and split by problem_id."""
    from judgekit.mine.miner import mine_to_dir
    from judgekit.tasks import get_task

    owners: dict[str, tuple[str, str]] = {}
    for name in ("pocket-math", "pocket-code"):
        task = get_task(name)
        problems = task.load("train", limit=2)
        mine_to_dir(pair, task, problems, str(tmp_path / name), MineConfig(max_new_tokens=12), split="train",
                    limit=2, progress=False)
        all_ids = [p.problem_id for p in task.load("train", limit=400)]
        assert all(pid.startswith(f"{name}/") for pid in all_ids)
        mined = read_problems(tmp_path / name, columns=["task", "problem_id"]).to_pylist()
        assert {r["problem_id"] for r in mined} == {p.problem_id for p in problems}
        for row in mined:
            assert owners.setdefault(row["problem_id"], (row["task"], name)) == (row["task"], name)
        for pid in all_ids:
            assert owners.setdefault(pid, (name, name))[0] == name
    assert len(owners) == 800

def test_unknown_task_is_one_line(tiny_dirs, tmp_path, capsys):
    from judgekit.cli import main

    cmd = _mine_cmd(tiny_dirs, tmp_path / "x")
    cmd[cmd.index("pocket-math")] = "no-such-task"
    assert main(cmd[3:]) == 2
    assert "judgekit: error: unknown task 'no-such-task'" in capsys.readouterr().err.splitlines()[-1]


@pytest.mark.parametrize("batch_size", [2, 4])
def test_batched_mining_equals_one_at_a_time(pair, batch_size):
    task, cfg = PrefixTask(), MineConfig(max_new_tokens=40, layers=(-1, 1), draft_features=True)
    single = {r.problem.problem_id: r for r in Miner(pair, task, cfg).mine_many(task.load())}
    batched = {r.problem.problem_id: r for r in Miner(pair, task, cfg, batch_size=batch_size).mine_many(task.load())}
    assert set(single) == set(batched)
    agreement, _, union = label_agreement(list(single.values()), [batched[k] for k in single])
    assert agreement == 1.0 and union > 20
    for pid, a in single.items():
        b = batched[pid]
        assert a.response_ids == b.response_ids and a.n_rollouts == b.n_rollouts
        for ra, rb in zip(a.records, b.records):
            for layer in (-1, 1):
                np.testing.assert_allclose(ra.features[layer].astype(np.float32), rb.features[layer].astype(np.float32),
                                           atol=1e-2, rtol=1e-2)
            np.testing.assert_allclose(ra.draft_hidden.astype(np.float32), rb.draft_hidden.astype(np.float32),
                                       atol=1e-2, rtol=1e-2)


def _same_results(a, b, layers=(-1, 1)):
    assert [r.problem.problem_id for r in a] == [r.problem.problem_id for r in b]
    for x, y in zip(a, b):
        assert x.response_ids == y.response_ids and x.n_rollouts == y.n_rollouts
        assert [(r.position, r.draft_token, r.important) for r in x.records] == \
               [(r.position, r.draft_token, r.important) for r in y.records]
        for rx, ry in zip(x.records, y.records):
            for layer in layers:
                np.testing.assert_allclose(rx.features[layer].astype(np.float32),
                                           ry.features[layer].astype(np.float32), atol=1e-2, rtol=1e-2)
            np.testing.assert_allclose(rx.draft_hidden.astype(np.float32), ry.draft_hidden.astype(np.float32),
                                       atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("batch_size", [1, 3])
def test_fast_path_miner_equals_the_transformers_miner(pair, batch_size):
    """The static-cache rows (judgekit.decode.staticrows) give the labels, responses and features of the transformers
    caches, one problem at a time and batched (rows fed as subsets of the cache, and grown past their length)."""
    task, cfg = PrefixTask(), MineConfig(max_new_tokens=40, layers=(-1, 1), draft_features=True)
    fast = Miner(pair, task, cfg, batch_size=batch_size, fast=True)
    eager = Miner(pair, task, cfg, batch_size=batch_size, fast=False)
    assert fast._fast is not None and eager._fast is None
    key = lambda r: r.problem.problem_id  # noqa: E731
    a = sorted(fast.mine_many(task.load()), key=key)
    b = sorted(eager.mine_many(task.load()), key=key)
    assert sum(len(r.records) for r in a) > 10
    _same_results(a, b)


def test_static_rows_feed_equals_transformers_rows_and_grows(pair):
    """The miner's feeder on the static-cache rows against the same feeder on transformers rows, on the same
    requests: a cold batch, a subset of rows with shared prefixes cropped and extended, teacher forcing, and a
    sequence longer than the initial cache; each against a plain forward of the whole sequence too."""
    from judgekit.decode.backends import fast_lm, make_rows
    from judgekit.mine.rows import RowFeeder

    rng = random.Random(0)
    vocab = pair.vocab_size
    seqs = [[rng.randrange(vocab) for _ in range(n)] for n in (7, 12, 5)]
    fast = RowFeeder(make_rows(pair.target, vocab, fast_lm(pair.target), max_len=16))
    slow = RowFeeder(make_rows(pair.target, vocab))
    rows = [(fast.acquire(), slow.acquire()) for _ in range(3)]
    steps = [
        ([0, 1, 2], seqs, False, (-1,)),
        ([2, 0], [seqs[2] + [3, 4], seqs[0][:4] + [9]], True, (1, -1)),
        ([1], [seqs[1] + [rng.randrange(vocab) for _ in range(20)]], True, (-1,)),  # past max_len 16: grows
        ([0, 1], [seqs[0][:4] + [9, 10], seqs[1][:3]], False, ()),
    ]
    for idx, want_seqs, all_pos, layers in steps:
        got = fast.feed([rows[i][0] for i in idx], want_seqs, all_positions=all_pos, hidden_layers=layers)
        ref = slow.feed([rows[i][1] for i in idx], want_seqs, all_positions=all_pos, hidden_layers=layers)
        for g, r, seq in zip(got, ref, want_seqs):
            assert g.common == r.common and g.argmax == r.argmax
            plain = pair.target(torch.tensor([seq])).logits[0, :, :vocab].argmax(-1).tolist()
            assert r.argmax == (plain[r.common:] if all_pos else plain[-1:])
            assert (g.hidden is None) == (r.hidden is None)
            for layer in layers:
                np.testing.assert_allclose(g.hidden[layer].astype(np.float32), r.hidden[layer].astype(np.float32),
                                           atol=1e-2, rtol=1e-2)
    assert fast.rows.cache.max_len >= 32


def test_lookup_drafter_proposes_each_rows_copy_within_its_limit():
    from judgekit.decode.engine import LookupDrafter, SeqState

    drafter = LookupDrafter(vocab=10, device=torch.device("cpu"))
    seqs = [SeqState([1, 2, 3, 9, 1, 2], torch.Generator()), SeqState([4, 5], torch.Generator()),
            SeqState([7, 1, 2], torch.Generator())]
    for s, limit in zip(seqs, (3, 3, 1)):
        s.limit = limit
    drafter.references = {seqs[2]: [1, 2, 8, 8]}
    prop = drafter.propose(seqs, 3)
    assert prop.limits == [3, 0, 1]  # [3, 9, 1] (copied from itself), no match, [8] (its reference, cut at 1)
    assert prop.tokens[0].tolist() == [3, 9, 1] and prop.tokens[2, :1].tolist() == [8]
    assert prop.tokens.shape == (3, 3) and torch.equal(prop.q.argmax(-1), prop.tokens)
    assert torch.equal(prop.q.sum(-1), torch.ones(3, 3))


@pytest.mark.parametrize("batch_size", [1, 3])
def test_copy_draft_rollouts_are_plain_greedy_in_fewer_target_forwards(pair, batch_size, monkeypatch):
    """The rollouts run on the engine's speculative step with a LookupDrafter: copying up to 8 tokens per step
    gives exactly the results of one token per step (lookahead 0), with fewer target forwards per rollout."""
    import judgekit.mine.miner as miner_mod

    task = PrefixTask()
    rows_stepped = {}
    runs = {}
    step = miner_mod.speculative_step
    for look in (0, 8):
        count = []

        def counted(cfg, target, drafter, seqs, k, _count=count):
            _count.append(len(seqs))
            return step(cfg, target, drafter, seqs, k)

        monkeypatch.setattr(miner_mod, "speculative_step", counted)
        cfg = MineConfig(max_new_tokens=40, layers=(-1, 1), draft_features=True, lookahead=look)
        runs[look] = sorted(Miner(pair, task, cfg, batch_size=batch_size).mine_many(task.load()),
                            key=lambda r: r.problem.problem_id)
        rows_stepped[look] = sum(count)
    _same_results(runs[0], runs[8])
    assert sum(len(r.records) for r in runs[8]) > 10
    assert 0 < rows_stepped[8] < rows_stepped[0]  # (random tiny models re-join their response only sometimes)
