/* What every part of the mega kernel (mega.cu, the only file that includes
 * the mega_*.cuh parts) shares: its modes, the block's shared state and
 * context, the waits and signals between blocks (mega.cu's header: how they
 * synchronise), the item trace, the ring of staged rows and the kernel's
 * parameters. */
#ifndef MOE_EP_MEGA_COMMON_CUH
#define MOE_EP_MEGA_COMMON_CUH

#include "kernels/mega_kernels.h"
#include "kernels/plan_scan.cuh"
#include "kernels/rows.cuh"
#include "kernels/sm90/gemm_tile.cuh"
#include "kernels/sm90/fp8_rs_tile.cuh"

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
/* The item loop takes the error word as the tile read it when it claimed the
 * next item (mega_tile_hook::claimed); not in FP8-BLOCK's 128-row instances,
 * whose wgmmas ptxas then serialised (C7511). */
#define MEGA_CLAIM_CHECKS(m) ((m) == MODE_MX_RS || (m) == MODE_W4_RS || (m) == MODE_NV_RS)
#define MODE_TMA(m) ((m) == MODE_WGMMA || MODE_RS(m))
/* The register-tile instances that can run its A16 form (FR_A16_OF: the 128-row MX, NVFP4 and exact
 * FP8-BLOCK ones, the 144-row NVFP4 and MX ones; their template A16, moe_ep_a16_rows decides): fold items
 * turn each m tile's rows into fp16 once (fold_rows.cuh), before its GEMM1 and again before its GEMM2
 * items, instead of every tile widening them. */
#define MEGA_A16_CAN(m, bm) (MODE_RS(m) && FR_A16_OF(RS_FMT_OF(m), bm, 1))
#define RS_FMT_OF(m) \
    ((m) == MODE_MX_RS ? RS_MXFP8 : (m) == MODE_W4_RS ? RS_W4A8 : (m) == MODE_NV_RS ? RS_NVFP4 : (m) == MODE_QG_RS ? RS_FP8_QG : RS_FP8_BLOCK)

/* Staged items (dispatch, local combine): their input rows move into the
 * shared memory the GEMM tiles leave free between items by bulk copies, a
 * ring of up to MEGA_STAGES stages, so that a block has many rows in flight
 * without holding registers (the timeline showed the register-fed loops at a
 * third of the copy bandwidth: one 16-byte load per thread in flight). */
#define MEGA_STAGES 4
/* The dispatch stores its encoded rows by bulk copies from shared memory
 * (mega_staging.out_bytes); not in FP8-BLOCK's QGMMA instance, whose 128-row
 * tile then serialised its wgmmas (C7511). */
#define MEGA_BULK_STORES(m) ((m) != MODE_QG_RS)

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
    int encoded;      /* 1: the claimed dispatch item's rows are encoded, its second pass due (dispatch_pass) */
    int n_combine;                                    /* combine items: token groups of the ranks combined here */
    uint32_t epoch;                                   /* links: forwards finished on this rank before this one */
    unsigned long long route_mask;                    /* links: ranks a token goes to */
    int32_t token_prefix[MOE_EP_GPU_MAX_RANKS + 1];   /* tokens of the ranks before r */
    /* The register tile's item protocol (mega_tile_hook): thread 0's own. */
    int32_t *pending;                  /* the done counter of the block's last GEMM item, not yet raised */
    int32_t dep_item;                  /* an item claimed whose inputs are known to exist (-1: none) */
    int32_t *ready;                    /* a.counters' ready counters (the g1_done ones follow, E on) */
    int E, n_send;                     /* a.d.E; the send items before the count items */
    const uint32_t *error;             /* a.b.error, read when the next item is claimed in a tile */
    int claim_failed;                  /* the error word was set when the tile claimed sh->next */
    int n_fold;                        /* fold items before GEMM2: tiles (A16 instances) or 0 (set at the plan) */
    int n_fold1;                       /* fold items before GEMM1: tiles where an A16 instance's dispatch does not
                                          fold its rows (mega_staging.fold_bytes 0), else 0 */
    int max_m_tiles;                   /* a.max_m_tiles: the done counters' stride (gemm_dependency) */
#ifdef MOE_EP_MEGA_TRACE
    int trace_kind; /* the open item's kind, -1: none */
    unsigned long long trace_t0, trace_tw, trace_stall;
#endif
};

/* Counters, the block's plan and the item's slots, derived from the args and
 * the shared block (rebuilt where needed: cheap, and nothing stays live). The
 * fold items' done counters follow g2_done: mega_fold_done. */
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

/* fold1_done (FIRST) or fold2_done of m tile mt (the A16 instances' fold items, mega_fold.cuh). */
__device__ __forceinline__ int32_t *mega_fold_done(const moe_ep_mega_args_t &a, const mega_ctx &c, bool first, int mt)
{
    return c.g2_done + (first ? 1 : 2) * (int64_t)a.max_m_tiles + mt;
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

/* Thread 0's view of the device error word, the same for the whole block. */
__device__ __forceinline__ bool block_not_failed(const moe_ep_mega_args_t &a)
{
    return __syncthreads_and(threadIdx.x != 0 || !moe_ep_dev_failed(a.b.error)) != 0;
}

/* A ring of staged token rows: `stages` stages of `per_stage` tokens of
 * `token_bytes` each (combine: stages 0, not staged; its register-fed loop runs). */
struct mega_staging {
    int stages, per_stage, token_bytes;
    int bulk;      /* 1: bulk copies (16-byte aligned rows); 0: the block copies (dispatch only) */
    int sh_offset; /* the ring starts this many bytes before mega_shared (at the GEMM's shared memory) */
    int out_data, out_bytes; /* dispatch: a token's encoded row (data, data + scale stride) staged in two
                              * buffers after the ring and stored by bulk copies; 0: stored from registers */
    int fold_bytes, fold_pitch; /* the A16 instances' dispatch: a token's row also folded into fp16 (2 H bytes, two
                                 * buffers after those) and stored to act16 (rows fold_pitch bytes apart) instead
                                 * of the E4M3 row, so no fold items before GEMM1; 0: not (mega_fold.cuh's then) */
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

/* Kernel parameters: the GEMM arguments are built on the host so that the tiles
 * read them from the parameter bank, not from registers. */
struct mega_params {
    moe_ep_mega_args_t a;
    gemm_args g1, g2;
    CUtensorMap ta1, tb1, ta2, tb2; /* the TMA modes: A and B of GEMM1 and GEMM2 (else unset) */
    mega_staging xs, ys;            /* staged dispatch (bf16 x rows) and combine (a token's K wire rows) */
    int gather; /* the bf16 GEMM runs: GEMM1 reads its A rows from x (every x 16-byte aligned), no row copies */
};

#endif
