"""The pocket tokenizer: a small byte-level BPE, digits split one by one, with a minimal chat template.

Word-level pieces keep sequences short and make draft/target mismatches read like real ones ("So" vs
"Then"); single digits make the arithmetic learnable by a tiny model. Byte-level means any text round-trips.
"""

from __future__ import annotations

import random
from typing import Iterable

PAD, BOS, EOS = "<|pad|>", "<|bos|>", "<|eos|>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
SPECIAL_TOKENS = (PAD, BOS, EOS, *ROLE_TOKENS)
# One turn per message; an assistant turn ends with EOS, which is what a trained model emits to stop.
CHAT_TEMPLATE = (  # newlines as expressions: transformers renders with trim_blocks, which eats "%}\n"
    "{% for m in messages %}{{ '<|' + m['role'] + '|>\\n' + m['content'] }}"
    "{% if m['role'] == 'assistant' %}{{ '" + EOS + "' }}{% endif %}{{ '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)


def corpus(n_math: int = 3000, n_code: int = 1500, seed: int = 0) -> Iterable[str]:
    """Training texts for the BPE: questions and sampled solutions of both pocket tasks (train split)."""
    from judgekit.tasks.pocket_code import PocketCode
    from judgekit.tasks.pocket_math import PocketMath

    rng = random.Random(seed)
    for task, n in ((PocketMath(seed), n_math), (PocketCode(seed), n_code)):
        for _ in range(n):
            p = task.sample("train", rng)
            yield p.question
            yield task.reference_completion(p, rng)


def build_tokenizer(vocab_size: int = 1024, seed: int = 0):
    """Train the BPE on generated pocket text and wrap it as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(corpus(seed=seed), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD,
        additional_special_tokens=list(ROLE_TOKENS), padding_side="left", clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast
