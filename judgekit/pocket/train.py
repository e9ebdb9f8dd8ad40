"""Training the pocket target/draft pair: a seeded plain-torch loop over freshly generated problems.

Both models are standard Llama decoders (so the hub loader handles them) sharing one tokenizer. Each batch
is a fresh sample of training-split problems with a randomly chosen equivalent solution, formatted exactly
as `Task.build_prompt` formats prompts at inference; the loss covers only the completion (and its EOS).
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

# Sized for the CPU budget (<= 45 min for both on 2 shared cores). Measured: at this compute the loss per
# step hardly depends on size (a 1.9M 4-layer model tracked a 0.54M 2-layer one step for step), so the
# target is a ~1M model trained for twice the steps of the draft rather than a bigger one trained for fewer.
TARGET_ARCH = dict(hidden_size=160, intermediate_size=448, num_hidden_layers=3, num_attention_heads=4,
                   num_key_value_heads=4)
DRAFT_ARCH = dict(hidden_size=128, intermediate_size=384, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=4)


@dataclass
class TrainSpec:
    """One model's recipe. `steps` x `batch_size` problems, AdamW with warm-up and cosine decay."""

    arch: dict = field(default_factory=lambda: dict(TARGET_ARCH))
    steps: int = 1500
    batch_size: int = 32
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup: int = 100
    weight_decay: float = 0.01
    math_fraction: float = 0.7  # share of pocket-math problems per batch (arithmetic is the harder part)
    seed: int = 0
    style: str = "target"  # solution habits of the training data (judgekit.tasks.pocket_common.STYLES)
    schedule_steps: int | None = None  # cosine horizon, when training stops before its end (None: `steps`)
    # Share of pocket-math-hard problems per batch, drawn before the math/code split (0: the original mix,
    # with exactly its random draws, so the shipped pair's recipe is unchanged).
    hard_fraction: float = 0.0
    init_from: str | None = None  # fine-tune from this model directory's weights instead of a fresh init


def make_model(tokenizer: Any, arch: dict, seed: int):
    """A fresh Llama decoder whose special-token ids match the tokenizer."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer), max_position_embeddings=512, tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, **arch,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


def encode_example(tokenizer: Any, prompt: str, completion: str) -> tuple[list[int], list[int]]:
    """Token ids of prompt + completion + EOS, and labels that are -100 on the prompt."""
    p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    c = tokenizer(completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return p + c, [-100] * len(p) + c


def pick_task(tasks: list, u: float, math_fraction: float, hard_fraction: float = 0.0) -> Any:
    """The task of one batch row from one uniform draw `u`: [hard | math | code] in those shares (tasks are
    math, code[, hard]); with hard_fraction 0 it is the original math/code choice for the same `u`."""
    if u < hard_fraction:
        return tasks[2]
    return tasks[0] if u < hard_fraction + math_fraction else tasks[1]


def sample_batch(tokenizer: Any, tasks: list, rng: random.Random, batch_size: int,
                 math_fraction: float, hard_fraction: float = 0.0) -> dict[str, torch.Tensor]:
    """A right-padded batch of fresh training problems, each with a random equivalent solution."""
    rows = []
    for _ in range(batch_size):
        task = pick_task(tasks, rng.random(), math_fraction, hard_fraction)
        problem = task.sample("train", rng)
        prompt = task.build_prompt(problem, tokenizer, chat_template=True)
        rows.append(encode_example(tokenizer, prompt, task.reference_completion(problem, rng)))
    width = max(len(ids) for ids, _ in rows)
    pad = tokenizer.pad_token_id
    ids = torch.full((batch_size, width), pad, dtype=torch.long)
    labels = torch.full((batch_size, width), -100, dtype=torch.long)
    mask = torch.zeros((batch_size, width), dtype=torch.long)
    for i, (x, y) in enumerate(rows):
        ids[i, : len(x)] = torch.tensor(x)
        labels[i, : len(y)] = torch.tensor(y)
        mask[i, : len(x)] = 1
    return {"input_ids": ids, "labels": labels, "attention_mask": mask}


def lr_at(step: int, spec: TrainSpec) -> float:
    """Linear warm-up, then cosine decay to min_lr_ratio * lr."""
    if step < spec.warmup:
        return spec.lr * (step + 1) / spec.warmup
    horizon = spec.schedule_steps or spec.steps
    t = min(1.0, (step - spec.warmup) / max(1, horizon - spec.warmup))
    return spec.lr * (spec.min_lr_ratio + (1 - spec.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * t)))


def train_model(tokenizer: Any, spec: TrainSpec, device: torch.device,
                log: Callable[[str], None] = print, checkpoint_every: int = 0,
                on_checkpoint: Callable[[Any, int], None] | None = None) -> tuple[Any, dict]:
    """Train one model from scratch (or fine-tune `spec.init_from`); returns it (eval mode, on CPU) and a
    summary of the run."""
    from judgekit.tasks.pocket_code import PocketCode
    from judgekit.tasks.pocket_math import PocketMath, PocketMathHard

    if spec.init_from:
        from transformers import AutoModelForCausalLM

        torch.manual_seed(spec.seed)
        model = AutoModelForCausalLM.from_pretrained(spec.init_from, dtype=torch.float32).to(device)
    else:
        model = make_model(tokenizer, spec.arch, spec.seed).to(device)
    tasks = [PocketMath(spec.seed, style=spec.style), PocketCode(spec.seed, style=spec.style)]
    if spec.hard_fraction:
        tasks.append(PocketMathHard(spec.seed, style=spec.style))
    rng = random.Random(spec.seed)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": spec.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=spec.lr, betas=(0.9, 0.98))
    model.train()
    start, ema = time.time(), None
    for step in range(spec.steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, spec)
        batch = {k: v.to(device) for k, v in sample_batch(tokenizer, tasks, rng, spec.batch_size,
                                                          spec.math_fraction, spec.hard_fraction).items()}
        loss = model(**batch).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        if on_checkpoint and checkpoint_every and (step + 1) % checkpoint_every == 0 and step + 1 < spec.steps:
            model.eval()
            on_checkpoint(model, step + 1)
            model.train()
        if step % 50 == 0 or step == spec.steps - 1:
            log(f"step {step:5d}/{spec.steps} loss {ema:.4f} lr {lr_at(step, spec):.2e} "
                f"elapsed {time.time() - start:.0f}s")
    model.eval()
    summary = {"steps": spec.steps, "final_loss_ema": round(ema or float("nan"), 4),
               "train_seconds": round(time.time() - start, 1), "device": str(device),
               "parameters": sum(p.numel() for p in model.parameters()), "spec": asdict(spec)}
    return model.to("cpu"), summary


def save_model(model: Any, tokenizer: Any, out: Path, summary: dict) -> None:
    """save_pretrained (safetensors) plus the shared tokenizer and the run's summary."""
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    (out / "training.json").write_text(json.dumps(summary, indent=2) + "\n")


def default_specs() -> dict[str, TrainSpec]:
    """The shipped recipe (the data card's numbers come from exactly these)."""
    return {"target": TrainSpec(arch=dict(TARGET_ARCH), steps=3000, lr=3e-3),
            # The draft: the target's problems in other habits (style "draft"), more math per batch (so its
            # code is not much stronger than its arithmetic), stopped at step 1300 of a 1500-step schedule so
            # that it makes the arithmetic slips of a real small draft (its step-1500 weights were at 53 %
            # held-out math accuracy and 12 % important mined mismatches; step 1300: 39 %, see the data card).
            "draft": TrainSpec(arch=dict(DRAFT_ARCH), steps=1300, schedule_steps=1500, lr=3e-3, style="draft",
                               math_fraction=0.8)}


def hard_specs(root: Path | None = None) -> dict[str, TrainSpec]:
    """The third pair (`pocket-hard-target` / `pocket-hard-draft`): copies of the shipped target and draft
    fine-tuned on a mix led by pocket-math-hard, the old tasks kept in every batch so that nothing is
    forgotten; the same habits (styles) as the shipped pair; a cosine schedule at half its LR and half its batch
    (about 0.9 s of CPU per target step, 18 min for the target's 1200; the data card has the learning curve,
    which stayed far below the 55 % the pair is meant to reach)."""
    from judgekit.pocket import POCKET_DIR

    root = root or POCKET_DIR
    common = dict(batch_size=16, lr=1.5e-3, warmup=20, hard_fraction=0.6, math_fraction=0.25)
    # The draft gets fewer steps than the target (as the shipped pair): a real small draft is the weaker model
    # on the same data, its slips on the same hard digits where the target is itself unsure.
    return {"hard-target": TrainSpec(arch=dict(TARGET_ARCH), init_from=str(root / "target"), steps=750,
                                     schedule_steps=1500, **common),
            "hard-draft": TrainSpec(arch=dict(DRAFT_ARCH), init_from=str(root / "draft"), style="draft", steps=600,
                                    **common)}


def train_pair(out: Path, seed: int = 0, device: str = "auto", specs: dict[str, TrainSpec] | None = None,
               log: Callable[[str], None] = print, which: tuple[str, ...] = ("target", "draft"),
               threads: int = 1, checkpoint_every: int = 0, checkpoint_dir: Path | None = None) -> dict:
    """Build the tokenizer, train the target and the draft, and save them under out/target, out/draft.

    One torch thread by default: on a small shared CPU it is faster than two (no thread contention), and
    two models can then train side by side in two processes (`which`)."""
    from judgekit.pocket.tokenizer import build_tokenizer

    torch.set_num_threads(threads)
    dev = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device)
    specs = specs or default_specs()
    init = next((specs[n].init_from for n in which if specs[n].init_from), None)
    if init:  # fine-tuning keeps the shipped vocabulary (the one its embeddings were trained on)
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(init)
    else:
        tokenizer = build_tokenizer(seed=seed)  # deterministic: separate processes build the same vocab
    results = {}
    for name in which:
        spec = specs[name]
        spec.seed = seed if name.endswith("target") else seed + 1
        log(f"training {name}: {spec}")

        def save_ckpt(model: Any, step: int, name: str = name) -> None:
            if checkpoint_dir is not None:
                save_model(model, tokenizer, Path(checkpoint_dir) / f"{name}-step{step}", {"step": step})

        model, summary = train_model(tokenizer, spec, dev, log, checkpoint_every, save_ckpt)
        save_model(model, tokenizer, Path(out) / name, summary)
        results[name] = summary
        log(f"{name} done in {summary['train_seconds']}s, {summary['parameters']} parameters")
    return results
