#!/usr/bin/env bash
# Three relational ELMo runs side by side on one lent GPU, from a bundle that
# `python -m lab.training.gpu_bundle pack` wrote (see lab/training/README.md).
#   bash lab/training/gpu_relational.sh BUNDLE OUT [BUDGET_MINUTES]
# Each run's exported model comes back as a tar split into parts under 15 MB (the device
# tool returns at most 8 files of at most 16 MB); its log beside them.
set -euo pipefail
BUNDLE=${1:?bundle}; OUT=${2:?out}; BUDGET=${3:-6}
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false; PY=${PYTHON:-python3}
CORPUS=${CORPUS:-data/corpus}; DEVICE=${DEVICE:-cuda}; RUNS=${RUNS:-training_runs}
"$PY" -m lab.training.gpu_bundle unpack --bundle "$BUNDLE" --corpus "$CORPUS"
[ "$DEVICE" = cpu ] || nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
"$PY" -m lab.training.gpu_bundle teacher --bundle "$BUNDLE" --corpus "$CORPUS" --layers 6 \
    --device "$DEVICE" --threads 4 --run-dirs "$RUNS/gpu-w2" "$RUNS/gpu-w4" "$RUNS/gpu-w4-b144"
COMMON=(--target relational --teacher "$BUNDLE/minilm-l6-mlm" --teacher-layers 6 --group-size 6
        --init "$BUNDLE/init" --corpus "$CORPUS" --device "$DEVICE" --threads 4 --lr-schedule time
        --budget-minutes "$BUDGET" --max-words 200000000 --warmup 30 --eval-every 200)
run() {  # name, then its own settings
    local name=$1; shift
    "$PY" -m lab.training.elmo_distill "${COMMON[@]}" "$@" --run-dir "$RUNS/$name" \
        --out "$RUNS/$name-out" > "$RUNS/$name.log" 2>&1
}
run gpu-w2 --distill-weight 2 --batch-size 36 --lr 5e-4 &
run gpu-w4 --distill-weight 4 --batch-size 36 --lr 5e-4 &
run gpu-w4-b144 --distill-weight 4 --batch-size 144 --lr 1e-3 &
status=0
wait -n || status=1; wait -n || status=1; wait -n || status=1
for name in gpu-w2 gpu-w4 gpu-w4-b144; do
    grep -v '\r' "$RUNS/$name.log" | tail -n 25 > "$RUNS/$name-out/run.log" || true
    echo "== $name"; tail -n 25 "$RUNS/$name.log" | tr '\r' '\n' | tail -n 30
    if [ -f "$RUNS/$name-out/training_report.json" ]; then
        tar -C "$RUNS" -cf - "$name-out" | split -b 15000000 - "$OUT/$name.tar."
    fi
done
exit $status
