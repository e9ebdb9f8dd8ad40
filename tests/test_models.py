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


# ------------------------------------------------------------------ loading options: revision, device map, quantised

def _hub_cache(root, repo_id: str, refs: dict) -> dict:
    """A git-style hub cache (models--org--name/refs/<ref> -> commit, snapshots/<commit>/...) holding one copy of
    a saved model per ref, as huggingface_hub lays it out; returns ref -> commit hash."""
    import hashlib
    import shutil

    repo = root / ("models--" + repo_id.replace("/", "--"))
    commits = {}
    for ref, src in refs.items():
        commit = hashlib.sha1(ref.encode()).hexdigest()
        shutil.copytree(src, repo / "snapshots" / commit)
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / ref).write_text(commit)
        commits[ref] = commit
    return commits


def test_revision_is_read_from_the_hub_cache_offline(tmp_path, dirs):
    from judgekit.benchmarks.synthetic import save_tiny_pair

    main_t, main_d = dirs["good"]
    other_t, _ = save_tiny_pair(tmp_path / "other", arch="llama", seed=7)
    cache = tmp_path / "hub"
    commits = _hub_cache(cache, "org/tiny", {"main": main_t, "v2": other_t})
    code = (
        "import json, sys\n"
        "from judgekit.models import LoadOptions, load_model_pair, resolved_commit\n"
        "from judgekit.errors import JudgekitError\n"
        "out = {}\n"
        "for rev in ('main', 'v2', %r):\n"
        "    pair = load_model_pair('org/tiny', sys.argv[1], 'cpu', 'fp32', target_options=LoadOptions(revision=rev))\n"
        "    w = pair.target.get_input_embeddings().weight\n"
        "    out[rev] = [float(w.sum()), resolved_commit('org/tiny', rev)]\n"
        "try:\n"
        "    load_model_pair('org/tiny', sys.argv[1], 'cpu', 'fp32', target_options=LoadOptions(revision='nope'))\n"
        "except JudgekitError as err:\n"
        "    out['error'] = str(err)\n"
        "print(json.dumps(out))\n" % commits["v2"])
    env = {**__import__("os").environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    run = subprocess.run([sys.executable, "-c", code, str(main_d)], capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    from safetensors.torch import load_file

    def emb_sum(d):
        return float(next(v for k, v in load_file(str(d / "model.safetensors")).items() if "embed_tokens" in k).sum())

    assert out["main"] == [pytest.approx(emb_sum(main_t)), commits["main"]]
    assert out["v2"] == [pytest.approx(emb_sum(other_t)), commits["v2"]]
    assert out[commits["v2"]] == out["v2"]  # a commit hash is a revision too
    assert out["main"][0] != pytest.approx(out["v2"][0])
    assert "cannot load tokenizer 'org/tiny'" in out["error"] and "\n" not in out["error"]


def test_revision_of_a_local_directory_is_refused(dirs):
    from judgekit.models import LoadOptions

    t, d = dirs["good"]
    with pytest.raises(JudgekitError, match="--revision applies to hub ids"):
        load_model_pair(str(t), str(d), "cpu", "fp32", target_options=LoadOptions(revision="v1"))
    with pytest.raises(JudgekitError, match="unknown device map"):
        LoadOptions(device_map="everywhere")


def test_device_map_auto_decodes_like_the_plain_pair(dirs):
    pytest.importorskip("accelerate")
    from judgekit.decode.decoder import SpeculativeDecoder
    from judgekit.decode.rules import make_rule
    from judgekit.models import LoadOptions

    t, d = dirs["good"]
    plain = load_model_pair(str(t), str(d), "cpu", "fp32")
    mapped = load_model_pair(str(t), str(d), "cpu", "fp32", target_options=LoadOptions(device_map="auto"))
    assert mapped.device == plain.device and mapped.options[0].device_map == "auto"
    decoders = [SpeculativeDecoder(p, make_rule("lenience", lenience=0.5), 4) for p in (plain, mapped)]
    assert decoders[1].fast  # everything landed on one device: the fast path still applies
    outs = [dec.generate(["a b c"], 24)[0].token_ids for dec in decoders]
    assert outs[0] == outs[1] and len(outs[0]) > 0


def test_quantised_or_sharded_models_take_the_transformers_backend(dirs):
    import torch

    from judgekit.decode.decoder import SpeculativeDecoder
    from judgekit.decode.fastmodel import fast_unsupported
    from judgekit.decode.rules import make_rule
    from judgekit.models import LoadOptions, placement_kwargs

    cpu = torch.device("cpu")
    # a quantised checkpoint is loaded in place on the one device, never moved with .to()
    assert placement_kwargs(LoadOptions(), cpu, quantised=True) == {"device_map": {"": "cpu"}}
    assert placement_kwargs(LoadOptions(), cpu, quantised=False) == {}
    assert placement_kwargs(LoadOptions(device_map="balanced"), cpu, quantised=True) == {"device_map": "balanced"}
    t, d = dirs["good"]
    pair = load_model_pair(str(t), str(d), "cpu", "fp32")
    assert fast_unsupported(pair.target) is None and SpeculativeDecoder(pair, make_rule("lossless")).fast
    pair.target.hf_device_map = {"model.layers.0": 0, "model.layers.1": 1}  # as accelerate leaves a 2-GPU split
    assert "sharded" in fast_unsupported(pair.target)
    assert not SpeculativeDecoder(pair, make_rule("lossless")).fast
    del pair.target.hf_device_map
    pair.draft.config.quantization_config = {"quant_method": "gptq", "bits": 4}
    assert "quantised" in fast_unsupported(pair.draft)
    assert not SpeculativeDecoder(pair, make_rule("lossless")).fast


def test_loading_flags_reach_the_loader():
    from judgekit.cli import build_parser
    from judgekit.config import loading_options

    args = build_parser().parse_args(["generate", "--target", "a/b", "--draft", "a/c", "--prompt", "x",
                                      "--revision", "v2", "--draft-revision", "abc", "--trust-remote-code",
                                      "--device-map", "auto"])
    opts = loading_options(args)
    assert (opts["target_options"].revision, opts["target_options"].device_map) == ("v2", "auto")
    assert (opts["draft_options"].revision, opts["draft_options"].device_map) == ("abc", None)
    assert opts["target_options"].trust_remote_code and opts["draft_options"].trust_remote_code
    plain = loading_options(build_parser().parse_args(["generate", "--target", "a", "--draft", "b", "--prompt", "x"]))
    assert plain["target_options"].revision is None and not plain["target_options"].trust_remote_code
    settings = {"revision": "r1", "trust_remote_code": True, "device_map": "sequential"}  # a `judgekit eval` config
    assert loading_options(settings)["target_options"].device_map == "sequential"
