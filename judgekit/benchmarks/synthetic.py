"""Models and tokenizers built from configs, with no download: for tests and speed benchmarks.

* :func:`tiny_tokenizer` trains a small byte-level BPE in memory, so a saved "model directory" has real
  tokenizer files and loads through the public loading path.
* :func:`tiny_model` builds a random Llama / Qwen2 model of a given size.
* :func:`make_controlled_pair` is docs/design.md §8's construction for real-size benchmarks: zero every attention
  output and MLP down projection (compute unchanged, the residual stream becomes the token's own
  embedding) and set the LM-head rows to embedding rows under a permutation, so the target predicts a fixed
  successor of the current token; the draft uses the same successor except on a chosen fraction of tokens.
  Every greedy decoder then emits the same tokens and the agreement fraction sets the block efficiency.
* :func:`synthetic_pair` applies it to random-init models of real shapes (:data:`QWEN25_CONFIGS`: Qwen2.5-7B /
  0.5B, and CPU-sized stand-ins), the pairs of `judgekit bench decode --pair cpu|qwen2.5`.
"""

from __future__ import annotations

from pathlib import Path

import torch

from judgekit.errors import JudgekitError

_CORPUS = [
    "The quick brown fox jumps over the lazy dog. " * 3,
    "Tom has 3 apples and buys 5 more, so he has 3 + 5 = 8 apples.\n#### 8\n",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))\n",
    "Speculative decoding drafts tokens with a small model and verifies them with a large one.",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 = + - * / ( ) [ ] { } : ; , . ! ?",
]
SPECIAL = ["<|endoftext|>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'user' %}<|user|>{{ m['content'] }}\n{% else %}"
    "<|assistant|>{{ m['content'] }}<|endoftext|>{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def tiny_tokenizer(vocab_size: int = 320, chat_template: bool = True):
    """A byte-level BPE tokenizer trained on a fixed corpus (deterministic)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    if chat_template:
        fast.chat_template = CHAT_TEMPLATE
    return fast


def tiny_model(arch: str, vocab_size: int, hidden: int = 64, layers: int = 2, heads: int = 4,
               seed: int = 0, eos_token_id: int = 0):
    """A random-init causal LM of a standard architecture: "llama" or "qwen2" (the static-cache fast path
    serves these), "gpt2" or "opt" (learned positions, no fast path: the transformers backend)."""
    from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig, OPTConfig, Qwen2Config

    ids = dict(eos_token_id=eos_token_id, bos_token_id=eos_token_id, pad_token_id=eos_token_id)
    if arch == "gpt2":
        config = GPT2Config(vocab_size=vocab_size, n_embd=hidden, n_layer=layers, n_head=heads, n_positions=2048,
                            tie_word_embeddings=False, **ids)
    elif arch == "opt":
        config = OPTConfig(vocab_size=vocab_size, hidden_size=hidden, ffn_dim=hidden * 2, num_hidden_layers=layers,
                           num_attention_heads=heads, max_position_embeddings=2048, word_embed_proj_dim=hidden,
                           tie_word_embeddings=False, **ids)
    else:
        cls = {"llama": LlamaConfig, "qwen2": Qwen2Config}[arch]
        config = cls(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=hidden * 2,
                     num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=max(1, heads // 2),
                     max_position_embeddings=2048, tie_word_embeddings=False, **ids)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    # Sharper random logits make greedy continuations less degenerate than a near-uniform init.
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(8.0)
    return model.eval()


def noisy_copy(model, noise: float, seed: int = 0):
    """The model with relative Gaussian noise on every weight: a draft that agrees with it partly."""
    import copy

    g = torch.Generator().manual_seed(seed)
    clone = copy.deepcopy(model)
    with torch.no_grad():
        for param in clone.parameters():
            param.add_(torch.randn(param.shape, generator=g) * noise * param.std().nan_to_num(0.02))
    return clone


def save_tiny_pair(root: Path, arch: str = "llama", seed: int = 0, draft_noise: float | None = 0.3,
                   target_vocab_pad: int = 0, draft_tokenizer=None) -> tuple[Path, Path]:
    """Save a tiny target/draft pair with a shared tokenizer under root/{target,draft}.

    With ``draft_noise`` the draft is a noisy copy of the target (so drafts are partly accepted and the
    rollback paths run); with None it is an independent, smaller random model.
    """
    tok = tiny_tokenizer()
    n = len(tok)
    target = tiny_model(arch, n + target_vocab_pad, hidden=64, layers=2, seed=seed, eos_token_id=tok.eos_token_id)
    if draft_noise is None or target_vocab_pad:
        draft = tiny_model(arch, n, hidden=32, layers=1, seed=seed + 1, eos_token_id=tok.eos_token_id)
    else:
        draft = noisy_copy(target, draft_noise, seed + 1)
    paths = []
    for name, model, t in (("target", target, tok), ("draft", draft, draft_tokenizer or tok)):
        path = Path(root) / name
        model.save_pretrained(path)
        t.save_pretrained(path)
        paths.append(path)
    return paths[0], paths[1]


def make_controlled_pair(target, draft, agreement: float, seed: int = 0) -> torch.Tensor:
    """Rewire target and draft in place so greedy decoding follows a fixed permutation (docs/design.md §8).

    Returns the successor permutation. The draft agrees with the target on about ``agreement`` of the
    tokens. Both models must share the embedding width of their own, not each other's: each is rewired
    with its own embedding.
    """
    vocab = min(target.get_input_embeddings().weight.shape[0], draft.get_input_embeddings().weight.shape[0])
    g = torch.Generator().manual_seed(seed)
    succ = torch.randperm(vocab, generator=g)  # target: next token after t is succ[t]
    draft_succ = succ.clone()
    flip = torch.rand(vocab, generator=g) >= agreement
    draft_succ[flip] = succ[flip].roll(1)  # a different successor on the disagreeing tokens
    for model, nxt in ((target, succ), (draft, draft_succ)):
        _make_successor_model(model, nxt, vocab)
    return succ


@torch.no_grad()
def _make_successor_model(model, nxt: torch.Tensor, vocab: int) -> None:
    for name, param in model.named_parameters():
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            param.zero_()
        elif name.endswith(("o_proj.bias", "down_proj.bias")):
            param.zero_()
    emb = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    if head.weight.data_ptr() == emb.data_ptr():
        raise ValueError("controlled pairs need untied embeddings (tie_word_embeddings=False)")
    # Unit-norm embedding rows make <e_t, e_t> the clear maximum of the logits for every t.
    unit = torch.nn.functional.normalize(torch.randn(emb.shape, generator=torch.Generator().manual_seed(1)), dim=-1)
    emb.copy_(unit.to(emb.dtype) * (emb.shape[1] ** 0.5))
    new_head = torch.zeros_like(head.weight)
    # Row nxt[t] of the head equals e_t, so the argmax after reading t is nxt[t]; padded rows stay zero.
    new_head[nxt.to(head.weight.device)] = emb[:vocab]
    head.weight.copy_(new_head)


# Real configs written inline (no download). Embeddings are untied so the controlled construction can set
# the LM head independently; this adds the head's parameters to the 0.5B but does not change its shape.
QWEN25_CONFIGS = {
    "qwen2.5-0.5b": dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
                         rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=False),
    "qwen2.5-7b": dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                       num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=32768,
                       rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=False),
    # CPU-sized stand-ins with the same architecture and vocabulary shape.
    "cpu-target": dict(vocab_size=32000, hidden_size=512, intermediate_size=1408, num_hidden_layers=8,
                       num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=4096,
                       tie_word_embeddings=False),
    "cpu-draft": dict(vocab_size=32000, hidden_size=128, intermediate_size=352, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                      tie_word_embeddings=False),
}


def build_config_model(name: str, dtype: torch.dtype, device: torch.device, seed: int = 0):
    """A random-init Qwen2 model of one of :data:`QWEN25_CONFIGS`, built on ``device`` (no download)."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    if name not in QWEN25_CONFIGS:
        raise JudgekitError(f"unknown synthetic config {name!r}; choose from {', '.join(QWEN25_CONFIGS)}")
    torch.manual_seed(seed)
    config = Qwen2Config(**QWEN25_CONFIGS[name], eos_token_id=None, bos_token_id=None)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model.eval()


class _NoTokenizer:
    """Synthetic pairs decode ids only: no text, no EOS."""

    eos_token_id = None

    def decode(self, ids, **_kwargs) -> str:
        return " ".join(map(str, ids))


def synthetic_pair(target: str, draft: str, agreement: float, device: str = "auto", dtype: str = "auto"):
    """A controlled-agreement :class:`judgekit.models.ModelPair` of two :data:`QWEN25_CONFIGS` shapes."""
    from judgekit.models import ModelPair, resolve_device, resolve_dtype

    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    tm = build_config_model(target, dt, dev, seed=0)
    dm = build_config_model(draft, dt, dev, seed=1)
    make_controlled_pair(tm, dm, agreement)
    vocab = min(tm.config.vocab_size, dm.config.vocab_size)
    return ModelPair(tm, dm, _NoTokenizer(), target, draft, vocab, dev)
