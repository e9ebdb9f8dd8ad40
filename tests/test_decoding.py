"""The speculative decoder: exactness, distribution, stopping, bookkeeping, and the judge's features."""

from __future__ import annotations


import pytest
import torch
from scipy.stats import chi2

from judgekit.decoding import SamplingConfig, SpeculativeDecoder
from judgekit.errors import JudgekitError
from judgekit.models import encode_prompt, format_prompt
from judgekit.rules import make_rule

PROMPTS = ["Tom has 3 apples", "def add(a, b):", "The quick brown", "Speculative decoding"]


@pytest.fixture(scope="session")
def pair(tiny_pair):  # the shared tiny pair of tests/conftest.py, once per architecture
    return tiny_pair


def _prompt_ids(pair, text):
    return encode_prompt(pair.tokenizer, format_prompt(pair.tokenizer, text))


@pytest.mark.parametrize("gamma", [1, 3, 8])
def test_greedy_lossless_equals_target_generate(pair, gamma):
    dec = SpeculativeDecoder(pair, make_rule("lossless"), block_size=gamma)
    accepted_some = False
    for text in PROMPTS:
        ids = _prompt_ids(pair, text)
        ref = pair.target.generate(torch.tensor([ids]), max_new_tokens=48, do_sample=False)[0, len(ids):].tolist()
        gen = dec.generate_ids(ids, max_new_tokens=48)
        assert gen.token_ids == ref, text
        accepted_some |= sum(gen.stats.accept_hist[1:]) > 0
    assert accepted_some  # the rollback paths actually ran


def test_stats_bookkeeping(pair):
    gamma = 4
    dec = SpeculativeDecoder(pair, make_rule("lossless"), block_size=gamma)
    for text in PROMPTS:
        gen = dec.generate_ids(_prompt_ids(pair, text), max_new_tokens=37)
        s = gen.stats
        assert sum(s.accept_hist) == s.target_calls
        emitted = sum((n + 1) * c for n, c in enumerate(s.accept_hist))
        assert s.new_tokens == len(gen.token_ids) <= emitted
        assert s.draft_calls <= gamma * s.target_calls
        assert s.block_efficiency == pytest.approx(s.new_tokens / s.target_calls)
        assert len(gen.token_ids) <= 37
        if gen.finish_reason == "length":
            assert len(gen.token_ids) == 37


def test_stop_string_cuts_at_first_occurrence(pair):
    dec = SpeculativeDecoder(pair, make_rule("lossless"), block_size=4)
    ids = _prompt_ids(pair, PROMPTS[0])
    full = dec.generate_ids(ids, max_new_tokens=40)
    text = pair.tokenizer.decode(full.token_ids)
    stop = text[len(text) // 2: len(text) // 2 + 2]
    cut = dec.generate_ids(ids, max_new_tokens=40, stop_strings=(stop,))
    assert cut.finish_reason == "stop"
    assert full.token_ids[: len(cut.token_ids)] == cut.token_ids
    assert stop in pair.tokenizer.decode(cut.token_ids)
    assert stop not in pair.tokenizer.decode(cut.token_ids[:-1])


def test_eos_stops_generation(pair):
    dec = SpeculativeDecoder(pair, make_rule("lossless"), block_size=4)
    eos = pair.tokenizer.eos_token_id
    for text in PROMPTS:
        gen = dec.generate_ids(_prompt_ids(pair, text), max_new_tokens=48)
        assert eos not in gen.token_ids[:-1]
        assert (gen.finish_reason == "eos") == (gen.token_ids[-1] == eos)


def _target_sequence_probs(pair, ids, horizon, cfg):
    """Exact probability of every horizon-token continuation under the target's own sampling."""
    from judgekit.decoding import to_probs

    probs: dict[tuple[int, ...], float] = {}

    def walk(prefix, mass):
        if len(prefix) == horizon:
            probs[tuple(prefix)] = mass
            return
        with torch.no_grad():
            logits = pair.target(torch.tensor([ids + prefix])).logits[0, -1, : pair.vocab_size]
        p, _ = to_probs(logits, cfg, False)
        for tok in torch.nonzero(p > 0).flatten().tolist():
            walk(prefix + [tok], mass * p[tok].item())

    walk([], 1.0)
    return probs


@pytest.mark.parametrize("rule_name", ["lossless"])
def test_lossless_sampling_matches_target_distribution(pair, rule_name):
    cfg = SamplingConfig(temperature=1.0, top_k=3)
    horizon, n = 3, 2500
    ids = _prompt_ids(pair, "Tom has")
    exact = _target_sequence_probs(pair, ids, horizon, cfg)
    dec = SpeculativeDecoder(pair, make_rule(rule_name), block_size=2, sampling=cfg)
    counts: dict[tuple[int, ...], int] = {}
    rejected = 0
    for seed in range(n):
        gen = dec.generate_ids(ids, max_new_tokens=horizon, seed=seed)
        key = tuple(gen.token_ids)
        counts[key] = counts.get(key, 0) + 1
        rejected += gen.stats.accept_hist[0]
    assert set(counts) <= set(exact)
    assert rejected > 0  # residual sampling was exercised
    support = [k for k, v in exact.items() if v * n >= 5]
    stat = sum((counts.get(k, 0) - n * exact[k]) ** 2 / (n * exact[k]) for k in support)
    rest_exp = n * sum(v for k, v in exact.items() if k not in support)
    rest_obs = n - sum(counts.get(k, 0) for k in support)
    if rest_exp >= 5:
        stat += (rest_obs - rest_exp) ** 2 / rest_exp
        dof = len(support)
    else:
        dof = len(support) - 1
    assert stat < chi2.ppf(1 - 1e-6, dof), (stat, dof)


class _RecordingJudge:
    """P(important) constant; records what the decoder passes, to check the features' alignment."""

    def __init__(self, p_important: float):
        self.p = p_important
        self.calls: list[tuple[torch.Tensor, torch.Tensor]] = []

    def __call__(self, hidden, tokens):
        self.calls.append((hidden.clone(), tokens.clone()))
        return torch.full(tokens.shape, self.p)


def test_judge_that_flags_everything_is_lossless(pair):
    judge = _RecordingJudge(1.0)
    dec_j = SpeculativeDecoder(pair, make_rule("judge", judge=judge, threshold=0.5), block_size=4)
    dec_l = SpeculativeDecoder(pair, make_rule("lossless"), block_size=4)
    for text in PROMPTS:
        ids = _prompt_ids(pair, text)
        assert dec_j.generate_ids(ids, 30).token_ids == dec_l.generate_ids(ids, 30).token_ids
    assert judge.calls


def test_judge_that_keeps_everything_accepts_every_draft(pair):
    dec = SpeculativeDecoder(pair, make_rule("judge", judge=_RecordingJudge(0.0), threshold=0.5), block_size=4)
    gen = dec.generate_ids(_prompt_ids(pair, PROMPTS[1]), max_new_tokens=21)
    hist = gen.stats.accept_hist
    assert hist[1:4] == [0, 0, 0] and hist[4] >= 1
    if gen.finish_reason == "length":
        # Four full blocks of 4 drafts + 1, then one target-only step for the last token of the budget.
        assert hist == [1, 0, 0, 0, 4]
        assert gen.stats.block_efficiency == pytest.approx(21 / 5)


@pytest.mark.parametrize("layer", [-1, 1])
def test_judge_reads_target_hidden_state_after_the_draft_token(pair, layer):
    """The features equal the target's hidden state at the drafted token, from the same verify forward."""
    checked = 0
    for text in PROMPTS:
        judge = _RecordingJudge(1.0)
        dec = SpeculativeDecoder(pair, make_rule("judge", judge=judge, threshold=0.5), block_size=3,
                                 hidden_layer=layer)
        ids = _prompt_ids(pair, text)
        gen = dec.generate_ids(ids, max_new_tokens=24)
        seq = ids + gen.token_ids
        with torch.no_grad():
            ref_hidden = pair.target(torch.tensor([seq]), output_hidden_states=True).hidden_states[layer][0]
        pos = len(ids)  # where this step's first drafted token would sit in the final sequence
        for hidden, tokens in judge.calls:
            assert hidden.shape == (tokens.shape[0], pair.target.config.hidden_size)
            run = 0  # the accepted run: drafted tokens that made it into the final sequence
            while run < len(tokens) and pos + run < len(seq) and seq[pos + run] == tokens[run].item():
                torch.testing.assert_close(hidden[run], ref_hidden[pos + run], atol=1e-4, rtol=1e-4)
                run += 1
            checked += run
            pos += run + 1
    assert checked > 0


@pytest.mark.parametrize("rule_name", ["lenience", "cos", "fuzzy", "speccascade", "typical", "minp", "eta"])
def test_every_rule_runs_greedy_and_sampling(pair, rule_name):
    rule = make_rule(rule_name, lenience=0.5, lam=0.5, threshold=0.5, p_base=0.1)
    for cfg in (SamplingConfig(0.0), SamplingConfig(0.8, top_p=0.9)):
        gen = SpeculativeDecoder(pair, rule, block_size=4, sampling=cfg).generate_ids(
            _prompt_ids(pair, PROMPTS[0]), max_new_tokens=20, seed=1)
        assert 1 <= len(gen.token_ids) <= 20
        assert all(0 <= t < pair.vocab_size for t in gen.token_ids)


def test_minp_greedy_equals_target_greedy(pair):
    """Greedy truncation baselines keep the target's argmax, so their output is the target's."""
    ids = _prompt_ids(pair, PROMPTS[3])
    a = SpeculativeDecoder(pair, make_rule("minp", p_base=0.2), block_size=4).generate_ids(ids, 30)
    b = SpeculativeDecoder(pair, make_rule("lossless"), block_size=4).generate_ids(ids, 30)
    assert a.token_ids == b.token_ids


def test_sampling_is_reproducible_for_a_seed(pair):
    dec = SpeculativeDecoder(pair, make_rule("lossless"), block_size=4, sampling=SamplingConfig(1.0))
    ids = _prompt_ids(pair, PROMPTS[0])
    runs = [dec.generate_ids(ids, 24, seed=s).token_ids for s in (5, 5, 6)]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_bad_decoder_parameters(pair):
    with pytest.raises(JudgekitError):
        SpeculativeDecoder(pair, make_rule("lossless"), block_size=0)
    with pytest.raises(JudgekitError):
        SamplingConfig(temperature=-1)
    with pytest.raises(JudgekitError):
        SamplingConfig(temperature=1, top_p=0)
    with pytest.raises(JudgekitError):
        SpeculativeDecoder(pair, make_rule("lossless")).generate_ids([1, 2], max_new_tokens=0)


def test_to_probs_transforms():
    from judgekit.decoding import to_probs

    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    greedy, shape = to_probs(logits, SamplingConfig(0.0), need_shape=True)
    assert greedy.tolist() == [[1.0, 0.0, 0.0, 0.0]]
    torch.testing.assert_close(shape, torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    p, none = to_probs(logits, SamplingConfig(1.0, top_p=0.8), need_shape=True)
    assert none is None
    torch.testing.assert_close(p, torch.tensor([[0.625, 0.375, 0.0, 0.0]]))
    p, _ = to_probs(logits, SamplingConfig(1.0, top_k=3), need_shape=False)
    torch.testing.assert_close(p, torch.tensor([[0.5, 0.3, 0.15, 0.0]]) / 0.95)
    p, _ = to_probs(logits, SamplingConfig(0.5), need_shape=False)
    sharp = torch.tensor([0.5, 0.3, 0.15, 0.05]) ** 2
    torch.testing.assert_close(p, (sharp / sharp.sum()).unsqueeze(0))
