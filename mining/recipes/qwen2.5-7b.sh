#!/usr/bin/env bash
# Mining for the paper's main pair: Qwen2.5-7B-Instruct (target) / Qwen2.5-0.5B-Instruct (draft), on GSM8K
# train (7,473 problems) and LiveCodeBench (880 problems). One node of 8 GPUs; a rerun resumes.
#   bash mining/recipes/qwen2.5-7b.sh            DRY_RUN=1 bash mining/recipes/qwen2.5-7b.sh
set -euo pipefail
JUDGEKIT=${JUDGEKIT:-"torchrun --nproc-per-node ${GPUS:-8} -m judgekit"}
run() { if [ -n "${DRY_RUN:-}" ]; then echo "$*"; else "$@"; fi; }
PAIR="--target Qwen/Qwen2.5-7B-Instruct --draft Qwen/Qwen2.5-0.5B-Instruct --dtype bf16"
OUT=${OUT:-runs/mined/qwen2.5-7b}
run $JUDGEKIT mine --task gsm8k --split train $PAIR --out $OUT/gsm8k --layers -1,14 --batch-size 8 --resume
run $JUDGEKIT mine --task livecodebench --split test $PAIR --out $OUT/lcb --layers -1,14 --max-new-tokens 1024 \
    --batch-size 4 --resume
