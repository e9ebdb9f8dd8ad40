"""Measuring the pocket pair: greedy accuracy, exact greedy block efficiency, TV distance, a mismatch census
and the oracle-judge ceiling.

Block efficiency is computed exactly from teacher forcing: with greedy lossless speculative decoding the
output is the target's greedy output R, and each block accepts the leading run (at most gamma) of positions
where the draft's argmax on R's prefix equals R's token, then emits one more token (the correction, or the
bonus token after gamma accepted ones). The mismatch census substitutes the draft's token at a mismatch,
lets the target complete greedily and compares outcomes, as mining does (docs/design.md §3), but at each
mismatch of the original response independently (a rough count, not the miner's running prefix).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from judgekit.pocket import ALIASES, pocket_model_path

MAX_NEW = {"pocket-math": 160, "pocket-code": 128, "pocket-math-hard": 192}


def resolve(name: str) -> Path | str:
    return pocket_model_path(name) if name in ALIASES else name


def load(name: str) -> tuple[Any, Any]:
    """(model, tokenizer) from an alias or a directory, with the hub loader (AutoModel/AutoTokenizer)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve(name)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(path)


def encode(tokenizer: Any, texts: Sequence[str]) -> list[list[int]]:
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]


@torch.no_grad()
def greedy_continue(model: Any, tokenizer: Any, prefixes: Sequence[list[int]], max_new_tokens: int,
                    batch_size: int = 64) -> list[list[int]]:
    """Greedy continuations of token-id prefixes (left-padded batches), cut after the first EOS."""
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    order = sorted(range(len(prefixes)), key=lambda i: len(prefixes[i]))
    out: list[list[int]] = [[] for _ in prefixes]
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        width = max(len(prefixes[i]) for i in idx)
        ids = torch.full((len(idx), width), pad, dtype=torch.long)
        mask = torch.zeros((len(idx), width), dtype=torch.long)
        for row, i in enumerate(idx):
            ids[row, width - len(prefixes[i]):] = torch.tensor(prefixes[i])
            mask[row, width - len(prefixes[i]):] = 1
        gen = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=max_new_tokens,
                             eos_token_id=eos, pad_token_id=pad)
        for row, i in enumerate(idx):
            new = gen[row, width:].tolist()
            out[i] = new[: new.index(eos) + 1] if eos in new else new
    return out


def _right_padded(rows: Sequence[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = 1
    return ids, mask


@torch.no_grad()
def draft_argmax(draft: Any, prompts: Sequence[list[int]], responses: Sequence[list[int]],
                 pad: int, batch_size: int = 64) -> list[list[int]]:
    """Teacher forcing: the draft's argmax for each response token given the prompt and the response prefix."""
    out = []
    for start in range(0, len(prompts), batch_size):
        rows = [p + r for p, r in zip(prompts[start:start + batch_size], responses[start:start + batch_size])]
        ids, mask = _right_padded(rows, pad)
        pred = draft(input_ids=ids, attention_mask=mask).logits.argmax(-1)
        for i, (p, r) in enumerate(zip(prompts[start:start + batch_size], responses[start:start + batch_size])):
            out.append(pred[i, len(p) - 1: len(p) + len(r) - 1].tolist())
    return out


@torch.no_grad()
def total_variation(target: Any, draft: Any, prompts: Sequence[list[int]], responses: Sequence[list[int]],
                    pad: int, batch_size: int = 64) -> list[float]:
    """TV(p, q) = 1/2 sum |p - q| between the two models' next-token distributions at temperature 1, at every
    position of the (target's) responses under teacher forcing: how far sampling-based SD would be from
    accepting everything (its acceptance rate is 1 - TV)."""
    out: list[float] = []
    for start in range(0, len(prompts), batch_size):
        ps, rs = prompts[start:start + batch_size], responses[start:start + batch_size]
        ids, mask = _right_padded([p + r for p, r in zip(ps, rs)], pad)
        tv = 0.5 * (target(input_ids=ids, attention_mask=mask).logits.softmax(-1)
                    - draft(input_ids=ids, attention_mask=mask).logits.softmax(-1)).abs().sum(-1)
        for i, (p, r) in enumerate(zip(ps, rs)):
            out += tv[i, len(p) - 1: len(p) + len(r) - 1].tolist()
    return out


@torch.no_grad()
def next_argmax(model: Any, seqs: Sequence[list[int]], k: Sequence[int], pad: int) -> list[list[int]]:
    """For each sequence s with k[i] trailing drafted tokens: the model's argmax after each of the last k+1
    prefixes of s (the verification forward of one speculative block, plus the bonus position)."""
    ids, mask = _right_padded(seqs, pad)
    pred = model(input_ids=ids, attention_mask=mask).logits.argmax(-1)
    return [pred[i, len(s) - n - 1: len(s)].tolist() for i, (s, n) in enumerate(zip(seqs, k))]


# The truncation sets the census checks: min-p at the demo's two p_base values and eta at its (epsilon, delta).
TRUNCATION_SETS = (("minp_0.1", "minp", (0.1,)), ("minp_0.3", "minp", (0.3,)), ("eta_0.05_0.3", "eta", (0.05, 0.3)))


@torch.no_grad()
def allowed_share(target: Any, prompts: Sequence[list[int]], responses: Sequence[list[int]],
                  guesses: Sequence[list[int]], pad: int, batch_size: int = 64) -> dict:
    """At every position where the draft's teacher-forced argmax differs from the target's greedy token, is
    the draft's token inside the target's min-p / eta allowed set at temperature 1?

    That share is what decides whether truncation rules can differ from SpecCascade: a truncation rule
    accepts a mismatching draft token only when it is in the allowed set, so a draft whose wrong tokens the
    target deems implausible gives min-p/eta nothing to accept (the sets are judgekit.decode.rules')."""
    from judgekit.decode.rules import eta_set, minp_set

    kinds = {"minp": minp_set, "eta": eta_set}
    inside = {name: 0 for name, _, _ in TRUNCATION_SETS}
    mismatches = 0
    for start in range(0, len(prompts), batch_size):
        ps, rs, gs = (x[start:start + batch_size] for x in (prompts, responses, guesses))
        ids, mask = _right_padded([p + r for p, r in zip(ps, rs)], pad)
        probs = target(input_ids=ids, attention_mask=mask).logits.softmax(-1)
        for i, (p, r, g) in enumerate(zip(ps, rs, gs)):
            rows = probs[i, len(p) - 1: len(p) + len(r) - 1]
            drafted = torch.tensor(g[: len(r)])
            miss = drafted != torch.tensor(r)
            mismatches += int(miss.sum())
            for name, kind, args in TRUNCATION_SETS:
                allowed = kinds[kind](rows, *args).gather(-1, drafted[:, None])[:, 0]
                inside[name] += int((allowed & miss).sum())
    return {"mismatches": mismatches, **{f"inside_{k}": v / max(1, mismatches) for k, v in inside.items()}}


def oracle_judge(task: Any, problems: Sequence[Any], target: Any, draft: Any, tokenizer: Any,
                 prompts: Sequence[list[int]], outcomes: Sequence[Any], gamma: int, max_new: int) -> dict:
    """Greedy speculative decoding with an oracle judge: a mismatching draft token is accepted exactly when
    the target's greedy completion after it reaches the same outcome as the target's own greedy response.

    That is the most any judge can accept on this pair without changing a single answer, so its block
    efficiency is the ceiling for judge-based lossy verification (docs/design.md §3 labels, §4 rules). The
    problems run in lock step: one batched draft proposal and one batched target forward per block, and
    the rollouts of the mismatches reached in the same round batched together. By induction the target's
    greedy outcome from every accepted prefix is the original one, so each mismatch needs one rollout."""
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    n = len(problems)
    out: list[list[int]] = [[] for _ in range(n)]
    blocks, accepted, rejected = [0] * n, [0] * n, [0] * n
    cache: dict[tuple[int, str], Any] = {}
    key_of = getattr(task, "outcome_key", None)

    def finished(k: int) -> bool:
        return (out[k] and out[k][-1] == eos) or len(out[k]) >= max_new

    def outcome_of(k: int, tokens: list[int]) -> Any:
        text = tokenizer.decode(tokens, skip_special_tokens=True)
        ck = (k, key_of(text) if key_of else text)
        if ck not in cache:
            cache[ck] = task.extract_outcome(problems[k], text)
        return cache[ck]

    active = list(range(n))
    while active:
        budget = [min(gamma, max_new - len(out[k])) for k in active]
        proposals = greedy_continue(draft, tokenizer, [prompts[k] + out[k] for k in active], max(budget))
        proposals = [d[:b] for d, b in zip(proposals, budget)]
        checks = next_argmax(target, [prompts[k] + out[k] + d for k, d in zip(active, proposals)],
                             [len(d) for d in proposals], pad)
        pos = {k: 0 for k in active}  # next drafted position to verify, per problem
        walking = list(active)
        while walking:
            waiting = []
            for k in walking:
                j = active.index(k)
                d, t = proposals[j], checks[j]
                while pos[k] < len(d) and d[pos[k]] == t[pos[k]] and d[pos[k]] != eos:
                    pos[k] += 1
                if pos[k] < len(d) and d[pos[k]] == t[pos[k]]:  # an agreed EOS ends the response
                    pos[k] += 1
                    out[k] += d[: pos[k]]
                elif pos[k] < len(d):
                    waiting.append(k)
                    continue
                else:  # all drafted tokens accepted: the verification forward yields one more
                    out[k] += d + [t[len(d)]]
                blocks[k] += 1
            if not waiting:
                break
            prefixes = [out[k] + proposals[active.index(k)][: pos[k] + 1] for k in waiting]
            tails = greedy_continue(target, tokenizer, [prompts[k] + p for k, p in zip(waiting, prefixes)],
                                    max(1, max(max_new - len(p) for p in prefixes)))
            walking = []
            for k, p, tail in zip(waiting, prefixes, tails):
                j = active.index(k)
                d, t = proposals[j], checks[j]
                if task.equivalent(outcome_of(k, (p + tail)[:max_new]), outcomes[k]):
                    accepted[k] += 1
                    if d[pos[k]] == eos:  # the draft ends the response here and the outcome stands
                        out[k] += d[: pos[k] + 1]
                        blocks[k] += 1
                        continue
                    pos[k] += 1
                    walking.append(k)
                else:  # the judge rejects: the target's token replaces the draft's and the block ends
                    rejected[k] += 1
                    out[k] += d[: pos[k]] + [t[pos[k]]]
                    blocks[k] += 1
        active = [k for k in active if not finished(k)]
    final = [outcome_of(k, out[k]) for k in range(n)]
    return {"problems": n, "tokens": sum(map(len, out)), "target_forwards": sum(blocks),
            "block_efficiency": sum(map(len, out)) / max(1, sum(blocks)),
            "accuracy": sum(task.grade(p, o) for p, o in zip(problems, final)) / max(1, n),
            "outcome_kept": sum(task.equivalent(o, r) for o, r in zip(final, outcomes)) / max(1, n),
            "mismatches_accepted": sum(accepted), "mismatches_rejected": sum(rejected)}


def greedy_blocks(matches: Sequence[bool], gamma: int) -> int:
    """Number of target forwards greedy SD needs to emit a response whose per-token draft matches are given."""
    i, blocks = 0, 0
    while i < len(matches):
        run = 0
        while run < gamma and i + run < len(matches) and matches[i + run]:
            run += 1
        i += run + 1
        blocks += 1
    return blocks


def block_efficiency(responses: Sequence[list[int]], guesses: Sequence[list[int]], gamma: int) -> float:
    """Pooled BE = emitted tokens / target forwards over all responses."""
    tokens = sum(len(r) for r in responses)
    blocks = sum(greedy_blocks([a == b for a, b in zip(r, g)], gamma) for r, g in zip(responses, guesses))
    return tokens / max(1, blocks)


def _score(task: Any, problems: Sequence[Any], tokenizer: Any, completions: Sequence[list[int]]) -> tuple[list, list]:
    outcomes = [task.extract_outcome(p, tokenizer.decode(c, skip_special_tokens=True))
                for p, c in zip(problems, completions)]
    return outcomes, [task.grade(p, o) for p, o in zip(problems, outcomes)]


def mismatch_census(task: Any, problems: Sequence[Any], target: Any, tokenizer: Any, prompts: list[list[int]],
                    responses: list[list[int]], guesses: list[list[int]], outcomes: list) -> dict:
    """Substitute the draft token at each mismatch, let the target finish greedily, compare outcomes."""
    jobs = [(k, m) for k, (r, g) in enumerate(zip(responses, guesses)) for m, (a, b) in enumerate(zip(r, g)) if a != b]
    prefixes = [prompts[k] + responses[k][:m] + [guesses[k][m]] for k, m in jobs]
    tails = greedy_continue(target, tokenizer, prefixes, MAX_NEW[task.name])
    important = examples = 0
    samples = []
    for (k, m), tail in zip(jobs, tails):
        alt = responses[k][:m] + [guesses[k][m]] + tail
        outcome = task.extract_outcome(problems[k], tokenizer.decode(alt, skip_special_tokens=True))
        changed = not task.equivalent(outcome, outcomes[k])
        important += changed
        if len(samples) < 6 and (changed or examples < 3):
            examples += not changed
            samples.append({"target": tokenizer.decode([responses[k][m]]), "draft": tokenizer.decode([guesses[k][m]]),
                            "important": changed})
    return {"problems": len(problems), "mismatches": len(jobs), "important": important,
            "unimportant": len(jobs) - important, "examples": samples}


def evaluate_task(task: Any, target: Any, draft: Any, tokenizer: Any, limit: int, mismatch_limit: int,
                  gamma: int, log: Callable[[str], None] = print, oracle_limit: int = 0) -> dict:
    problems = task.load("test", limit=limit)
    prompts = encode(tokenizer, [task.build_prompt(p, tokenizer) for p in problems])
    log(f"{task.name}: target generates {len(problems)} responses")
    responses = greedy_continue(target, tokenizer, prompts, MAX_NEW[task.name])
    outcomes, t_ok = _score(task, problems, tokenizer, responses)
    log(f"{task.name}: draft generates")
    d_out = greedy_continue(draft, tokenizer, prompts, MAX_NEW[task.name])
    _, d_ok = _score(task, problems, tokenizer, d_out)
    guesses = draft_argmax(draft, prompts, responses, tokenizer.pad_token_id)
    be = block_efficiency(responses, guesses, gamma)
    n = min(mismatch_limit, len(problems))
    log(f"{task.name}: mismatch census on {n} problems")
    census = mismatch_census(task, problems[:n], target, tokenizer, prompts[:n], responses[:n], guesses[:n],
                             outcomes[:n])
    agree = sum(a == b for r, g in zip(responses, guesses) for a, b in zip(r, g)) / max(1, sum(map(len, responses)))
    tv = total_variation(target, draft, prompts, responses, tokenizer.pad_token_id)
    shares = allowed_share(target, prompts, responses, guesses, tokenizer.pad_token_id)
    report = {"problems": len(problems), "target_accuracy": sum(t_ok) / len(problems),
              "draft_accuracy": sum(d_ok) / len(problems), f"block_efficiency_gamma{gamma}": be,
              "draft_token_agreement": agree, "mean_tv_temperature1": sum(tv) / max(1, len(tv)),
              "mean_response_tokens": sum(map(len, responses)) / len(problems), "mismatch_census": census,
              "draft_mismatches_in_target_sets": shares}
    m = min(oracle_limit, len(problems))
    if m:
        log(f"{task.name}: oracle-judge speculative decoding on {m} problems")
        oracle = oracle_judge(task, problems[:m], target, draft, tokenizer, prompts[:m], outcomes[:m], gamma,
                              MAX_NEW[task.name])
        oracle["lossless_block_efficiency"] = block_efficiency(responses[:m], guesses[:m], gamma)
        oracle["target_accuracy"] = sum(t_ok[:m]) / m
        oracle["ratio_to_lossless"] = oracle["block_efficiency"] / oracle["lossless_block_efficiency"]
        report["oracle_judge"] = oracle
    return report


def evaluate_pair(target: str = "pocket-target", draft: str = "pocket-draft", limit: int = 200,
                  mismatch_limit: int = 40, gamma: int = 8, seed: int = 0, threads: int = 1, oracle_limit: int = 50,
                  tasks: Sequence[str] = ("pocket-math", "pocket-code"),
                  log: Callable[[str], None] = print) -> dict:
    """All the data card's numbers for a pair, on held-out (test split) problems, greedy."""
    from judgekit.tasks import get_task

    unknown = [t for t in tasks if t not in MAX_NEW]
    if unknown:
        from judgekit.errors import JudgekitError

        raise JudgekitError(f"pocket eval measures the pocket tasks ({', '.join(MAX_NEW)}), not {', '.join(unknown)}")
    torch.set_num_threads(threads)
    random.seed(seed)
    t_model, tokenizer = load(target)
    d_model, _ = load(draft)
    report: dict = {"target": str(target), "draft": str(draft), "seed": seed, "gamma": gamma,
                    "target_parameters": sum(p.numel() for p in t_model.parameters()),
                    "draft_parameters": sum(p.numel() for p in d_model.parameters())}
    for name in tasks:
        report[name] = evaluate_task(get_task(name, seed=seed), t_model, d_model, tokenizer, limit,
                                     mismatch_limit, gamma, log, oracle_limit)
    return report
