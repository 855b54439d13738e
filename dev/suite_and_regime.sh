#!/usr/bin/env bash
# device, one call (~480 s; carry build-carry): the whole suite at this tree
# (scripts/device.sh test), then the bench regime check: bf16 T = 512 and 2048,
# both geometries, split and mega, with each cell's warm-up at 200 ms (the bench's
# default), 1500 ms (past the power controller's overshoot, which the kernel lab
# saw 0.6-0.9 s into sustained load: `dev/lab_claimed.sh ssssss`), and 200 again.
# Everything lands in $OUT/all.tgz; the summary is printed last.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
out=${OUT:-/tmp/moe_ep_out}; mkdir -p "$out/s"
t0=$(date +%s)
OUT=$out/s bash scripts/device.sh test > "$out/s/device_sh.txt" 2>&1
echo "suite: $(( $(date +%s) - t0 )) s"
gunzip -kf build-carry/moe_ep_su.gz && chmod +x build-carry/moe_ep_su
for ms in 200 1500 200; do
  timeout 150 build-carry/moe_ep_su bench --paths bf16 --backends split,mega --tokens 512,2048 --iters 20 --warmup 3 \
    --sustain-ms $ms --out "$out/s/regime_${ms}_$(date +%s).md" > "$out/s/regime_${ms}_$(date +%s).log" 2>&1
  echo "bench sustain $ms ms rc=$? at $(( $(date +%s) - t0 )) s"
  grep -E "forward" "$(ls -t $out/s/regime_${ms}_*.log | head -1)" | sed 's/^/  /'
done
tar -czf "$out/all.tgz" -C "$out" s && rm -rf "$out/s/"
tar -xzOf "$out/all.tgz" s/device_sh.txt | tail -n 8
