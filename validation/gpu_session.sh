#!/usr/bin/env bash
# One lent GPU, one call: everything batchfit measures on a CUDA machine, each
# part under its own time limit, the results packed into $OUT (or ./gpu-out).
#   1. validation/measure.py on every case of cases.json (memory per phase),
#      in parallel shards (allocator statistics are per process, so shards do
#      not disturb each other's figures; their step times are not used), and
#      validation/rnn_cudnn.py (cuDNN RNN's saved tensors) beside them;
#   2. validation/steptime_gpu.py alone on the GPU (step times);
#   3. measure.py --maxbatch on cases-limit.json alone on the GPU (real OOMs).
# Usage: validation/gpu_session.sh GPU_CATALOG_NAME [SHARDS]
set -u
gpu=${1:?catalog name of this GPU, e.g. h200}
shards=${2:-8}
out=${OUT:-gpu-out}
work=$(mktemp -d)
here=$(cd "$(dirname "$0")" && pwd)
export PYTHONUNBUFFERED=1
mkdir -p "$out"
{ nvidia-smi; python3 -c 'import torch,torchvision,transformers;print(torch.__version__,torch.version.cuda,torch.backends.cudnn.version(),torchvision.__version__,transformers.__version__)'; } >"$work/env.txt" 2>&1
echo "== phase 1: $(date -u +%T)"
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
echo "== phase 2: $(date -u +%T)"
timeout 420 python3 "$here/steptime_gpu.py" --gpu "$gpu" --out "$work/steptime-$gpu.csv" >"$work/steptime.log" 2>&1
echo "== phase 3: $(date -u +%T)"
timeout 150 python3 "$here/measure.py" --cases "$here/cases-limit.json" --maxbatch \
  --maxbatch-growth 1.03 --maxbatch-resolution 0.01 --timeout 60 \
  --out "$work/maxbatch.json" >"$work/maxbatch.log" 2>&1
echo "== done: $(date -u +%T)"
tail -n 3 "$work"/*.log
tar -C "$work" -czf "$out/results.tar.gz" --exclude snapshots .
tar -C "$work" -czf "$out/snapshots.tar.gz" snapshots 2>/dev/null
ls -la "$out"
