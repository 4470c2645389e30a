#!/usr/bin/env bash
# Builds triforce on the lent H200 machine (Ubuntu 24.04 image with CUDA, MPI, HDF5, NCCL, GTest and Google
# Benchmark, but no Boost.Program_options). Boost 1.74 comes as Debian packages carried in .deps/ (fetched on the
# development machine with `apt-get download libboost1.74-dev libboost-program-options1.74-dev
# libboost-program-options1.74.0`), unpacked into a private prefix, never over /. To keep a call's carried files
# small, `.deps/boost-po-1.74.tar.xz` (0.5 MB) may replace the three packages (9.8 MB): the headers that
# <boost/program_options.hpp> includes (`g++ -M`) plus boost/version.hpp and libboost_program_options, taken from
# the unpacked packages.
# cuDNN's fused prefill attention needs the header-only cudnn-frontend in .deps/cudnn-frontend/include (fetched on
# the development machine: `pip download nvidia-cudnn-frontend==1.16.0 --no-deps`, then the wheel's include/ folder
# unzipped there); the image has libcudnn9-dev (9.14). Without it the build goes on with our kernels only.
# TRIFORCE_CUDA_LINEINFO=1 configures with -DTRIFORCE_CUDA_LINEINFO=ON (-lineinfo: compute-sanitizer reports name
# source lines; same code); =0 turns it off again; unset keeps what BUILD_DIR was configured with. Every CUDA
# file recompiles when it changes.
# Usage: experiments/h200/build.sh [BUILD_DIR] [extra cmake --build args]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-h200}
shift || true
deps=/opt/tfdeps
if [[ ! -f $deps/usr/include/boost/program_options.hpp ]]; then
  mkdir -p $deps
  if compgen -G ".deps/boost-po-*.tar.xz" >/dev/null; then
    for f in .deps/boost-po-*.tar.xz; do tar -xJf "$f" -C $deps; done
  elif compgen -G ".deps/*.deb" >/dev/null; then
    for f in .deps/*.deb; do dpkg -x "$f" $deps; done
  else
    echo "build.sh: no Boost in .deps/ (carry boost-po-*.tar.xz or the .deb files)" >&2; exit 1
  fi
fi
cudnn=()
if [[ -f .deps/cudnn-frontend/include/cudnn_frontend.h ]]; then
  cudnn=(-DTRIFORCE_CUDNN_FRONTEND_DIR="$PWD/.deps/cudnn-frontend/include")
else
  echo "build.sh: no .deps/cudnn-frontend/include (carry it): building without cuDNN attention" >&2
fi
lineinfo=()
case ${TRIFORCE_CUDA_LINEINFO-} in
  "") ;;
  1) lineinfo=(-DTRIFORCE_CUDA_LINEINFO=ON) ;;
  0) lineinfo=(-DTRIFORCE_CUDA_LINEINFO=OFF) ;;
  *) echo "build.sh: TRIFORCE_CUDA_LINEINFO=$TRIFORCE_CUDA_LINEINFO: expected 0 or 1" >&2; exit 2 ;;
esac
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DTRIFORCE_BENCH=ON "${cudnn[@]}" "${lineinfo[@]}" \
  -DBoost_NO_BOOST_CMAKE=ON -DBOOST_ROOT=$deps/usr -DBoost_NO_SYSTEM_PATHS=ON \
  -DBoost_INCLUDE_DIR=$deps/usr/include -DBoost_LIBRARY_DIR=$deps/usr/lib/x86_64-linux-gnu >"$build.configure.log"
grep -E "^-- +(cuDNN|CUDA lineinfo)" "$build.configure.log" | sed 's/^-- */build.sh: /' || true
if ! cmake --build "$build" -j16 "$@" >"$build/build.log" 2>&1; then
  grep -E -B2 -A6 "error" "$build/build.log" | head -60 >&2
  echo "build.sh: build failed (log: $build/build.log)" >&2
  exit 1
fi
echo "build.sh: built ${TRIFORCE_GIT_SHA:-?} in $build"
