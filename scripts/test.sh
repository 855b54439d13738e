#!/usr/bin/env bash
# Configure, build with every core, and run all tests (GPU tests skip without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)"
ctest --test-dir build --output-on-failure -j2
