#!/usr/bin/env bash
# Idempotent set-up on Debian: the cross toolchains and simulators (apt), then nnbuild and its
# Python dependencies (pip, editable). Safe to run again: it installs only what is missing.
#   bash scripts/setup.sh [--with-otawa]
# --with-otawa also builds OTAWA 2 with its ARM loader (the WCET analyzer of target=arm) from
# ../shared/third_party/otawa, once per source hash, into nnbuild's cache (about 5 minutes), where
# nnbuild finds it without PATH changes.
set -euo pipefail
cd "$(dirname "$0")/.."
WITH_OTAWA=0
for arg in "$@"; do
  case "$arg" in
    --with-otawa) WITH_OTAWA=1 ;;
    *) echo "setup: unknown option '$arg' (known: --with-otawa)" >&2; exit 2 ;;
  esac
done

APT_PACKAGES=(gcc make gcc-avr avr-libc binutils-avr simavr libsimavr-dev libelf-dev pkg-config
              gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-user qemu-system-arm cppcheck strace)

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
if ! "$PYTHON" -c "import nnbuild, SCons, numpy, h5py, jinja2, scipy, jsonschema, elftools, pytest, xdist, hypothesis, yaml, onnx, onnxruntime, sklearn, tflite, capstone; assert tuple(map(int, xdist.__version__.split('.')[:2])) >= (3, 6)" 2>/dev/null \
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

if [ "$WITH_OTAWA" = 1 ]; then
  src="$PWD/../shared/third_party/otawa"
  if [ ! -f "$src/build-otawa.sh" ]; then
    echo "setup: --with-otawa needs OTAWA's pinned sources in $src (../shared beside this checkout)" >&2
    exit 1
  fi
  cache="${NNBUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nnbuild}"
  hash=$(cd "$src" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
  prefix="$cache/otawa-$hash"
  if [ ! -f "$prefix/.nnbuild-complete" ]; then
    echo "setup: building OTAWA from $src into $prefix (about 5 minutes)"
    rm -rf "$prefix" && mkdir -p "$prefix"
    work=$(mktemp -d)
    # Debian's cmake first: a pip cmake 4 refuses OTAWA's old cmake_minimum_required
    if ! $SUDO env PATH="/usr/bin:/bin:/usr/sbin:/sbin" CMAKE_POLICY_VERSION_MINIMUM=3.5 \
         bash "$src/build-otawa.sh" "$prefix" "$work" >"$work/build.log" 2>&1 || [ ! -x "$prefix/bin/owcet" ] \
       || [ ! -f "$prefix/lib/otawa/loader/arm.so" ] || ! ls "$prefix"/lib/otawa/ilp/*.so >/dev/null 2>&1; then
      tail -n 20 "$work/build.log" >&2
      echo "setup: the OTAWA build failed (logs in $work)" >&2
      exit 1
    fi
    "$prefix/bin/owcet" --help >/dev/null 2>&1 || true
    touch "$prefix/.nnbuild-complete"
    rm -rf "$work"
  fi
  echo "$prefix" > "$cache/otawa.current"
  echo "setup: OTAWA in $prefix"
fi
