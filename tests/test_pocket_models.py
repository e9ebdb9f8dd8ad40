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
