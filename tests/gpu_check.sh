#!/usr/bin/env bash
# GPU evidence, for a machine with CUDA (never needed by CI): the runtime's in-process tests, the CPU
# programs' tests (a user's --no-cuda trained on a GPU machine) and the
# end-to-end suite, whose migrated runs then train on the GPU with NCCL, one process per GPU (at most
# two). Run from the repository root: `bash tests/gpu_check.sh [pytest -k expression]`.
# Logs go to $OUT (default: a temporary folder). libcst wheels in .whl/ are installed first, for a
# machine that cannot reach a package index.
set -uo pipefail
out="${OUT:-$(mktemp -d)}"
python=python3
export OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
# Every launch a new process tree, as when this check was last run on a GPU: forked launches
# (tests/launch_forked.py) have not been tried with CUDA and NCCL yet.
export DDP_MIGRATE_TEST_FRESH_LAUNCHES=1
if compgen -G ".whl/*.whl" > /dev/null; then
    "$python" -m pip install -q --no-index --no-deps --no-compile .whl/*.whl || exit 2
fi
"$python" -m pip install -q --no-index --no-deps --no-build-isolation -e . || exit 2
nvidia-smi -L 2>&1 | tee "$out/devices.txt"
"$python" - <<'PY' 2>&1 | tee -a "$out/devices.txt"
import torch, torch.distributed as dist
print("torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count(),
      "nccl", dist.is_nccl_available() and ".".join(map(str, torch.cuda.nccl.version())))
PY
selection=("$@")
status=0
"$python" -m pytest -q -p no:cacheprovider -p no:warnings tests/test_runtime.py \
    tests/test_runtime_accelerator.py tests/test_runtime_snapshot.py tests/test_cpu_programs.py \
    ${selection:+-k "${selection[*]}"} \
    2>&1 | tee "$out/runtime.log" || status=1
"$python" -m pytest -q -p no:cacheprovider -p no:warnings --durations=5 tests/test_e2e.py \
    ${selection:+-k "${selection[*]}"} 2>&1 | tee "$out/e2e.log" || status=1
echo "gpu_check: exit $status; logs in $out"
exit $status
