#!/usr/bin/env bash
# cuobjdump and nvdisasm on a machine whose CUDA has neither (the CI machine):
# fetched once as NVIDIA's pip wheels into build-sass-tools/ (ignored by git),
# then run from there. Optional: nothing in the build or the tests needs them.
#   scripts/sass_tools.sh OBJECT [cuobjdump args...]   e.g.
#   scripts/sass_tools.sh build/libmoe_ep.a -sass -fun '_Z12mega_forwardILi128ELi6ELi32EEv11mega_params'
# With no cuobjdump args: the LDL / STL (local memory) count of OBJECT.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build-sass-tools
bin() { find "$dir" -name "$1" -type f -path '*/bin/*' 2>/dev/null | head -n1; }
if [ -z "$(bin cuobjdump)" ] || [ -z "$(bin nvdisasm)" ]; then
  mkdir -p "$dir"
  python3 -m pip download -q --no-deps --only-binary=:all: -d "$dir" nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm
  for w in "$dir"/*.whl; do python3 -m zipfile -e "$w" "$dir/unpacked"; done
  chmod +x "$(bin cuobjdump)" "$(bin nvdisasm)"
fi
export PATH="$(dirname "$(bin nvdisasm)"):$(dirname "$(bin cuobjdump)"):$PATH"
[ $# -ge 1 ] || { sed -n '2,7p' "$0"; exit 2; }
obj=$1; shift
if [ $# -eq 0 ]; then
  echo "LDL/STL in $obj: $(cuobjdump -sass "$obj" | grep -cE '\b(LDL|STL)\b' || true)"
else
  cuobjdump "$@" "$obj"
fi
