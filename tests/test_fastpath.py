"""The static-cache fast path: the lean forward against transformers, batched decoding against batch 1,
and the batched verifier against the one-sequence one."""

from __future__ import annotations

import pytest
import torch

from judgekit.benchmarks.synthetic import save_tiny_pair, tiny_model
from judgekit.decode.decoder import SpeculativeDecoder
from judgekit.decode.sampling import SamplingConfig
from judgekit.errors import JudgekitError
from judgekit.decode.fastmodel import FastLM, fast_unsupported
from judgekit.models import ModelPair, encode_prompt, format_prompt, load_model_pair
from judgekit.decode.rules import RULES, RuleContext, make_rule, sample
from judgekit.decode.verify import verify_batch, verify_block

PROMPTS = ["Tom has 3 apples", "def add(a, b):", "The quick brown fox jumps", "Speculative decoding",
           "0 1 2", "Tom"]


@pytest.fixture(scope="session")
def pair(tiny_pair):  # the shared tiny pair of tests/conftest.py, once per architecture
    return tiny_pair


def _ids(pair, text):
    return encode_prompt(pair.tokenizer, format_prompt(pair.tokenizer, text))


def _rope_variant(arch: str, variant: str):
    model = tiny_model(arch, 97, hidden=64, layers=3, heads=4, seed=5)
    if variant == "default":
        return model
    from transformers import AutoModelForCausalLM

    cfg = model.config
    if variant == "tied":
        cfg.tie_word_embeddings = True
    else:  # llama3-style rope scaling and a different theta
        cfg.rope_parameters = {"rope_type": "llama3", "rope_theta": 50000.0, "factor": 8.0,
                               "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                               "original_max_position_embeddings": 16}
    torch.manual_seed(5)
    return AutoModelForCausalLM.from_config(cfg).eval()


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("variant", ["default", "tied", "rope-scaled"])
@pytest.mark.parametrize("fused", [True, False])
def test_forward_matches_transformers_logits_and_hidden_states(arch, variant, fused):
    model = _rope_variant(arch, variant)
    fm = FastLM(model, fused=fused)
    ids = torch.randint(0, 97, (2, 11), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = model(ids, output_hidden_states=True)
        for layer in range(-1, fm.n_layers + 1):
            cache = fm.new_cache(2, 32)
            logits, hidden = fm.forward(ids, torch.zeros(2, dtype=torch.long), cache, 11, hidden_layer=layer)
            torch.testing.assert_close(logits, ref.logits, atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(hidden, ref.hidden_states[layer], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_ragged_rows_and_rollback_match_a_fresh_forward(arch):
    """Rows at different lengths, then a rollback (a smaller start) and a rewrite, give the logits of a
    plain forward over each row's own sequence."""
    model = tiny_model(arch, 97, hidden=64, layers=2, heads=4, seed=1)
    fm = FastLM(model)
    g = torch.Generator().manual_seed(1)
    a, b = torch.randint(0, 97, (9,), generator=g), torch.randint(0, 97, (5,), generator=g)
    cache = fm.new_cache(2, 40)
    with torch.no_grad():
        pad = torch.zeros(2, 9, dtype=torch.long)
        pad[0], pad[1, :5] = a, b
        fm.forward(pad, torch.zeros(2, dtype=torch.long), cache, 9)
        # Row 0 rolls back 3 tokens and reads 3 new ones; row 1 continues from its length 5.
        new = torch.randint(0, 97, (2, 3), generator=g)
        logits, _ = fm.forward(new, torch.tensor([6, 5]), cache, 9)
        seq0, seq1 = torch.cat([a[:6], new[0]]), torch.cat([b, new[1]])
        torch.testing.assert_close(logits[0], model(seq0[None]).logits[0, -3:], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(logits[1], model(seq1[None]).logits[0, -3:], atol=1e-4, rtol=1e-4)


def test_fast_greedy_equals_transformers_generate_and_eager(pair):
    fast = SpeculativeDecoder(pair, make_rule("lossless"), block_size=4, fast=True)
    eager = SpeculativeDecoder(pair, make_rule("lossless"), block_size=4, fast=False)
    assert fast.fast and not eager.fast
    for text in PROMPTS:
        ids = _ids(pair, text)
        ref = pair.target.generate(torch.tensor([ids]), max_new_tokens=40, do_sample=False)[0, len(ids):].tolist()
        assert fast.generate_ids(ids, max_new_tokens=40).token_ids == ref
        assert eager.generate_ids(ids, max_new_tokens=40).token_ids == ref


def _rule(name, pair):
    if name == "judge":
        weight = torch.randn(pair.target.config.hidden_size, generator=torch.Generator().manual_seed(0))
        return make_rule("judge", judge=lambda h, t: torch.sigmoid(h.float() @ weight), threshold=0.5)
    return make_rule(name, lenience=0.5, lam=0.5, threshold=0.3, p_base=0.2)


@pytest.mark.parametrize("rule_name", list(RULES))
def test_batch_greedy_equals_batch_one_and_eager(pair, rule_name):
    rule = _rule(rule_name, pair)
    dec = SpeculativeDecoder(pair, rule, block_size=5, fast=True)
    eager = SpeculativeDecoder(pair, rule, block_size=5, fast=False)
    prompts = [_ids(pair, t) for t in PROMPTS]
    budgets = [30, 7]
    for budget in budgets:
        seeds = [7 + i for i in range(len(prompts))]
        batch = dec.generate_batch(prompts, max_new_tokens=budget, stop_strings=("fox",), seeds=seeds)
        for ids, gen, seed in zip(prompts, batch, seeds):
            one = dec.generate_ids(ids, max_new_tokens=budget, stop_strings=("fox",), seed=seed)
            ref = eager.generate_ids(ids, max_new_tokens=budget, stop_strings=("fox",), seed=seed)
            assert gen.token_ids == one.token_ids == ref.token_ids
            assert gen.finish_reason == one.finish_reason == ref.finish_reason
            assert sum(gen.stats.accept_hist) == gen.stats.target_calls
            assert gen.stats.new_tokens == len(gen.token_ids) <= budget


def test_batch_sampling_runs_and_is_reproducible(pair):
    dec = SpeculativeDecoder(pair, make_rule("lossless"), block_size=4, sampling=SamplingConfig(0.8, top_k=20))
    prompts = [_ids(pair, t) for t in PROMPTS[:4]]
    a = dec.generate_batch(prompts, max_new_tokens=20, seeds=[3, 4, 5, 6])
    b = dec.generate_batch(prompts, max_new_tokens=20, seeds=[3, 4, 5, 6])
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert all(1 <= len(g.token_ids) <= 20 for g in a)


def test_batch_stats_share_the_wall_time(pair):
    dec = SpeculativeDecoder(pair, make_rule("lossless"), block_size=4)
    gens = dec.generate_batch([_ids(pair, t) for t in PROMPTS], max_new_tokens=16)
    assert all(g.stats.wall_time > 0 for g in gens)


def test_unsupported_architecture_falls_back_or_refuses(pair):
    gpt2 = _gpt2()
    assert fast_unsupported(gpt2) is not None and fast_unsupported(pair.target) is None
    mixed = ModelPair(pair.target, gpt2, pair.tokenizer, "t", "d", pair.vocab_size, pair.device)
    assert not SpeculativeDecoder(mixed, make_rule("lossless")).fast
    with pytest.raises(JudgekitError, match="no fast path"):
        SpeculativeDecoder(mixed, make_rule("lossless"), fast=True)
    with pytest.raises(JudgekitError):
        SpeculativeDecoder(pair, make_rule("lossless"), fast="yes")


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=400)).eval()


# -- the batched verifier --------------------------------------------------------------------------------------


def _rand_dists(g, *shape):
    return torch.softmax(torch.randn(*shape, generator=g) * 3, -1)


def _reference_verify_block(rule, p, q, x, ctx, generator):
    """Block verification of one sequence written out plainly (k uniforms, the leading run of acceptances,
    one draw from the residual at the first rejection or the bonus row): the reference the batched verifier
    must reproduce draw for draw."""
    k = x.shape[0]
    bonus = rule.bonus(p[k:], ctx.target_rows(slice(k, None)))
    if k == 0:
        return 0, int(sample(bonus, generator)[0])
    drafted_ctx = ctx.target_rows(slice(0, k))
    h = rule.acceptance(p[:k], q, x, drafted_ctx)
    u = torch.rand(k, generator=generator, dtype=torch.float32)
    n = (u < h.float()).long().cumprod(0).sum()
    dists = torch.cat([rule.residual(p[:k], q, drafted_ctx), bonus], 0)
    return int(n), int(sample(dists.index_select(0, n.view(1)), generator)[0])


@pytest.mark.parametrize("rule_name", list(RULES))
def test_verify_block_matches_the_plain_one_block_verifier_draw_for_draw(rule_name):
    """Sampled: the batched verifier makes the same random draws as the plain one-block procedure, so a
    shared seed gives the same accepted length and token."""
    g = torch.Generator().manual_seed(0)
    k, V, H = 4, 11, 6
    weight = torch.randn(H, generator=g)
    rule = make_rule(rule_name, judge=lambda h, t: torch.sigmoid(h @ weight), lenience=0.5, lam=0.5,
                     threshold=0.3)
    for trial in range(20):
        p, q = _rand_dists(g, k + 1, V), _rand_dists(g, k, V)
        x = torch.multinomial(q, 1, generator=g)[:, 0]
        ctx = RuleContext(p, q, torch.randn(k, H, generator=g))
        a = _reference_verify_block(rule, p, q, x, ctx, torch.Generator().manual_seed(trial))
        b = verify_block(rule, p, q, x, ctx, torch.Generator().manual_seed(trial))
        assert a == (int(b.n_accepted), int(b.next_token))


@pytest.mark.parametrize("rule_name", list(RULES))
def test_greedy_path_equals_sampling_one_hot_rows_and_honours_limits(rule_name):
    g = torch.Generator().manual_seed(1)
    B, k, V, H = 5, 4, 9, 6
    weight = torch.randn(H, generator=g)
    rule = make_rule(rule_name, judge=lambda h, t: torch.sigmoid(h @ weight), lenience=0.5, lam=0.5,
                     threshold=0.3)
    logits_p, logits_q = torch.randn(B, k + 1, V, generator=g), torch.randn(B, k, V, generator=g)
    p = torch.zeros_like(logits_p).scatter_(-1, logits_p.argmax(-1, keepdim=True), 1.0)
    x = torch.where(torch.rand(B, k, generator=g) < 0.6, logits_p[:, :k].argmax(-1), logits_q.argmax(-1))
    q = torch.zeros(B, k, V).scatter_(-1, x[..., None], 1.0)
    ctx = RuleContext(torch.softmax(logits_p, -1), torch.softmax(logits_q, -1), torch.randn(B, k, H, generator=g))
    limit = torch.tensor([4, 0, 2, 4, 1])
    n_g, t_g = verify_batch(rule, p, q, x, ctx, limit, greedy=True, generator=torch.Generator().manual_seed(0))
    n_s, t_s = verify_batch(rule, p, q, x, ctx, limit, greedy=False, generator=torch.Generator().manual_seed(0))
    assert n_g.tolist() == n_s.tolist() and t_g.tolist() == t_s.tolist()
    assert (n_g <= limit).all()
    # Per-row generators: each row alone, with only its own limit of drafts, decides the same.
    n_r, t_r = verify_batch(rule, p, q, x, ctx, limit, greedy=True,
                            generator=[torch.Generator().manual_seed(10 + b) for b in range(B)])
    gens = [torch.Generator().manual_seed(10 + b) for b in range(B)]
    for b in range(B):
        kb = int(limit[b])
        row_ctx = RuleContext(ctx.p_shape[b: b + 1, : kb + 1], ctx.q_shape[b: b + 1, :kb], ctx.hidden[b: b + 1, :kb])
        n1, t1 = verify_batch(rule, p[b: b + 1, : kb + 1], q[b: b + 1, :kb], x[b: b + 1, :kb], row_ctx,
                              greedy=True, generator=[gens[b]])
        assert (int(n1), int(t1)) == (int(n_r[b]), int(t_r[b]))


def test_batch_one_steps_run_on_host_positions(pair, monkeypatch):
    """At batch size 1 every forward (prefill, draft steps, verify) takes host positions: cache writes by
    slicing and no mask for one-token steps (tensor positions there cost ~25 % of a pocket decode's CPU)."""
    dec = SpeculativeDecoder(pair, make_rule("lossless"), block_size=4, fast=True)
    starts = []
    for lm in dec._fast:
        def spy(ids, start, *args, _impl=lm._impl):
            starts.append(start)
            return _impl(ids, start, *args)
        monkeypatch.setattr(lm, "_impl", spy)
    dec.generate_batch([_ids(pair, t) for t in PROMPTS[:2]], max_new_tokens=20, batch_size=1)
    assert len(starts) > 10 and all(isinstance(s, int) for s in starts)


def test_continuous_batching_refills_rows_and_keeps_outputs(pair):
    dec = SpeculativeDecoder(pair, make_rule("lossless"), block_size=3)
    prompts = [_ids(pair, t) for t in PROMPTS] * 2
    stop = ("o", "s")  # rows stop at different steps, so finished rows are refilled while others run
    full = [g.token_ids for g in dec.generate_batch(prompts, max_new_tokens=40, stop_strings=stop)]
    assert len({len(t) for t in full}) > 2
    assert [g.token_ids for g in dec.generate_batch(prompts, 40, stop, batch_size=3)] == full
    assert full == [dec.generate_ids(ids, max_new_tokens=40, stop_strings=stop).token_ids for ids in prompts]


def test_bench_decode_cli_reports_every_decoder(capsys):
    from judgekit.cli import main

    rc = main(["bench", "decode", "--pair", "pocket", "--prompts", "2", "--max-new-tokens", "6",
               "--batch-size", "2", "--threads", "1"])
    out = capsys.readouterr().out
    assert rc == 0 and "outputs identical: True" in out
    for name in ("HF target-only", "HF assisted", "judgekit eager", "judgekit fast"):
        assert name in out


def test_bench_decode_rejects_a_bad_batch_size(capsys):
    from judgekit.cli import main

    assert main(["bench", "decode", "--pair", "pocket", "--batch-size", "0"]) == 2
    assert "judgekit: error: --batch-size" in capsys.readouterr().err


def test_evaluation_at_batch_size_equals_batch_one(tmp_path):
    from judgekit.evaluate.run import run_eval
    from judgekit.evaluate.summary import summarize
    from judgekit.evaluate.sweep import EvalSettings, Sweep
    from judgekit.store.records import read_records
    from judgekit.tasks import get_task

    pocket = load_model_pair("pocket-target", "pocket-draft", device="cpu", dtype="fp32")
    task = get_task("pocket-math")
    problems = task.load("test", limit=8)
    settings = EvalSettings("pocket-math", "pocket-target", "pocket-draft", limit=8, max_new_tokens=64)
    rows = []
    for bs in (1, 4):
        run_eval(pocket, task, problems, Sweep(["lossless"]).points(), settings, str(tmp_path / str(bs)),
                 batch_size=bs)
        rows.append(summarize(read_records(tmp_path / str(bs)))[0])
    one, many = rows
    assert (one["correct"], one["new_tokens"]) == (many["correct"], many["new_tokens"])


def test_fast_forwards_are_shared_between_decoders_and_rebuilt_after_in_place_updates(tmp_path):
    """Decoders of one pair share its fused fast forwards (a sweep builds them once); changing the weights in
    place (training, perturbation) must not leave a decoder on stale fused copies."""
    target, draft = save_tiny_pair(tmp_path, arch="llama", seed=5)  # its own pair: the weights change below
    local = load_model_pair(str(target), str(draft), device="cpu", dtype="fp32")
    a = SpeculativeDecoder(local, make_rule("lossless"), block_size=4, fast=True)
    b = SpeculativeDecoder(local, make_rule("cos", lam=0.5), block_size=4, fast=True)
    assert a._fast[0] is b._fast[0] and a._fast[1] is b._fast[1]
    ids = _ids(local, "Tom has 3 apples")
    before = a.generate_ids(ids, max_new_tokens=24).token_ids
    with torch.no_grad():
        for p in local.target.model.layers[0].self_attn.q_proj.parameters():
            p.mul_(-3.0)
        local.target.model.layers[0].mlp.up_proj.weight.mul_(5.0)
    c = SpeculativeDecoder(local, make_rule("lossless"), block_size=4, fast=True)
    assert c._fast[0] is not a._fast[0]
    ref = local.target.generate(torch.tensor([ids]), max_new_tokens=24, do_sample=False)[0, len(ids):].tolist()
    assert c.generate_ids(ids, max_new_tokens=24).token_ids == ref
    assert ref != before  # the update changed the output, so a stale forward would have been caught


def _static_form(dec):
    """Run a decoder's steps in the static form CUDA graphs capture (whole-cache attention, tensor positions),
    without capturing: the same forward a graph replays, checkable on a CPU."""
    from judgekit.decode.cudagraphs import GraphedLM

    dec.graphs = (GraphedLM(dec._fast[0], capture=False), GraphedLM(dec._fast[1], capture=False))
    return dec


@pytest.mark.parametrize("rule_name", ["lossless", "cos"])
def test_static_form_of_the_graphed_step_equals_the_dynamic_forward(pair, rule_name):
    rule = make_rule(rule_name) if rule_name == "lossless" else make_rule("cos", lam=0.5)
    prompts = [_ids(pair, t) for t in PROMPTS]
    plain = SpeculativeDecoder(pair, rule, block_size=4, fast=True)
    static = _static_form(SpeculativeDecoder(pair, rule, block_size=4, fast=True))
    for bs in (1, 3):
        want = plain.generate_batch(prompts, max_new_tokens=30, batch_size=bs)
        got = static.generate_batch(prompts, max_new_tokens=30, batch_size=bs)
        assert [g.token_ids for g in got] == [g.token_ids for g in want]
        assert [g.stats.accept_hist for g in got] == [g.stats.accept_hist for g in want]
    # Sampled: the same draws, so the same tokens.
    sampled = SamplingConfig(temperature=1.0)
    want = SpeculativeDecoder(pair, rule, 4, sampled, fast=True).generate_batch(prompts, 30, seeds=[1] * 6,
                                                                                 batch_size=3)
    got = _static_form(SpeculativeDecoder(pair, rule, 4, sampled, fast=True)).generate_batch(
        prompts, 30, seeds=[1] * 6, batch_size=3)
    assert [g.token_ids for g in got] == [g.token_ids for g in want]


def test_cuda_graphs_need_a_cuda_device(pair):
    with pytest.raises(JudgekitError, match="CUDA"):
        SpeculativeDecoder(pair, make_rule("lossless"), block_size=4, fast=True, cuda_graphs=True)
    with pytest.raises(JudgekitError, match="either compile or cuda_graphs"):
        SpeculativeDecoder(pair, make_rule("lossless"), block_size=4, fast=True, cuda_graphs=True, compile=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_cuda_graph_replay_equals_the_fast_path_on_a_gpu(tiny_models):
    target, draft = tiny_models.dirs("qwen2")
    gpu = load_model_pair(str(target), str(draft), device="cuda", dtype="fp32")
    prompts = [_ids(gpu, t) for t in PROMPTS]
    plain = SpeculativeDecoder(gpu, make_rule("lossless"), block_size=4, fast=True)
    graphed = SpeculativeDecoder(gpu, make_rule("lossless"), block_size=4, fast=True, cuda_graphs=True)
    for bs in (1, 3):
        want = plain.generate_batch(prompts, max_new_tokens=30, batch_size=bs)
        got = graphed.generate_batch(prompts, max_new_tokens=30, batch_size=bs)
        assert [g.token_ids for g in got] == [g.token_ids for g in want]


def test_bench_eval_cli_reports_each_batch_size(capsys, tmp_path):
    from judgekit.cli import main

    rc = main(["bench", "eval", "--problems", "3", "--max-new-tokens", "24", "--batch-sizes", "1,3",
               "--threads", "1", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0 and "greedy records identical across batch sizes: True" in out
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert [r[0] for r in rows] == ["1", "3"] and rows[0][-1] == "1.00x"
    assert all(r[1] == "3" for r in rows)  # each batch size recorded every problem
    assert sorted(p.name for p in tmp_path.iterdir()) == ["batch-1", "batch-3"]
    assert main(["bench", "eval", "--batch-sizes", "1,x"]) == 2
    assert "--batch-sizes" in capsys.readouterr().err
    assert main(["bench", "eval", "--repeats", "0"]) == 2
    assert "--repeats" in capsys.readouterr().err


# -- one copy of the weights -----------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_fusing_keeps_one_copy_of_the_weights_and_the_transformers_model_working(arch):
    """The fused q/k/v and gate/up tensors are the model's own storage (its parameters become views of them),
    the transformers model's logits do not change, and the forward holds nothing beyond the model but its
    RoPE tables; building it again reuses the fused storage."""
    from judgekit.decode.fastmodel import extra_bytes

    model = _rope_variant(arch, "default")
    ids = torch.randint(0, 97, (2, 9), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        before = model(ids).logits
    params_before = sum(p.numel() for p in model.parameters())
    fm = FastLM(model)
    att, mlp = model.model.layers[0].self_attn, model.model.layers[0].mlp
    L = fm.layers[0]
    assert att.q_proj.weight.untyped_storage().data_ptr() == L.wqkv.untyped_storage().data_ptr()
    assert att.v_proj.weight.data_ptr() == L.wqkv[-att.v_proj.weight.shape[0]:].data_ptr()
    assert mlp.up_proj.weight.data_ptr() == L.w_gate_up[mlp.gate_proj.weight.shape[0]:].data_ptr()
    if att.q_proj.bias is not None:
        assert att.k_proj.bias.untyped_storage().data_ptr() == L.bqkv.untyped_storage().data_ptr()
    assert sum(p.numel() for p in model.parameters()) == params_before
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, before, atol=0, rtol=0)
    cache = fm.new_cache(2, 32)  # the RoPE tables are built here
    tables = sum(t.untyped_storage().nbytes() for t in (fm._cos, fm._sin, fm._sin_signed))  # inv_freq: the model's
    assert extra_bytes(model, fm.tensors()) == tables
    with torch.no_grad():
        logits, _ = fm.forward(ids, torch.zeros(2, dtype=torch.long), cache, 9)
    torch.testing.assert_close(logits, before, atol=1e-4, rtol=1e-4)
    again = FastLM(model)  # a rebuild re-fuses and rebinds: still one copy
    assert att.q_proj.weight.untyped_storage().data_ptr() == again.layers[0].wqkv.untyped_storage().data_ptr()
    assert extra_bytes(model, again.tensors()) == 0  # its RoPE tables are not built yet


# -- the transformers backend on architectures without the fast path --------------------------------------------


@pytest.fixture(scope="module", params=["gpt2", "opt"])
def other_pair(request, tmp_path_factory):
    target, draft = save_tiny_pair(tmp_path_factory.mktemp(f"tiny-{request.param}"), arch=request.param, seed=3)
    return load_model_pair(str(target), str(draft), device="cpu", dtype="fp32")


@pytest.mark.parametrize("rule_name", ["lossless", "cos", "judge"])
def test_other_architectures_batch_equals_batch_one_and_generate(other_pair, rule_name):
    """GPT-2 and OPT (learned positions) run on transformers rows: batched, continuously refilled and rolled
    back per row, greedy outputs equal batch 1 and, for the lossless rule, transformers' generate."""
    pair = other_pair
    rule = _rule(rule_name, pair)
    dec = SpeculativeDecoder(pair, rule, block_size=4)
    assert not dec.fast
    prompts = [_ids(pair, t) for t in PROMPTS]
    # A stop string the first prompt's output really contains early (random models emit no fixed text).
    first = dec.generate_ids(prompts[0], max_new_tokens=30).token_ids
    stop = (pair.tokenizer.decode(first[5:7]),)
    batch = dec.generate_batch(prompts, max_new_tokens=30, stop_strings=stop, batch_size=4)
    assert len({len(g.token_ids) for g in batch}) > 1  # rows finish at different steps: refills happen
    for i, (ids, gen) in enumerate(zip(prompts, batch)):
        one = dec.generate_ids(ids, max_new_tokens=30, stop_strings=stop, seed=i)  # prompt i's seed in a batch
        assert gen.token_ids == one.token_ids and gen.finish_reason == one.finish_reason
    if rule_name == "lossless":
        for ids in prompts:
            ref = pair.target.generate(torch.tensor([ids]), max_new_tokens=30, do_sample=False)[0, len(ids):].tolist()
            assert dec.generate_ids(ids, max_new_tokens=30).token_ids == ref


def test_other_architectures_sample_as_in_batch_one(other_pair):
    """Sampled: each sequence draws from its own generator, so its tokens do not depend on its batch."""
    dec = SpeculativeDecoder(other_pair, make_rule("lossless"), block_size=3, sampling=SamplingConfig(0.9))
    prompts = [_ids(other_pair, t) for t in PROMPTS]
    seeds = list(range(10, 16))
    batch = [g.token_ids for g in dec.generate_batch(prompts, 20, seeds=seeds, batch_size=3)]
    assert batch == [dec.generate_ids(ids, 20, seed=s).token_ids for ids, s in zip(prompts, seeds)]


def test_transformers_rows_roll_back_by_mask_and_compact_without_changing_results(pair):
    """Crop-to-start on transformers rows only clears mask bits; once dead columns pile up they are
    compacted away, and every forward still equals a plain forward over the row's own sequence."""
    from judgekit.decode.rows import ModelRows, pad_ids

    rows = ModelRows(pair.target, pair.vocab_size)
    rows.SLACK = 0  # compact as soon as dead columns outnumber live ones
    g = torch.Generator().manual_seed(4)
    seqs = [torch.randint(0, pair.vocab_size, (n,), generator=g).tolist() for n in (6, 3)]
    handles = [rows.acquire(), rows.acquire()]
    ids, lengths = pad_ids(seqs, "cpu")
    rows.forward(handles, ids, [0, 0], lengths)
    widths = []
    for step in range(6):
        keep = [max(1, len(s) - 2) for s in seqs]  # each row rolls back two tokens, then reads three
        new = [torch.randint(0, pair.vocab_size, (3,), generator=g).tolist() for _ in seqs]
        logits, _ = rows.forward(handles, torch.tensor(new), keep)
        seqs = [s[:k] + n for s, k, n in zip(seqs, keep, new)]
        widths.append(rows.mask.shape[1])
        for b, s in enumerate(seqs):
            with torch.no_grad():
                ref = pair.target(torch.tensor([s])).logits[0, -3:, :pair.vocab_size]
            torch.testing.assert_close(logits[b], ref, atol=1e-4, rtol=1e-4)
    assert max(widths) <= 2 * max(len(s) for s in seqs) + 3  # compaction kept the cache bounded
    assert rows.mask.sum(1).tolist() == [len(s) for s in seqs]  # rolled-back columns are masked out
