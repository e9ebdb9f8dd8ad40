#!/usr/bin/env bash
# Mining for AutoJudge's own pair: Llama-3.1-8B-Instruct (target) / Llama-3.2-1B-Instruct (draft), on the
# paper's two sources (GSM8K train, LiveCodeBench). Gated models: accept Meta's licence on the hub and
# `huggingface-cli login` first. One node of 8 GPUs; ranks share the problems and a rerun resumes.
#   bash mining/recipes/llama3.1-8b.sh                 # run
#   DRY_RUN=1 bash mining/recipes/llama3.1-8b.sh       # print the commands only
# JUDGEKIT overrides the launcher (default: torchrun on 8 local GPUs; see docs/cluster.md for SLURM).
set -euo pipefail
JUDGEKIT=${JUDGEKIT:-"torchrun --nproc-per-node ${GPUS:-8} -m judgekit"}
run() { if [ -n "${DRY_RUN:-}" ]; then echo "$*"; else "$@"; fi; }
PAIR="--target meta-llama/Llama-3.1-8B-Instruct --draft meta-llama/Llama-3.2-1B-Instruct --dtype bf16"
OUT=${OUT:-runs/mined/llama3.1-8b}
run $JUDGEKIT mine --task gsm8k --split train $PAIR --out $OUT/gsm8k --layers -1,16 --batch-size 8 --resume
run $JUDGEKIT mine --task livecodebench --split test $PAIR --out $OUT/lcb --layers -1,16 --max-new-tokens 1024 \
    --batch-size 4 --resume
