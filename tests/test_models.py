"""Loading a pair through the public path, and refusing bad or incompatible ones with one clear error."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from judgekit.benchmarks.synthetic import save_tiny_pair, tiny_tokenizer
from judgekit.errors import JudgekitError
from judgekit.models import format_prompt, load_model_pair, resolve_model_path, tokenizer_mismatch


@pytest.fixture(scope="module")
def dirs(tmp_path_factory, tiny_dirs):
    root = tmp_path_factory.mktemp("models")
    good = tiny_dirs  # the shared tiny llama pair (tests/conftest.py); the other two are built to be different
    padded = save_tiny_pair(root / "padded", arch="qwen2", target_vocab_pad=64)
    other_tok = tiny_tokenizer(vocab_size=290)
    bad = save_tiny_pair(root / "bad", arch="llama", draft_tokenizer=other_tok)
    return {"good": good, "padded": padded, "bad": bad}


def test_pair_loads_with_shared_vocab(dirs):
    t, d = dirs["good"]
    pair = load_model_pair(str(t), str(d), device="cpu", dtype="fp32")
    assert pair.vocab_size == len(pair.tokenizer)


def test_padded_embedding_is_fine_and_uses_shared_range(dirs):
    t, d = dirs["padded"]
    pair = load_model_pair(str(t), str(d), device="cpu", dtype="fp32")
    assert pair.target.get_output_embeddings().weight.shape[0] == len(pair.tokenizer) + 64
    assert pair.vocab_size == len(pair.tokenizer)


def test_incompatible_tokenizers_are_refused_naming_the_difference(dirs):
    t, d = dirs["bad"]
    with pytest.raises(JudgekitError, match="tokenizers differ: vocab sizes"):
        load_model_pair(str(t), str(d), device="cpu", dtype="fp32")


def test_same_size_but_different_mapping_is_refused():
    a = tiny_tokenizer()
    b = tiny_tokenizer()
    vocab = b.get_vocab()
    # Swap two ids: same size, same token set, different token -> id mapping.
    x, y = sorted(vocab, key=vocab.get)[100:102]
    assert tokenizer_mismatch(a, a) is None
    from tokenizers import Tokenizer

    data = json.loads(b.backend_tokenizer.to_str())
    data["model"]["vocab"][x], data["model"]["vocab"][y] = vocab[y], vocab[x]
    from transformers import PreTrainedTokenizerFast

    swapped = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(data)), eos_token="<|endoftext|>")
    msg = tokenizer_mismatch(a, swapped)
    assert msg and "different ids" in msg and repr(x) in msg


def test_missing_paths_and_dtypes():
    with pytest.raises(JudgekitError, match="does not exist"):
        resolve_model_path("/no/such/model")
    with pytest.raises(JudgekitError, match="does not exist"):
        resolve_model_path("./relative/missing")
    assert resolve_model_path("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"
    with pytest.raises(JudgekitError, match="unknown dtype"):
        load_model_pair("/tmp", "/tmp", device="cpu", dtype="int3")


def test_chat_template_switch():
    tok = tiny_tokenizer()
    assert format_prompt(tok, "hi") == "<|user|>hi\n<|assistant|>"
    assert format_prompt(tok, "hi", chat_template=False) == "hi"
    assert format_prompt(tiny_tokenizer(chat_template=False), "hi") == "hi"


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "judgekit", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_cli_generate_json(dirs):
    t, d = dirs["good"]
    proc = _cli("generate", "--target", str(t), "--draft", str(d), "--prompt", "Tom has", "--json",
                "--max-new-tokens", "12", "--device", "cpu", "--block-size", "4")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert {"text", "token_ids", "stats"} <= set(out)
    assert {"block_efficiency", "target_calls", "draft_calls", "new_tokens", "tokens_per_s"} <= set(out["stats"])
    assert 1 <= len(out["token_ids"]) <= 12


@pytest.mark.parametrize("extra, message", [
    (["--rule", "nope"], "unknown rule 'nope'"),
    (["--rule", "lenience", "--lenience", "0"], "lenience must be in (0, 1]"),
    (["--rule", "cos", "--lam", "1.5"], "lambda must be in [0, 1]"),
    (["--rule", "speccascade", "--p-base", "1.2"], "p_base must be in (0, 1)"),
    (["--rule", "judge"], "needs --judge"),
    (["--temperature", "-1"], "--temperature must be a number in [0, inf)"),
])
def test_cli_bad_rule_parameters_give_one_line(dirs, extra, message, capsys):
    """In process (a subprocess per case costs seconds of imports; the ones above and below run the real
    entry point): any exception other than the one-line error would propagate and fail the test."""
    from judgekit.cli import main

    t, d = dirs["good"]
    assert main(["generate", "--target", str(t), "--draft", str(d), "--prompt", "x", "--device", "cpu", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.startswith("judgekit: error:") and err.count("\n") == 1


@pytest.mark.slow
def test_cli_bad_models_give_one_line(dirs):
    t, d = dirs["bad"]
    for target, draft, message in ((str(t), str(d), "incompatible pair"),
                                   ("/no/such/dir", str(d), "does not exist")):
        proc = _cli("generate", "--target", target, "--draft", draft, "--prompt", "x", "--device", "cpu")
        assert proc.returncode == 2, proc.stderr
        assert message in proc.stderr and "Traceback" not in proc.stderr


def test_cache_argument_name_follows_the_installed_transformers():
    from judgekit.models import cache_arg

    class Old:
        def forward(self, input_ids, past_key_values=None):
            pass

    class New:
        def forward(self, input_ids, cache=None):
            pass

    assert cache_arg(Old()) == "past_key_values"
    assert cache_arg(New()) == "cache"
