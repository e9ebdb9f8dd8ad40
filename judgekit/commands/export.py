"""`judgekit export`: a trained judge as a portable TorchScript or ONNX file (scaler and thresholds inside)."""

from __future__ import annotations


def run(args) -> int:
    if args.format == "hf":  # a custom_generate/ folder for transformers' generate (judgekit.hf_generate)
        from judgekit.hf_generate import write_custom_generate_dir

        print(f"hf custom_generate -> {write_custom_generate_dir(args.out)}")
        return 0
    from judgekit.judge.export import export_judge

    out = export_judge(args.judge_dir, args.format, args.out)
    print(f"{args.format} judge -> {out}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("export", help="export a trained judge to ONNX or TorchScript",
                       description="Export a judge directory as one file: inputs hidden [n, H] (and draft_hidden "
                                   "[n, H_d] for target+draft judges), output P(important) [n]; the judge config "
                                   "and thresholds travel as metadata. ONNX needs `pip install judgekit[export]`.")
    p.add_argument("judge_dir", help="a judge directory written by `judgekit train`")
    p.add_argument("--format", required=True, choices=["onnx", "torchscript", "hf"])
    p.add_argument("--out", required=True,
                   help="output file (.onnx or .pt); for hf the directory (e.g. the judge's) to hold custom_generate/")
    p.set_defaults(func=run)
