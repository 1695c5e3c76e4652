#!/usr/bin/env bash
# Build, once per machine, the llama.cpp that llama-cpp-python vendors: its shared libraries
# (loaded by llama-cpp-python through LLAMA_CPP_LIB_PATH) and llama-server, from one CMake tree,
# for one compute backend (scripts/backend.sh: ADASPARK_BACKEND=cpu|cuda|metal|auto).
# The patches in scripts/llama-patches/ are applied first (one today: the qwen2 graph records
# its layer inputs, which DSpark capture needs; nothing else in llama.cpp changes); they are part
# of the cache key and listed, with their sha256, in the build's PATCHES file.
#
# Usage: scripts/build_llama.sh SOURCE CACHE_DIR
#   SOURCE is the llama-cpp-python sdist (patched here); or a source tarball made by
#   `adaspark device-source` (patched when it was packed: its SOURCE.json carries the sdist's
#   hash and the patches, so its build has the sdist's cache key); or a llama.cpp source
#   directory, built as it is (keyed by its files' contents; no patches applied).
# Environment:
#   ADASPARK_BACKEND       cpu | cuda | metal | auto (default auto; scripts/backend.sh)
#   ADASPARK_CUDA_ARCHS    CMAKE_CUDA_ARCHITECTURES of a CUDA build (default native: the GPU
#                          present; 90 for an H200)
#   ADASPARK_BUILD_TARGETS CMake targets (default "llama llama-server"; "llama" builds the
#                          libraries alone, as scripts/device_profile.sh does)
#   ADASPARK_PRINT_ROOT    set: print the build directory this source and backend key to, and
#                          stop (nothing is built)
# The cache key: the source's hash, the patches, the CPU architecture, the compiler, the CPU's
# widest vector set, the extra C flags (x86-64: AMX kernels off), and for a GPU build its backend and architectures (a CPU build keeps the
# key it had before backends were recorded). A finished build with every target asked for is
# reused; one missing a target gets it added. Prints the directory holding lib*.so (and
# llama-server); BUILD_INFO.json beside it records backend, architectures, targets, source.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/backend.sh
source "$here/backend.sh"
src_in=$1
cache=$2
backend=$(adaspark_backend)
targets=${ADASPARK_BUILD_TARGETS:-llama llama-server}
archs=""
case "$backend" in
  cuda)
    command -v nvcc >/dev/null 2>&1 || { echo "ADASPARK_BACKEND=cuda needs nvcc on PATH" >&2; exit 1; }
    archs=${ADASPARK_CUDA_ARCHS:-native} ;;
  metal)
    [[ "$(uname -s)" == Darwin ]] || { echo "ADASPARK_BACKEND=metal needs macOS" >&2; exit 1; } ;;
esac

if [[ -d "$src_in" ]]; then
  kind=dir
  ver=llama.cpp-src
  sha16=$(cd "$src_in" && find . -type f \( -path ./models -o -path ./docs -o -path ./.git \
    -o -path ./build \) -prune -o -type f -print | LC_ALL=C sort | xargs -d '\n' sha256sum \
    | sha256sum | cut -c1-16)
  patch_sums="none (a source directory, built as it is)"
elif [[ "$(basename "$src_in")" == llama_cpp_python-*.tar.gz ]]; then
  kind=sdist
  ver=$(basename "$src_in" .tar.gz)
  sha16=$(sha256sum "$src_in" | cut -c1-16)
  patch_sums=$(cd "$here/llama-patches" && sha256sum -- *.patch)
else
  kind=packed
  meta=$(tar -xzf "$src_in" -O adaspark-llama-src/SOURCE.json 2>/dev/null) \
    || { echo "$src_in is neither the llama-cpp-python sdist nor a tarball of \`adaspark device-source\` (no adaspark-llama-src/SOURCE.json)" >&2; exit 1; }
  field() { printf '%s' "$meta" | python3 -c "import json, sys; print(json.load(sys.stdin)['$1'].strip())"; }
  ver=$(field sdist)
  sha16=$(field sdist_sha16)
  patch_sums=$(field patches)
fi
compiler=$( (gcc -dumpfullversion || cc --version | head -1) 2>/dev/null)
# No AMX kernels: on an x86-64 CPU with AMX, -march=native compiles ggml's AMX matrix kernels,
# and the vendored version's ggml_backend_amx_mul_mat crashed (SIGSEGV) on the first decode of
# every model here (2026-12-05), while AMX itself worked in a standalone test. Off everywhere,
# so that a machine with AMX and one without run the same kernels.
cpu_flags=""
[[ "$(uname -m)" == x86_64 ]] && cpu_flags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
gpu_part=""
[[ "$backend" == cpu ]] || gpu_part="backend=$backend archs=$archs"
key=$( { echo "$sha16"; echo "$patch_sums"; uname -m; echo "$compiler"; \
  grep -m1 -o 'avx512f\|avx2' /proc/cpuinfo 2>/dev/null || true; \
  [[ -z "$cpu_flags" ]] || echo "cflags=$cpu_flags"; \
  [[ -z "$gpu_part" ]] || echo "$gpu_part"; } | sha256sum | cut -c1-12)
root="$cache/$ver-$key"
out="$root/build/bin"
if [[ -n "${ADASPARK_PRINT_ROOT:-}" ]]; then echo "$root"; exit 0; fi  # where it would build

have_targets() { # every target asked for was built in $root
  [[ -f "$root/BUILD_OK" ]] || return 1
  local built
  built=$(cat "$root/TARGETS" 2>/dev/null || echo "llama llama-server")
  for t in $targets; do [[ " $built " == *" $t "* ]] || return 1; done
}
write_info() {
  local archs_json=null
  [[ -z "$archs" ]] || archs_json="\"$archs\""
  cat >"$root/BUILD_INFO.json" <<JSON
{"backend": "$backend", "cuda_architectures": $archs_json, "targets": "$(cat "$root/TARGETS")", "cflags": "$cpu_flags", "source_kind": "$kind", "source": "$src_in", "sdist": "$ver", "sdist_sha16": "$sha16", "key": "$key"}
JSON
}
if have_targets; then
  if [[ ! -f "$root/BUILD_INFO.json" && "$kind" == sdist ]]; then  # a build made before these files
    echo "llama llama-server" >"$root/TARGETS"
    echo "$sha16" >"$root/SDIST_SHA16"
    echo "$root/$ver/vendor/llama.cpp" >"$root/SRC_DIR"
    echo "$root/$ver" >"$root/BINDINGS_DIR"
    write_info
  fi
  echo "$out"; exit 0
fi

if [[ -f "$root/BUILD_OK" ]]; then  # a finished build missing a target: add it to the tree
  targets=$(echo "$(cat "$root/TARGETS" 2>/dev/null || echo "llama llama-server") $targets" | tr ' ' '\n' | awk 'NF && !s[$0]++' | tr '\n' ' ')
  src=$(cat "$root/SRC_DIR")
  rm -f "$root/BUILD_OK"
else
  echo "building llama.cpp ($backend${archs:+, CUDA architectures $archs}; targets: $targets) from $ver into $root (about 7 minutes on 2 cores for the CPU)" >&2
  rm -rf "$root"; mkdir -p "$root"
  case "$kind" in
    sdist)
      tar -xzf "$src_in" -C "$root"
      src="$root/$ver/vendor/llama.cpp"
      bindings="$root/$ver"
      for p in "$here/llama-patches"/*.patch; do
        patch -p1 -d "$src" --forward --batch <"$p" >"$root/patch.log" 2>&1 \
          || { echo "patch $(basename "$p") does not apply to $ver:" >&2; cat "$root/patch.log" >&2; exit 1; }
      done ;;
    packed)
      tar -xzf "$src_in" -C "$root"
      src="$root/adaspark-llama-src/llama.cpp"
      bindings="$root/adaspark-llama-src/bindings" ;;
    dir)
      src=$(cd "$src_in" && pwd)
      bindings=${ADASPARK_BINDINGS:-$(cd "$src/../.." && pwd)} ;;
  esac
  echo "$patch_sums" >"$root/PATCHES"
  echo "$sha16" >"$root/SDIST_SHA16"
  echo "$src" >"$root/SRC_DIR"
  echo "$bindings" >"$root/BINDINGS_DIR"
  (cd "$src" && git rev-parse HEAD 2>/dev/null || echo unknown) >"$root/LLAMA_COMMIT"
fi
server=OFF
[[ " $targets " == *" llama-server "* ]] && server=ON
backend_flags=(-DGGML_CUDA=OFF)
case "$backend" in
  cuda) backend_flags=(-DGGML_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=$archs" -DGGML_CUDA_FA_ALL_QUANTS=OFF) ;;
  metal) backend_flags=(-DGGML_METAL=ON) ;;
esac
cmake -S "$src" -B "$root/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
  -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON "${backend_flags[@]}" \
  "-DCMAKE_C_FLAGS=$cpu_flags" "-DCMAKE_CXX_FLAGS=$cpu_flags" \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=$server \
  -DLLAMA_BUILD_SERVER=$server -DLLAMA_BUILD_COMMON=$server -DLLAMA_BUILD_APP=OFF \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
  -DLLAMA_CURL=OFF >"$root/cmake-configure.log" 2>&1 || { tail -30 "$root/cmake-configure.log" >&2; exit 1; }
# shellcheck disable=SC2086
cmake --build "$root/build" -j "$(nproc 2>/dev/null || sysctl -n hw.ncpu)" --target $targets \
  >"$root/cmake-build.log" 2>&1 || { tail -30 "$root/cmake-build.log" >&2; exit 1; }
echo "$targets" | xargs >"$root/TARGETS"
write_info
touch "$root/BUILD_OK"
echo "$out"
