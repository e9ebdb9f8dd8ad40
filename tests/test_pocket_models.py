"""The shipped pocket pair: loadable through the aliases, compatible, small, and the target solves fixed
held-out problems. Plus the pure helpers behind the data card's numbers (BE by teacher forcing, tokenizer)."""

import pytest
import torch

from judgekit.errors import JudgekitError
from judgekit.pocket import POCKET_DIR, pocket_model_path
from judgekit.pocket.evaluate import block_efficiency, greedy_blocks, greedy_continue

# Held-out (test split, seed 0) problems the shipped target solves (checked greedy); indices into
# task.load("test"). Code index 0 (count_char with a rare letter) is one it gets wrong.
FIXED_MATH = [0, 1, 2, 3, 4, 5]
FIXED_CODE = [1, 2, 3, 4, 5, 7]

shipped = pytest.mark.skipif(not (POCKET_DIR / "target" / "model.safetensors").exists(),
                             reason="pocket models not trained (run `judgekit pocket train`)")


def test_alias_paths():
    assert pocket_model_path("pocket-target") == POCKET_DIR / "target"
    assert pocket_model_path("pocket-draft") == POCKET_DIR / "draft"
    with pytest.raises(JudgekitError):
        pocket_model_path("pocket-huge")


def test_greedy_blocks():
    assert greedy_blocks([True] * 8, gamma=8) == 1  # 8 accepted + the bonus would follow
    assert greedy_blocks([True] * 9, gamma=8) == 1  # ... and the bonus is the 9th token
    assert greedy_blocks([True] * 10, gamma=8) == 2
    assert greedy_blocks([False] * 3, gamma=8) == 3  # each block emits only the target's token
    assert greedy_blocks([True, True, False, True], gamma=8) == 2  # [T T (fix)] [T]
    assert block_efficiency([[1, 2, 3, 4]], [[1, 2, 9, 4]], gamma=8) == 2.0


def test_tokenizer_splits_digits_and_round_trips():
    from judgekit.pocket.tokenizer import build_tokenizer

    tok = build_tokenizer()
    assert len(tok) <= 2048
    text = "So 12 + 305 = 317 apples.\n#### 317"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text
    pieces = [tok.decode([i]) for i in ids]
    assert "3" in pieces and "317" not in pieces and " apples" in pieces
    prompt = tok.apply_chat_template([{"role": "user", "content": "Hi?"}], tokenize=False, add_generation_prompt=True)
    assert prompt == "<|user|>\nHi?\n<|assistant|>\n"


@shipped
def test_shipped_pair_loads_through_aliases_and_solves_fixed_problems():
    from judgekit.tasks import get_task

    try:
        from judgekit.models import load_model_pair
    except ImportError:  # the lead's loader not there: the hub loader on the alias paths is the same thing
        load_model_pair = None
    if load_model_pair is not None:
        pair = load_model_pair("pocket-target", "pocket-draft", device="cpu", dtype="fp32")
        target, draft, tok = pair.target, pair.draft, pair.tokenizer
    else:  # pragma: no cover
        from transformers import AutoModelForCausalLM, AutoTokenizer

        target = AutoModelForCausalLM.from_pretrained(pocket_model_path("pocket-target"))
        draft = AutoModelForCausalLM.from_pretrained(pocket_model_path("pocket-draft"))
        tok = AutoTokenizer.from_pretrained(pocket_model_path("pocket-draft"))
    assert tok.chat_template and tok.eos_token == "<|eos|>"
    n_target = sum(p.numel() for p in target.parameters())
    n_draft = sum(p.numel() for p in draft.parameters())
    assert n_draft * 2 < n_target
    size = sum(f.stat().st_size for d in ("target", "draft") for f in (POCKET_DIR / d).iterdir())
    assert size <= 25 * 2**20

    torch.set_num_threads(1)
    for name, fixed in (("pocket-math", FIXED_MATH), ("pocket-code", FIXED_CODE)):
        task = get_task(name)
        problems = task.load("test", limit=max(fixed) + 1)
        chosen = [problems[i] for i in fixed]
        prompts = [tok(task.build_prompt(p, tok), add_special_tokens=False)["input_ids"] for p in chosen]
        outs = greedy_continue(target, tok, prompts, 160)
        for p, o in zip(chosen, outs):
            text = tok.decode(o, skip_special_tokens=True)
            assert o[-1] == tok.eos_token_id, text
            assert task.grade(p, task.extract_outcome(p, text)), (p.question, text)


def test_cli_parses_pocket_commands():
    from judgekit.cli import build_parser

    args = build_parser().parse_args(["pocket", "train", "--only", "draft", "--seed", "2"])
    assert args.only == "draft" and args.seed == 2 and callable(args.func)
    args = build_parser().parse_args(["pocket", "eval", "--limit", "5"])
    assert args.limit == 5 and args.target == "pocket-target" and args.oracle_limit == 50
    args = build_parser().parse_args(["pocket", "eval", "--oracle-limit", "0"])
    assert args.oracle_limit == 0


def test_training_recipe_is_deterministic_for_a_seed(tmp_path):
    """Two short runs of the committed recipe with the same seed give bit-identical weights and tokenizer."""
    from safetensors.torch import load_file

    from dataclasses import replace

    from judgekit.pocket.train import default_specs, train_pair

    shipped_draft = default_specs()["draft"]
    assert shipped_draft.style == "draft" and default_specs()["target"].style == "target"

    def run(out):
        specs = {"draft": replace(shipped_draft, steps=3, batch_size=4, warmup=1)}  # the shipped draft's recipe, short
        train_pair(out, seed=5, device="cpu", specs=specs, which=("draft",), log=lambda _m: None)
        return load_file(str(out / "draft" / "model.safetensors")), (out / "draft" / "tokenizer.json").read_text()

    (w1, t1), (w2, t2) = run(tmp_path / "a"), run(tmp_path / "b")
    assert t1 == t2
    assert w1.keys() == w2.keys()
    assert all(torch.equal(w1[k], w2[k]) for k in w1)


@shipped
def test_oracle_judge_between_lossless_and_accept_all():
    """The oracle judge keeps every outcome; with an outcome that is the whole text it is exactly lossless
    greedy SD, and with an outcome that never changes it accepts every mismatch."""
    from judgekit.pocket.evaluate import draft_argmax, encode, load, oracle_judge, total_variation
    from judgekit.tasks.pocket_math import PocketMath

    class Verbatim(PocketMath):
        def extract_outcome(self, problem, completion):
            return completion

    class Constant(PocketMath):
        def extract_outcome(self, problem, completion):
            return "same"

    torch.set_num_threads(1)
    target, tok = load("pocket-target")
    draft, _ = load("pocket-draft")
    task = PocketMath()
    problems = task.load("test", limit=4)
    prompts = encode(tok, [task.build_prompt(p, tok) for p in problems])
    responses = greedy_continue(target, tok, prompts, 160)
    guesses = draft_argmax(draft, prompts, responses, tok.pad_token_id)
    texts = [tok.decode(r, skip_special_tokens=True) for r in responses]
    lossless = sum(greedy_blocks([a == b for a, b in zip(r, g)], 8) for r, g in zip(responses, guesses))
    assert lossless > len(problems)  # the pair disagrees somewhere, or the test shows nothing

    exact = oracle_judge(Verbatim(), problems, target, draft, tok, prompts, texts, 8, 160)
    assert exact["mismatches_accepted"] == 0 and exact["outcome_kept"] == 1.0
    assert exact["target_forwards"] == lossless and exact["tokens"] == sum(map(len, responses))

    outcomes = [task.extract_outcome(p, t) for p, t in zip(problems, texts)]
    real = oracle_judge(task, problems, target, draft, tok, prompts, outcomes, 8, 160)
    assert real["outcome_kept"] == 1.0
    assert real["accuracy"] == sum(task.grade(p, o) for p, o in zip(problems, outcomes)) / len(problems)
    assert real["target_forwards"] <= lossless and real["mismatches_accepted"] >= 1

    loose = oracle_judge(Constant(), problems, target, draft, tok, prompts, ["same"] * 4, 8, 160)
    assert loose["mismatches_rejected"] == 0 and loose["block_efficiency"] >= real["block_efficiency"]

    tv = total_variation(target, draft, prompts, responses, tok.pad_token_id)
    assert len(tv) == sum(map(len, responses)) and all(0 <= x <= 1 + 1e-6 for x in tv) and max(tv) > 0.05
    assert max(total_variation(target, target, prompts[:1], responses[:1], tok.pad_token_id)) < 1e-5


def test_stopping_inside_the_schedule_equals_the_longer_runs_checkpoint(tmp_path):
    """The shipped draft is a checkpoint of a longer cosine schedule; the recipe (steps < schedule_steps)
    reproduces it exactly."""
    from dataclasses import replace

    from safetensors.torch import load_file

    from judgekit.pocket.train import default_specs, lr_at, train_pair

    base = replace(default_specs()["draft"], batch_size=4, warmup=1)
    assert lr_at(2, replace(base, steps=3, schedule_steps=5)) == lr_at(2, replace(base, steps=5, schedule_steps=None))
    train_pair(tmp_path / "stop", seed=5, device="cpu", specs={"draft": replace(base, steps=3, schedule_steps=5)},
               which=("draft",), log=lambda _m: None)
    train_pair(tmp_path / "long", seed=5, device="cpu", specs={"draft": replace(base, steps=5, schedule_steps=None)},
               which=("draft",), log=lambda _m: None, checkpoint_every=3, checkpoint_dir=tmp_path / "ckpt")
    a = load_file(str(tmp_path / "stop" / "draft" / "model.safetensors"))
    b = load_file(str(tmp_path / "ckpt" / "draft-step3" / "model.safetensors"))
    c = load_file(str(tmp_path / "long" / "draft" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


def test_task_mix_with_no_hard_share_is_the_original_choice():
    """The shipped recipe's random draws are unchanged by the hard share (0 by default)."""
    import random

    from judgekit.pocket.train import pick_task

    tasks = ["math", "code", "hard"]
    rng = random.Random(0)
    us = [rng.random() for _ in range(2000)]
    assert [pick_task(tasks, u, 0.7) for u in us] == [("math" if u < 0.7 else "code") for u in us]
    picked = [pick_task(tasks, u, 0.25, 0.6) for u in us]
    share = {t: picked.count(t) / len(us) for t in tasks}
    assert share["hard"] == pytest.approx(0.6, abs=0.04) and share["math"] == pytest.approx(0.25, abs=0.04)


def test_hard_pair_aliases():
    assert pocket_model_path("pocket-hard-target") == POCKET_DIR / "hard-target"
    assert pocket_model_path("pocket-hard-draft") == POCKET_DIR / "hard-draft"


@shipped
def test_fine_tuning_starts_from_the_given_weights_and_keeps_their_vocabulary(tmp_path):
    """The hard recipe: a copy of a shipped model, trained a few steps on a mix with pocket-math-hard; the
    shipped files are untouched and the copy keeps the shipped tokenizer (its embeddings' vocabulary)."""
    import hashlib
    from dataclasses import replace

    from safetensors.torch import load_file

    from judgekit.pocket.train import hard_specs, train_pair

    shipped_file = POCKET_DIR / "draft" / "model.safetensors"
    before = hashlib.sha256(shipped_file.read_bytes()).hexdigest()
    spec = hard_specs()["hard-draft"]
    assert spec.init_from == str(POCKET_DIR / "draft") and spec.hard_fraction > 0 and spec.style == "draft"
    assert 0 < spec.hard_fraction + spec.math_fraction < 1  # the old tasks stay in every batch's mix
    train_pair(tmp_path, seed=0, device="cpu", specs={"hard-draft": replace(spec, steps=2, batch_size=4, warmup=1)},
               which=("hard-draft",), log=lambda _m: None)
    tuned, start = load_file(str(tmp_path / "hard-draft" / "model.safetensors")), load_file(str(shipped_file))
    assert tuned.keys() == start.keys()
    # moved a little from the shipped weights (2 steps at a small LR), not re-initialised
    moved = [(tuned[k] - start[k]).abs().max().item() for k in start]
    assert max(moved) > 0 and max(moved) < 0.05
    assert (tmp_path / "hard-draft" / "tokenizer.json").read_text() == (POCKET_DIR / "draft" / "tokenizer.json").read_text()
    assert hashlib.sha256(shipped_file.read_bytes()).hexdigest() == before


def test_allowed_share_counts_draft_mismatches_inside_the_targets_sets():
    """A target whose distribution is fixed per position: the draft's wrong tokens are inside min-p at 0.1 only
    when their target probability is at least a tenth of the top one."""
    from judgekit.pocket.evaluate import allowed_share

    probs = torch.tensor([0.60, 0.30, 0.055, 0.045])

    class Fixed(torch.nn.Module):
        def forward(self, input_ids, attention_mask=None):
            logits = probs.log().expand(*input_ids.shape, 4)
            return type("Out", (), {"logits": logits})()

    # the target's greedy token is 0 everywhere; the draft guesses 0 (match), 1 (p 0.3: inside min-p 0.1 and
    # 0.3), 2 (p 0.055: inside neither, 0.055 < 0.06)
    share = allowed_share(Fixed(), [[3, 3]], [[0, 0, 0]], [[0, 1, 2]], pad=3)
    assert share["mismatches"] == 2
    assert share["inside_minp_0.1"] == 0.5 and share["inside_minp_0.3"] == 0.5
    # eta at epsilon 0.05 keeps p >= min(0.05, 0.3 exp(-H)) = 0.05 here: token 2 (0.055) is inside
    assert share["inside_eta_0.05_0.3"] == 1.0


def test_pocket_eval_takes_the_pocket_tasks_only():
    from judgekit.cli import build_parser
    from judgekit.pocket.evaluate import evaluate_pair

    args = build_parser().parse_args(["pocket", "eval", "--tasks", "pocket-math-hard"])
    assert args.tasks == "pocket-math-hard"
    with pytest.raises(JudgekitError, match="pocket tasks"):
        evaluate_pair(tasks=["gsm8k"])  # refused before any model is loaded


# ---- the hard pair (pocket-hard-target / pocket-hard-draft, data/pocket/README.md "The hard task") ----------------
HARD_SAMPLE = 128  # the first held-out problems of pocket-math-hard (seed 0): two greedy batches, a few seconds


@pytest.fixture(scope="module")
def hard_run():
    """The hard pair loaded by alias, and the target's greedy responses on the fixed sample."""
    from judgekit.models import load_model_pair
    from judgekit.pocket.evaluate import MAX_NEW, encode
    from judgekit.tasks import get_task

    torch.set_num_threads(1)
    pair = load_model_pair("pocket-hard-target", "pocket-hard-draft", device="cpu", dtype="fp32")
    task = get_task("pocket-math-hard")
    problems = task.load("test", limit=HARD_SAMPLE)
    prompts = encode(pair.tokenizer, [task.build_prompt(p, pair.tokenizer) for p in problems])
    responses = greedy_continue(pair.target, pair.tokenizer, prompts, MAX_NEW["pocket-math-hard"])
    return pair, task, problems, prompts, responses


def test_hard_pair_loads_by_alias_and_keeps_its_bounds_on_a_fixed_sample(hard_run):
    """The issue's bounds on the fixed sample: target accuracy 55-80 %, lossless greedy BE 3-5.5 at gamma 8, and
    the draft's wrong tokens mostly inside the target's min-p 0.1 and eta sets at T = 1 (data/pocket/README.md:
    the shipped pair gives 78/128 = 60.9 %, BE 4.84, 72 % / 73 % inside; the step-1000 checkpoint of the
    learning curve, at 86 % of 100 problems, or one from step 600 or before, fails)."""
    from judgekit.pocket.evaluate import allowed_share, draft_argmax

    pair, task, problems, prompts, responses = hard_run
    assert pair.tokenizer.eos_token == "<|eos|>"
    assert sum(p.numel() for p in pair.draft.parameters()) * 2 < sum(p.numel() for p in pair.target.parameters())
    size = sum(f.stat().st_size for d in ("hard-target", "hard-draft") for f in (POCKET_DIR / d).iterdir())
    assert size <= 10 * 2**20
    tok = pair.tokenizer
    correct = [task.grade(p, task.extract_outcome(p, tok.decode(r, skip_special_tokens=True)))
               for p, r in zip(problems, responses)]
    accuracy = sum(correct) / len(correct)
    guesses = draft_argmax(pair.draft, prompts, responses, tok.pad_token_id)
    be = block_efficiency(responses, guesses, gamma=8)
    shares = allowed_share(pair.target, prompts, responses, guesses, tok.pad_token_id)
    assert 0.55 <= accuracy <= 0.80, accuracy
    assert 3.0 <= be <= 5.5, be
    assert shares["inside_minp_0.1"] >= 0.5 and shares["inside_eta_0.05_0.3"] >= 0.5, shares


def test_hard_pair_greedy_lossless_decoding_is_its_targets_greedy_output(hard_run, tmp_path):
    """The real speculative decoder on the hard pair, greedy and lossless, emits exactly the target's greedy
    tokens (so the pair's lossless BE above is the decoder's)."""
    from judgekit.evaluate.run import run_eval
    from judgekit.evaluate.sweep import EvalSettings, Sweep
    from judgekit.pocket.evaluate import MAX_NEW
    from judgekit.store.records import read_records

    pair, task, problems, _prompts, responses = hard_run
    n = 4
    settings = EvalSettings("pocket-math-hard", "pocket-hard-target", "pocket-hard-draft", limit=n,
                            max_new_tokens=MAX_NEW["pocket-math-hard"])
    run_eval(pair, task, problems[:n], Sweep(["lossless"]).points(), settings, str(tmp_path))
    records = {r["problem"]: r for r in read_records(tmp_path).to_pylist()}
    assert len(records) == n
    eos = pair.tokenizer.eos_token_id
    for p, greedy in zip(problems[:n], responses[:n]):
        decoded = list(records[p.problem_id]["completion_ids"])
        assert [t for t in decoded if t != eos] == [t for t in greedy if t != eos], p.problem_id
