#!/usr/bin/env bash
# Mining for the paper's large pair: Qwen2.5-72B-Instruct, GPTQ Int4 (target, ~41 GB) / Qwen2.5-0.5B-Instruct
# (draft). The GPTQ checkpoint loads as transformers loads it (pip install gptqmodel optimum); --device-map auto
# spreads it over the GPUs one process sees, so run ONE process per GPU group (e.g. 4 groups of 2 GPUs on a
# node: GROUP=0..3), not one per GPU; docs/cluster.md has the SLURM form. Quantised and sharded models decode
# on the transformers backend. A rerun resumes.
#   bash mining/recipes/qwen2.5-72b-gptq.sh      DRY_RUN=1 bash mining/recipes/qwen2.5-72b-gptq.sh
set -euo pipefail
JUDGEKIT=${JUDGEKIT:-"python -m judgekit"}
run() { if [ -n "${DRY_RUN:-}" ]; then echo "$*"; else "$@"; fi; }
PAIR="--target Qwen/Qwen2.5-72B-Instruct-GPTQ-Int4 --draft Qwen/Qwen2.5-0.5B-Instruct --dtype fp16 --device-map auto"
OUT=${OUT:-runs/mined/qwen2.5-72b-gptq}
run $JUDGEKIT mine --task gsm8k --split train $PAIR --out $OUT/gsm8k --layers -1,40 --batch-size 4 --resume
run $JUDGEKIT mine --task livecodebench --split test $PAIR --out $OUT/lcb --layers -1,40 --max-new-tokens 1024 \
    --batch-size 2 --resume
