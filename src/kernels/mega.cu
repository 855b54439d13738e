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
 * rows staged by the dispatch and combine items (mega_staging).
 *
 * Parts, each included here only: mega_common.cuh (modes, the block's shared
 * state, waits and signals between blocks, the staged-row ring, the
 * parameters), mega_dispatch.cuh (count and dispatch items), mega_gemm.cuh
 * (GEMM items and the register tile's item protocol), mega_fold.cuh (the A16
 * tiles' fold items), mega_runs.cuh (the bf16
 * GEMM runs), mega_combine.cuh (local combine items), mega_links.cuh (NCCL
 * groups: send, row and link combine items). Here: the item counts, the
 * plan, the exit, the kernel's item loop and its launch. */
#include "kernels/mega_common.cuh"
#include "kernels/mega_dispatch.cuh"
#include "kernels/mega_gemm.cuh"
#include "kernels/mega_fold.cuh"
#include "kernels/mega_runs.cuh"
#include "kernels/mega_combine.cuh"
#include "kernels/mega_links.cuh"

#include <string.h>

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

/* The block's copy of the plan, once every slot is counted: expert row and
 * tile offsets in shared memory; A16: a fold item an m tile before GEMM2
 * where GEMM1's epilogue does not fold its outputs itself (gemm_args.out16),
 * and before GEMM1 where the dispatch does not fold its rows itself. */
template <int BM, bool A16>
__device__ bool mega_plan(const moe_ep_mega_args_t &a, mega_shared *sh, bool dispatch_folds, bool gemm1_folds)
{
    const mega_ctx c = ctx_of(a, sh);
    if (!block_wait(&c.ctr[MOE_EP_MEGA_CTR_COUNTED], sh->n_count, a, MOE_EP_MEGA_WAIT_COUNT, 0)) return false;
    if (!block_not_failed(a)) return false; /* a bad id (set before its item counted): nothing runs on */
    moe_ep_scan_experts(a.b.expert_count, a.d.E, BM, c.off, c.tile_off);
    if (threadIdx.x == 0) {
        sh->tiles = c.tile_off[a.d.E];
        if constexpr (A16) /* else 0 since the start (MEGA_DEFERS instances read them) */
            sh->n_fold = gemm1_folds ? 0 : sh->tiles, sh->n_fold1 = dispatch_folds ? 0 : sh->tiles;
    }
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

/* A16: the register tile's A16 form with fold items (MEGA_A16_CAN instances only). */
template <int BM, int MODE, int SB, bool A16>
__global__ void __launch_bounds__(mega_threads<BM, MODE>(), mega_ctas_per_sm<BM, MODE>()) mega_forward(const __grid_constant__ mega_params p)
{
    static_assert(!A16 || MEGA_A16_CAN(MODE, BM), "the A16 form: the 128-row MX, NVFP4 and FP8-BLOCK instances, the 144-row NVFP4 and MX ones");
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
        sh->n_tok = -1, sh->tiles = -1, sh->next = -1, sh->encoded = 0;
        if constexpr (MEGA_CLAIM_CHECKS(MODE)) sh->error = a.b.error, sh->claim_failed = 0;
        if constexpr (MEGA_DEFERS(MODE)) { /* for the register tile's hook (gemm_dependency), which has no args */
            sh->pending = nullptr, sh->dep_item = -1;
            sh->ready = a.counters + MOE_EP_MEGA_CTR_FIXED, sh->E = a.d.E, sh->n_send = n_send;
            sh->max_m_tiles = a.max_m_tiles, sh->n_fold = sh->n_fold1 = 0;
        }
        sh->n1 = 2 * a.d.I / MEGA_BN, sh->n2 = a.d.H / MEGA_BN;
        sh->epoch = a.link.world ? __ldcg(ctrl_of(peer_heap(a.link, a.link.rank), a.link.world).epoch) : 0u;
    }
    __syncthreads();
    for (;;) {
        MEGA_TRACE_CLOSE(sh);
        if (threadIdx.x == 0) {
            /* an item the last tile claimed: the error word as read then (mega_tile_hook::claimed) */
            const bool failed = MEGA_CLAIM_CHECKS(MODE) && sh->next >= 0 ? sh->claim_failed != 0 : moe_ep_dev_failed(a.b.error);
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
        i -= sh->n_count;
        const int pass = i < sh->n_groups ? dispatch_pass<MODE>(p, sh) : DISPATCH_WHOLE;
        if (sh->tiles < 0 && pass != DISPATCH_ENCODE && !mega_plan<BM, A16>(a, sh, p.xs.fold_bytes > 0, p.g1.out16 != nullptr))
            break;
        if (i < sh->n_groups) {
            MEGA_TRACE_OPEN(sh, MOE_EP_MEGA_ITEM_DISPATCH);
            if (MODE == MODE_WGMMA && p.gather) dispatch_sources(a, sh, i);
            else dispatch_group<mega_act_format<MODE, SB>(), MEGA_BULK_STORES(MODE), A16>(a, p.xs, sh, i, pass);
            continue;
        }
        i -= sh->n_groups;
        if constexpr (A16) { /* GEMM1's fold items (mega_fold.cuh), where the dispatch did not fold */
            if (i < sh->n_fold1) {
                MEGA_TRACE_OPEN(sh, MOE_EP_MEGA_ITEM_FOLD);
                if (!fold_item<BM, true, true, fold_kind_of(mega_act_format<MODE, SB>())>(p, sh, i)) break;
                continue;
            }
            i -= sh->n_fold1;
        }
        const int n_f2 = A16 ? sh->n_fold : 0; /* GEMM2's fold items, between the GEMMs' */
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
            ok = gemm_item<BM, MODE, SB, A16, true>(p, sh, smem, i);
        } else if (A16 && i - n_g1 < n_f2) {
            MEGA_TRACE_OPEN(sh, MOE_EP_MEGA_ITEM_FOLD);
            ok = fold_item<BM, false, A16, fold_kind_of(mega_act_format<MODE, SB>())>(p, sh, i - n_g1);
        } else if ((i -= n_g1 + n_f2) < n_g2) {
            MEGA_TRACE_OPEN(sh, MOE_EP_MEGA_ITEM_GEMM2);
            ok = gemm_item<BM, MODE, SB, A16, false>(p, sh, smem, i);
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
    mega_staging st = {0, 0, (int)token_bytes, aligned ? 1 : 0, 0, 0, 0, 0, 0};
    int64_t fit = token_bytes > 0 ? (int64_t)region / token_bytes : 0;
    if (fit < 1) return st;
    if (fit >= 2 * MEGA_STAGES) st.stages = MEGA_STAGES, st.per_stage = (int)(fit / MEGA_STAGES);
    else st.stages = (int)(fit < MEGA_STAGES ? fit : MEGA_STAGES), st.per_stage = 1;
    return st;
}

/* The dispatch and combine rings of a launch: x rows of 2 H bytes (every
 * rank's x 16-byte aligned), a token's K wire rows (data and scale rows
 * multiples of 16 bytes). */
template <int BM, int MODE, bool A16>
static void plan_staging(const moe_ep_mega_args_t *a, mega_params *p)
{
    size_t region = staging_region<BM, MODE>(a->d);
    bool x_aligned = a->d.H % 8 == 0;
    for (int r = 0; r < a->d.R; r++) x_aligned = x_aligned && ((uintptr_t)a->io.x[r] & 15) == 0;
    moe_ep_format_t yf = moe_ep_wire_format(a->d.wire);
    int64_t db = moe_ep_row_data_bytes(yf, a->d.H), sb = moe_ep_row_scale_bytes(yf, a->d.H);
    p->xs = staging_for(region, 2 * (int64_t)a->d.H, x_aligned);
    /* the encoded rows through shared memory: each token's row once, then its K
     * copies by bulk stores (a scale row of a multiple of 16 bytes) */
    moe_ep_format_t af = moe_ep_path_act_format(a->d.path);
    int64_t od = moe_ep_row_data_bytes(af, a->d.H), os = moe_ep_act_scale_stride(af, a->d.H);
    int64_t per = (int64_t)region / (MEGA_STAGES * (int64_t)p->xs.token_bytes + 2 * (od + os));
    /* A16: the rows folded too (two more buffers of fp16 rows), stored to act16 instead of xq */
    const int64_t fb = A16 ? 2 * (int64_t)a->d.H : 0, per_fold = (int64_t)region / (MEGA_STAGES * (int64_t)p->xs.token_bytes + 2 * (od + os + fb));
    if (MEGA_BULK_STORES(MODE) && p->xs.bulk && af != MOE_EP_FORMAT_BF16 && moe_ep_row_scale_bytes(af, a->d.H) == os && per >= 1) {
        p->xs.stages = MEGA_STAGES, p->xs.per_stage = (int)per, p->xs.out_data = (int)od, p->xs.out_bytes = (int)(od + os);
        if (A16 && per_fold >= 1)
            p->xs.per_stage = (int)per_fold, p->xs.fold_bytes = (int)fb,
            p->xs.fold_pitch = 2 * MOE_EP_ACT16_PITCH(a->d.H, a->d.I);
    }
    p->ys = staging_for(region, a->d.K * (db + sb), db % 16 == 0 && sb % 16 == 0 && ((uintptr_t)a->b.y & 15) == 0 &&
                                                        ((uintptr_t)a->b.y_scales & 15) == 0);
    if (!p->ys.bulk) p->ys.stages = 0; /* the combine stages by bulk copies only */
    p->xs.sh_offset = p->ys.sh_offset = (int)mega_shared_offset<BM, MODE>(a->d);
}

template <int BM, int MODE, int SB, bool A16 = false>
static moe_ep_status_t launch(const moe_ep_mega_args_t *a, cudaStream_t s)
{
    const char *name = "mega_forward";
    size_t smem = mega_smem_bytes<BM, MODE>(a->d);
    int threads = mega_threads<BM, MODE>();
    if (MODE_RS(MODE) && mega_ctas_per_sm<BM, MODE>() == 1) /* it moves registers (setmaxnreg); paired ones do not */
        MOE_EP_CHECK(fr_check_regs((const void *)mega_forward<BM, MODE, SB, A16>, name));
    cudaError_t e = cudaFuncSetAttribute(mega_forward<BM, MODE, SB, A16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)smem);
    if (e != cudaSuccess)
        return MOE_EP_FAIL(MOE_EP_ERROR_UNSUPPORTED, "%s: %zu B of shared memory: %s", name, smem, cudaGetErrorString(e));
    int per_sm = 0;
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, mega_forward<BM, MODE, SB, A16>, threads, smem);
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
    plan_staging<BM, MODE, A16>(a, &p);
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
        if constexpr (A16) { /* the fold items' rows (mega_fold.cuh), a stage of the ring at least one row */
            const moe_ep_format_t af = moe_ep_path_act_format(a->d.path);
            const int64_t K = p.g1.a16_pitch, row = moe_ep_row_data_bytes(af, K) + moe_ep_act_scale_stride(af, K);
            if (!a->b.act16) return MOE_EP_FAIL(MOE_EP_ERROR_INTERNAL, "%s: no act16 buffer for the A16 tiles", name);
            if ((int64_t)p.xs.sh_offset < MEGA_STAGES * row)
                return MOE_EP_FAIL(MOE_EP_ERROR_UNSUPPORTED, "%s: rows of %lld too long for the fold items' stages", name, (long long)K);
            p.g1.a16 = p.g2.a16 = a->b.act16;
            if (MODE == MODE_NV_RS && a->b.act16_2) /* GEMM2's rows folded by GEMM1's epilogue: no fold items between */
                p.g1.out16 = a->b.act16_2, p.g2.a16 = a->b.act16_2, p.g2.a16_pitch = a->d.I;
        }
        MOE_EP_CHECK(fr_make_maps<BM>(p.g1, rows, &p.ta1, &p.tb1));
        MOE_EP_CHECK(fr_make_maps<BM>(p.g2, rows, &p.ta2, &p.tb2));
    }
    mega_forward<BM, MODE, SB, A16><<<a->d.num_sms * per_sm, threads, smem, s>>>(p);
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
    case FR_BM: /* W4A8's, NVFP4's and FP8-BLOCK's always A16 (moe_ep_a16_rows); MXFP8's where moe_ep_a16_rows says */
        if constexpr (MODE == MODE_W4_RS || MODE == MODE_NV_RS || MODE == MODE_FP8_RS) return launch<FR_BM, MODE, SB, true>(a, s);
        else if constexpr (MODE == MODE_MX_RS)
            return a->d.a16 ? launch<FR_BM, MODE, SB, true>(a, s) : launch<FR_BM, MODE, SB>(a, s);
        else return launch<FR_BM, MODE, SB>(a, s);
    case 144: /* NVFP4, MXFP8 and W4A8 A16 at more than 128 rows an expert (mega.c's set_knobs) */
        if constexpr (MODE == MODE_NV_RS || MODE == MODE_MX_RS || MODE == MODE_W4_RS) return launch<144, MODE, SB, true>(a, s);
        else return MOE_EP_FAIL(MOE_EP_ERROR_INTERNAL, "mega: no 144-row register tile of this path");
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
#ifndef MOE_EP_MEGA_ONE_A16
#define MOE_EP_MEGA_ONE_A16 false
#endif
    return launch<MOE_EP_MEGA_ONE_BM, MOE_EP_MEGA_ONE_MODE, MOE_EP_MEGA_ONE_SB, MOE_EP_MEGA_ONE_A16>(a, s);
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
