#!/usr/bin/env bash
# Idempotent set-up on Debian: the cross toolchains and simulators (apt), then nnbuild and its
# Python dependencies (pip, editable). Safe to run again: it installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(gcc make gcc-avr avr-libc binutils-avr simavr libsimavr-dev libelf-dev pkg-config
              gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-user cppcheck)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c "import nnbuild, SCons, numpy, h5py, jinja2, scipy, jsonschema, pytest, xdist, hypothesis, yaml, onnx, onnxruntime" 2>/dev/null \
   || ! command -v cmake >/dev/null || ! command -v ninja >/dev/null \
   || [ "$("$PYTHON" -c 'import nnbuild, os; print(os.path.dirname(os.path.dirname(os.path.abspath(nnbuild.__file__))))' 2>/dev/null)" != "$PWD" ]; then
  echo "setup: installing nnbuild and its Python dependencies"
  if ! "$PYTHON" -m pip --version >/dev/null 2>&1; then
    $SUDO apt-get install -y -qq python3-pip >/dev/null
  fi
  if ! "$PYTHON" -m pip install -q -e ".[test]" 2>/tmp/nnbuild-pip.err; then
    # Debian's own python3 is "externally managed" (PEP 668): install beside it deliberately.
    if grep -q externally-managed /tmp/nnbuild-pip.err; then
      "$PYTHON" -m pip install -q --break-system-packages -e ".[test]"
    else
      cat /tmp/nnbuild-pip.err >&2
      exit 1
    fi
  fi
fi
