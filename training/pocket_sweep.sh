#!/usr/bin/env bash
# Mine pocket-math and pocket-code with the shipped pair, then train the 9:1 ... 1:9 mixture sweep.
# Usage: bash training/pocket_sweep.sh OUT_DIR   (env: MATH_LIMIT, CODE_LIMIT, BATCH, JUDGEKIT)
set -euo pipefail
out=${1:?usage: pocket_sweep.sh OUT_DIR}
jk=${JUDGEKIT:-python -m judgekit}
common=(--target pocket-target --draft pocket-draft --batch-size "${BATCH:-8}" --layers=-1 --draft-features --resume)
$jk mine --task pocket-math --out "$out/mine-pm" --limit "${MATH_LIMIT:-1500}" "${common[@]}"
$jk mine --task pocket-code --out "$out/mine-pc" --limit "${CODE_LIMIT:-805}" "${common[@]}"
$jk train --data "$out/mine-pm" "$out/mine-pc" --out "$out/sweep" --mix-sweep 9:1,7:3,5:5,3:7,1:9 --quiet
