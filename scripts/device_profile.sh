#!/usr/bin/env bash
# A device cost profile (issue 16): build llama.cpp for this machine's backend from a source
# tarball, then time verifies of a random-weight GGUF with the target's shapes (and each
# drafter's round), and write a device model file that replay reads.
#
# Usage: scripts/device_profile.sh SOURCE TARGET_SHAPE OUT_DIR [DRAFTER_SHAPE ...]
#   SOURCE        a tarball of `adaspark device-source` (or the llama-cpp-python sdist, or a
#                 llama.cpp source directory; scripts/build_llama.sh)
#   TARGET_SHAPE  a shape file (`adaspark device-shape`; data/devices/shapes/ has ours)
#   OUT_DIR       survey.jsonl, drafters.jsonl, device.yaml, profile.json, build.json
# Environment: ADASPARK_BACKEND (default auto: CUDA only where `nvidia-smi -L` lists a GPU and
# nvcc is on PATH), ADASPARK_CUDA_ARCHS (default native; 90 for an H200), ADASPARK_CACHE (where
# builds are cached, default ~/.cache/adaspark), PROFILE_ARGS (more flags for
# scripts/device_profile.py, e.g. "--widths 1,2,4,8 --contexts 443,1596 --name h200").
# Needs bash, CMake, a C/C++ compiler (nvcc for CUDA), Python 3 with numpy. Nothing else: no
# network, no model files, no llama-cpp-python. Only the libraries are built (no llama-server,
# tools, common, tests or examples; for CUDA, no FlashAttention kernels for quantized KV caches).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[[ $# -ge 3 ]] || { sed -n 6,12p "$0" >&2; exit 2; }
source_in=$1; shape=$2; out=$3; shift 3
for f in "$source_in" "$shape" "$@"; do [[ -e "$f" ]] || { echo "device_profile: $f does not exist" >&2; exit 2; }; done
python3 -c 'import numpy' 2>/dev/null || { echo "device_profile: python3 with numpy is needed" >&2; exit 2; }
mkdir -p "$out"
cache="${ADASPARK_CACHE:-$HOME/.cache/adaspark}/llama.cpp"
# shellcheck source=scripts/backend.sh
source "$here/backend.sh"
backend=$(adaspark_backend)
t0=$(date +%s)
echo "device_profile: building llama.cpp for $backend (libraries only)" >&2
bindir=$(ADASPARK_BUILD_TARGETS=llama bash "$here/build_llama.sh" "$source_in" "$cache")
t1=$(date +%s)
root=$(dirname "$(dirname "$bindir")")
src=$(cat "$root/SRC_DIR")
printf '{"backend": "%s", "build_s": %d, "build_dir": "%s"}\n' "$backend" $((t1 - t0)) "$root" >"$out/build.json"
echo "device_profile: build ready in $((t1 - t0)) s ($root)" >&2
ngl=0
[[ "$backend" == cpu ]] || ngl=-1
drafters=()
for d in "$@"; do drafters+=(--drafter "$d"); done
# shellcheck disable=SC2086
python3 "$here/device_profile.py" --lib-dir "$bindir" --bindings "$(cat "$root/BINDINGS_DIR")" \
  --gguf-py "$src/gguf-py" --build "$root/BUILD_INFO.json" --shape "$shape" --out "$out" \
  --n-gpu-layers "$ngl" "${drafters[@]}" ${PROFILE_ARGS:-}
echo "device_profile: whole run $(( $(date +%s) - t0 )) s; device model: $out/device.yaml" >&2
