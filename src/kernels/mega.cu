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
 * Shared memory: the GEMM ring / tables / C tile (gemm_tile.cuh), then mega_shared and the
 * plan: expert row offsets [E+1], tile offsets [E+1], then the rows and local
 * experts of the item's slots [blockDim] each. Between GEMM items, the GEMM's
 * region (for the mma.sync tiles its ring only: their tables stay) holds the
 * rows staged by the dispatch and combine items (mega_staging). */
#include "kernels/mega_kernels.h"
#include "kernels/plan_scan.cuh"
#include "kernels/rows.cuh"
#include "kernels/sm90/gemm_tile.cuh"
#include "kernels/sm90/fp8_rs_tile.cuh"

#include <string.h>

#define MEGA_BN 256 /* tile columns of both GEMMs */
/* The TMA + wgmma tiles instead of gemm_tile's mma.sync (384 threads): bf16
 * HGMMA (wgmma_tile.cuh, 128 rows; 144 in its wide swapped form), the FP8 register tile (fp8_rs_tile.cuh,
 * 128, 64, 32 or 16 rows; FP8-BLOCK with fp8_fast_accum its QGMMA instances). */
#define MODE_WGMMA 3
#define MODE_FP8_RS 5 /* the register tile (fp8_rs_tile.cuh): FP8-BLOCK */
#define MODE_MX_RS 6  /* MXFP8 */
#define MODE_W4_RS 7  /* W4A8 */
#define MODE_NV_RS 8  /* NVFP4 */
#define MODE_QG_RS 9  /* FP8-BLOCK with fp8_fast_accum: the tile's QGMMA instances (RS_FP8_QG) */
#define MODE_RS(m) ((m) == MODE_FP8_RS || (m) == MODE_MX_RS || (m) == MODE_W4_RS || (m) == MODE_NV_RS || (m) == MODE_QG_RS)
/* The register tile's item protocol (gemm_item): every register-tile
 * instance but QGMMA's, whose 128-row kernel ptxas then serialised (C7511,
 * with any form of the protocol tried, 2026-12-01). */
#define MEGA_DEFERS(m) (MODE_RS(m) && (m) != MODE_QG_RS)
#define MODE_TMA(m) ((m) == MODE_WGMMA || MODE_RS(m))
#define RS_FMT_OF(m) \
    ((m) == MODE_MX_RS ? RS_MXFP8 : (m) == MODE_W4_RS ? RS_W4A8 : (m) == MODE_NV_RS ? RS_NVFP4 : (m) == MODE_QG_RS ? RS_FP8_QG : RS_FP8_BLOCK)

/* Staged items (dispatch, local combine): their input rows move into the
 * shared memory the GEMM tiles leave free between items by bulk copies, a
 * ring of up to MEGA_STAGES stages, so that a block has many rows in flight
 * without holding registers (the timeline showed the register-fed loops at a
 * third of the copy bandwidth: one 16-byte load per thread in flight). */
#define MEGA_STAGES 4

/* The activation format of an instance (SB: the FP8 tiles' scale block). */
template <int MODE, int SB>
__host__ __device__ constexpr int mega_act_format()
{
    return MODE == MODE_WGMMA || MODE == MODE_BF16                                          ? MOE_EP_FORMAT_BF16
           : MODE == MODE_NV_RS || MODE == MODE_CVT                                         ? MOE_EP_FORMAT_NVFP4
           : MODE == MODE_FP8_RS || MODE == MODE_QG_RS || (MODE == MODE_FP8 && SB == 128) ? MOE_EP_FORMAT_FP8_BLOCK
                                                                                            : MOE_EP_FORMAT_MXFP8;
}

/* Threads of a block: the GEMM tile's. */
template <int BM, int MODE>
constexpr int mega_threads()
{
    return MODE_TMA(MODE) ? WG_THREADS : gemm_threads<BM, MEGA_BN>();
}
/* Tile rows: 16, or for bf16 and FP8-BLOCK 32 where the split uses 64: a
 * 64 x 256 tile needs 512 threads of at most 128 registers, and inside this
 * kernel (more live state than the split's grouped GEMM) the FP8 tiles then
 * spill; a 32 x 256 tile has 256 threads of up to 255 registers. Bits do not
 * depend on the tile shape. */

/* Per-block state in shared memory (not registers: the GEMM tile needs them all). */
struct mega_shared {
    uint64_t stage_full[MEGA_STAGES];  /* staged items: a stage's bulk copies landed */
    uint64_t stage_empty[MEGA_STAGES]; /* the staged combine: a stage read by every summing thread */
    int32_t item, ok, mt;
    int32_t next;                      /* the loop's next item, set by a GEMM run (-1: claim one) */
    uint64_t run_full[2], run_empty[2]; /* a GEMM run's descriptor queue (gemm_run) */
    int32_t run_q[2][6];               /* its descriptors: GEMM (1, 2; 0: the run ends), e, mt, row0, rows_valid, n0 */
    int32_t run_end;                   /* the item that ended the run (-1: none: a wait failed) */
    int n_tok, n_count, tpi, n_groups, n1, n2, tiles; /* item counts (n_tok -1 before they are known); tiles -1 before the plan */
    int dpi, cpi;     /* tokens per dispatch item, per combine item (local rows); tpi: per link combine item */
    int n_combine;                                    /* combine items: token groups of the ranks combined here */
    uint32_t epoch;                                   /* links: forwards finished on this rank before this one */
    unsigned long long route_mask;                    /* links: ranks a token goes to */
    int32_t token_prefix[MOE_EP_GPU_MAX_RANKS + 1];   /* tokens of the ranks before r */
    /* The register tile's item protocol (mega_tile_hook): thread 0's own. */
    int32_t *pending;                  /* the done counter of the block's last GEMM item, not yet raised */
    int32_t dep_item;                  /* an item claimed whose inputs are known to exist (-1: none) */
    int32_t *ready;                    /* a.counters' ready counters (the g1_done ones follow, E on) */
    int E, n_send;                     /* a.d.E; the send items before the count items */
#ifdef MOE_EP_MEGA_TRACE
    int trace_kind; /* the open item's kind, -1: none */
    unsigned long long trace_t0, trace_tw, trace_stall;
#endif
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

__device__ __forceinline__ uint32_t ld_acquire_sys(const uint32_t *p)
{
    uint32_t v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void red_release_sys_add(uint32_t *p, uint32_t v)
{
    asm volatile("red.release.sys.global.add.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

/* A spinning wait gives up: another wait failed first, or this one has run
 * past a.timeout_ns since start (the error word then says which wait). */
__device__ __forceinline__ bool wait_gives_up(const moe_ep_mega_args_t &a, long long start, uint32_t kind,
                                              uint32_t index)
{
    if (moe_ep_dev_failed(a.b.error)) return true;
    if (global_ns() - start <= a.timeout_ns) return false;
    moe_ep_dev_fail(a.b.error, MOE_EP_DEVERR_TIMEOUT, (kind << 20) | (index & 0xFFFFFu));
    return true;
}

/* One thread: spins until *ctr >= target. False when the wait timed out or
 * another wait failed first. */
__device__ bool spin_until(const int32_t *ctr, int32_t target, const moe_ep_mega_args_t &a, uint32_t kind,
                           uint32_t index)
{
    if (ld_acquire(ctr) >= target) return true;
    long long start = global_ns();
    for (;;) {
        __nanosleep(64);
        if (ld_acquire(ctr) >= target) return true;
        if (wait_gives_up(a, start, kind, index)) return false;
    }
}

/* Link counters (written by other GPUs, only growing, modulo 2^32): spins
 * until *ctr has reached target. */
__device__ bool spin_until_sys(const uint32_t *ctr, uint32_t target, const moe_ep_mega_args_t &a, uint32_t kind,
                               uint32_t index)
{
    if ((int32_t)(ld_acquire_sys(ctr) - target) >= 0) return true;
    long long start = global_ns();
    for (;;) {
        __nanosleep(128);
        if ((int32_t)(ld_acquire_sys(ctr) - target) >= 0) return true;
        if (wait_gives_up(a, start, kind, index)) return false;
    }
}

#ifdef MOE_EP_MEGA_TRACE
/* The item timeline (mega_kernels.h): thread 0 opens an item (kind, start),
 * marks the end of its wait, and closes it at the next item or the end. */
__device__ moe_ep_mega_trace_rec_t *g_mega_trace;
__device__ unsigned int g_mega_trace_n, g_mega_trace_cap;

__device__ __forceinline__ void mega_trace_open(mega_shared *sh, int kind)
{
    if (threadIdx.x == 0)
        sh->trace_kind = kind, sh->trace_t0 = sh->trace_tw = (unsigned long long)global_ns(), sh->trace_stall = 0;
}

/* A staged item's wait for a stage; thread `timer`'s wait adds to the item's stall. */
__device__ __forceinline__ void mega_trace_stage_wait(const moe_ep_mega_args_t &a, mega_shared *sh, uint64_t *bar,
                                                      int phase, int timer)
{
    unsigned long long t = threadIdx.x == timer ? (unsigned long long)global_ns() : 0ull;
    mbar_wait_bounded(bar, phase, a.d.tile_wait_ns);
    if (threadIdx.x == timer) sh->trace_stall += (unsigned long long)global_ns() - t;
}

__device__ __forceinline__ void mega_trace_mark(mega_shared *sh)
{
    if (threadIdx.x == 0) sh->trace_tw = (unsigned long long)global_ns();
}

__device__ __forceinline__ void mega_trace_close(mega_shared *sh)
{
    if (threadIdx.x != 0) return;
    if (sh->trace_kind >= 0 && g_mega_trace) {
        unsigned int k = atomicAdd(&g_mega_trace_n, 1u);
        if (k < g_mega_trace_cap)
            g_mega_trace[k] = {blockIdx.x, (uint32_t)sh->trace_kind, sh->trace_t0, sh->trace_tw, sh->trace_stall,
                               (unsigned long long)global_ns()};
    }
    sh->trace_kind = -1;
}
#define MEGA_TRACE_OPEN(sh, kind) mega_trace_open(sh, kind)
#define MEGA_TRACE_MARK(sh) mega_trace_mark(sh)
#define MEGA_TRACE_CLOSE(sh) mega_trace_close(sh)
#define MEGA_STAGE_WAIT(a, sh, bar, phase, timer) mega_trace_stage_wait(a, sh, bar, phase, timer)
#else
#define MEGA_TRACE_OPEN(sh, kind) ((void)0)
#define MEGA_TRACE_MARK(sh) ((void)0)
#define MEGA_TRACE_CLOSE(sh) ((void)0)
#define MEGA_STAGE_WAIT(a, sh, bar, phase, timer) mbar_wait_bounded(bar, phase, (a).d.tile_wait_ns)
#endif

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
            int t = a.io.t_device ? __ldcg(&a.io.t_device[r]) : a.io.t_host[r];
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
        int32_t id = __ldcg(&a.io.ids[r][i]), local = id - d.first_expert, pos = -1;
        if (id < -1 || id >= d.num_experts_global) /* every rank sees every id: all of them fail */
            moe_ep_dev_fail(a.b.error, MOE_EP_DEVERR_BAD_EXPERT, (uint32_t)((int64_t)r * d.T_max * d.K + i));
        else if (id >= 0 && local >= 0 && local < d.E) /* else another GPU's expert (links) */
            pos = atomicAdd(&a.b.expert_count[local], 1);
        a.b.slot_pos[(int64_t)r * d.T_max * d.K + i] = pos;
    }
    block_signal(&c.ctr[MOE_EP_MEGA_CTR_COUNTED]);
}

/* The slots of the group's tokens [first, first + count) into rows_s /
 * expert_s[j K + k] (count * K <= blockDim): thread j K + k takes slot k of
 * token j, -1 for unused slots. One pass: the loop over the tokens it
 * replaced (K threads each) waited a load round trip per token. */
__device__ void group_slots(const moe_ep_mega_args_t &a, const mega_ctx &c, const mega_shared *sh, int first, int count)
{
    const int K = a.d.K, j = threadIdx.x / K, k = threadIdx.x - j * K;
    if (j >= count) return;
    const int r = rank_of(sh->token_prefix, a.d.R, first + j), t = first + j - sh->token_prefix[r];
    int64_t s = ((int64_t)r * a.d.T_max + t) * K + k;
    int32_t pos = __ldcg(&a.b.slot_pos[s]), e = __ldcg(&a.io.ids[r][(int64_t)t * K + k]) - a.d.first_expert;
    c.rows_s[threadIdx.x] = pos < 0 ? -1 : c.off[e] + pos;
    c.expert_s[threadIdx.x] = pos < 0 ? -1 : e;
}

/* Where each row of the group's slots came from (a.row_slot: links' row
 * items send it back there, the gathering GEMM1 reads its x row there). */
__device__ __forceinline__ void record_row_sources(const moe_ep_mega_args_t &a, const mega_ctx &c,
                                                   const mega_shared *sh, int first, int count)
{
    const moe_ep_split_dims_t &d = a.d;
    if (threadIdx.x < count * d.K && c.rows_s[threadIdx.x] >= 0) {
        int j = threadIdx.x / d.K, r = rank_of(sh->token_prefix, d.R, first + j);
        int64_t t = first + j - sh->token_prefix[r];
        a.row_slot[c.rows_s[threadIdx.x]] = (int32_t)(((int64_t)r * d.T_max + t) * d.K + threadIdx.x % d.K);
    }
}

/* Whole block, after a dispatch item wrote its rows: each row counts once
 * towards its expert's ready counter (an absent rank's rows never do). */
__device__ __forceinline__ void dispatch_signal(const moe_ep_mega_args_t &a, const mega_ctx &c, const mega_shared *sh,
                                                int first, int count)
{
    __threadfence();
    __syncthreads();
    if (threadIdx.x < count * a.d.K && c.rows_s[threadIdx.x] >= 0 &&
        rank_of(sh->token_prefix, a.d.R, first + (int)threadIdx.x / a.d.K) != a.absent_rank)
        red_release_add(&c.ready[c.expert_s[threadIdx.x]], 1);
}

/* A ring of staged token rows: `stages` stages of `per_stage` tokens of
 * `token_bytes` each (combine: stages 0, not staged; its register-fed loop runs). */
struct mega_staging {
    int stages, per_stage, token_bytes;
    int bulk;      /* 1: bulk copies (16-byte aligned rows); 0: the block copies (dispatch only) */
    int sh_offset; /* the ring starts this many bytes before mega_shared (at the GEMM's shared memory) */
};

/* p (or v), through an asm volatile: what a staged item derives from it
 * (barrier and stage addresses, the reciprocals of its divisors) is computed
 * in the item, not hoisted out of the item loop into registers that would
 * stay live across the GEMM tiles (ptxas spilled them in the producer's
 * 40-register branch). */
template <typename T>
__device__ __forceinline__ T *pinned(T *p)
{
    T *q;
    asm volatile("mov.b64 %0, %1;\n" : "=l"(q) : "l"(p));
    return q;
}

__device__ __forceinline__ int pinned_int(int v)
{
    int q;
    asm volatile("mov.b32 %0, %1;\n" : "=r"(q) : "r"(v));
    return q;
}

/* Thread 0: the stage barriers of a staged item (invalidated by stage_end). */
__device__ __forceinline__ void stage_begin(const moe_ep_mega_args_t &a, mega_shared *sh, const mega_staging &st)
{
    for (int i = 0; i < st.stages; i++) mbar_init(&sh->stage_full[i], 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("fence.proxy.async.global;\n" ::: "memory"); /* rows other blocks (or GPUs) wrote, read by the copies */
}

/* Whole block, after its last stage wait. */
__device__ __forceinline__ void stage_end(const moe_ep_mega_args_t &a, mega_shared *sh, const mega_staging &st)
{
    __syncthreads();
    if (threadIdx.x == 0) {
        tile_wait_report(a.b.error);
        for (int i = 0; i < st.stages; i++) mbar_inval(&sh->stage_full[i]);
    }
}

/* Thread 0: bf16 rows of the group's tokens [j0, j0 + n) (token first + j)
 * into stage dst, completing on bar; an absent rank's tokens are not copied. */
__device__ void stage_x_rows(const moe_ep_mega_args_t &a, const mega_shared *sh, uint8_t *dst, uint64_t *bar,
                             int first, int j0, int n)
{
    const uint32_t bytes = (uint32_t)pinned_int(2 * a.d.H);
    uint32_t total = 0;
    for (int j = j0; j < j0 + n; j++) total += rank_of(sh->token_prefix, a.d.R, first + j) != a.absent_rank ? bytes : 0u;
    mbar_expect_tx(bar, total);
    for (int j = j0; j < j0 + n; j++) {
        int r = rank_of(sh->token_prefix, a.d.R, first + j);
        if (r != a.absent_rank)
            bulk_load(dst + (size_t)(j - j0) * bytes, a.io.x[r] + (int64_t)(first + j - sh->token_prefix[r]) * a.d.H,
                      bytes, bar);
    }
}

/* The block: the same rows copied by every thread (x not 16-byte aligned),
 * read through L2 as rows other GPUs wrote must be. */
__device__ void copy_x_rows(const moe_ep_mega_args_t &a, const mega_shared *sh, uint16_t *dst, int first, int j0, int n)
{
    const int H = a.d.H;
    for (int i = threadIdx.x; i < n * H; i += blockDim.x) {
        int j = j0 + i / H, r = rank_of(sh->token_prefix, a.d.R, first + j);
        if (r != a.absent_rank) dst[i] = __ldcg(a.io.x[r] + (int64_t)(first + j - sh->token_prefix[r]) * H + i % H);
    }
}

/* Dispatch item: tokens [g * dpi, ...) quantized once, written to each of
 * their rows. The group's bf16 rows move into shared memory by stages of
 * the ring (bulk copies, issued ahead while earlier stages are encoded; the
 * register-fed loop this replaced had one 16-byte load per thread in flight
 * and ran at a third of the copy bandwidth). The (token, chunk) pairs of a
 * stage are spread over the block; a warp's 32 chunks straddle tokens only
 * at a multiple of 16 chunks (H % 128 == 0), so a format block's lanes share
 * one token. */
template <int AF>
__device__ void dispatch_group(const moe_ep_mega_args_t &a, const mega_staging &st, mega_shared *sh, int g)
{
    sh = pinned(sh);
    uint8_t *smem = (uint8_t *)sh - st.sh_offset; /* not the kernel's pointer: that one then stayed live across the tiles */
    const mega_ctx c = ctx_of(a, sh);
    const moe_ep_split_dims_t &d = a.d;
    const moe_ep_format_t f = (moe_ep_format_t)AF; /* compile-time: the encoder's branches fold (2.5x slower at run time, 528786f vs 49cc52a) */
    const int first = g * sh->dpi, count = min(c.n_tok, first + sh->dpi) - first, lane = threadIdx.x % 32;
    const int stages = pinned_int(st.stages), per_stage = pinned_int(st.per_stage), chunks = pinned_int(d.H / 8);
    const int batches = (count + per_stage - 1) / per_stage, stage_bytes = per_stage * st.token_bytes;
    if (threadIdx.x == 0 && st.bulk) {
        stage_begin(a, sh, st);
        for (int b = 0; b < min(batches, stages); b++)
            stage_x_rows(a, sh, smem + (size_t)b * stage_bytes, &sh->stage_full[b], first, b * per_stage,
                         min(per_stage, count - b * per_stage));
    }
    group_slots(a, c, sh, first, count);
    __syncthreads();
    record_row_sources(a, c, sh, first, count);
    for (int b = 0, s = 0, phase = 0; b < batches; b++) {
        const int j0 = b * per_stage, n = min(per_stage, count - j0);
        int jj = threadIdx.x / chunks, ch = threadIdx.x - jj * chunks; /* token of the batch, 8-column chunk */
        uint16_t *x = (uint16_t *)(smem + (size_t)s * stage_bytes);
        const uint32_t xs = smem_u32(x);
        if (st.bulk) {
            MEGA_STAGE_WAIT(a, sh, &sh->stage_full[s], phase, 0);
        } else {
            copy_x_rows(a, sh, x, first, j0, n);
            __syncthreads();
        }
        /* lane's pair (jj, ch) = chunk i0 + lane of the batch, stepped by
         * blockDim.x chunks without a division; set again at each batch, not
         * carried over as in combine_staged: here the loop runs on the warp's
         * i0 and the shuffles need a warp's lanes on consecutive chunks. The
         * rank only where one is absent (tests). Per chunk a division, a
         * modulo and rank_of's loop were most of the dispatch's instructions
         * (it ran at ~1.3 TB/s) */
        for (int i0 = threadIdx.x - lane; i0 < n * chunks; i0 += blockDim.x) { /* warp-uniform: shuffles inside */
            const bool on = jj < n && (a.absent_rank < 0 || rank_of(sh->token_prefix, d.R, first + j0 + jj) != a.absent_rank);
            float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            if (on) load_bf16x8_shared(xs + 2u * (uint32_t)(jj * d.H + ch * 8), v);
            dispatch_chunk(f, v, d.H, ch * 8, d.fc1_scale, a.b.xq, a.b.xq_scales, c.rows_s + (j0 + (on ? jj : 0)) * d.K,
                           d.K, on);
            for (ch += blockDim.x; ch >= chunks; ch -= chunks) jj++;
        }
        __syncthreads(); /* stage s read by every thread */
        if (threadIdx.x == 0 && st.bulk && b + stages < batches)
            stage_x_rows(a, sh, smem + (size_t)s * stage_bytes, &sh->stage_full[s], first, j0 + stages * per_stage,
                         min(per_stage, count - j0 - stages * per_stage));
        if (++s == stages) s = 0, phase ^= 1;
    }
    if (st.bulk) stage_end(a, sh, st);
    dispatch_signal(a, c, sh, first, count);
}

/* Dispatch item when GEMM1 gathers its A rows from x itself (mega_params.gather):
 * only where each row comes from, then the rows count as ready. */
__device__ void dispatch_sources(const moe_ep_mega_args_t &a, mega_shared *sh, int g)
{
    const mega_ctx c = ctx_of(a, sh);
    const int first = g * sh->dpi, count = min(c.n_tok, first + sh->dpi) - first;
    group_slots(a, c, sh, first, count);
    __syncthreads();
    record_row_sources(a, c, sh, first, count);
    dispatch_signal(a, c, sh, first, count);
}

/* Kernel parameters: the GEMM arguments are built on the host so that the tiles
 * read them from the parameter bank, not from registers. */
struct mega_params {
    moe_ep_mega_args_t a;
    gemm_args g1, g2;
    CUtensorMap ta1, tb1, ta2, tb2; /* the TMA modes: A and B of GEMM1 and GEMM2 (else unset) */
    mega_staging xs, ys;            /* staged dispatch (bf16 x rows) and combine (a token's K wire rows) */
    int gather; /* the bf16 GEMM runs: GEMM1 reads its A rows from x (every x 16-byte aligned), no row copies */
};

template <int BM, int MODE>
__host__ __device__ __forceinline__ size_t mega_shared_offset(const moe_ep_split_dims_t &d);

/* GEMM item i (of one GEMM, n column blocks per m tile): its expert e, m
 * tile mt and first column n0. */
template <int MODE>
__device__ __forceinline__ void gemm_item_tile(const mega_ctx &c, int E, int n, int i, int &e, int &mt, int &n0)
{
    e = tile_expert(c.tile_off, E, i / n); /* an expert's items are contiguous */
    const int first = c.tile_off[e], li = i - first * n;
    if constexpr (MODE == MODE_WGMMA) { /* column block by column block: split's bf16 order (wgmma_gemm.cu) */
        const int m_e = c.tile_off[e + 1] - first;
        mt = first + li % m_e, n0 = (li / m_e) * MEGA_BN;
    } else {
        mt = first + li / n, n0 = (li % n) * MEGA_BN;
    }
}

/* The row step of expert e's bf16 tiles (MODE_WGMMA; tile mt: rows off[e] +
 * (mt - tile_off[e]) * step, at most step of them): the rows spread evenly
 * over the expert's m tiles, as split's (wg_tile_step). GEMM1, GEMM2, the
 * row and the combine items all map rows to tiles so. The other modes step
 * by BM, written out where used: this helper there, even when it returned
 * BM, moved ptxas into C7511 at QG_RS 128 (thirtieth session). */
__device__ __forceinline__ int mega_spread_step(const mega_ctx &c, int e)
{
    return wg_tile_step(c.off[e + 1] - c.off[e], c.tile_off[e + 1] - c.tile_off[e]);
}

/* ---- The register tile's item protocol ----------------------------------
 * A GEMM item's done counter is raised (release_pending) not at the item's
 * end, where the fence waits ~1 us for the epilogue's stores to drain, but
 * in the block's next tile once its first loads are issued
 * (mega_tile_hook::loads_issued), so that the drain overlaps their flight;
 * and the next item's inputs are looked at when it is claimed, while thread
 * 0 waits for the consumers anyway (mega_tile_hook::claimed), so that the
 * item then starts without a wait's round trip. Deadlock-free: a block
 * raises its pending counter before any wait that might need it (the item
 * loop, for every item but one whose inputs were seen to exist; the exit). */

/* Thread 0, every thread's writes of the item ordered before it by a barrier. */
__device__ __forceinline__ void release_pending(mega_shared *sh)
{
    if (!sh->pending) return;
    __threadfence();
    red_release_add(sh->pending, 1);
    sh->pending = nullptr;
}

/* The counter GEMM item `item` (the loop's index) waits for, and its target;
 * NULL: not a GEMM item. From the shared block alone (the tile's hook has no args). */
__device__ __forceinline__ const int32_t *gemm_dependency(const mega_shared *sh, int item, int32_t &target)
{
    const int j = item - sh->n_send - sh->n_count - sh->n_groups, n_g1 = sh->tiles * sh->n1;
    if (item < 0 || j < 0 || j >= n_g1 + sh->tiles * sh->n2) return nullptr;
    if (j >= n_g1) { /* GEMM2 item j - n_g1: m tile (j - n_g1) / n2 (gemm_item_tile's order) */
        target = sh->n1;
        return sh->ready + sh->E + (j - n_g1) / sh->n2; /* g1_done[mt] */
    }
    const int32_t *off = (const int32_t *)(sh + 1), *tile_off = off + sh->E + 1;
    const int e = tile_expert(tile_off, sh->E, j / sh->n1);
    target = off[e + 1] - off[e];
    return sh->ready + e;
}

/* mega_shared_offset of the register tile's modes: a constant (their tile's
 * shared memory does not depend on the layer's dims). */
template <int BM, int MODE>
__host__ __device__ constexpr size_t mega_rs_shared_offset()
{
    return (FR_SMEM_BYTES(RS_FMT_OF(MODE), BM) + 15) / 16 * 16;
}

/* The register tile's HOOK in this kernel (fr_no_hook: what and when). */
template <int BM, int MODE>
struct mega_tile_hook {
    static __device__ __forceinline__ mega_shared *shared()
    {
        extern __shared__ __align__(1024) uint8_t smem[];
        return (mega_shared *)(smem + mega_rs_shared_offset<BM, MODE>());
    }
    static __device__ __forceinline__ void claimed(int item)
    {
        if constexpr (!MEGA_DEFERS(MODE)) return;
        mega_shared *sh = shared();
        int32_t target = 0;
        const int32_t *ctr = gemm_dependency(sh, item, target);
        sh->dep_item = ctr && ld_acquire(ctr) >= target ? item : -1;
    }
    static __device__ __forceinline__ void loads_issued()
    {
        if constexpr (MEGA_DEFERS(MODE)) release_pending(shared());
    }
};

template <int BM, int MODE, int SB, bool FIRST>
__device__ bool gemm_item(const mega_params &p, mega_shared *sh, uint8_t *smem, int i)
{
    const moe_ep_mega_args_t &a = p.a;
    int mt, e, row0, rows_valid, n0; /* row0 32-bit (rows < 2^31, layer.c): a 64-bit one held into the tile spilled */
    {
        const mega_ctx c = ctx_of(a, sh);
        gemm_item_tile<MODE>(c, a.d.E, FIRST ? c.n1 : c.n2, i, e, mt, n0);
        bool ok = (MEGA_DEFERS(MODE) && sh->dep_item == sh->item) ||
                  (FIRST ? block_wait(&c.ready[e], c.off[e + 1] - c.off[e], a, MOE_EP_MEGA_WAIT_ROWS, (uint32_t)e)
                         : block_wait(&c.g1_done[mt], c.n1, a, MOE_EP_MEGA_WAIT_GEMM1, (uint32_t)mt));
        if (!ok) return false;
        if constexpr (MODE == MODE_WGMMA) { /* after the wait: nothing more held across it */
            const int step = mega_spread_step(c, e);
            row0 = c.off[e] + (mt - c.tile_off[e]) * step, rows_valid = min(step, c.off[e + 1] - row0);
        } else {
            row0 = c.off[e] + (mt - c.tile_off[e]) * BM, rows_valid = min(BM, c.off[e + 1] - row0);
        }
        MEGA_TRACE_MARK(sh);
        if (threadIdx.x == 0) sh->mt = mt; /* read back after the tile: nothing stays live across it */
    }
    if constexpr (MODE == MODE_WGMMA) {
        /* non-bf16 GEMM2 outputs (the C-tile epilogue); never in the wide instance (launch refuses it) */
        if constexpr (BM == WG_BM)
            wgmma_tile(FIRST ? p.g1 : p.g2, FIRST ? &p.ta1 : &p.ta2, FIRST ? &p.tb1 : &p.tb2, smem, e, row0, rows_valid, n0);
    }
    else if constexpr (MODE_RS(MODE)) {
        /* 128 rows and the paired instances (80 registers): the epilogue
         * inlined spills in this kernel, so it runs after the tile as a call
         * (fr_epilogue_after) */
        constexpr int FMT = RS_FMT_OF(MODE);
        constexpr bool AFTER = BM == 128 || FR_PAIRED(FMT, BM);
        fp8_rs_tile<FMT, BM, BM <= 64, !AFTER, mega_tile_hook<BM, MODE>>(FIRST ? p.g1 : p.g2, FIRST ? &p.ta1 : &p.ta2, FIRST ? &p.tb1 : &p.tb2, smem, e, row0, rows_valid, n0);
        if constexpr (AFTER) fr_epilogue_after<FMT, BM>(FIRST ? p.g1 : p.g2, smem);
    }
    else
        gemm_tile<BM, MEGA_BN, MODE, SB, true>(FIRST ? p.g1 : p.g2, smem, e, row0, rows_valid, n0);
    sh = (mega_shared *)(smem + mega_shared_offset<BM, MODE>(a.d)); /* recomputed: no register kept across the tile */
    const mega_ctx c = ctx_of(a, sh);
    if constexpr (MODE_RS(MODE))
        if (threadIdx.x == 0) sh->next = fr_claimed<RS_FMT_OF(MODE), BM>(smem); /* the item loop's next item */
    if constexpr (MEGA_DEFERS(MODE)) { /* the counter is raised later (release_pending), the item's writes drained by then */
        if (threadIdx.x == 0) sh->pending = FIRST ? &c.g1_done[sh->mt] : &c.g2_done[sh->mt];
    } else {
        block_signal(FIRST ? &c.g1_done[sh->mt] : &c.g2_done[sh->mt]);
    }
    return true;
}

/* ---- GEMM runs: the bf16 tile's items pipelined (MODE_WGMMA) ------------
 * As split's wg_persistent: one ring over the block's tiles, the producer
 * loading the next tile while the consumers store the last one's outputs
 * from registers (bf16 outputs: GEMM1, and GEMM2 on the bf16 wire). Thread 0
 * claims each next item itself RUN_CLAIM_AHEAD K steps before the current
 * one's loads end, then waits for that item's rows and passes the tile to
 * the consumers through a 2-entry queue in shared memory. An item that is
 * not such a GEMM item ends the run: the item loop takes it next.
 * Deadlock-free as the item loop: a claimed item waits only on smaller ones,
 * and the block's earlier items need no more of the producer's work.
 *
 * Gathering GEMM1 (mega_params.gather: every x 16-byte aligned): the
 * dispatch writes no bf16 rows, only each row's source (a.row_slot); the
 * producer warpgroup copies the A rows from x itself. The dispatch's
 * 467 MB at flash T = 8192 (T K rows written and read back) become T K row
 * reads, and GEMM1 can start ~20 us into the forward instead of ~160. */

/* The consumers' wait for the next descriptor: the producer's own waits are
 * bounded (its dependency spin by timeout_ns, the ring by tile_wait_ns), so
 * this gives up only past both (a bug: reported as a tile wait). */
__device__ __forceinline__ bool run_wait(const moe_ep_mega_args_t &a, uint64_t *bar, int parity)
{
    long long start = 0;
    for (;;) {
        uint32_t done;
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(smem_u32(bar)), "r"(parity) : "memory");
        if (done) return true;
        if (start == 0) start = global_ns();
        const moe_ep_mega_args_t *ap = pinned(&a); /* the bound made here, not held across the kernel */
        if (tile_wait_failed || global_ns() - start > 2 * ap->timeout_ns + 2 * (long long)ap->d.tile_wait_ns) {
            tile_wait_failed = 1u;
            return false;
        }
    }
}

/* Thread 0: the run's next tile from item `item` (global index; GEMM1 item 0
 * is `base`) once its inputs exist, into descriptor slot q % 2 (gemm 0: the
 * run ends, at `item`). */
template <int BM, int MODE>
__device__ __forceinline__ void run_claim(const mega_params &p, mega_shared *sh, int item, int base, int q)
{
    const moe_ep_mega_args_t &a = p.a;
    const mega_ctx c = ctx_of(a, sh);
    const int n_g1 = sh->tiles * c.n1, n_g2 = p.g2.out_fmt == MOE_EP_FORMAT_BF16 ? sh->tiles * c.n2 : 0;
    const int j = item - base;
    int gemm = item >= 0 && j >= 0 && j < n_g1 ? 1 : item >= 0 && j >= n_g1 && j < n_g1 + n_g2 ? 2 : 0;
    int e = 0, mt = 0, n0 = 0, row0 = 0, rows_valid = 0;
    if (gemm) {
        gemm_item_tile<MODE>(c, a.d.E, gemm == 1 ? c.n1 : c.n2, gemm == 1 ? j : j - n_g1, e, mt, n0);
        const bool ok = gemm == 1 ? spin_until(&c.ready[e], c.off[e + 1] - c.off[e], a, MOE_EP_MEGA_WAIT_ROWS, (uint32_t)e)
                                  : spin_until(&c.g1_done[mt], c.n1, a, MOE_EP_MEGA_WAIT_GEMM1, (uint32_t)mt);
        if (!ok) gemm = 0, item = -1;
        const int step = mega_spread_step(c, e); /* a bf16 run: MODE_WGMMA */
        row0 = c.off[e] + (mt - c.tile_off[e]) * step, rows_valid = min(step, c.off[e + 1] - row0);
    }
    mbar_wait_bounded(&sh->run_empty[q & 1], ((q >> 1) & 1) ^ 1, a.d.tile_wait_ns);
    int32_t *dq = sh->run_q[q & 1];
    dq[0] = gemm, dq[1] = e, dq[2] = mt, dq[3] = row0, dq[4] = rows_valid, dq[5] = n0;
    if (!gemm) sh->run_end = item;
    mbar_arrive(&sh->run_full[q & 1]); /* release: the descriptor before it */
}

/* Thread 0: the next item of the loop (-1 once the forward failed). */
__device__ __forceinline__ int claim_next(const moe_ep_mega_args_t &a)
{
    return moe_ep_dev_failed(a.b.error) ? -1 : atomicAdd(&a.counters[MOE_EP_MEGA_CTR_WORK], 1);
}

/* A run's producer warpgroup: each of its threads arrives once per stage
 * (gathering tiles: after its copies; TMA tiles: thread 0 for all of them),
 * besides thread 0's expect_tx arrival. */
#define RUN_PRODUCERS 128

/* MODE_WGMMA's SB (no scale block there): its instance with every bf16-output
 * tile swapped (wgmma_tile.cuh; chosen per forward: moe_ep_bf16_swapped). */
#define MEGA_WG_SWAP 1

__device__ __forceinline__ void run_producer_barrier() { asm volatile("bar.sync 2, 128;\n" ::: "memory"); }

/* Producer thread t of a gathering GEMM1 tile: A rows come from their
 * tokens' x rows (found through a.row_slot) by 16-byte cp.async into the
 * 128-byte swizzled layout TMA gives (chunk c of row r at chunk c ^ r % 8).
 * Thread t copies chunk t % 8 of rows t / 8 + 16 i, so each warp instruction
 * reads 4 whole 128-byte lines (lane per row: 2x the L2 sectors, 20 % slower
 * at T = 2048). Rows past rows_valid stay unwritten: their outputs are never
 * stored. src[i]: row t / 8 + 16 i's chunk, NULL past rows_valid (NR = tile rows / 16). */
template <int NR>
__device__ __forceinline__ void gather_rows(const moe_ep_mega_args_t &a, const int32_t *dq, int t, const uint16_t *(&src)[NR])
{
    const int row0 = dq[3], rows_valid = dq[4];
#pragma unroll
    for (int i = 0; i < NR; i++) {
        const int r = (t >> 3) + 16 * i;
        src[i] = NULL;
        if (r < rows_valid) {
            const int tok = __ldcg(&a.row_slot[row0 + r]) / a.d.K, rk = tok / a.d.T_max; /* rk * T_max + token */
            src[i] = a.io.x[rk] + (int64_t)(tok - rk * a.d.T_max) * a.d.H + 8 * (t & 7);
        }
    }
}

/* K steps kt0 .. kt1 - 1 of a gathering GEMM1 tile: B by thread 0's TMA, A by
 * every thread's copies, each thread's making its arrival on the stage (with
 * the expect_tx, 1 + RUN_PRODUCERS). */
template <int NR, typename S>
__device__ __forceinline__ void gather_steps(const mega_params &p, S &s, const int32_t *dq, int t,
                                             const uint16_t *const (&src)[NR], int kt0, int kt1, int &kg)
{
    const int e = dq[1], n0 = dq[5];
    const uint32_t off = (uint32_t)(t >> 3) * 128u + ((uint32_t)((t & 7) ^ ((t >> 3) & 7)) << 4);
    for (int kt = kt0; kt < kt1; kt++, kg++) {
        const int st = kg % WG_STAGES;
        tile_wait(p.g1, &s.empty[st], ((kg / WG_STAGES) & 1) ^ 1);
        if (t == 0) {
            mbar_expect_tx(&s.full[st], sizeof s.b[0]);
            tma_load_2d(s.b[st], &p.tb1, &s.full[st], kt * WG_BK, e * p.g1.N + n0);
        }
        const uint32_t base = smem_u32(s.a[st]) + off;
#pragma unroll
        for (int i = 0; i < NR; i++)
            if (src[i]) cp_async16(base + 16u * 128u * (uint32_t)i, src[i] + kt * WG_BK);
        cp_async_mbar_arrive(&s.full[st]);
    }
}

/* K steps before a tile's end at which thread 0 claims the run's next item:
 * its atomic's round trip then overlaps the last loads instead of following
 * them (claimed any earlier, the item would wait longer for this block). */
#define RUN_CLAIM_AHEAD 8

/* Producer warpgroup (thread t): the run's tiles. Thread 0 claims each next
 * item RUN_CLAIM_AHEAD K steps before the current one's loads end, and once
 * they are issued passes it on through the descriptor queue; the warpgroup
 * then loads it: gathering GEMM1 tiles all 128 threads, the others thread 0
 * alone by TMA (arriving for the rest). */
template <int BM, int MODE>
__device__ __forceinline__ void run_produce(const mega_params &p_, mega_shared *sh, wg_smem_t<BM> &s, int item, int base, int t)
{
    const mega_params &p = *pinned(&p_); /* parameters read here: nothing derived from them held across the kernel */
    int kg = 0;
    for (int q = 0;; q++) {
        if (t == 0) run_claim<BM, MODE>(p, sh, item, base, q);
        run_producer_barrier(); /* the descriptor, seen by the warpgroup */
        const int32_t *dq = sh->run_q[q & 1];
        const int gemm = dq[0], n_k = (gemm == 1 ? p.g1.K : p.g2.K) / WG_BK, mid = max(0, n_k - RUN_CLAIM_AHEAD);
        if (!gemm) return;
        const int e = dq[1], row0 = dq[3], n0 = dq[5];
        if (gemm == 1 && p.gather) {
            const uint16_t *src[BM / 16];
            gather_rows(p.a, dq, t, src);
            gather_steps(p, s, dq, t, src, 0, mid, kg);
            if (t == 0) item = claim_next(p.a);
            gather_steps(p, s, dq, t, src, mid, n_k, kg);
        } else if (t == 0) {
            asm volatile("fence.proxy.async.global;\n" ::: "memory"); /* rows other blocks wrote, acquired above */
            const bool g1 = gemm == 1;
            const gemm_args &g = g1 ? p.g1 : p.g2;
            const CUtensorMap *ta = g1 ? &p.ta1 : &p.ta2, *tb = g1 ? &p.tb1 : &p.tb2;
            wg_load_steps(g, s, ta, tb, 0, mid, row0, e * g.N + n0, kg, RUN_PRODUCERS);
            item = claim_next(p.a);
            wg_load_steps(g, s, ta, tb, mid, n_k, row0, e * g.N + n0, kg, RUN_PRODUCERS);
        } else {
            kg += n_k;
        }
        /* a ring wait that gave up ends the run (-1), so the block ends too */
        if (t == 0 && tile_wait_failed) item = -1;
    }
}

/* Consumer warpgroup h: the run's tiles until its end. The descriptor is
 * read again after the K loop (nothing but the accumulators held across it)
 * and its slot given back then. Each tile's outputs are fenced by every
 * consumer, then one thread releases its done counter. */
template <bool SWAP, int BM>
__device__ __forceinline__ void run_consume(const mega_params &p_, mega_shared *sh, wg_smem_t<BM> &s, int h, int t)
{
    int kg = 0;
    for (int q = 0;; q++) {
        if (!run_wait(p_.a, &sh->run_full[q & 1], (q >> 1) & 1)) return;
        const int gemm = sh->run_q[q & 1][0];
        if (!gemm) {
            mbar_arrive(&sh->run_empty[q & 1]);
            return;
        }
        float d[2 * wg_smem_t<BM>::HALF]; /* 128; the wide tile's 144 (wg_smem_t::HALF) */
#pragma unroll
        for (int i = 0; i < 2 * wg_smem_t<BM>::HALF; i++) d[i] = 0.0f; /* else the last tile's values stay live around the loop */
        /* p.g1: the waits' bound; gathered A: fenced per stage (free: 0.99-1.01 without it) */
        wg_bf16_mma<SWAP>(p_.g1, s, d, h, (gemm == 1 ? p_.g1.K : p_.g2.K) / WG_BK, kg, gemm == 1 && p_.gather,
                    sh->run_q[q & 1][4]); /* SWAP: this instance's form, the width from the valid rows */
        const mega_params &p = *pinned(&p_); /* as run_produce */
        const int32_t *dq = pinned(sh)->run_q[q & 1];
        tile_pos tp;
        tp.e = dq[1], tp.row0 = dq[3], tp.rows_valid = dq[4], tp.n0 = dq[5];
        if (dq[0] == 1) wg_bf16_store<true, SWAP>(p.g1, s, d, tp, h, t); /* SwiGLU of column pairs */
        else wg_bf16_store<false, SWAP>(p.g2, s, d, tp, h, t);
        const int32_t *dq2 = pinned(sh)->run_q[q & 1];
        const int first = dq2[0] == 1, mt = dq2[2];
        mbar_arrive(&sh->run_empty[q & 1]);
        wg_consumer_barrier();
        if (h == 1 && t == 0) { /* every consumer's stores before the barrier: one fence drains them (grid sync's pattern) */
            const mega_ctx c = ctx_of(p.a, sh);
            __threadfence();
            red_release_add(first ? &c.g1_done[mt] : &c.g2_done[mt], 1);
        }
    }
}

/* Whole block: a run from GEMM item `item` (global index). Returns the item
 * that ended it, for the item loop (-1: a wait failed). */
template <int BM, int MODE, bool SWAP>
__device__ int gemm_run(const mega_params &p, mega_shared *sh, uint8_t *smem, int item, int base)
{
    sh = pinned(sh), smem = pinned(smem); /* addresses derived here stay here */
    wg_smem_t<BM> &s = *(wg_smem_t<BM> *)(((uintptr_t)smem + 1023) & ~(uintptr_t)1023);
    const int wg = threadIdx.x / 128, t = threadIdx.x % 128;
    if (threadIdx.x == 0) {
        for (int q = 0; q < 2; q++) mbar_init(&sh->run_full[q], 1), mbar_init(&sh->run_empty[q], 256);
        wg_ring_init<WG_STAGES>(p.g1, s.full, s.empty, 1 + RUN_PRODUCERS); /* and the fence for both */
    }
    __syncthreads();
    constexpr bool WIDE = BM == WG_BM_WIDE; /* 144 accumulators: registers moved to the consumers */
    if (wg == 0) {
        if constexpr (WIDE) setmaxnreg_dec<WG_WIDE_PRODUCER_REGS>();
        run_produce<BM, MODE>(p, sh, s, item, base, t);
        if constexpr (WIDE) {
            wg_registers_back_wait(); /* asleep until the consumers gave their registers back */
            setmaxnreg_inc<FR_LAUNCH_REGS>();
        }
    } else {
        if constexpr (WIDE) setmaxnreg_inc<WG_WIDE_CONSUMER_REGS>();
        run_consume<SWAP>(p, sh, s, wg - 1, t);
        if constexpr (WIDE) {
            setmaxnreg_dec<FR_LAUNCH_REGS>();
            wg_registers_back_arrive();
        }
    }
    __syncthreads(); /* every TMA landed, every arrival made */
    const int end = sh->run_end;
    if (threadIdx.x == 0) {
        wg_ring_inval<WG_STAGES>(p.g1, s.full, s.empty);
        for (int q = 0; q < 2; q++) mbar_inval(&sh->run_full[q]), mbar_inval(&sh->run_empty[q]);
    }
    __syncthreads(); /* run_end read by all before the loop's thread 0 moves on */
    return end;
}

/* Thread 0: the wire rows (data, then scales) of the group's tokens [j0,
 * j0 + n) into stage dst, completing on bar: token j's K data rows, then its
 * K scale rows (slots without a row are not copied). */
__device__ void stage_y_rows(const moe_ep_mega_args_t &a, const mega_ctx &c, uint8_t *dst, uint64_t *bar, int j0,
                             int n, int db, int sb)
{
    const int K = a.d.K;
    uint32_t total = 0;
    for (int s = j0 * K; s < (j0 + n) * K; s++) total += c.rows_s[s] >= 0 ? (uint32_t)(db + sb) : 0u;
    mbar_expect_tx(bar, total);
    for (int s = j0 * K; s < (j0 + n) * K; s++) {
        int64_t row = c.rows_s[s];
        if (row < 0) continue;
        uint8_t *tok = dst + (size_t)(s / K - j0) * K * (db + sb);
        bulk_load(tok + (s % K) * db, a.b.y + row * db, (uint32_t)db, bar);
        if (sb) bulk_load(tok + K * db + (s % K) * sb, a.b.y_scales + row * sb, (uint32_t)sb, bar);
    }
}

/* The group's tokens [first, first + count) summed from their rows staged
 * by stages of the ring (combine_chunk_staged: the same bits as combine_chunk),
 * slot weights from slot_w[j K + k] (shared memory). WIRE at compile time:
 * the decode's per-slot branches fold. Warp 0 refills the ring (thread 0:
 * a stage once every summing thread has arrived on its empty barrier), the
 * other warps sum (every warp when no stage is refilled: short groups,
 * decode): with one block-wide barrier per stage instead, the
 * refill's issue and the sums ran one after the other (lab traces,
 * docs/benchmarks.md: the copies alone ran at ~3.7 TB/s, with the sums and
 * stores a token took their times added). Each summing thread steps its
 * (token jj, chunk ch) pair by the summing threads' count without a
 * division, carried over from batch to batch; index math in 32 bits. */
template <int WIRE>
__device__ void combine_staged(const moe_ep_mega_args_t &a, const mega_staging &st, mega_shared *sh,
                               const float *slot_w, int first, int count)
{
    sh = pinned(sh);
    uint8_t *smem = (uint8_t *)sh - st.sh_offset;
    const mega_ctx c = ctx_of(a, sh);
    const moe_ep_split_dims_t &d = a.d;
    const moe_ep_format_t yf = moe_ep_wire_format(d.wire);
    const int db = pinned_int((int)moe_ep_row_data_bytes(yf, d.H)), sb = pinned_int((int)moe_ep_row_scale_bytes(yf, d.H));
    const int stages = pinned_int(st.stages), per_stage = pinned_int(st.per_stage), chunks = pinned_int(d.H / 8);
    const int batches = (count + per_stage - 1) / per_stage, stage_bytes = per_stage * st.token_bytes;
    const int refill = batches > stages ? 32 : 0; /* warp 0 refills; with no refill every thread sums */
    const int summers = blockDim.x - refill;        /* threads refill .. blockDim.x - 1 */
    if (threadIdx.x == 0) {
        stage_begin(a, sh, st);
        for (int i = 0; i < stages; i++) mbar_init(&sh->stage_empty[i], summers);
        for (int b = 0; b < min(batches, stages); b++)
            stage_y_rows(a, c, smem + (size_t)b * stage_bytes, &sh->stage_full[b], b * per_stage,
                         min(per_stage, count - b * per_stage), db, sb);
    }
    __syncthreads(); /* the barriers exist before anyone waits; slot_w written */
    if (threadIdx.x < refill) {
        for (int b = stages; threadIdx.x == 0 && b < batches; b++) { /* batch b into stage b % stages once read */
            const int s = b % stages;
            mbar_wait_bounded(&sh->stage_empty[s], (b / stages - 1) & 1, d.tile_wait_ns);
            stage_y_rows(a, c, smem + (size_t)s * stage_bytes, &sh->stage_full[s], b * per_stage,
                         min(per_stage, count - b * per_stage), db, sb);
        }
    } else {
        const int tid = threadIdx.x - refill;
        int jj = tid / chunks, ch = tid - jj * chunks; /* token of the batch, 8-column chunk */
        for (int b = 0, s = 0, phase = 0; b < batches; b++) {
            const int j0 = b * per_stage, n = min(per_stage, count - j0);
            MEGA_STAGE_WAIT(a, sh, &sh->stage_full[s], phase, refill);
            const uint8_t *stage = smem + s * stage_bytes;
            while (jj < n) {
                const int j = j0 + jj, r = rank_of(sh->token_prefix, d.R, first + j), t = first + j - sh->token_prefix[r];
                const uint8_t *tok = stage + jj * st.token_bytes;
                combine_chunk_staged((moe_ep_wire_t)WIRE, tok, tok + d.K * db, db, sb, d.K, c.rows_s + j * d.K,
                                     slot_w + j * d.K, a.io.out[r] + (int64_t)t * d.H, ch * 8);
                for (ch += summers; ch >= chunks; ch -= chunks) jj++;
            }
            jj -= per_stage; /* into the next batch (only the last batch holds fewer) */
            if (refill) mbar_arrive(&sh->stage_empty[s]); /* stage s read by this thread */
            if (++s == stages) s = 0, phase ^= 1;
        }
    }
    stage_end(a, sh, st);
    if (threadIdx.x == 0)
        for (int i = 0; i < stages; i++) mbar_inval(&sh->stage_empty[i]);
}

/* Combine item: tokens [g * cpi, ...) once the GEMM2 tiles of their rows are
 * done; staged (st.stages > 0) or register-fed. */
template <int BM, bool SPREAD>
__device__ bool combine_group(const moe_ep_mega_args_t &a, const mega_staging &st, mega_shared *sh, int g)
{
    const mega_ctx c = ctx_of(a, sh);
    const moe_ep_split_dims_t &d = a.d;
    int first = g * sh->cpi, count = min(c.n_tok, first + sh->cpi) - first;
    bool ok = true;
    group_slots(a, c, sh, first, count);
    __syncthreads();
    if (threadIdx.x < count * d.K && c.rows_s[threadIdx.x] >= 0) {
        int e = c.expert_s[threadIdx.x], mt = c.tile_off[e] + (c.rows_s[threadIdx.x] - c.off[e]) / (SPREAD ? mega_spread_step(c, e) : BM);
        ok = spin_until(&c.g2_done[mt], c.n2, a, MOE_EP_MEGA_WAIT_GEMM2, (uint32_t)mt);
    }
    if (!__syncthreads_and(ok)) return false;
    MEGA_TRACE_MARK(sh);
    if (st.stages) {
        /* each slot's weight, once, over its expert (read by its own thread
         * only, above); combine_staged's first barrier orders it */
        float *slot_w = (float *)c.expert_s;
        if (threadIdx.x < count * d.K) {
            const int j = threadIdx.x / d.K, r = rank_of(sh->token_prefix, d.R, first + j);
            const int t = first + j - sh->token_prefix[r];
            slot_w[threadIdx.x] = c.rows_s[threadIdx.x] >= 0 ? __ldg(a.io.weights[r] + (int64_t)t * d.K + threadIdx.x % d.K) : 0.0f;
        }
        if (d.wire == MOE_EP_WIRE_BF16) combine_staged<MOE_EP_WIRE_BF16>(a, st, sh, slot_w, first, count);
        else if (d.wire == MOE_EP_WIRE_MXFP8) combine_staged<MOE_EP_WIRE_MXFP8>(a, st, sh, slot_w, first, count);
        else combine_staged<MOE_EP_WIRE_FP4>(a, st, sh, slot_w, first, count);
        return true;
    }
    /* the group's (token, chunk) pairs spread over the block */
    const int64_t chunks = d.H / 8;
    for (int64_t i = threadIdx.x; i < count * chunks; i += blockDim.x) {
        int j = (int)(i / chunks), r = rank_of(sh->token_prefix, d.R, first + j), t = first + j - sh->token_prefix[r];
        combine_chunk(d.wire, a.b.y, a.b.y_scales, d.H, d.K, c.rows_s + j * d.K, a.io.weights[r] + (int64_t)t * d.K,
                      a.io.out[r] + (int64_t)t * d.H, (i % chunks) * 8);
    }
    __syncthreads();
    return true;
}

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

/* Thread 0's view of the device error word, the same for the whole block. */
__device__ __forceinline__ bool block_not_failed(const moe_ep_mega_args_t &a)
{
    return __syncthreads_and(threadIdx.x != 0 || !moe_ep_dev_failed(a.b.error)) != 0;
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

/* Item counts, once: links first wait for every rank's tokens of this forward. */
__device__ bool setup_items(const moe_ep_mega_args_t &a, mega_shared *sh, bool staged_dispatch, bool staged_combine)
{
    if (a.link.world) {
        const int W = a.link.world;
        link_ctrl own = ctrl_of(peer_heap(a.link, a.link.rank), W);
        bool ok = true;
        for (int j = threadIdx.x; j < W * MOE_EP_MEGA_SEND_ITEMS && ok; j += blockDim.x)
            ok = spin_until_sys(&own.arrived[j], sh->epoch + 1u, a, MOE_EP_MEGA_WAIT_TOKENS,
                                (uint32_t)(j / MOE_EP_MEGA_SEND_ITEMS));
        if (!__syncthreads_and(ok)) return false;
    }
    read_tokens(a, sh);
    if (!block_not_failed(a)) return false; /* a bad T: every rank stops here */
    if (threadIdx.x == 0) {
        int n_tok = sh->token_prefix[a.d.R], slots_per_item = blockDim.x;
        int per_item = (n_tok + 4 * (int)gridDim.x - 1) / (4 * (int)gridDim.x);
        sh->n_tok = n_tok;
        sh->n_count = (int)(((int64_t)n_tok * a.d.K + slots_per_item - 1) / slots_per_item);
        int max_tokens = (int)blockDim.x / a.d.K; /* an item's slots: one thread each */
        sh->tpi = max(1, min(per_item, max_tokens));
        /* staged items keep many rows in flight: larger groups pay fewer
         * per-item round trips (dispatch: one per block; combine: two, so
         * that blocks freed early by GEMM2 take more) */
        sh->dpi = staged_dispatch ? max(1, min((n_tok + (int)gridDim.x - 1) / (int)gridDim.x, max_tokens)) : sh->tpi;
        sh->cpi = staged_combine ? max(1, min((n_tok + 2 * (int)gridDim.x - 1) / (2 * (int)gridDim.x), max_tokens)) : sh->tpi;
        sh->n_groups = (n_tok + sh->dpi - 1) / sh->dpi;
        int own = a.link.world ? sh->token_prefix[a.link.rank + 1] - sh->token_prefix[a.link.rank] : n_tok;
        sh->n_combine = a.link.world ? (own + sh->tpi - 1) / sh->tpi : (own + sh->cpi - 1) / sh->cpi;
    }
    __syncthreads();
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
    const int step = SPREAD ? mega_spread_step(c, e) : BM;
    int64_t row0 = c.off[e] + (int64_t)(mt - c.tile_off[e]) * step;
    int n = (int)min((int64_t)step, (int64_t)c.off[e + 1] - row0);
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

/* The block's copy of the plan, once every slot is counted: expert row and
 * tile offsets in shared memory. */
template <int BM>
__device__ bool mega_plan(const moe_ep_mega_args_t &a, mega_shared *sh)
{
    const mega_ctx c = ctx_of(a, sh);
    if (!block_wait(&c.ctr[MOE_EP_MEGA_CTR_COUNTED], sh->n_count, a, MOE_EP_MEGA_WAIT_COUNT, 0)) return false;
    if (!block_not_failed(a)) return false; /* a bad id (set before its item counted): nothing runs on */
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
    if (a.link.world) link_exit(a, sh);
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
    if constexpr (MODE == MODE_WGMMA) return (WG_SMEM_BYTES_OF(BM) + 15) / 16 * 16;
    else if constexpr (MODE_RS(MODE)) return mega_rs_shared_offset<BM, MODE>();
    else return (gemm_smem_bytes<BM, MEGA_BN, MODE>(af, wf) + 15) / 16 * 16;
}

template <int BM, int MODE>
static size_t mega_smem_bytes(const moe_ep_split_dims_t &d)
{
    return mega_shared_offset<BM, MODE>(d) + sizeof(mega_shared) +
           sizeof(int32_t) * (2 * (d.E + 1) + 2 * mega_threads<BM, MODE>());
}

/* Blocks per SM the instance is compiled for: 2 for the register tile's
 * paired instances (fp8_rs_tile.cuh, FR_PAIR_MAX_ROWS), else 1. */
template <int BM, int MODE>
constexpr int mega_ctas_per_sm()
{
    return MODE_RS(MODE) ? FR_CTAS_OF(RS_FMT_OF(MODE), BM) : 1;
}

template <int BM, int MODE, int SB>
__global__ void __launch_bounds__(mega_threads<BM, MODE>(), mega_ctas_per_sm<BM, MODE>()) mega_forward(const __grid_constant__ mega_params p)
{
    /* 1024: the register tile's stages (128-byte swizzle) start at smem itself (fr_smem_base) */
    extern __shared__ __align__(1024) uint8_t smem[];
    const moe_ep_mega_args_t &a = p.a;
    mega_shared *sh = (mega_shared *)(smem + mega_shared_offset<BM, MODE>(a.d));
    MEGA_TRACE_OPEN(sh, MOE_EP_MEGA_ITEM_START); /* the block's start: closed at its first claim */
    if constexpr (!MODE_TMA(MODE)) gemm_tables_init<BM, MEGA_BN, MODE>(p.g1, smem);
    const int n_send = a.link.world ? MOE_EP_MEGA_SEND_ITEMS : 0;
    if (threadIdx.x == 0) {
        if ((uint32_t)__cvta_generic_to_shared(smem) & 1023u) /* not seen; every item then ends at once */
            moe_ep_dev_fail(a.b.error, MOE_EP_DEVERR_SMEM_ALIGN, (uint32_t)__cvta_generic_to_shared(smem));
        tile_wait_arm();
        sh->n_tok = -1, sh->tiles = -1, sh->next = -1;
        if constexpr (MEGA_DEFERS(MODE)) { /* for the register tile's hook (gemm_dependency), which has no args */
            sh->pending = nullptr, sh->dep_item = -1;
            sh->ready = a.counters + MOE_EP_MEGA_CTR_FIXED, sh->E = a.d.E, sh->n_send = n_send;
        }
        sh->n1 = 2 * a.d.I / MEGA_BN, sh->n2 = a.d.H / MEGA_BN;
        sh->epoch = a.link.world ? __ldcg(ctrl_of(peer_heap(a.link, a.link.rank), a.link.world).epoch) : 0u;
    }
    __syncthreads();
    for (;;) {
        MEGA_TRACE_CLOSE(sh);
        if (threadIdx.x == 0) {
            const bool failed = moe_ep_dev_failed(a.b.error);
            /* next: claimed ahead by the last GEMM item (the bf16 runs' end, the register tile's fr_claimed) */
            sh->item = failed ? -1 : sh->next >= 0 ? sh->next : atomicAdd(&a.counters[MOE_EP_MEGA_CTR_WORK], 1);
            sh->next = -1;
        }
        __syncthreads();
        int i = sh->item;
        __syncthreads();
        /* a GEMM item whose inputs exist raises the last one's counter in its
         * tile (mega_tile_hook); any other raises it before it can wait */
        if constexpr (MEGA_DEFERS(MODE))
            if (threadIdx.x == 0 && i != sh->dep_item) release_pending(sh);
        if (i < 0) break;
        if (i < n_send) {
            MEGA_TRACE_OPEN(sh, MOE_EP_MEGA_ITEM_SEND);
            if (!send_item(a, sh, i)) break;
            continue;
        }
        i -= n_send;
        if (sh->n_tok < 0 && !setup_items(a, sh, p.xs.stages > 0, p.ys.stages > 0)) break;
        if (i < sh->n_count) {
            MEGA_TRACE_OPEN(sh, MOE_EP_MEGA_ITEM_COUNT);
            count_item(a, sh, i);
            continue;
        }
        if (sh->tiles < 0 && !mega_plan<BM>(a, sh)) break;
        i -= sh->n_count;
        if (i < sh->n_groups) {
            MEGA_TRACE_OPEN(sh, MOE_EP_MEGA_ITEM_DISPATCH);
            if (MODE == MODE_WGMMA && p.gather) dispatch_sources(a, sh, i);
            else dispatch_group<mega_act_format<MODE, SB>()>(a, p.xs, sh, i);
            continue;
        }
        i -= sh->n_groups;
        int n_g1 = sh->tiles * sh->n1, n_g2 = sh->tiles * sh->n2, n_rows = a.link.world ? sh->tiles : 0;
        if constexpr (MODE == MODE_WGMMA) { /* bf16 outputs: pipelined over the block's GEMM items */
            if (i < n_g1 || (i < n_g1 + n_g2 && pinned_int((int)p.g2.out_fmt) == MOE_EP_FORMAT_BF16)) {
                MEGA_TRACE_OPEN(sh, i < n_g1 ? MOE_EP_MEGA_ITEM_GEMM1 : MOE_EP_MEGA_ITEM_GEMM2);
                const int end = gemm_run<BM, MODE, SB == MEGA_WG_SWAP>(p, sh, smem, sh->item, n_send + sh->n_count + sh->n_groups);
                if (end < 0) break;
                if (threadIdx.x == 0) sh->next = end;
                continue;
            }
        }
        bool ok;
        if (i < n_g1) {
            MEGA_TRACE_OPEN(sh, MOE_EP_MEGA_ITEM_GEMM1);
            ok = gemm_item<BM, MODE, SB, true>(p, sh, smem, i);
        } else if ((i -= n_g1) < n_g2) {
            MEGA_TRACE_OPEN(sh, MOE_EP_MEGA_ITEM_GEMM2);
            ok = gemm_item<BM, MODE, SB, false>(p, sh, smem, i);
        } else if ((i -= n_g2) < n_rows) {
            MEGA_TRACE_OPEN(sh, MOE_EP_MEGA_ITEM_ROWS);
            ok = rows_item<BM, MODE == MODE_WGMMA>(a, sh, i);
        } else if ((i -= n_rows) >= sh->n_combine) {
            ok = false;
        } else {
            MEGA_TRACE_OPEN(sh, MOE_EP_MEGA_ITEM_COMBINE);
            ok = a.link.world ? combine_link_group(a, sh, i) : combine_group<BM, MODE == MODE_WGMMA>(a, p.ys, sh, i);
        }
        if (!ok) break;
    }
    MEGA_TRACE_CLOSE(sh);
    MEGA_TRACE_OPEN(sh, MOE_EP_MEGA_ITEM_EXIT);
    if constexpr (MEGA_DEFERS(MODE)) { /* the last item's counter (a wait that failed left it too) */
        __syncthreads();
        if (threadIdx.x == 0) release_pending(sh);
    }
    mega_exit(a, sh);
    MEGA_TRACE_CLOSE(sh);
}

/* Bytes at the start of shared memory free between items: the TMA tiles'
 * whole region; the mma.sync tiles' ring (their tables stay). */
template <int BM, int MODE>
static size_t staging_region(const moe_ep_split_dims_t &d)
{
    if (MODE_TMA(MODE)) return mega_shared_offset<BM, MODE>(d);
    return gemm_tables_offset<BM, MEGA_BN, MODE>(moe_ep_path_act_format(d.path), moe_ep_path_weight_format(d.path));
}

/* The ring for tokens of token_bytes (whose copies are each a multiple of 16
 * bytes at 16-byte aligned addresses when `aligned`): MEGA_STAGES stages of
 * as many tokens as fit, or fewer stages of one token; none when not even one
 * token fits (the combine then runs its register-fed loop; the dispatch
 * always fits: moe_ep_mega_unsupported). */
static mega_staging staging_for(size_t region, int64_t token_bytes, bool aligned)
{
    mega_staging st = {0, 0, (int)token_bytes, aligned ? 1 : 0, 0};
    int64_t fit = token_bytes > 0 ? (int64_t)region / token_bytes : 0;
    if (fit < 1) return st;
    if (fit >= 2 * MEGA_STAGES) st.stages = MEGA_STAGES, st.per_stage = (int)(fit / MEGA_STAGES);
    else st.stages = (int)(fit < MEGA_STAGES ? fit : MEGA_STAGES), st.per_stage = 1;
    return st;
}

/* The dispatch and combine rings of a launch: x rows of 2 H bytes (every
 * rank's x 16-byte aligned), a token's K wire rows (data and scale rows
 * multiples of 16 bytes). */
template <int BM, int MODE>
static void plan_staging(const moe_ep_mega_args_t *a, mega_params *p)
{
    size_t region = staging_region<BM, MODE>(a->d);
    bool x_aligned = a->d.H % 8 == 0;
    for (int r = 0; r < a->d.R; r++) x_aligned = x_aligned && ((uintptr_t)a->io.x[r] & 15) == 0;
    moe_ep_format_t yf = moe_ep_wire_format(a->d.wire);
    int64_t db = moe_ep_row_data_bytes(yf, a->d.H), sb = moe_ep_row_scale_bytes(yf, a->d.H);
    p->xs = staging_for(region, 2 * (int64_t)a->d.H, x_aligned);
    p->ys = staging_for(region, a->d.K * (db + sb), db % 16 == 0 && sb % 16 == 0 && ((uintptr_t)a->b.y & 15) == 0 &&
                                                        ((uintptr_t)a->b.y_scales & 15) == 0);
    if (!p->ys.bulk) p->ys.stages = 0; /* the combine stages by bulk copies only */
    p->xs.sh_offset = p->ys.sh_offset = (int)mega_shared_offset<BM, MODE>(a->d);
}

template <int BM, int MODE, int SB>
static moe_ep_status_t launch(const moe_ep_mega_args_t *a, cudaStream_t s)
{
    const char *name = "mega_forward";
    size_t smem = mega_smem_bytes<BM, MODE>(a->d);
    int threads = mega_threads<BM, MODE>();
    if (MODE_RS(MODE) && mega_ctas_per_sm<BM, MODE>() == 1) /* it moves registers (setmaxnreg); paired ones do not */
        MOE_EP_CHECK(fr_check_regs((const void *)mega_forward<BM, MODE, SB>, name));
    cudaError_t e = cudaFuncSetAttribute(mega_forward<BM, MODE, SB>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)smem);
    if (e != cudaSuccess)
        return MOE_EP_FAIL(MOE_EP_ERROR_UNSUPPORTED, "%s: %zu B of shared memory: %s", name, smem, cudaGetErrorString(e));
    int per_sm = 0;
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, mega_forward<BM, MODE, SB>, threads, smem);
    if (e != cudaSuccess || per_sm < 1)
        return MOE_EP_FAIL(MOE_EP_ERROR_UNSUPPORTED, "%s: no block fits an SM (%zu B shared memory)", name, smem);
    if (a->d.gemm_ctas_per_sm > 0 && a->d.gemm_ctas_per_sm < per_sm) per_sm = a->d.gemm_ctas_per_sm;
    mega_params p;
    memset(&p, 0, sizeof p);
    p.a = *a, p.g1 = moe_ep_gemm1_args(a->d, a->b), p.g2 = moe_ep_gemm2_args(a->d, a->b);
    if (MODE_RS(MODE)) /* the register tile claims the block's next item early (fr_claimed) */
        p.g1.claim_counter = p.g2.claim_counter = &a->counters[MOE_EP_MEGA_CTR_WORK];
    if (mega_act_format<MODE, SB>() != (int)moe_ep_path_act_format(a->d.path))
        return MOE_EP_FAIL(MOE_EP_ERROR_INTERNAL, "%s: instance for another activation format", name);
    plan_staging<BM, MODE>(a, &p);
    p.gather = MODE == MODE_WGMMA && p.xs.bulk; /* bulk: every x row 16-byte aligned */
    if (!p.xs.stages) /* not reached: moe_ep_mega_unsupported refuses such hidden sizes first */
        return MOE_EP_FAIL(MOE_EP_ERROR_UNSUPPORTED, "%s: hidden too large for the dispatch's shared memory", name);
    int64_t rows = (int64_t)a->d.R * a->d.T_max * a->d.K; /* rows of every source rank's slots: the buffers' capacity */
    if constexpr (MODE == MODE_WGMMA) {
        if (BM != WG_BM && (SB != MEGA_WG_SWAP || p.g2.out_fmt != MOE_EP_FORMAT_BF16))
            return MOE_EP_FAIL(MOE_EP_ERROR_INTERNAL, "%s: the %d-row bf16 tile is swapped, bf16 wire only", name, BM);
        MOE_EP_CHECK(wg_make_maps(p.g1, rows, &p.ta1, &p.tb1, BM));
        MOE_EP_CHECK(wg_make_maps(p.g2, rows, &p.ta2, &p.tb2, BM));
    } else if constexpr (MODE_RS(MODE)) {
        MOE_EP_CHECK(fr_make_maps<BM>(p.g1, rows, &p.ta1, &p.tb1));
        MOE_EP_CHECK(fr_make_maps<BM>(p.g2, rows, &p.ta2, &p.tb2));
    }
    mega_forward<BM, MODE, SB><<<a->d.num_sms * per_sm, threads, smem, s>>>(p);
    return moe_ep_launch_check(name);
}

/* Dynamic shared memory a block of sm_90 may have. */
#define MEGA_SMEM_MAX (227 * 1024)

/* The register tile of mode MODE with a->d.tile_rows activation rows (128,
 * 64, 32 or 16: moe_ep_single_tile_allows). */
template <int MODE, int SB>
static moe_ep_status_t launch_rs(const moe_ep_mega_args_t *a, cudaStream_t s)
{
    switch (a->d.tile_rows) {
    case FR_BM: return launch<FR_BM, MODE, SB>(a, s);
    case 64: return launch<64, MODE, SB>(a, s);
    case 32: return launch<32, MODE, SB>(a, s);
    case 16: return launch<16, MODE, SB>(a, s);
    default: return MOE_EP_FAIL(MOE_EP_ERROR_INTERNAL, "mega: no %d-row register tile", a->d.tile_rows);
    }
}

/* Small tiles: 16 rows. Large: 64 rows (512 threads) for NVFP4; 32 rows
 * (256 threads) for bf16, FP8-BLOCK, MXFP8 and W4A8, whose 64-row instances
 * spill here (see the tile rows note above; MXFP8 / W4A8 since the staged
 * dispatch); tile_rows 128 with bf16: the TMA
 * + HGMMA tile (384 threads; 144: its wide swapped form, mega.c's set_knobs); FP8-BLOCK, MXFP8,
 * W4A8 and NVFP4 where their shapes allow: the exact fp16 HGMMA register tile
 * (128, 64, 32 or 16 rows, 384 threads; tile_rows is then one of those);
 * FP8-BLOCK layers with fp8_fast_accum its QGMMA instances (RS_FP8_QG). */
static moe_ep_status_t launch_for_format(const moe_ep_mega_args_t *a, cudaStream_t s)
{
#ifdef MOE_EP_MEGA_ONE_INSTANCE /* scripts/ptxas_mega.sh: ptxas's report of one instance in seconds, not all in minutes */
    return launch<MOE_EP_MEGA_ONE_BM, MOE_EP_MEGA_ONE_MODE, MOE_EP_MEGA_ONE_SB>(a, s);
#else
    bool small = a->d.tile_rows == 16;
    switch (moe_ep_path_act_format(a->d.path)) {
    case MOE_EP_FORMAT_BF16:
        return small                     ? launch<16, MODE_BF16, 0>(a, s)
               : a->d.tile_rows == WG_BM_WIDE
                   ? (mega_smem_bytes<WG_BM_WIDE, MODE_WGMMA>(a->d) <= MEGA_SMEM_MAX /* else the 128-row one: the same bits */
                          ? launch<WG_BM_WIDE, MODE_WGMMA, MEGA_WG_SWAP>(a, s)
                          : launch<WG_BM, MODE_WGMMA, MEGA_WG_SWAP>(a, s))
               : a->d.tile_rows == 128 ? (a->d.bf16_swapped ? launch<WG_BM, MODE_WGMMA, MEGA_WG_SWAP>(a, s)
                                                            : launch<WG_BM, MODE_WGMMA, 0>(a, s))
                                       : launch<32, MODE_BF16, 0>(a, s);
    case MOE_EP_FORMAT_MXFP8:
        if (moe_ep_rs_tile_fits(a->d.path, a->d.H, a->d.I)) {
            if (a->d.path == MOE_EP_PATH_W4A8) return launch_rs<MODE_W4_RS, 32>(a, s);
            return launch_rs<MODE_MX_RS, 32>(a, s);
        }
        return small ? launch<16, MODE_FP8, 32>(a, s) : launch<32, MODE_FP8, 32>(a, s);
    case MOE_EP_FORMAT_FP8_BLOCK:
        if (moe_ep_qgmma_on(a->d.path, a->d.H, a->d.I, a->d.fp8_fast_accum)) return launch_rs<MODE_QG_RS, 128>(a, s);
        if (moe_ep_rs_tile_fits(a->d.path, a->d.H, a->d.I))
            return launch_rs<MODE_FP8_RS, 128>(a, s);
        return small ? launch<16, MODE_FP8, 128>(a, s) : launch<32, MODE_FP8, 128>(a, s);
    default:
        if (moe_ep_rs_tile_fits(a->d.path, a->d.H, a->d.I))
            return launch_rs<MODE_NV_RS, 0>(a, s);
        return small ? launch<16, MODE_CVT, 0>(a, s) : launch<64, MODE_CVT, 0>(a, s);
    }
#endif
}

/* The ring of the smallest tile (BM 16): the dispatch stages its bf16 tokens
 * there (at least one, 2 H bytes). The limit checked is the older one, room
 * for an fp32 token, kept until a larger hidden runs on the GPU. */
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

#ifdef MOE_EP_MEGA_TRACE
static moe_ep_mega_trace_rec_t *g_trace_buf;
static uint32_t g_trace_cap;

extern "C" moe_ep_status_t moe_ep_mega_trace_start(uint32_t cap)
{
    if (!g_trace_buf || cap > g_trace_cap) {
        if (g_trace_buf) cudaFree(g_trace_buf);
        g_trace_buf = NULL, g_trace_cap = 0;
        cudaError_t e = cudaMalloc(&g_trace_buf, (size_t)cap * sizeof *g_trace_buf);
        if (e != cudaSuccess) return MOE_EP_FAIL(MOE_EP_ERROR_OUT_OF_MEMORY, "mega trace: %s", cudaGetErrorString(e));
        g_trace_cap = cap;
    }
    const unsigned int zero = 0;
    cudaError_t e = cudaMemcpyToSymbol(g_mega_trace, &g_trace_buf, sizeof g_trace_buf);
    if (e == cudaSuccess) e = cudaMemcpyToSymbol(g_mega_trace_cap, &g_trace_cap, sizeof g_trace_cap);
    if (e == cudaSuccess) e = cudaMemcpyToSymbol(g_mega_trace_n, &zero, sizeof zero);
    return e == cudaSuccess ? MOE_EP_SUCCESS : MOE_EP_FAIL(MOE_EP_ERROR_CUDA, "mega trace: %s", cudaGetErrorString(e));
}

extern "C" moe_ep_status_t moe_ep_mega_trace_fetch(moe_ep_mega_trace_rec_t *host, uint32_t cap, uint32_t *n)
{
    unsigned int got = 0;
    cudaError_t e = cudaMemcpyFromSymbol(&got, g_mega_trace_n, sizeof got);
    if (e == cudaSuccess && g_trace_buf) {
        uint32_t m = got < cap ? got : cap;
        m = m < g_trace_cap ? m : g_trace_cap;
        e = cudaMemcpy(host, g_trace_buf, (size_t)m * sizeof *host, cudaMemcpyDeviceToHost);
    }
    *n = got;
    return e == cudaSuccess ? MOE_EP_SUCCESS : MOE_EP_FAIL(MOE_EP_ERROR_CUDA, "mega trace: %s", cudaGetErrorString(e));
}
#endif
