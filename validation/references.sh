#!/usr/bin/env bash
# Every CPU reference, made again by one PyTorch: reference.py, cs336.py,
# step.py, capture_zoo.py, generate.py and autocast.py (and under 1.13
# checkpoint_capture.py's capture examples), each writing (or,
# with --check, comparing with) the file of that interpreter's release
# (validation/refname.py: torch 1.13's files keep their names, 2.5's carry
# "-torch2.5"). CI runs it with Debian's 1.13 and with the 2.x that
# python/requirements-test.txt pins:
#
#   validation/references.sh /usr/bin/python3 --check
#   validation/references.sh "$BATCHFIT_PYENV" --check
#   validation/references.sh "$BATCHFIT_PYENV"          # rewrite 2.5's files
#
# Each script's time is printed: they are most of CI's time.
set -euo pipefail
cd "$(dirname "$0")"
py=${1:?usage: validation/references.sh PYTHON [--check]}
shift
release=$("$py" -c 'import torch; print(torch.__version__)')
scripts=(reference.py cs336.py step.py capture_zoo.py generate.py autocast.py)
# checkpoint_capture.py under 1.13: the capture examples only (Debian has
# no timm, peft or transformers), a second or two. Its 2.x run, which adds
# the timm and peft models, is TestCheckpointCapturedCheck's (go test).
if [[ $release == 1.13* ]]; then
  scripts+=(checkpoint_capture.py)
fi
for script in "${scripts[@]}"; do
  start=$SECONDS
  "$py" "$script" "$@"
  echo "references: $script under PyTorch $release: $((SECONDS - start)) s"
done
