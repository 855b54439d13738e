/* The mega kernel on NCCL groups, one rank per GPU (mega.cu only): send
 * items, row items and the link's combine, through the mapped heap
 * (mega_kernels.h). */
#ifndef MOE_EP_MEGA_LINKS_CUH
#define MOE_EP_MEGA_LINKS_CUH

#include "kernels/mega_gemm.cuh"

/* ---- links: NCCL groups, one rank per GPU (mega_kernels.h) ---------------- */

struct link_ctrl {
    uint32_t *epoch, *arrived, *done, *rows; /* [1], [W][SEND_ITEMS], [W], [T_max * K] */
};

__device__ __forceinline__ link_ctrl ctrl_of(uint8_t *heap, int W)
{
    link_ctrl c;
    c.epoch = (uint32_t *)heap, c.arrived = c.epoch + MOE_EP_MEGA_CTRL_FIXED;
    c.done = c.arrived + W * MOE_EP_MEGA_SEND_ITEMS, c.rows = c.done + W;
    return c;
}

__device__ __forceinline__ void st_release_sys(uint32_t *p, uint32_t v)
{
    asm volatile("st.release.sys.global.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint8_t *peer_heap(const moe_ep_mega_link_t &l, int r) { return l.peers[r]; }

/* T of this rank's forward; an invalid T is sent as is (every rank reports
 * it) but nothing is copied for it. */
__device__ __forceinline__ int own_tokens(const moe_ep_mega_link_t &l) { return l.t_own_device ? __ldg(l.t_own_device) : l.t_own_host; }

/* Ranks token t of this rank goes to (bit r: rank r owns one of its experts). */
__device__ void route_mask(const moe_ep_mega_args_t &a, mega_shared *sh, int t)
{
    if (threadIdx.x == 0) {
        unsigned long long m = 0;
        for (int k = 0; k < a.d.K; k++) {
            int32_t id = __ldg(&a.link.ids_own[(int64_t)t * a.d.K + k]);
            if (id >= 0 && id < a.d.num_experts_global) m |= 1ull << (id / a.d.E);
        }
        sh->route_mask = m;
    }
    __syncthreads();
}

/* Send item i of this rank: tokens [i T / S, (i + 1) T / S) with their ids to
 * every rank (x only where routed), T with item 0. First waits until each rank
 * finished this rank's previous forward (its receive space is free again). */
__device__ bool send_item(const moe_ep_mega_args_t &a, mega_shared *sh, int i)
{
    const moe_ep_mega_link_t &l = a.link;
    const moe_ep_split_dims_t &d = a.d;
    const int W = l.world, q = l.rank;
    link_ctrl own = ctrl_of(peer_heap(l, q), W);
    bool ok = true;
    if (threadIdx.x < W) ok = spin_until_sys(&own.done[threadIdx.x], sh->epoch, a, MOE_EP_MEGA_WAIT_PEER, threadIdx.x);
    if (!__syncthreads_and(ok)) return false;
    int T = own_tokens(l), Tc = T < 0 || T > d.T_max ? 0 : T;
    int t0 = (int)((int64_t)i * Tc / MOE_EP_MEGA_SEND_ITEMS), t1 = (int)((int64_t)(i + 1) * Tc / MOE_EP_MEGA_SEND_ITEMS);
    for (int r = 0; r < W; r++) {
        uint8_t *h = peer_heap(l, r);
        if (i == 0 && threadIdx.x == 0) ((int32_t *)(h + l.t_off))[q] = T;
        int32_t *ids = (int32_t *)(h + l.ids_off) + (int64_t)q * d.T_max * d.K;
        for (int64_t j = (int64_t)t0 * d.K + threadIdx.x; j < (int64_t)t1 * d.K; j += blockDim.x) ids[j] = __ldg(&l.ids_own[j]);
    }
    const int n16 = d.H / 8; /* 16-byte pieces of a bf16 token */
    for (int t = t0; t < t1; t++) {
        route_mask(a, sh, t);
        unsigned long long m = sh->route_mask;
        const int4 *src = (const int4 *)(l.x_own + (int64_t)t * d.H);
        for (int j = threadIdx.x; j < n16; j += blockDim.x) {
            int4 v = __ldg(&src[j]);
            for (int r = 0; r < W; r++)
                if (m >> r & 1ull)
                    ((int4 *)(peer_heap(l, r) + l.x_off + ((int64_t)q * d.T_max + t) * d.H * 2))[j] = v;
        }
        __syncthreads(); /* route_mask is rewritten for the next token */
    }
    __threadfence_system();
    __syncthreads();
    if (threadIdx.x < W)
        st_release_sys(&ctrl_of(peer_heap(l, threadIdx.x), W).arrived[q * MOE_EP_MEGA_SEND_ITEMS + i], sh->epoch + 1u);
    return true;
}

/* Copies n bytes (a multiple of 8) from this GPU's L2 to a peer, 16 bytes at a time where aligned. */
__device__ __forceinline__ void copy_out(uint8_t *dst, const uint8_t *src, int64_t n, int tid, int nthreads)
{
    if (n % 16 == 0) {
        for (int64_t j = tid; j < n / 16; j += nthreads) ((int4 *)dst)[j] = __ldcg((const int4 *)src + j);
    } else {
        for (int64_t j = tid; j < n / 8; j += nthreads) ((int2 *)dst)[j] = __ldcg((const int2 *)src + j);
    }
}

/* Row item of m tile mt: once its GEMM2 tiles are done, each row goes to its
 * token's rank (slot t * K + k there), then that token's row counter moves. */
template <int BM, bool SPREAD>
__device__ bool rows_item(const moe_ep_mega_args_t &a, mega_shared *sh, int mt)
{
    const mega_ctx c = ctx_of(a, sh);
    const moe_ep_split_dims_t &d = a.d;
    const moe_ep_mega_link_t &l = a.link;
    if (!block_wait(&c.g2_done[mt], c.n2, a, MOE_EP_MEGA_WAIT_GEMM2, (uint32_t)mt)) return false;
    int e = tile_expert(c.tile_off, d.E, mt);
    int r0, n;
    mega_tile_rows<BM, SPREAD>(c, e, mt, r0, n);
    const int64_t row0 = r0;
    moe_ep_format_t yf = moe_ep_wire_format(d.wire);
    int64_t yd = moe_ep_row_data_bytes(yf, d.H), ys = moe_ep_row_scale_bytes(yf, d.H), per_rank = (int64_t)d.T_max * d.K;
    for (int j = 0; j < n; j++) {
        int64_t src = __ldcg(&a.row_slot[row0 + j]), slot = src % per_rank;
        uint8_t *h = peer_heap(l, (int)(src / per_rank));
        copy_out(h + l.y_off + slot * yd, a.b.y + (row0 + j) * yd, yd, threadIdx.x, blockDim.x);
        if (ys) copy_out(h + l.ys_off + slot * ys, a.b.y_scales + (row0 + j) * ys, ys, threadIdx.x, blockDim.x);
    }
    __threadfence_system();
    __syncthreads();
    if (threadIdx.x < n) {
        int64_t src = __ldcg(&a.row_slot[row0 + threadIdx.x]);
        st_release_sys(&ctrl_of(peer_heap(l, (int)(src / per_rank)), l.world).rows[src % per_rank], sh->epoch + 1u);
    }
    return true;
}

/* Combine item of a link: this rank's tokens [g * tpi, ...) once all their
 * rows arrived (in the heap's y at slot t * K + k, each flagged with the
 * forward's epoch + 1, so rows of an earlier forward never count). */
__device__ bool combine_link_group(const moe_ep_mega_args_t &a, mega_shared *sh, int g)
{
    const mega_ctx c = ctx_of(a, sh);
    const moe_ep_split_dims_t &d = a.d;
    const moe_ep_mega_link_t &l = a.link;
    const int q = l.rank;
    uint8_t *h = peer_heap(l, q);
    int first = g * c.tpi, count = min(sh->token_prefix[q + 1] - sh->token_prefix[q], first + c.tpi) - first;
    if (threadIdx.x < count * d.K) {
        int64_t s = (int64_t)first * d.K + threadIdx.x;
        c.rows_s[threadIdx.x] = __ldg(&l.ids_own[s]) >= 0 ? (int32_t)s : -1;
    }
    __syncthreads();
    bool ok = true;
    if (threadIdx.x < count * d.K && c.rows_s[threadIdx.x] >= 0)
        ok = spin_until_sys(&ctrl_of(h, l.world).rows[c.rows_s[threadIdx.x]], sh->epoch + 1u, a,
                            MOE_EP_MEGA_WAIT_OUTPUTS, (uint32_t)(first + threadIdx.x / d.K));
    if (!__syncthreads_and(ok)) return false;
    for (int j = 0; j < count; j++)
        combine_row(d.wire, h + l.y_off, h + l.ys_off, d.H, d.K, c.rows_s + j * d.K,
                    a.io.weights[q] + (int64_t)(first + j) * d.K, a.io.out[q] + (int64_t)(first + j) * d.H,
                    threadIdx.x, blockDim.x);
    __syncthreads();
    return true;
}

/* Last block out of a link: this forward is done here and on every rank's books. */
__device__ void link_exit(const moe_ep_mega_args_t &a, mega_shared *sh)
{
    const moe_ep_mega_link_t &l = a.link;
    if (threadIdx.x == 0) *ctrl_of(peer_heap(l, l.rank), l.world).epoch = sh->epoch + 1u;
    __threadfence_system();
    __syncthreads();
    if (threadIdx.x < l.world) red_release_sys_add(&ctrl_of(peer_heap(l, threadIdx.x), l.world).done[l.rank], 1u);
}

#endif
