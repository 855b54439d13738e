#!/usr/bin/env bash
# Configure, build, and run the demo: build/tools/moe_ep run [options].
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release --log-level=WARNING
cmake --build build -j "$(nproc)"
exec build/tools/moe_ep run "$@"
