"""The speculative decoder: exactness, distribution, stopping, bookkeeping, and the judge's features."""

from __future__ import annotations


import pytest
import torch
from stat_checks import gof_sparse

from judgekit.decode.decoder import SpeculativeDecoder
from judgekit.decode.sampling import SamplingConfig, to_probs
from judgekit.errors import JudgekitError
from judgekit.models import encode_prompt, format_prompt
from judgekit.decode.rules import RuleContext, make_rule

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


# -- distributions in sampled mode ----------------------------------------------------------------------------
# Every decoder tested here decodes the same short prompt N_DRAWS times, one seed per sequence, on the tiny
# llama pair (architecture does not matter for sampling; greedy tests cover both). top_k = 4 keeps the first
# position to six tokens (the union of the target's and the draft's top 4), so the bounds of
# tests/stat_checks.py (ALPHA = 1e-6) catch a sampler off by a total variation of about 0.03 (checked by
# planting such mistakes in the rules, the verifier and the eager draft loop).

N_DRAWS = 20_000
SAMPLED = SamplingConfig(temperature=1.0, top_k=4)
SAMPLED_PROMPT = "apples"  # no chat template: 3 tokens; there CoS and lenience move 0.27 and 0.14 of p's mass
SAMPLED_RULES = [("lossless", {}), ("cos", {"lam": 0.5}), ("lenience", {"lenience": 0.5})]


def _first_rows(pair, ids, cfg=SAMPLED):
    """The target's and the draft's sampling distributions after ``ids`` (float64, from a plain forward)."""
    with torch.no_grad():
        rows = [to_probs(m(torch.tensor([ids])).logits[0, -1, : pair.vocab_size], cfg, False)[0].double()
                for m in (pair.target, pair.draft)]
    return rows[0], rows[1]


def _sampled(pair, rule, n, block_size=1, max_new_tokens=2, fast=True, ids=None):
    """Token ids of n sampled sequences, seeds 0 .. n-1 (the fast path decodes them as one batch)."""
    ids = ids or pair.tokenizer.encode(SAMPLED_PROMPT)
    dec = SpeculativeDecoder(pair, rule, block_size=block_size, sampling=SAMPLED, fast=fast)
    assert dec.fast == fast
    return [tuple(g.token_ids) for g in dec.generate_batch([ids] * n, max_new_tokens, seeds=list(range(n)))]


def _expected(pair, rule, joint: bool):
    """What the decoder must emit: the target's first row p, the rule's closed-form induced distribution of
    the first token, and (if asked) the target's own law of the first two tokens, p(t1) p(t2 | t1)."""
    ids = pair.tokenizer.encode(SAMPLED_PROMPT)
    p, q = _first_rows(pair, ids)
    induced = rule.induced(p[None], q[None], RuleContext())[0]
    two = {}
    for t1 in torch.nonzero(p).flatten().tolist() if joint else []:
        p2, _ = _first_rows(pair, ids + [t1])
        two.update({(t1, t2): p[t1].item() * p2[t2].item() for t2 in torch.nonzero(p2).flatten().tolist()})
    return p, induced, two


def _check(observed, expected, label):
    stat, chi_bound, l1, l1_bound = gof_sparse(observed, expected)
    print(f"{label}: chi2 = {stat:.1f} vs {chi_bound:.1f}; L1 = {l1:.4f} vs {l1_bound:.4f}")
    assert stat < chi_bound, f"{label}: chi2 {stat:.1f} >= {chi_bound:.1f}"
    assert l1 < l1_bound, f"{label}: L1 {l1:.4f} >= {l1_bound:.4f}"


@pytest.mark.parametrize("rule_name,params", SAMPLED_RULES, ids=[r for r, _ in SAMPLED_RULES])
def test_sampled_tokens_follow_the_rules_induced_distribution(tiny_models, rule_name, params):
    """The first emitted token follows ``rule.induced(p, q)`` (eq. 8 for CoS, eq. 10 for lenience, p for
    lossless); lossless also reproduces the target's joint law of the first two tokens, which runs the
    bonus token after an acceptance and a whole second step, from the rolled-back caches, after a rejection."""
    pair = tiny_models.pair("llama")
    rule = make_rule(rule_name, **params)
    p, induced, joint = _expected(pair, rule, joint=rule_name == "lossless")
    tv_from_target = 0.5 * (induced - p).abs().sum().item()
    if rule_name == "lossless":
        assert tv_from_target < 1e-9 and len(joint) > 8
    else:  # the rule really is lossy here: a decoder that ignored it (sampled from p) would fail
        assert tv_from_target > 0.1, tv_from_target
    seqs = _sampled(pair, rule, N_DRAWS)
    assert all(len(s) == 2 for s in seqs)
    _check([s[0] for s in seqs], dict(enumerate(induced.tolist())), f"{rule_name} first token")
    if joint:
        _check(seqs, joint, f"{rule_name} first two tokens")


@pytest.mark.parametrize("rule_name,params", SAMPLED_RULES[:2], ids=[r for r, _ in SAMPLED_RULES[:2]])
def test_eager_path_makes_the_fast_paths_draws(tiny_models, rule_name, params):
    """The eager path, sampled, emits exactly the fast path's tokens for every seed (blocks of 2, several
    steps). Both consume each sequence's generator the same way, so the distribution checked above on the
    fast path is the eager path's too: two samplers whose laws differ by TV delta disagree on a random seed
    with probability >= delta, so n = 400 equal seeds leave P <= (1 - 0.03)^400 < 1e-5 for delta = 0.03.
    (Should the fast path's random stream change by design, replace this by a direct check on the eager path.)"""
    pair = tiny_models.pair("llama")
    rule = make_rule(rule_name, **params)
    fast = _sampled(pair, rule, 400, block_size=2, max_new_tokens=3)
    eager = _sampled(pair, rule, 400, block_size=2, max_new_tokens=3, fast=False)
    assert len(set(fast)) > 40  # the draws vary, so equality is not a coincidence of a peaked distribution
    assert eager == fast


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
    from judgekit.decode.sampling import to_probs

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
