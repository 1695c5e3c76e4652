#!/usr/bin/env bash
# The compute backend llama.cpp is built for (issue 16): ADASPARK_BACKEND=cpu|cuda|metal|auto,
# default auto. auto picks cuda only when a GPU is usable now (`nvidia-smi -L` lists one and nvcc
# is on PATH), metal only on macOS, and cpu otherwise: a machine with nvcc but no GPU (this one,
# CI) builds for the CPU. Sourced, it defines adaspark_backend; run, it prints the choice.
adaspark_backend() {
  local want="${ADASPARK_BACKEND:-auto}"
  case "$want" in
    cpu|cuda|metal) echo "$want"; return 0 ;;
    auto) ;;
    *) echo "ADASPARK_BACKEND=$want: one of cpu, cuda, metal, auto" >&2; return 2 ;;
  esac
  if [[ "$(uname -s)" == Darwin ]]; then echo metal; return 0; fi
  if command -v nvcc >/dev/null 2>&1 && command -v nvidia-smi >/dev/null 2>&1 \
      && nvidia-smi -L 2>/dev/null | grep -q '^GPU [0-9]'; then
    echo cuda; return 0
  fi
  echo cpu
}
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then adaspark_backend; fi
