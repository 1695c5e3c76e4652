#!/usr/bin/env bash
# Build, once per machine, the llama.cpp that llama-cpp-python vendors: its shared libraries
# (loaded by llama-cpp-python through LLAMA_CPP_LIB_PATH) and llama-server, from one CMake tree.
# The patches in scripts/llama-patches/ are applied first (one today: the qwen2 graph records
# its layer inputs, which DSpark capture needs; nothing else in llama.cpp changes); they are part
# of the cache key and listed, with their sha256, in the build's PATCHES file.
# Usage: scripts/build_llama.sh SDIST_TARBALL CACHE_DIR
# Prints the directory holding lib*.so and llama-server. Reuses a finished build in CACHE_DIR.
set -euo pipefail
sdist=$1
cache=$2
ver=$(basename "$sdist" .tar.gz)
patches=$(cd "$(dirname "$0")/llama-patches" && pwd)
patch_sums=$(cd "$patches" && sha256sum -- *.patch)
key=$( { sha256sum "$sdist" | cut -c1-16; echo "$patch_sums"; uname -m; gcc -dumpfullversion; grep -m1 -o 'avx512f\|avx2' /proc/cpuinfo || true; } | sha256sum | cut -c1-12)
root="$cache/$ver-$key"
out="$root/build/bin"
if [[ -f "$root/BUILD_OK" ]]; then echo "$out"; exit 0; fi
echo "building llama.cpp from $ver into $root (about 10 minutes on 2 cores)" >&2
rm -rf "$root"; mkdir -p "$root"
tar -xzf "$sdist" -C "$root"
src="$root/$ver/vendor/llama.cpp"
for p in "$patches"/*.patch; do
  patch -p1 -d "$src" --forward --batch <"$p" >"$root/patch.log" 2>&1 \
    || { echo "patch $(basename "$p") does not apply to $ver:" >&2; cat "$root/patch.log" >&2; exit 1; }
done
echo "$patch_sums" >"$root/PATCHES"
cmake -S "$src" -B "$root/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
  -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
  -DLLAMA_CURL=OFF >"$root/cmake-configure.log" 2>&1 || { tail -30 "$root/cmake-configure.log" >&2; exit 1; }
cmake --build "$root/build" -j "$(nproc)" --target llama llama-server >"$root/cmake-build.log" 2>&1 \
  || { tail -30 "$root/cmake-build.log" >&2; exit 1; }
(cd "$src" && git rev-parse HEAD 2>/dev/null || echo unknown) >"$root/LLAMA_COMMIT"
touch "$root/BUILD_OK"
echo "$out"
