"""judgekit.decode.generation.text_decoder: the same text as ``tokenizer.decode(ids, skip_special_tokens=...)``."""

import pytest

from judgekit.decode.generation import text_decoder


@pytest.mark.parametrize("skip", [True, False])
@pytest.mark.parametrize("clean_up", [False, True])
def test_text_decoder_equals_tokenizer_decode(clean_up, skip):
    from transformers import AutoTokenizer

    from judgekit.pocket import pocket_model_path
    from judgekit.tasks import get_task

    tok = AutoTokenizer.from_pretrained(pocket_model_path("pocket-target"), clean_up_tokenization_spaces=clean_up)
    task = get_task("pocket-math")
    for p in task.load("test", limit=20):
        ids = tok(task.build_prompt(p, tok) + task.reference_completion(p), add_special_tokens=False)["input_ids"]
        ids = ids + [tok.eos_token_id]  # a special token: skipped by both, or kept by both
        for cut in (0, 1, len(ids) // 2, len(ids)):
            assert text_decoder(tok, skip)(ids[:cut]) == tok.decode(ids[:cut], skip_special_tokens=skip)
    # the backend shortcut is taken exactly where transformers applies no clean-up: there the wrapper is not called
    calls = []
    real = tok.decode
    tok.decode = lambda *a, **k: calls.append(1) or real(*a, **k)
    text_decoder(tok, skip)(ids)
    assert bool(calls) == clean_up
