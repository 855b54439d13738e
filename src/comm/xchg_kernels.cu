/* The split backend's NCCL exchanges, device side (layouts in xchg_kernels.h):
 *   pack            token block + header of this rank, before the all-gather;
 *   absorb / remap  after it: T of every rank, peers' errors, own experts' ids;
 *   pack_outputs    wire rows into per-destination send blocks;
 *   combine_rows    after the all-to-all: where each of this rank's slots landed;
 *   mark_enter/leave  progress words for the host watchdog around each exchange.
 * Every kernel but the header/marks returns at once when the error word is set. */
#include "comm/comm.h"
#include "comm/xchg_kernels.h"
#include "kernels/gpu_common.cuh"

#ifdef MOE_EP_HAVE_NCCL
#include <nccl.h>
#include <nccl_device.h>

__device__ __forceinline__ int xchg_tokens(const int32_t *t_device, int t_host, int T_max)
{
    int t = t_device ? *t_device : t_host;
    return t < 0 || t > T_max ? -1 : t;
}

/* One block per token t < T: ids checked and copied, x copied (16-byte moves
 * when the caller's row is aligned). */
__global__ void xchg_pack_tokens(moe_ep_xchg_dev_t x, const uint16_t *tokens, const int32_t *ids,
                                 const int32_t *t_device, int t_host)
{
    if (moe_ep_dev_failed(x.error)) return;
    int t = blockIdx.x, T = xchg_tokens(t_device, t_host, x.T_max);
    if (t >= T) return;
    uint8_t *blk = x.blocks + (int64_t)x.rank * x.block_bytes;
    int32_t *dst_ids = (int32_t *)(blk + x.ids_off) + (int64_t)t * x.K;
    for (int k = threadIdx.x; k < x.K; k += blockDim.x) {
        int32_t id = ids[(int64_t)t * x.K + k];
        if (id < -1 || id >= x.num_experts_global)
            moe_ep_dev_fail(x.error, MOE_EP_DEVERR_BAD_EXPERT, (uint32_t)(t * x.K + k));
        dst_ids[k] = id;
    }
    const uint16_t *src = tokens + (int64_t)t * x.H;
    uint16_t *dst = (uint16_t *)(blk + x.x_off) + (int64_t)t * x.H;
    if (((uintptr_t)src & 15u) == 0) {
        for (int i = threadIdx.x; i < x.H / 8; i += blockDim.x)
            ((uint4 *)dst)[i] = ((const uint4 *)src)[i];
    } else {
        for (int i = threadIdx.x; i < x.H; i += blockDim.x) dst[i] = src[i];
    }
}

/* After pack_tokens: the header carries T and this rank's error word, even
 * when it is set (the other ranks then skip this forward too). Then the
 * entry mark of the token exchange. */
__global__ void xchg_pack_header(moe_ep_xchg_dev_t x, const int32_t *t_device, int t_host)
{
    int T = xchg_tokens(t_device, t_host, x.T_max);
    if (T < 0) {
        moe_ep_dev_fail(x.error, MOE_EP_DEVERR_BAD_TOKENS, (uint32_t)x.rank);
        T = 0;
    }
    int32_t *hdr = (int32_t *)(x.blocks + (int64_t)x.rank * x.block_bytes);
    hdr[0] = T;
    hdr[1] = (int32_t)*(volatile uint32_t *)x.error;
    *x.tokens_own = T;
}

__global__ void xchg_mark_enter(moe_ep_xchg_dev_t x, uint32_t which)
{
    uint32_t s = *x.seq + 1u;
    *x.seq = s;
    volatile uint32_t *p = x.progress;
    p[2] = which;
    __threadfence_system();
    p[0] = s;
    __threadfence_system();
}

/* Exit mark; a set abort flag means the watchdog aborted the communicator in
 * this exchange: what arrived is garbage, so the forward stops here. */
__global__ void xchg_mark_leave(moe_ep_xchg_dev_t x, uint32_t which)
{
    volatile uint32_t *p = x.progress;
    p[1] = *x.seq;
    __threadfence_system();
    if (p[3] != 0u) moe_ep_dev_fail(x.error, MOE_EP_DEVERR_TIMEOUT, which);
}

__global__ void xchg_absorb(moe_ep_xchg_dev_t x)
{
    for (int s = threadIdx.x; s < x.R; s += blockDim.x) {
        const int32_t *hdr = (const int32_t *)(x.blocks + (int64_t)s * x.block_bytes);
        int T = hdr[0];
        x.tokens_in[s] = T < 0 || T > x.T_max ? 0 : T;
        if (hdr[1] != 0 && s != x.rank) moe_ep_dev_fail(x.error, MOE_EP_DEVERR_PEER, (uint32_t)s);
    }
}

/* Slots of every source: ids of other ranks' experts become -1 (in place). */
__global__ void xchg_remap(moe_ep_xchg_dev_t x)
{
    if (moe_ep_dev_failed(x.error)) return;
    int64_t per_rank = (int64_t)x.T_max * x.K;
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= per_rank * x.R) return;
    int s = (int)(i / per_rank);
    int64_t j = i % per_rank;
    if (j / x.K >= x.tokens_in[s]) return;
    int32_t *ids = (int32_t *)(x.blocks + (int64_t)s * x.block_bytes + x.ids_off);
    int32_t id = ids[j], first = x.rank * x.experts_per_rank;
    if (id < first || id >= first + x.experts_per_rank) ids[j] = -1;
}

/* One block per (source s, token t): its slots' wire rows that live here go
 * to row t * K + k of the send block for s. Row sizes are multiples of 16
 * (data: H % 128 == 0) and of 4 (scales) bytes. */
__global__ void xchg_pack_outputs(moe_ep_xchg_dev_t x, moe_ep_split_bufs_t b)
{
    if (moe_ep_dev_failed(x.error)) return;
    int s = blockIdx.x / x.T_max, t = blockIdx.x % x.T_max;
    if (t >= b.tokens[s]) return;
    const int32_t *rows = b.row_of_slot + ((int64_t)s * x.T_max + t) * x.K;
    for (int k = 0; k < x.K; k++) {
        int64_t row = rows[k];
        if (row < 0) continue;
        int64_t dst = (int64_t)s * x.cap + (int64_t)t * x.K + k;
        const uint4 *sd = (const uint4 *)(b.y + row * x.y_data);
        uint4 *dd = (uint4 *)(x.ysend + dst * x.y_data);
        for (int i = threadIdx.x; i < x.y_data / 16; i += blockDim.x) dd[i] = sd[i];
        const uint32_t *ss = (const uint32_t *)(b.y_scales + row * x.y_scale);
        uint32_t *ds = (uint32_t *)(x.ysend_scales + dst * x.y_scale);
        for (int i = threadIdx.x; i < x.y_scale / 4; i += blockDim.x) ds[i] = ss[i];
    }
}

/* Slot (t, k) of this rank came back from the owner q of its expert, at row
 * q * cap + t * K + k of the receive buffer. */
__global__ void xchg_combine_rows(moe_ep_xchg_dev_t x, const int32_t *ids)
{
    if (moe_ep_dev_failed(x.error)) return;
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)*x.tokens_own * x.K) return;
    int32_t id = ids[i];
    x.combine_rows[i] = id < 0 ? -1 : (int32_t)((int64_t)(id / x.experts_per_rank) * x.cap + i);
}

extern "C" moe_ep_status_t moe_ep_launch_xchg_pack(const moe_ep_xchg_dev_t *x, const uint16_t *tokens,
                                                   const int32_t *ids, const int32_t *t_device, int t_host,
                                                   moe_ep_stream_t stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    xchg_pack_tokens<<<(unsigned)x->T_max, 128, 0, s>>>(*x, tokens, ids, t_device, t_host);
    MOE_EP_CHECK(moe_ep_launch_check("xchg_pack_tokens"));
    xchg_pack_header<<<1, 1, 0, s>>>(*x, t_device, t_host);
    MOE_EP_CHECK(moe_ep_launch_check("xchg_pack_header"));
    xchg_mark_enter<<<1, 1, 0, s>>>(*x, MOE_EP_WAIT_NCCL_TOKENS);
    return moe_ep_launch_check("xchg_mark_enter");
}

extern "C" moe_ep_status_t moe_ep_launch_xchg_absorb(const moe_ep_xchg_dev_t *x, moe_ep_stream_t stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    xchg_mark_leave<<<1, 1, 0, s>>>(*x, MOE_EP_WAIT_NCCL_TOKENS);
    MOE_EP_CHECK(moe_ep_launch_check("xchg_mark_leave"));
    xchg_absorb<<<1, 64, 0, s>>>(*x);
    MOE_EP_CHECK(moe_ep_launch_check("xchg_absorb"));
    int64_t slots = (int64_t)x->R * x->T_max * x->K;
    xchg_remap<<<(unsigned)((slots + 255) / 256), 256, 0, s>>>(*x);
    return moe_ep_launch_check("xchg_remap");
}

extern "C" moe_ep_status_t moe_ep_launch_xchg_pack_outputs(const moe_ep_xchg_dev_t *x,
                                                           const moe_ep_split_bufs_t *b,
                                                           moe_ep_stream_t stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    xchg_pack_outputs<<<(unsigned)(x->R * x->T_max), 128, 0, s>>>(*x, *b);
    MOE_EP_CHECK(moe_ep_launch_check("xchg_pack_outputs"));
    xchg_mark_enter<<<1, 1, 0, s>>>(*x, MOE_EP_WAIT_NCCL_OUTPUTS);
    return moe_ep_launch_check("xchg_mark_enter");
}

extern "C" moe_ep_status_t moe_ep_launch_xchg_unpack_outputs(const moe_ep_xchg_dev_t *x, const int32_t *ids,
                                                             moe_ep_stream_t stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    xchg_mark_leave<<<1, 1, 0, s>>>(*x, MOE_EP_WAIT_NCCL_OUTPUTS);
    MOE_EP_CHECK(moe_ep_launch_check("xchg_mark_leave"));
    xchg_combine_rows<<<(unsigned)((x->cap + 255) / 256), 256, 0, s>>>(*x, ids);
    return moe_ep_launch_check("xchg_combine_rows");
}

#endif

