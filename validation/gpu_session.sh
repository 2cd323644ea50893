#!/usr/bin/env bash
# One lent GPU, one call: what batchfit measures on a CUDA machine, each part
# under its own time limit, the results packed into $OUT (or ./gpu-out).
# Phases (run in the order given, default "memory steptime limit"):
#   memory    validation/measure.py on every case of cases.json (memory per
#             phase), in parallel shards (allocator statistics are per process,
#             so shards do not disturb each other's figures; their step times
#             are not used), merged by measure.py --merge, beside
#             validation/rnn_cudnn.py (cuDNN RNN's saved tensors);
#   steptime  validation/steptime_gpu.py alone on the GPU (step times);
#   limit     measure.py --maxbatch on cases-limit.json alone (real OOMs);
#   dispatch  validation/dispatch_cpu.py --device cuda alone (the host's cost
#             per op, the launch included);
#   launch1   steptime_gpu.py at batch 1 (GPT-2 at batch 1, sequence 128),
#             --count: launch-bound steps and what they issue;
#   launch32  the same at batch 32 (GPT-2 at 4, sequence 512), seven models;
#             (LAUNCH1_ONLY, LAUNCH32_ONLY, LAUNCH_FLAGS and *_TIMEOUT below)
#   snapshot  measure.py on cases-snapshot.json (allocation-level recordings);
#   banded    measure.py --maxbatch on cases-limit-banded.json alone: the
#             largest batch searched from batchfit's answer with its band;
#   kernels   validation/kernels_gpu.py alone: every kernel of one profiled
#             step of the step-time runs, with the op that launched it
#             (KERNELS_ONLY, KERNELS_DEADLINE, KERNELS_TIMEOUT);
#   gqa       measure.py on cases-gqa.json (a grouped-query Llama under each
#             SDPA kernel: memory per phase).
# Usage: validation/gpu_session.sh GPU_CATALOG_NAME [SHARDS] [PHASE ...]
set -u
gpu=${1:?catalog name of this GPU, e.g. h200}
shards=${2:-8}
shift $(($# < 2 ? $# : 2))
phases=("$@")
[ ${#phases[@]} -gt 0 ] || phases=(memory steptime limit)
known=" memory steptime limit dispatch launch1 launch32 snapshot banded kernels gqa "
for p in "${phases[@]}"; do
  case "$known" in
  *" $p "*) ;;
  *) echo "gpu_session.sh: unknown phase \"$p\" (one of:$known)" >&2; exit 2 ;;
  esac
done
out=${OUT:-gpu-out}
work=$(mktemp -d)
here=$(cd "$(dirname "$0")" && pwd)
export PYTHONUNBUFFERED=1
mkdir -p "$out"
{ nvidia-smi; python3 -c 'import torch,torchvision,transformers;print(torch.__version__,torch.version.cuda,torch.backends.cudnn.version(),torchvision.__version__,transformers.__version__)'; } >"$work/env.txt" 2>&1

memory() {
  python3 "$here/measure.py" --list >"$work/ids.txt" 2>&1
  mapfile -t ids < <(grep -E '^[A-Za-z0-9._-]+$' "$work/ids.txt")
  for ((s = 0; s < shards; s++)); do
    sel=()
    for ((i = s; i < ${#ids[@]}; i += shards)); do sel+=("${ids[i]}"); done
    timeout 200 python3 "$here/measure.py" --out "$work/measure-$s.json" --timeout 150 \
      --snapshot-dir "$work/snapshots" --only "${sel[@]}" >"$work/measure-$s.log" 2>&1 &
  done
  timeout 120 python3 "$here/rnn_cudnn.py" --out "$work/rnn-cudnn.json" >"$work/rnn.log" 2>&1 &
  wait
  python3 "$here/measure.py" --merge "$work"/measure-*.json --out "$work/measure.json" >>"$work/merge.log" 2>&1
}
steptime() {
  timeout 420 python3 "$here/steptime_gpu.py" --gpu "$gpu" --out "$work/steptime-$gpu.csv" >"$work/steptime.log" 2>&1
}
limit() {
  timeout 150 python3 "$here/measure.py" --cases "$here/cases-limit.json" --maxbatch \
    --maxbatch-growth 1.03 --maxbatch-resolution 0.01 --timeout 60 \
    --out "$work/maxbatch.json" >"$work/maxbatch.log" 2>&1
}
dispatch() {
  timeout 90 python3 "$here/dispatch_cpu.py" --device cuda --out "$work/dispatch-$gpu.json" >"$work/dispatch.log" 2>&1
}
# LAUNCH1_ONLY / LAUNCH32_ONLY: comma-separated models (launch32's default is
# seven); LAUNCH_FLAGS: steptime_gpu.py's flags (default --count)
launch1() {
  timeout ${LAUNCH1_TIMEOUT:-150} python3 "$here/steptime_gpu.py" --gpu "$gpu" --batch 1 --gpt2-batch 1 --gpt2-seq 128 \
    ${LAUNCH_FLAGS:---count} ${LAUNCH1_ONLY:+--only "$LAUNCH1_ONLY"} \
    --out "$work/steptime-$gpu-b1.csv" >"$work/launch-b1.log" 2>&1
}
launch32() {
  timeout ${LAUNCH32_TIMEOUT:-80} python3 "$here/steptime_gpu.py" --gpu "$gpu" --batch 32 --gpt2-batch 4 --gpt2-seq 512 \
    ${LAUNCH_FLAGS:---count} --only "${LAUNCH32_ONLY:-resnet50,efficientnet_b0,mobilenet_v3_small,convnext_tiny,vit_b_16,vit_b_32,gpt2}" \
    --out "$work/steptime-$gpu-b32.csv" >"$work/launch-b32.log" 2>&1
}
snapshot() {
  timeout 100 python3 "$here/measure.py" --cases "$here/cases-snapshot.json" --timeout 80 \
    --snapshot-dir "$work/snapshots" --out "$work/snapshot-cases.json" >"$work/snapshot.log" 2>&1
}
banded() {
  timeout 150 python3 "$here/measure.py" --cases "$here/cases-limit-banded.json" --maxbatch \
    --maxbatch-growth 1.03 --maxbatch-resolution 0.01 --timeout 60 \
    --out "$work/maxbatch-banded.json" >"$work/maxbatch-banded.log" 2>&1
}
kernels() {
  timeout ${KERNELS_TIMEOUT:-330} python3 "$here/kernels_gpu.py" --gpu "$gpu" --out "$work/kernels" \
    --deadline ${KERNELS_DEADLINE:-270} ${KERNELS_ONLY:+--only "$KERNELS_ONLY"} >"$work/kernels.log" 2>&1
}
gqa() {
  timeout ${GQA_TIMEOUT:-150} python3 "$here/measure.py" --cases "$here/cases-gqa.json" --timeout 60 \
    --out "$work/gqa.json" >"$work/gqa.log" 2>&1
}

# packed after every phase: a call cut short by its time limit still brings
# back what the phases before had measured
pack() {
  tar -C "$work" -czf "$out/results.tar.gz.part" --exclude snapshots . && mv "$out/results.tar.gz.part" "$out/results.tar.gz"
  if [ -d "$work/snapshots" ]; then
    tar -C "$work" -czf "$out/snapshots.tar.gz.part" snapshots && mv "$out/snapshots.tar.gz.part" "$out/snapshots.tar.gz"
  fi
}
for p in "${phases[@]}"; do
  echo "== $p: $(date -u +%T)"
  "$p"
  pack
done
echo "== done: $(date -u +%T)"
tail -n 3 "$work"/*.log
ls -la "$out"
