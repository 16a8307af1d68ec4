#!/usr/bin/env bash
# Installs NVRTC 13.0 (and the CUDA headers NVRTC needs for cuda_fp16.h / cuda_bf16.h) and nvdisasm
# from PyPI wheels into .tools/cuda13, without a CUDA toolkit or a GPU. Idempotent.
#
# Usage:   eval "$(scripts/setup-nvrtc.sh)"
# It prints (on stdout) the two export lines the runner needs; progress goes to stderr:
#   LD_LIBRARY_PATH      gets .tools/cuda13/lib (libnvrtc.so.13, libnvrtc-builtins.so.13.0):
#                        cudarc loads libnvrtc by name through the normal library search.
#   HOPFUSE_CUDA_INCLUDE = .tools/cuda13/include: NVRTC 13.0 has no built-in cuda_fp16.h /
#                        cuda_bf16.h, so the runner passes this directory as --include-path.
#   HOPFUSE_NVDISASM     = .tools/cuda13/bin/nvdisasm: SASS with line info for `hopfuse compile
#                        --sass`, `nvrtc-check --inspect` and POST /api/inspect.
set -euo pipefail

NVRTC_VERSION=13.0.88    # nvidia-cuda-nvrtc: libnvrtc.so.13 + libnvrtc-builtins.so.13.0
RUNTIME_VERSION=13.0.96  # nvidia-cuda-runtime: include/ (cuda_fp16.h, cuda_bf16.h, ...)
# nvidia-cuda-nvdisasm: bin/nvdisasm. PyPI has no 13.0 build of it (its wheels start at 13.2);
# nvdisasm reads the CUBINs of older 13.x compilers, and 13.2.86 is checked on NVRTC 13.0's
# sm_90a CUBINs (nvrtc-check --inspect).
NVDISASM_VERSION=13.2.86

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tools="$root/.tools"
dest="$tools/cuda13"
lib="$dest/lib"
inc="$dest/include"
wheels="$tools/wheels"

log() { echo "setup-nvrtc: $*" >&2; }

fetch() { # package version -> path of the wheel
  local pkg=$1 ver=$2 name
  name=${pkg//-/_}
  local found
  found=$(ls "$wheels/$name-$ver-"*.whl 2>/dev/null | head -n 1 || true)
  if [ -z "$found" ]; then
    log "downloading $pkg==$ver"
    python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$wheels" "$pkg==$ver" >&2
    found=$(ls "$wheels/$name-$ver-"*.whl | head -n 1)
  fi
  echo "$found"
}

unzip_py() { # wheel dest-dir member-prefix: extract members under prefix, stripping it
  # (files under bin/ and shared libraries become executable)
  python3 - "$1" "$2" "$3" <<'PY'
import os, shutil, sys, zipfile
whl, dest, prefix = sys.argv[1:]
os.makedirs(dest, exist_ok=True)
with zipfile.ZipFile(whl) as z:
    for m in z.infolist():
        if m.is_dir() or not m.filename.startswith(prefix):
            continue
        rel = m.filename[len(prefix):]
        if ".alt." in rel:  # alternative builds of the same libraries: not needed
            continue
        out = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with z.open(m) as src, open(out + ".part", "wb") as dst:
            shutil.copyfileobj(src, dst)
        executable = rel.endswith((".so", ".13", ".13.0")) or prefix.endswith("/bin/")
        os.chmod(out + ".part", 0o755 if executable else 0o644)
        os.replace(out + ".part", out)
PY
}

mkdir -p "$wheels"
if [ ! -f "$lib/libnvrtc.so.13" ] || [ ! -f "$lib/libnvrtc-builtins.so.13.0" ] \
  || [ ! -f "$dest/.nvrtc-$NVRTC_VERSION" ]; then
  whl=$(fetch nvidia-cuda-nvrtc "$NVRTC_VERSION")
  log "unpacking $(basename "$whl")"
  unzip_py "$whl" "$lib" "nvidia/cu13/lib/"
  touch "$dest/.nvrtc-$NVRTC_VERSION"
fi
if [ ! -f "$inc/cuda_fp16.h" ] || [ ! -f "$inc/cuda_bf16.h" ] \
  || [ ! -f "$dest/.runtime-$RUNTIME_VERSION" ]; then
  whl=$(fetch nvidia-cuda-runtime "$RUNTIME_VERSION")
  log "unpacking headers of $(basename "$whl")"
  unzip_py "$whl" "$inc" "nvidia/cu13/include/"
  touch "$dest/.runtime-$RUNTIME_VERSION"
fi
if [ ! -x "$dest/bin/nvdisasm" ] || [ ! -f "$dest/.nvdisasm-$NVDISASM_VERSION" ]; then
  whl=$(fetch nvidia-cuda-nvdisasm "$NVDISASM_VERSION")
  log "unpacking $(basename "$whl")"
  unzip_py "$whl" "$dest/bin" "nvidia/cu13/bin/"
  touch "$dest/.nvdisasm-$NVDISASM_VERSION"
fi
# The wheels are only a download cache: drop them once unpacked (they are ~100 MB).
rm -f "$wheels"/*.whl
log "NVRTC $NVRTC_VERSION in $lib, headers in $inc, nvdisasm $NVDISASM_VERSION in $dest/bin"

echo "export LD_LIBRARY_PATH=\"$lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\""
echo "export HOPFUSE_CUDA_INCLUDE=\"$inc\""
echo "export HOPFUSE_NVDISASM=\"$dest/bin/nvdisasm\""
