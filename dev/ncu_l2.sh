export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 MOE_EP_KNOB_CACHE=off
m=gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,lts__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,l1tex__throughput.avg.pct_of_peak_sustained_active
for v in moe_ep moe_ep_P4 moe_ep_B; do gunzip -kf build-carry/$v.gz; chmod +x build-carry/$v
 for g in flash pro; do
 ncu --kernel-name regex:'grouped_gemm' --launch-count 2 --metrics "$m" build-carry/$v bench --paths bf16 --tokens 2048 --geometry ds-v4-$g --backends split --iters 1 --warmup 0 --sustain-ms 0 > $OUT/ncu_${v}_$g.txt 2>&1
 echo "== $v $g rc $?"; grep -E '^  [A-Za-z_].*\(|^    [a-z_]+__' $OUT/ncu_${v}_$g.txt | sed -E 's/ +/ /g' | cut -c1-150
 done; done
