#!/usr/bin/env bash
# Judges for the qwen2.5-72b-gptq pair from its mined GSM8K and LiveCodeBench directories (mining/recipes/qwen2.5-72b-gptq.sh): the
# paper's 9:1 and 1:9 math:code mixes at the same budget, linear heads on the final layer. CPU is enough
# (a judge head is a few thousand parameters); the eval recipes read judges/qwen2.5-72b-gptq-9to1 and judges/qwen2.5-72b-gptq-1to9.
#   bash training/recipes/qwen2.5-72b-gptq.sh                  DRY_RUN=1 bash training/recipes/qwen2.5-72b-gptq.sh
set -euo pipefail
JUDGEKIT=${JUDGEKIT:-judgekit}
run() { if [ -n "${DRY_RUN:-}" ]; then echo "$*"; else "$@"; fi; }
MINED=${MINED:-runs/mined/qwen2.5-72b-gptq}
run $JUDGEKIT train --data $MINED/gsm8k $MINED/lcb --mix 9:1 --layer -1 --out judges/qwen2.5-72b-gptq-9to1 --accelerator cpu --devices 1
run $JUDGEKIT train --data $MINED/gsm8k $MINED/lcb --mix 1:9 --layer -1 --out judges/qwen2.5-72b-gptq-1to9 --accelerator cpu --devices 1
