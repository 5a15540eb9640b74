#!/usr/bin/env bash
# scripts/torch-venv.sh: makes the Python virtual environment that PyTorch scripts run in as Coach
# workers (examples/torch/, the coach.torch package) and that the PyTorch benchmarks under bench/
# use. Never needed by the build or the C++ tests.
#
#   scripts/torch-venv.sh
#
# The venv lives outside the clone at a fixed path: /opt/coach-venv, or $COACH_VENV. Idempotent:
# when `$VENV/bin/python -c 'import torch, numpy, safetensors, yaml'` works it prints one line
# and does nothing. Otherwise it installs Debian's python3-venv with apt-get where `python3 -m
# venv` is missing (sudo when not root), creates the venv (or keeps the one there) and runs `pip
# install torch numpy safetensors pyyaml` from PyPI (the torch wheel with its CUDA libraries is
# ~2.8 GB to download; what a venv has already is not fetched again). PyYAML: the PyTorch
# benchmarks read the job specs they compare against (bench/pytorch_spec.py, pytorch_check.py).
# Exit code 0 when the venv imports the four at the end.
set -euo pipefail
venv=${COACH_VENV:-/opt/coach-venv}

fail() { echo "torch-venv: $*" >&2; exit 1; }

check='import torch, numpy, safetensors, yaml; print("torch", torch.__version__)'
if [ -x "$venv/bin/python" ] && have=$("$venv/bin/python" -c "$check" 2>/dev/null); then
  echo "torch-venv: $venv already has torch, numpy, safetensors and pyyaml ($have)"
  exit 0
fi

command -v python3 >/dev/null || fail "python3 is missing (apt-get install python3)"

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"

# Debian's python3 has the venv module only with python3-venv (ensurepip is what it lacks).
if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
  echo "torch-venv: installing python3-venv with apt-get"
  $sudo apt-get update -qq || fail "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-venv >/dev/null \
    || fail "apt-get install python3-venv failed"
fi

if [ ! -x "$venv/bin/python" ]; then
  echo "torch-venv: creating the virtual environment $venv"
  parent=$(dirname "$venv")
  if [ -w "$parent" ]; then
    python3 -m venv "$venv" || fail "python3 -m venv $venv failed"
  else
    # /opt is root's: create the venv as root, then hand it to this user so pip needs no sudo.
    $sudo python3 -m venv "$venv" || fail "python3 -m venv $venv failed"
    $sudo chown -R "$(id -u):$(id -g)" "$venv" || fail "chown of $venv failed"
  fi
fi

echo "torch-venv: pip install torch numpy safetensors pyyaml into $venv (torch with its CUDA libraries: ~2.8 GB)"
"$venv/bin/python" -m pip install --upgrade pip >/dev/null || fail "pip upgrade failed in $venv"
"$venv/bin/python" -m pip install torch numpy safetensors pyyaml \
  || fail "pip install torch numpy safetensors pyyaml failed"

have=$("$venv/bin/python" -c "$check") \
  || fail "$venv/bin/python still cannot import torch, numpy, safetensors and yaml"
echo "torch-venv: ready: $venv ($have)"
