"""Tree decoding end to end: greedy lossless equals the target's own greedy output, sampling emits tokens,
the tree forward equals per-path chain forwards, and misuse is refused."""

from __future__ import annotations

import pytest
import torch

from judgekit.decode.decoder import SpeculativeDecoder
from judgekit.decode.fastmodel import FastLM
from judgekit.decode.rules import make_rule
from judgekit.decode.sampling import SamplingConfig
from judgekit.decode.tree import parse_tree
from judgekit.decode.treedecode import draw_without_replacement
from judgekit.errors import JudgekitError
from judgekit.models import encode_prompt, format_prompt

PROMPTS = ["Tom has 3 apples", "def add(a, b):", "The quick brown"]


def _ids(pair, text):
    return encode_prompt(pair.tokenizer, format_prompt(pair.tokenizer, text))


def _greedy_tree_equals_target(pair, spec, fast, static):
    dec = SpeculativeDecoder(pair, make_rule("lossless"), tree=spec, fast=fast)
    assert dec.fast == static and dec.gamma == parse_tree(spec).depth
    prompts = [_ids(pair, t) for t in PROMPTS]
    refs = [pair.target.generate(torch.tensor([ids]), max_new_tokens=40, do_sample=False)[0, len(ids):].tolist()
            for ids in prompts]
    gens = dec.generate_batch(prompts, max_new_tokens=40, batch_size=2)  # batched, rows joining and leaving
    accepted = 0
    for gen, ref in zip(gens, refs):
        assert gen.token_ids == ref
        assert len(gen.token_ids) <= 40
        accepted += sum(gen.stats.accept_hist[1:])
    assert accepted > 0  # paths were accepted and gathered


@pytest.mark.parametrize("spec", ["2,2,1,1", "3,1", "eagle"])
@pytest.mark.parametrize("fast", ["auto", False], ids=["static", "transformers"])
def test_greedy_tree_equals_target_generate(tiny_pair, spec, fast):
    """On both backends: the static cache (K/V gather) and transformers caches (4D tree mask, column keep)."""
    _greedy_tree_equals_target(tiny_pair, spec, fast, fast == "auto")


@pytest.mark.parametrize("arch", ["gpt2", "opt"])
def test_greedy_tree_on_learned_position_models(tiny_models, arch):
    """GPT-2 / OPT have no static path: the tree runs on transformers caches with per-node position ids."""
    _greedy_tree_equals_target(tiny_models.pair(arch), "2,2,1", "auto", False)


def test_tree_forward_matches_chain_forward(tiny_pair):
    """Every node's logits from one tree-masked forward equal those of feeding its path as a chain."""
    pair = tiny_pair
    lm = FastLM(pair.target)
    tr = parse_tree("2,2,1").tensors()
    prefix = _ids(pair, PROMPTS[0])
    tokens = torch.randint(0, pair.vocab_size, (tr.n,), generator=torch.Generator().manual_seed(0))
    cache = lm.new_cache(1, 128)
    with torch.inference_mode():
        lm.forward(torch.tensor([prefix[:-1]]), 0, cache, len(prefix) - 1)
        tokens[0] = prefix[-1]
        start = torch.tensor([len(prefix) - 1])
        logits, _ = lm.forward(tokens[None], start, cache, len(prefix) - 1 + tr.n,
                               tree=(torch.arange(tr.n), tr.depth, tr.mask))
        for node in range(tr.n):
            path = tr.ancestors[node][tr.ancestors[node] >= 0]
            ref = pair.target(torch.tensor([prefix[:-1] + tokens[path].tolist()])).logits[0, -1]
            torch.testing.assert_close(logits[0, node], ref, atol=1e-4, rtol=1e-4)


def test_sampled_tree_decoding_emits_tokens(tiny_pair):
    pair = tiny_pair
    dec = SpeculativeDecoder(pair, make_rule("lossless"), sampling=SamplingConfig(temperature=1.0, top_k=3),
                             tree="2,2,1")
    prompts = [_ids(pair, t) for t in PROMPTS]
    gens = dec.generate_batch(prompts, max_new_tokens=24, seeds=[1, 2, 3])
    for gen in gens:
        assert 0 < len(gen.token_ids) <= 24
        assert all(0 <= t < pair.vocab_size for t in gen.token_ids)
        assert sum(gen.stats.accept_hist) == gen.stats.target_calls
    again = dec.generate_batch(prompts[:1], max_new_tokens=24, seeds=[1])[0]
    assert again.token_ids == gens[0].token_ids  # a sequence's draws do not depend on its batch


def test_draws_are_without_replacement():
    probs = torch.tensor([[[0.5, 0.3, 0.2, 0.0]]]).expand(1, 200, 4).contiguous()
    draws = draw_without_replacement(probs, 3, [torch.Generator().manual_seed(0)])
    assert all(len(set(row)) == 3 for row in draws[0].tolist())
    assert (draws[..., :3] != 3).all()  # a zero-probability token is never drawn while support remains
    first = torch.bincount(draws[0, :, 0], minlength=4).float() / 200
    assert first[0] > first[1] > first[2]


def test_tree_refusals(tiny_pair):
    with pytest.raises(JudgekitError, match="no tree form"):
        SpeculativeDecoder(tiny_pair, make_rule("lenience", delta=0.3), tree="2,1")


def test_generate_cli_with_a_tree(tiny_dirs, capsys):
    import json

    from judgekit.cli import main

    target, draft = map(str, tiny_dirs)
    base = ["generate", "--target", target, "--draft", draft, "--prompt", PROMPTS[0], "--device", "cpu",
            "--max-new-tokens", "12", "--json"]
    assert main(base) == 0
    chain = json.loads(capsys.readouterr().out)
    assert main(base + ["--tree", "2,2,1"]) == 0
    tree = json.loads(capsys.readouterr().out)
    assert tree["token_ids"] == chain["token_ids"]  # greedy lossless: the target's output either way
    stats = tree["stats"]
    assert max(i for i, c in enumerate(stats["accept_hist"]) if c) <= 3  # gamma = the tree's depth
    assert 0 < stats["draft_calls"] <= 3 * stats["target_calls"]  # a step drafts at most its depth's levels
    assert main(base + ["--tree", "2,x"]) == 2
    err = capsys.readouterr().err
    assert err.count("judgekit: error:") == 1 and "bad tree" in err and "Traceback" not in err


def test_bench_decode_times_the_tree(capsys):
    from judgekit.cli import main
    from judgekit.pocket import POCKET_DIR

    if not (POCKET_DIR / "target" / "model.safetensors").exists():
        pytest.skip("pocket models not trained")
    rc = main(["bench", "decode", "--pair", "pocket", "--prompts", "2", "--max-new-tokens", "6", "--block-size", "2",
               "--tree", "2,1", "--threads", "1"])
    out = capsys.readouterr().out
    assert rc == 0 and "outputs identical: True" in out and "judgekit tree" in out and "tree 2,1" in out


def test_greedy_children_are_the_drafts_top_tokens(tiny_pair):
    """Every drafted node's children are the draft's top-m tokens after the node's path, in rank order
    (ranked by the draft's softmax, not by a one-hot row)."""
    from judgekit.decode.engine import SeqState
    from judgekit.decode.staticrows import StaticRows
    from judgekit.decode.treedecode import TreeDrafter

    pair = tiny_pair
    drafter = TreeDrafter(StaticRows(FastLM(pair.draft), pair.vocab_size), parse_tree("3,2,2"), SamplingConfig())
    ids = _ids(pair, PROMPTS[1])
    seq = SeqState(list(ids), torch.Generator().manual_seed(0), limit=3)
    with torch.inference_mode():
        drafter.admit([seq])
        tokens, *_ = drafter.propose_tree([seq], 3)
        tr = drafter.tree
        for node in range(tr.n):
            kids = tr.children[node][tr.children[node] >= 0]
            if len(kids) == 0:
                continue
            path = tr.ancestors[node][tr.ancestors[node] >= 0]
            logits = pair.draft(torch.tensor([ids[:-1] + tokens[0, path].tolist()])).logits[0, -1]
            assert tokens[0, kids].tolist() == logits.topk(len(kids)).indices.tolist()


class _HiddenJudge:
    """P(important) from the features alone: unimportant where the target state's first coordinate (plus the
    draft state's, for a target+draft judge) is below zero — a verdict that differs from node to node."""

    def __init__(self, features: str):
        self.config = {"features": features, "layer": -1}

    @staticmethod
    def important(hidden, draft_hidden=None):
        score = hidden[..., 0] + (0.0 if draft_hidden is None else draft_hidden[..., 0])
        return (score >= 0).float()

    def __call__(self, hidden, tokens, draft_hidden=None):
        return self.important(hidden, draft_hidden)


def _reference_judge_tree(pair, ids, spec, judge, with_draft, n_tokens):
    """Greedy tree decoding with a judge, written node by node with full forwards: every node's children are
    the draft's top-m after its path; at each node the first sibling equal to the target's argmax or that the
    judge (the target's state after reading that sibling; the draft's state after its parent) calls
    unimportant is taken; where none is, the target's argmax. Returns (tokens, kept mismatches)."""
    tr = parse_tree(spec).tensors()
    seq, kept = list(ids), 0
    with torch.no_grad():
        while len(seq) - len(ids) < n_tokens:
            tok = {0: seq[-1]}
            for node in range(tr.n):  # parents precede children
                kids = tr.children[node][tr.children[node] >= 0].tolist()
                if kids:
                    path = [tok[a] for a in tr.ancestors[node].tolist()[1:] if a >= 0]
                    top = pair.draft(torch.tensor([seq + path])).logits[0, -1].topk(len(kids)).indices.tolist()
                    tok.update(zip(kids, top))

            def path_of(n):
                return [tok[a] for a in tr.ancestors[n].tolist()[1:] if a >= 0]

            def target_at(n):
                out = pair.target(torch.tensor([seq + path_of(n)]), output_hidden_states=True)
                return out.logits[0, -1].argmax().item(), out.hidden_states[-1][0, -1]

            def draft_at(n):
                return pair.draft(torch.tensor([seq + path_of(n)]), output_hidden_states=True).hidden_states[-1][0, -1]

            node, emitted = 0, []
            while True:
                best, _ = target_at(node)
                kids = tr.children[node][tr.children[node] >= 0].tolist()
                take = None
                for c in kids:
                    keep = judge.important(target_at(c)[1], draft_at(node) if with_draft else None) < 0.5
                    if tok[c] == best or keep:
                        kept += tok[c] != best
                        take = c
                        break
                if take is None:
                    emitted.append(best)
                    break
                emitted.append(tok[take])
                node = take
            seq += emitted
    return seq[len(ids):], kept


@pytest.mark.parametrize("features", ["target", "target+draft"])
@pytest.mark.parametrize("fast", ["auto", False], ids=["static", "transformers"])
def test_greedy_judge_on_a_tree_equals_the_node_by_node_reference(tiny_pair, fast, features):
    """A sibling is kept where the judge calls the mismatch unimportant, from the hidden state of that
    sibling's own verify position (and the draft's at its parent), on both backends."""
    pair, spec, n = tiny_pair, "2,2,1", 24
    judge = _HiddenJudge(features)
    dec = SpeculativeDecoder(pair, make_rule("judge", judge=judge, threshold=0.5), tree=spec, fast=fast)
    kept = 0
    for text in PROMPTS:
        ids = _ids(pair, text)
        gen = dec.generate_ids(ids, max_new_tokens=n)
        ref, k = _reference_judge_tree(pair, ids, spec, judge, features == "target+draft", n)
        # the last step may be capped by the budget (bonus token instead of a kept sibling): compare before it
        m = len(gen.token_ids) - (parse_tree(spec).depth if gen.finish_reason == "length" else 0)
        assert m > 0 and gen.token_ids[:m] == ref[:m]
        kept += k
    assert kept > 0  # the judge kept mismatching siblings, so the test exercises its verdicts


@pytest.mark.parametrize("spec,topk", [("3,2:topk", True), ("3,2", False)])
def test_sampled_topk_trees_take_the_drafts_top_tokens(tiny_pair, spec, topk):
    """Under sampling a ``:topk`` tree's children are the draft's top-m after each node's path (EAGLE's
    expansion); a plain sampled tree's are draws without replacement (the top-m only by chance)."""
    from judgekit.decode.engine import SeqState
    from judgekit.decode.staticrows import StaticRows
    from judgekit.decode.treedecode import TreeDrafter

    pair = tiny_pair
    drafter = TreeDrafter(StaticRows(FastLM(pair.draft), pair.vocab_size), parse_tree(spec),
                          SamplingConfig(temperature=1.0))
    hits, total = 0, 0
    for seed, text in enumerate(PROMPTS):
        ids = _ids(pair, text)
        seq = SeqState(list(ids), torch.Generator().manual_seed(seed), limit=2)
        with torch.inference_mode():
            drafter.admit([seq])
            tokens, q, *_ = drafter.propose_tree([seq], 2)
        tr = drafter.tree
        for node in range(tr.n):
            kids = tr.children[node][tr.children[node] >= 0]
            if len(kids):
                top = q[0, node].topk(len(kids)).indices.tolist()
                hits += tokens[0, kids].tolist() == top
                total += 1
        drafter.retire(seq)
    assert (hits == total) if topk else (hits < total)
    dec = SpeculativeDecoder(pair, make_rule("lossless"), sampling=SamplingConfig(temperature=1.0), tree=spec)
    gen = dec.generate_ids(_ids(pair, PROMPTS[0]), max_new_tokens=12, seed=3)
    assert 0 < len(gen.token_ids) <= 12 and sum(gen.stats.accept_hist) == gen.stats.target_calls
