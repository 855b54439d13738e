/* Routing plan on the device, no host synchronisation:
 *   plan_begin   T of every rank (host value or device memory, range-checked),
 *                expert counts cleared;
 *   plan_count   per slot: id checked, position in its expert's rows taken
 *                with an atomic (the order is free: results are position
 *                independent);
 *   plan_scan    expert row offsets and GEMM tile offsets (one block). */
#include "kernels/plan_scan.cuh"

__global__ void plan_begin(moe_ep_split_dims_t d, moe_ep_split_bufs_t b, moe_ep_split_io_t io)
{
    if (moe_ep_dev_failed(b.error)) return;
    for (int e = threadIdx.x; e < d.E; e += blockDim.x) b.expert_count[e] = 0;
    for (int r = threadIdx.x; r < d.R; r += blockDim.x) {
        int t = io.t_device ? io.t_device[r] : io.t_host[r];
        if (t < 0 || t > d.T_max) {
            moe_ep_dev_fail(b.error, MOE_EP_DEVERR_BAD_TOKENS, (uint32_t)r);
            t = 0;
        }
        b.tokens[r] = t;
    }
}

__global__ void plan_count(moe_ep_split_dims_t d, moe_ep_split_bufs_t b, moe_ep_split_io_t io)
{
    if (moe_ep_dev_failed(b.error)) return;
    int64_t per_rank = (int64_t)d.T_max * d.K;
    int64_t s = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= per_rank * d.R) return;
    int r = (int)(s / per_rank);
    int64_t i = s % per_rank; /* t * K + k */
    int32_t pos = -1;
    if (i / d.K < b.tokens[r]) {
        int32_t id = io.ids[r][i];
        int32_t local = id - d.first_expert;
        if (id < -1 || id >= d.num_experts_global || (id >= 0 && (local < 0 || local >= d.E)))
            moe_ep_dev_fail(b.error, MOE_EP_DEVERR_BAD_EXPERT, (uint32_t)s);
        else if (id >= 0)
            pos = atomicAdd(&b.expert_count[local], 1);
    }
    b.slot_pos[s] = pos;
}

/* One block: expert row offsets and tile offsets (plan_scan.cuh). */
__global__ void plan_scan(moe_ep_split_dims_t d, moe_ep_split_bufs_t b)
{
    if (moe_ep_dev_failed(b.error)) return;
    moe_ep_scan_experts(b.expert_count, d.E, d.tile_rows, b.expert_offset, b.tile_offset);
}

extern "C" moe_ep_status_t moe_ep_launch_plan(const moe_ep_split_dims_t *d, const moe_ep_split_bufs_t *b,
                                              const moe_ep_split_io_t *io, moe_ep_stream_t stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    plan_begin<<<1, 256, 0, s>>>(*d, *b, *io);
    MOE_EP_CHECK(moe_ep_launch_check("plan_begin"));
    int64_t slots = (int64_t)d->R * d->T_max * d->K;
    plan_count<<<(unsigned)((slots + 255) / 256), 256, 0, s>>>(*d, *b, *io);
    MOE_EP_CHECK(moe_ep_launch_check("plan_count"));
    plan_scan<<<1, 1024, 0, s>>>(*d, *b);
    return moe_ep_launch_check("plan_scan");
}
