"""The decoder reads the judge's own layer and features: via `judgekit generate` and `run_eval`."""

from __future__ import annotations

import pytest
import torch

from judgekit.cli import main
from judgekit.evaluate.run import run_eval
from judgekit.evaluate.sweep import EvalSettings, Sweep
from judgekit.judge.head import LinearJudge, load_judge
from judgekit.models import encode_prompt, format_prompt, load_model_pair
from judgekit.pocket import POCKET_DIR
from judgekit.decode.rules import make_rule
from judgekit.tasks import get_task

pytestmark = pytest.mark.skipif(not (POCKET_DIR / "target" / "model.safetensors").exists(),
                                reason="pocket models not trained")


@pytest.fixture(scope="module")
def pair():
    return load_model_pair("pocket-target", "pocket-draft", device="cpu", dtype="fp32")


def _keep_all_judge(path, pair, layer, features="target"):
    """A judge that keeps every draft (P(important) = sigmoid(-20)), trained 'on' `layer`."""
    h = pair.target.config.hidden_size
    d = pair.draft.config.hidden_size if features == "target+draft" else 0
    config = {"schema_version": 2, "layer": layer, "features": features, "hidden_size": h,
              "draft_hidden_size": d or None, "target_model": "pocket-target", "draft_model": "pocket-draft"}
    LinearJudge(torch.zeros(h + d), torch.tensor(-20.0), torch.zeros(h + d), torch.ones(h + d), config).save(path)
    return path


@pytest.fixture
def calls(monkeypatch):
    """Every (hidden, tokens, draft_hidden) a saved judge is called with."""
    seen = []
    original = LinearJudge.__call__

    def recording(self, hidden, tokens=None, draft_hidden=None):
        seen.append((hidden.clone(), tokens.clone(), None if draft_hidden is None else draft_hidden.clone()))
        return original(self, hidden, tokens, draft_hidden)

    monkeypatch.setattr(LinearJudge, "__call__", recording)
    return seen


def _check_first_step(pair, prompt_ids, calls, layer, draft=False):
    """The first step keeps every draft, so its features are the models' states on prompt + drafts."""
    hidden, tokens, draft_hidden = calls[0]
    seq = torch.tensor([prompt_ids + tokens.tolist()])
    n = len(prompt_ids)
    with torch.no_grad():
        states = pair.target(seq, output_hidden_states=True).hidden_states
    torch.testing.assert_close(hidden, states[layer][0, n:], atol=1e-4, rtol=1e-4)
    assert not torch.allclose(hidden, states[-1][0, n:], atol=1e-3)  # really not the last layer
    if draft:
        with torch.no_grad():
            d_states = pair.draft(seq, output_hidden_states=True).hidden_states
        # The miner's draft_hidden: the draft's final state after the token before each drafted one.
        torch.testing.assert_close(draft_hidden, d_states[-1][0, n - 1: -1], atol=1e-4, rtol=1e-4)
    else:
        assert draft_hidden is None


def test_generate_reads_the_judges_layer(pair, tmp_path, calls, capsys):
    judge_dir = _keep_all_judge(tmp_path / "j", pair, layer=1)
    prompt = "Tom has 3 apples and buys 4 more."
    assert main(["generate", "--target", "pocket-target", "--draft", "pocket-draft", "--prompt", prompt,
                 "--rule", "judge", "--judge", str(judge_dir), "--device", "cpu", "--dtype", "fp32",
                 "--max-new-tokens", "12", "--json"]) == 0
    ids = encode_prompt(pair.tokenizer, format_prompt(pair.tokenizer, prompt))
    _check_first_step(pair, ids, calls, layer=1)


@pytest.mark.parametrize("features", ["target", "target+draft"])
def test_run_eval_reads_the_judges_layer_and_draft_features(pair, tmp_path, calls, features):
    judge_dir = _keep_all_judge(tmp_path / "j", pair, layer=2, features=features)
    task = get_task("pocket-math")
    problem = task.load("test", limit=1)
    points = Sweep(["judge"], {"judge_threshold": [0.5]}, judges=[str(judge_dir)]).points()
    settings = EvalSettings("pocket-math", "pocket-target", "pocket-draft", limit=1, max_new_tokens=12)
    run_eval(pair, task, problem, points, settings, str(tmp_path / "ev"))
    ids = encode_prompt(pair.tokenizer, task.build_prompt(problem[0], pair.tokenizer, chat_template=True))
    _check_first_step(pair, ids, calls, layer=2, draft=features == "target+draft")


def test_generate_refuses_a_layer_the_target_lacks(pair, tmp_path, capsys):
    judge_dir = _keep_all_judge(tmp_path / "j", pair, layer=7)
    assert main(["generate", "--target", "pocket-target", "--draft", "pocket-draft", "--prompt", "x",
                 "--rule", "judge", "--judge", str(judge_dir), "--device", "cpu"]) == 2
    assert "layer 7" in capsys.readouterr().err


@pytest.mark.parametrize("features", ["target", "target+draft"])
def test_fast_and_eager_paths_feed_the_judge_the_same_features(pair, tmp_path, calls, features):
    """The static-cache fast path (batched too) passes the judge the same target and draft states as the eager
    transformers path: first-step features match the models' own states on both, and a judge that really
    decides (random weights) gives the same greedy outputs and acceptances on both paths and at any batch."""
    from judgekit.decode.decoder import SpeculativeDecoder

    judge = load_judge(_keep_all_judge(tmp_path / "j", pair, layer=2, features=features))
    task = get_task("pocket-math")
    problems = task.load("test", limit=4)
    ids = encode_prompt(pair.tokenizer, task.build_prompt(problems[0], pair.tokenizer))
    seen = {}
    for fast in (False, True):
        calls.clear()
        dec = SpeculativeDecoder(pair, make_rule("judge", judge=judge, threshold=0.5), 4, fast=fast)
        assert dec.fast is fast
        dec.generate_ids(ids, max_new_tokens=40)
        _check_first_step(pair, ids, calls, layer=2, draft=features == "target+draft")
        seen[fast] = list(calls)
    # Every step (after full acceptance the draft reads two unread tokens): the same features on both paths.
    assert len(seen[True]) == len(seen[False]) > 3
    for (h_e, t_e, d_e), (h_f, t_f, d_f) in zip(seen[False], seen[True]):
        assert torch.equal(t_e, t_f)
        torch.testing.assert_close(h_f, h_e, atol=1e-4, rtol=1e-4)
        if d_e is not None:
            torch.testing.assert_close(d_f, d_e, atol=1e-4, rtol=1e-4)
    h = pair.target.config.hidden_size
    d = pair.draft.config.hidden_size if features == "target+draft" else 0
    g = torch.Generator().manual_seed(1)
    config = {**judge.config}
    deciding = LinearJudge(torch.randn(h + d, generator=g) * 3, torch.tensor(0.0), torch.zeros(h + d),
                           torch.ones(h + d), config)
    rule = make_rule("judge", judge=deciding, threshold=0.5)
    prompts = [encode_prompt(pair.tokenizer, task.build_prompt(p, pair.tokenizer)) for p in problems]
    eager = SpeculativeDecoder(pair, rule, 4, fast=False).generate_batch(prompts, max_new_tokens=40)
    fast1 = SpeculativeDecoder(pair, rule, 4, fast=True).generate_batch(prompts, max_new_tokens=40, batch_size=1)
    fast4 = SpeculativeDecoder(pair, rule, 4, fast=True).generate_batch(prompts, max_new_tokens=40, batch_size=4)
    for e, f1, f4 in zip(eager, fast1, fast4):
        assert e.token_ids == f1.token_ids == f4.token_ids
        assert e.stats.accept_hist == f1.stats.accept_hist == f4.stats.accept_hist
    lossless = SpeculativeDecoder(pair, make_rule("lossless"), 4, fast=True).generate_batch(prompts, 40)
    assert [g.token_ids for g in lossless] != [g.token_ids for g in eager]  # the judge changed the outputs
