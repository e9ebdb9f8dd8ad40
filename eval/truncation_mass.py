"""Why SpecCascade beats min-p on the hard pocket pair (the README's reproduce section): the mass each rule's
induced distribution puts on the gold token of an answer-deciding position.

    PYTHONPATH=. python3 eval/truncation_mass.py [--task pocket-math-hard] [--target pocket-hard-target]
        [--draft pocket-hard-draft] [--limit 150] [--p-base 0.1,0.3]

Both models read the canonical reference solution (teacher forcing, T = 1); at every result digit (a digit after
`=` on its line: the positions that decide the answer) we take p and q and each rule's closed-form induced
distribution (`Rule.induced`: min-p gives p_A, the target truncated to its allowed set; SpecCascade gives q_A, the
draft truncated to the same set) and report the mean mass on the gold digit and the share of positions where it
is below one half. The rules are judgekit's own, so this reads exactly what the decoder samples from.
"""

from __future__ import annotations

import argparse
import sys

import torch


def result_digit_mask(tokens: list[str]) -> list[bool]:
    """Which tokens are digits written after `=` on their line (byte-level BPE: `Ċ` is a newline)."""
    out, after = [], False
    for t in tokens:
        if "=" in t:
            after = True
        if "\n" in t or "Ċ" in t or "." in t:
            after = False
        out.append(after and t.strip("Ġ ").isdigit())
    return out


@torch.no_grad()
def gold_mass(pair, task, problems, rules: dict) -> dict[str, torch.Tensor]:
    """name -> the mass on the gold token at every result digit of the problems' reference solutions: "p" and
    "q" (the models at T = 1) and one entry per rule (its induced distribution)."""
    from judgekit.decode.rules import RuleContext

    tok = pair.tokenizer
    found: dict[str, list[torch.Tensor]] = {k: [] for k in ("p", "q", *rules)}
    for problem in problems:
        prompt = tok(task.build_prompt(problem, tok), add_special_tokens=False)["input_ids"]
        ref = tok(task.reference_completion(problem), add_special_tokens=False)["input_ids"]
        mask = torch.tensor(result_digit_mask(tok.convert_ids_to_tokens(ref)))
        if not mask.any():
            continue
        ids = torch.tensor([prompt + ref], device=pair.device)
        cols = slice(len(prompt) - 1, -1)  # the distributions that predict each reference token
        p = pair.target(ids).logits[0, cols].float().softmax(-1).cpu()
        q = pair.draft(ids).logits[0, cols].float().softmax(-1).cpu()
        gold = torch.tensor(ref)[:, None]
        dists = {"p": p, "q": q, **{k: rule.induced(p, q, RuleContext()) for k, rule in rules.items()}}
        for k, d in dists.items():
            found[k].append(d.gather(1, gold)[:, 0][mask])
    return {k: torch.cat(v) if v else torch.zeros(0) for k, v in found.items()}


def main(argv: list[str] | None = None) -> int:
    from judgekit.decode.rules import make_rule
    from judgekit.models import load_model_pair
    from judgekit.tasks import get_task

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="pocket-math-hard")
    ap.add_argument("--target", default="pocket-hard-target")
    ap.add_argument("--draft", default="pocket-hard-draft")
    ap.add_argument("--limit", type=int, default=150)
    ap.add_argument("--p-base", default="0.1,0.3")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    pair = load_model_pair(args.target, args.draft, device="cpu", dtype="fp32")
    task = get_task(args.task)
    rules = {}
    for b in (float(x) for x in args.p_base.split(",")):
        rules[f"minp p_base={b:g}"] = make_rule("minp", p_base=b)
        rules[f"speccascade p_base={b:g}"] = make_rule("speccascade", p_base=b)
    mass = gold_mass(pair, task, task.load("test", limit=args.limit), rules)
    print(f"{args.task}, {args.target} / {args.draft}, first {args.limit} test problems, "
          f"{mass['p'].numel()} result digits of the reference solutions (teacher forcing, T = 1)")
    print(f"{'distribution':<26}{'mean mass on gold':>18}{'share < 0.5':>13}")
    for k, v in mass.items():
        print(f"{k:<26}{v.mean().item():>18.4f}{(v < 0.5).float().mean().item():>13.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
