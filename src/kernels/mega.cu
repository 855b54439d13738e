/* The mega kernel: one persistent launch runs the whole forward of every
 * local rank (work items and their order: mega_kernels.h).
 *
 * Building blocks are the split backend's: the tile of gemm_tile.cuh, the row
 * codecs of rows.cuh, the expert scan of plan_scan.cuh; so every row gets the
 * same bits as in the split backend (same rounding points, same K order).
 *
 * Synchronisation between blocks: a producer block fences its writes, then one
 * thread adds to a counter with release semantics; a consumer thread spins on
 * the counter with acquire loads (bounded by a.timeout_ns), the block
 * synchronises, and every read of data other blocks wrote in this launch goes
 * through L2 (cp.async.cg, __ldcg), never a possibly stale L1 line.
 *
 * Shared memory: the GEMM ring / tables / C tile (gemm_tile.cuh), the
 * dispatch's fp32 token (H floats, over the ring), then mega_shared and the
 * plan: expert row offsets [E+1], tile offsets [E+1], then the rows and local
 * experts of the item's slots [blockDim] each. */
#include "kernels/mega_kernels.h"
#include "kernels/plan_scan.cuh"
#include "kernels/rows.cuh"
#include "kernels/sm90/gemm_tile.cuh"

#define MEGA_BN 256 /* tile columns of both GEMMs */
/* Tile rows: 16, or for bf16 and FP8-BLOCK 32 where the split uses 64: a
 * 64 x 256 tile needs 512 threads of at most 128 registers, and inside this
 * kernel (more live state than the split's grouped GEMM) the FP8 tiles then
 * spill; a 32 x 256 tile has 256 threads of up to 255 registers. Bits do not
 * depend on the tile shape. */

/* Per-block state in shared memory (not registers: the GEMM tile needs them all). */
struct mega_shared {
    int32_t item, ok, mt;
    int n_tok, n_count, tpi, n_groups, n1, n2, tiles; /* item counts; tiles -1 before the plan */
    int32_t token_prefix[MOE_EP_GPU_MAX_RANKS + 1];   /* tokens of the ranks before r */
};

/* Counters, the block's plan and the item's slots, derived from the args and
 * the shared block (rebuilt where needed: cheap, and nothing stays live). */
struct mega_ctx {
    int32_t *ctr, *ready, *g1_done, *g2_done;
    int32_t *off, *tile_off, *rows_s, *expert_s;
    int n_tok, tpi, n1, n2;
};

__device__ __forceinline__ mega_ctx ctx_of(const moe_ep_mega_args_t &a, mega_shared *sh)
{
    mega_ctx c;
    c.ctr = a.counters, c.ready = c.ctr + MOE_EP_MEGA_CTR_FIXED;
    c.g1_done = c.ready + a.d.E, c.g2_done = c.g1_done + a.max_m_tiles;
    c.off = (int32_t *)(sh + 1), c.tile_off = c.off + a.d.E + 1;
    c.rows_s = c.tile_off + a.d.E + 1, c.expert_s = c.rows_s + blockDim.x;
    c.n_tok = sh->n_tok, c.tpi = sh->tpi, c.n1 = sh->n1, c.n2 = sh->n2;
    return c;
}

__device__ __forceinline__ int32_t ld_acquire(const int32_t *p)
{
    int32_t v;
    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void red_release_add(int32_t *p, int32_t v)
{
    asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ long long global_ns()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
    return (long long)t;
}

/* One thread: spins until *ctr >= target. False when the wait timed out (the
 * error word then says which wait) or another wait failed first. */
__device__ bool spin_until(const int32_t *ctr, int32_t target, const moe_ep_mega_args_t &a, uint32_t kind,
                           uint32_t index)
{
    if (ld_acquire(ctr) >= target) return true;
    long long start = global_ns();
    for (;;) {
        __nanosleep(64);
        if (ld_acquire(ctr) >= target) return true;
        if (moe_ep_dev_failed(a.b.error)) return false;
        if (global_ns() - start > a.timeout_ns) {
            moe_ep_dev_fail(a.b.error, MOE_EP_DEVERR_TIMEOUT, (kind << 20) | (index & 0xFFFFFu));
            return false;
        }
    }
}

/* Whole block: thread 0 waits, everyone learns the outcome. */
__device__ __forceinline__ bool block_wait(const int32_t *ctr, int32_t target, const moe_ep_mega_args_t &a,
                                           uint32_t kind, uint32_t index)
{
    bool ok = true;
    if (threadIdx.x == 0) ok = spin_until(ctr, target, a, kind, index);
    return __syncthreads_and(ok) != 0;
}

/* Whole block: the block's writes become visible, then the counter moves. */
__device__ __forceinline__ void block_signal(int32_t *ctr)
{
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) red_release_add(ctr, 1);
}

/* Local rank of global token index tg (prefix over ranks, R <= 64). */
__device__ __forceinline__ int rank_of(const int32_t *prefix, int R, int tg)
{
    int r = 0;
    while (r + 1 < R && prefix[r + 1] <= tg) r++;
    return r;
}

/* T of every rank (checked) and their prefix, computed by every block alike. */
__device__ void read_tokens(const moe_ep_mega_args_t &a, mega_shared *sh)
{
    if (threadIdx.x == 0) {
        int sum = 0;
        for (int r = 0; r < a.d.R; r++) {
            int t = a.io.t_device ? a.io.t_device[r] : a.io.t_host[r];
            if (t < 0 || t > a.d.T_max) {
                moe_ep_dev_fail(a.b.error, MOE_EP_DEVERR_BAD_TOKENS, (uint32_t)r);
                t = 0;
            }
            sh->token_prefix[r] = sum;
            sum += t;
        }
        sh->token_prefix[a.d.R] = sum;
    }
    __syncthreads();
}

/* Count item: one slot per thread; its position in its expert's rows. */
__device__ void count_item(const moe_ep_mega_args_t &a, mega_shared *sh, int item)
{
    const mega_ctx c = ctx_of(a, sh);
    const moe_ep_split_dims_t &d = a.d;
    int64_t s = (int64_t)item * blockDim.x + threadIdx.x;
    if (s < (int64_t)c.n_tok * d.K) {
        int tg = (int)(s / d.K), k = (int)(s % d.K), r = rank_of(sh->token_prefix, d.R, tg);
        int64_t i = (int64_t)(tg - sh->token_prefix[r]) * d.K + k; /* t * K + k */
        int32_t id = a.io.ids[r][i], local = id - d.first_expert, pos = -1;
        if (id < -1 || id >= d.num_experts_global || (id >= 0 && (local < 0 || local >= d.E)))
            moe_ep_dev_fail(a.b.error, MOE_EP_DEVERR_BAD_EXPERT, (uint32_t)((int64_t)r * d.T_max * d.K + i));
        else if (id >= 0)
            pos = atomicAdd(&a.b.expert_count[local], 1);
        a.b.slot_pos[(int64_t)r * d.T_max * d.K + i] = pos;
    }
    block_signal(&c.ctr[MOE_EP_MEGA_CTR_COUNTED]);
}

/* Rows (and local experts) of token t of rank r into c.rows_s[j0 + k]. Threads
 * j0 .. j0 + K - 1 of the block; -1 for unused slots. */
__device__ __forceinline__ void slot_rows(const moe_ep_mega_args_t &a, const mega_ctx &c, int r, int t, int j0)
{
    int k = threadIdx.x - j0;
    if (k < 0 || k >= a.d.K) return;
    int64_t s = ((int64_t)r * a.d.T_max + t) * a.d.K + k;
    int32_t pos = __ldcg(&a.b.slot_pos[s]), e = a.io.ids[r][(int64_t)t * a.d.K + k] - a.d.first_expert;
    c.rows_s[threadIdx.x] = pos < 0 ? -1 : c.off[e] + pos;
    c.expert_s[threadIdx.x] = pos < 0 ? -1 : e;
}

/* Dispatch item: tokens [g * tpi, ...) quantized once, written to each row. */
__device__ void dispatch_group(const moe_ep_mega_args_t &a, mega_shared *sh, uint8_t *smem, int g)
{
    const mega_ctx c = ctx_of(a, sh);
    const moe_ep_split_dims_t &d = a.d;
    float *xs = (float *)smem; /* [H] */
    moe_ep_format_t f = moe_ep_path_act_format(d.path);
    int blk = f == MOE_EP_FORMAT_BF16 ? 2 : moe_ep_format_block(f);
    int end = min(c.n_tok, (g + 1) * c.tpi);
    for (int tg = g * c.tpi; tg < end; tg++) {
        int r = rank_of(sh->token_prefix, d.R, tg), t = tg - sh->token_prefix[r];
        bool present = r != a.absent_rank;
        slot_rows(a, c, r, t, 0);
        const uint16_t *x = a.io.x[r] + (int64_t)t * d.H;
        for (int i = threadIdx.x; i < d.H; i += blockDim.x) xs[i] = moe_ep_bf16_to_f32(x[i]);
        __syncthreads();
        for (int k = 0; k < d.K && present; k++) {
            int64_t row = c.rows_s[k];
            if (row < 0) continue;
            for (int col = threadIdx.x * blk; col < d.H; col += blockDim.x * blk)
                store_block(f, xs + col, d.H, col, d.fc1_scale, a.b.xq, a.b.xq_scales, row);
        }
        __threadfence();
        __syncthreads();
        if (threadIdx.x < d.K && present && c.rows_s[threadIdx.x] >= 0) red_release_add(&c.ready[c.expert_s[threadIdx.x]], 1);
    }
}

/* GEMM item i of GEMM 1 or 2: (m tile, 256 columns) once its inputs exist. */
/* Kernel parameters: the GEMM arguments are built on the host so that the tiles
 * read them from the parameter bank, not from registers. */
struct mega_params {
    moe_ep_mega_args_t a;
    gemm_args g1, g2;
};

template <int BM, int MODE, int SB, bool FIRST>
__device__ bool gemm_item(const mega_params &p, mega_shared *sh, uint8_t *smem, int i)
{
    const moe_ep_mega_args_t &a = p.a;
    int mt, e, rows_valid, n0;
    int64_t row0;
    {
        const mega_ctx c = ctx_of(a, sh);
        int n = FIRST ? c.n1 : c.n2;
        mt = i / n, n0 = (i % n) * MEGA_BN;
        e = tile_expert(c.tile_off, a.d.E, mt);
        row0 = c.off[e] + (int64_t)(mt - c.tile_off[e]) * BM;
        rows_valid = (int)min((int64_t)BM, (int64_t)c.off[e + 1] - row0);
        bool ok = FIRST ? block_wait(&c.ready[e], c.off[e + 1] - c.off[e], a, MOE_EP_MEGA_WAIT_ROWS, (uint32_t)e)
                        : block_wait(&c.g1_done[mt], c.n1, a, MOE_EP_MEGA_WAIT_GEMM1, (uint32_t)mt);
        if (!ok) return false;
        if (threadIdx.x == 0) sh->mt = mt; /* read back after the tile: nothing stays live across it */
    }
    gemm_tile<BM, MEGA_BN, MODE, SB, true>(FIRST ? p.g1 : p.g2, smem, e, row0, rows_valid, n0);
    const mega_ctx c = ctx_of(a, sh);
    block_signal(FIRST ? &c.g1_done[sh->mt] : &c.g2_done[sh->mt]);
    return true;
}

/* Combine item: tokens [g * tpi, ...) once the GEMM2 tiles of their rows are done. */
template <int BM>
__device__ bool combine_group(const moe_ep_mega_args_t &a, mega_shared *sh, int g)
{
    const mega_ctx c = ctx_of(a, sh);
    const moe_ep_split_dims_t &d = a.d;
    int first = g * c.tpi, count = min(c.n_tok, first + c.tpi) - first;
    bool ok = true;
    for (int j = 0; j < count; j++) {
        int r = rank_of(sh->token_prefix, d.R, first + j);
        slot_rows(a, c, r, first + j - sh->token_prefix[r], j * d.K);
    }
    __syncthreads();
    if (threadIdx.x < count * d.K && c.rows_s[threadIdx.x] >= 0) {
        int e = c.expert_s[threadIdx.x], mt = c.tile_off[e] + (c.rows_s[threadIdx.x] - c.off[e]) / BM;
        ok = spin_until(&c.g2_done[mt], c.n2, a, MOE_EP_MEGA_WAIT_GEMM2, (uint32_t)mt);
    }
    if (!__syncthreads_and(ok)) return false;
    for (int j = 0; j < count; j++) {
        int r = rank_of(sh->token_prefix, d.R, first + j), t = first + j - sh->token_prefix[r];
        combine_row(d.wire, a.b, d.H, d.K, c.rows_s + j * d.K, a.io.weights[r] + (int64_t)t * d.K,
                    a.io.out[r] + (int64_t)t * d.H, threadIdx.x, blockDim.x);
    }
    __syncthreads();
    return true;
}

/* The block's copy of the plan, once every slot is counted: expert row and
 * tile offsets in shared memory. */
template <int BM>
__device__ bool mega_plan(const moe_ep_mega_args_t &a, mega_shared *sh)
{
    const mega_ctx c = ctx_of(a, sh);
    if (!block_wait(&c.ctr[MOE_EP_MEGA_CTR_COUNTED], sh->n_count, a, MOE_EP_MEGA_WAIT_COUNT, 0)) return false;
    moe_ep_scan_experts(a.b.expert_count, a.d.E, BM, c.off, c.tile_off);
    if (threadIdx.x == 0) sh->tiles = c.tile_off[a.d.E];
    __syncthreads();
    return true;
}

/* The last block out clears the counters for the next forward and publishes
 * the error word to the host-mapped copy. */
__device__ void mega_exit(const moe_ep_mega_args_t &a, mega_shared *sh)
{
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        sh->ok = atomicAdd(&a.counters[MOE_EP_MEGA_CTR_EXITED], 1) == (int)gridDim.x - 1;
    }
    __syncthreads();
    if (!sh->ok) return;
    __threadfence();
    int64_t n = moe_ep_mega_counter_count(a.d.E, a.max_m_tiles);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) a.counters[i] = 0;
    for (int e = threadIdx.x; e < a.d.E; e += blockDim.x) a.b.expert_count[e] = 0;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        *(volatile uint32_t *)a.b.error_mapped = *(volatile uint32_t *)a.b.error;
        __threadfence_system();
    }
}

/* Bytes of shared memory before mega_shared (the GEMM's, 16-aligned). */
template <int BM, int MODE>
__host__ __device__ __forceinline__ size_t mega_shared_offset(const moe_ep_split_dims_t &d)
{
    moe_ep_format_t af = moe_ep_path_act_format(d.path), wf = moe_ep_path_weight_format(d.path);
    return (gemm_smem_bytes<BM, MEGA_BN, MODE>(af, wf) + 15) / 16 * 16;
}

template <int BM, int MODE>
static size_t mega_smem_bytes(const moe_ep_split_dims_t &d)
{
    return mega_shared_offset<BM, MODE>(d) + sizeof(mega_shared) +
           sizeof(int32_t) * (2 * (d.E + 1) + 2 * gemm_threads<BM, MEGA_BN>());
}

template <int BM, int MODE, int SB>
__global__ void __launch_bounds__(gemm_threads<BM, MEGA_BN>(), 1) mega_forward(mega_params p)
{
    extern __shared__ __align__(16) uint8_t smem[];
    const moe_ep_mega_args_t &a = p.a;
    mega_shared *sh = (mega_shared *)(smem + mega_shared_offset<BM, MODE>(a.d));
    gemm_tables_init<BM, MEGA_BN, MODE>(p.g1, smem);
    read_tokens(a, sh);
    if (threadIdx.x == 0) {
        int n_tok = sh->token_prefix[a.d.R], slots_per_item = blockDim.x;
        int per_item = (n_tok + 4 * (int)gridDim.x - 1) / (4 * (int)gridDim.x);
        sh->n_tok = n_tok;
        sh->n_count = (int)(((int64_t)n_tok * a.d.K + slots_per_item - 1) / slots_per_item);
        sh->tpi = max(1, min(per_item, (int)blockDim.x / a.d.K));
        sh->n_groups = (n_tok + sh->tpi - 1) / sh->tpi;
        sh->n1 = 2 * a.d.I / MEGA_BN, sh->n2 = a.d.H / MEGA_BN, sh->tiles = -1;
    }
    __syncthreads();
    for (;;) {
        if (threadIdx.x == 0)
            sh->item = moe_ep_dev_failed(a.b.error) ? -1 : atomicAdd(&a.counters[MOE_EP_MEGA_CTR_WORK], 1);
        __syncthreads();
        int i = sh->item;
        __syncthreads();
        if (i < 0) break;
        if (i < sh->n_count) {
            count_item(a, sh, i);
            continue;
        }
        if (sh->tiles < 0 && !mega_plan<BM>(a, sh)) break;
        i -= sh->n_count;
        if (i < sh->n_groups) {
            dispatch_group(a, sh, smem, i);
            continue;
        }
        i -= sh->n_groups;
        int n_g1 = sh->tiles * sh->n1, n_g2 = sh->tiles * sh->n2;
        bool ok = i < n_g1                       ? gemm_item<BM, MODE, SB, true>(p, sh, smem, i)
                  : i < n_g1 + n_g2              ? gemm_item<BM, MODE, SB, false>(p, sh, smem, i - n_g1)
                  : i < n_g1 + n_g2 + sh->n_groups ? combine_group<BM>(a, sh, i - n_g1 - n_g2)
                                                   : false;
        if (!ok) break;
    }
    mega_exit(a, sh);
}

template <int BM, int MODE, int SB>
static moe_ep_status_t launch(const moe_ep_mega_args_t *a, cudaStream_t s)
{
    const char *name = "mega_forward";
    size_t smem = mega_smem_bytes<BM, MODE>(a->d);
    int threads = gemm_threads<BM, MEGA_BN>();
    cudaError_t e = cudaFuncSetAttribute(mega_forward<BM, MODE, SB>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)smem);
    if (e != cudaSuccess)
        return MOE_EP_FAIL(MOE_EP_ERROR_UNSUPPORTED, "%s: %zu B of shared memory: %s", name, smem, cudaGetErrorString(e));
    int per_sm = 0;
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, mega_forward<BM, MODE, SB>, threads, smem);
    if (e != cudaSuccess || per_sm < 1)
        return MOE_EP_FAIL(MOE_EP_ERROR_UNSUPPORTED, "%s: no block fits an SM (%zu B shared memory)", name, smem);
    if (a->d.gemm_ctas_per_sm > 0 && a->d.gemm_ctas_per_sm < per_sm) per_sm = a->d.gemm_ctas_per_sm;
    mega_params p = {*a, moe_ep_gemm1_args(a->d, a->b), moe_ep_gemm2_args(a->d, a->b)};
    mega_forward<BM, MODE, SB><<<a->d.num_sms * per_sm, threads, smem, s>>>(p);
    return moe_ep_launch_check(name);
}

/* Small tiles: 16 rows. Large: 64 rows (512 threads) for NVFP4, MXFP8 and
 * W4A8; 32 rows (256 threads) for bf16 and FP8-BLOCK, whose 64-row instances
 * spill here (see the tile rows note above). */
static moe_ep_status_t launch_for_format(const moe_ep_mega_args_t *a, cudaStream_t s)
{
    bool small = a->d.tile_rows == 16;
    switch (moe_ep_path_act_format(a->d.path)) {
    case MOE_EP_FORMAT_BF16: return small ? launch<16, MODE_BF16, 0>(a, s) : launch<32, MODE_BF16, 0>(a, s);
    case MOE_EP_FORMAT_MXFP8: return small ? launch<16, MODE_FP8, 32>(a, s) : launch<64, MODE_FP8, 32>(a, s);
    case MOE_EP_FORMAT_FP8_BLOCK: return small ? launch<16, MODE_FP8, 128>(a, s) : launch<32, MODE_FP8, 128>(a, s);
    default: return small ? launch<16, MODE_CVT, 0>(a, s) : launch<64, MODE_CVT, 0>(a, s);
    }
}

/* The ring of the smallest tile (BM 16) must hold the dispatch's fp32 token. */
template <int BM>
static size_t ring_bytes(const moe_ep_split_dims_t *d)
{
    moe_ep_format_t af = moe_ep_path_act_format(d->path), wf = moe_ep_path_weight_format(d->path);
    switch (af) {
    case MOE_EP_FORMAT_BF16: return gemm_tables_offset<BM, MEGA_BN, MODE_BF16>(af, wf);
    case MOE_EP_FORMAT_NVFP4: return gemm_tables_offset<BM, MEGA_BN, MODE_CVT>(af, wf);
    default: return gemm_tables_offset<BM, MEGA_BN, MODE_FP8>(af, wf);
    }
}

extern "C" const char *moe_ep_mega_unsupported(const moe_ep_split_dims_t *d)
{
    if (d->H % MEGA_BN != 0) return "hidden must be a multiple of 256";
    if (d->E > MOE_EP_MEGA_MAX_EXPERTS) return "more than 1024 experts on one GPU";
    if ((size_t)d->H * sizeof(float) > ring_bytes<16>(d)) return "hidden too large for the dispatch's shared memory";
    return NULL;
}

extern "C" moe_ep_status_t moe_ep_launch_mega(const moe_ep_mega_args_t *a, moe_ep_stream_t stream)
{
    const char *why = moe_ep_mega_unsupported(&a->d);
    if (why) return MOE_EP_FAIL(MOE_EP_ERROR_UNSUPPORTED, "mega backend: %s", why);
    return launch_for_format(a, (cudaStream_t)stream);
}
