/* The mega kernel's GEMM items (mega.cu only): an item's tile, its wait for
 * its inputs, the register tile's item protocol, one tile run by the
 * format's tile code, its done counter. */
#ifndef MOE_EP_MEGA_GEMM_CUH
#define MOE_EP_MEGA_GEMM_CUH

#include "kernels/mega_common.cuh"

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
 * over the expert's m tiles, as split's (wg_tile_step); mega_tile_rows' SPREAD
 * form. The other modes never call it: even returning BM, it moved ptxas into
 * C7511 at QG_RS 128 (thirtieth session). */
__device__ __forceinline__ int mega_spread_step(const mega_ctx &c, int e)
{
    return wg_tile_step(c.off[e + 1] - c.off[e], c.tile_off[e + 1] - c.tile_off[e]);
}

/* The rows of m tile mt of expert e (its first row0 and rows_valid). SPREAD
 * (MODE_WGMMA): spread evenly, mega_spread_step a tile. Else BM a tile, but in
 * the 144-row instances 128 a tile, and the excess over 128 m_e (m_e: the
 * expert's m tiles, ceil(rows / 144)) 16 more in each of the first tiles: the
 * K loop at N 144 costs ~6 % more than at N 128 (the kernel lab, sixty-seventh
 * session) and N 96 what N 128 does, so an expert of 384 rows takes 3 x 128
 * (not 144 + 144 + 96), of 400 144 + 128 + 128. GEMM1, GEMM2, the fold, row
 * and combine items map rows to tiles so (mega_row_tile); the bits do not
 * depend on it (each output element one K chain whatever the tile's N). */
__device__ __forceinline__ int mega_big_tiles(int rows, int m_e)
{
    return min(m_e, max(0, rows - 128 * m_e + 15) / 16);
}

template <int BM, bool SPREAD>
__device__ __forceinline__ void mega_tile_rows(const mega_ctx &c, int e, int mt, int &row0, int &rows_valid)
{
    const int j = mt - c.tile_off[e];
    if constexpr (SPREAD) {
        const int step = mega_spread_step(c, e);
        row0 = c.off[e] + j * step, rows_valid = min(step, c.off[e + 1] - row0);
    } else if constexpr (BM == 144) {
        const int rows = c.off[e + 1] - c.off[e], big = mega_big_tiles(rows, c.tile_off[e + 1] - c.tile_off[e]);
        const int first = 128 * j + 16 * min(j, big), end = first + (j < big ? 144 : 128);
        row0 = c.off[e] + first, rows_valid = min(end, rows) - first;
    } else {
        row0 = c.off[e] + j * BM, rows_valid = min(BM, c.off[e + 1] - row0);
    }
}

/* The m tile (of the expert's, from 0) of row p of expert e (p from its first row): mega_tile_rows' inverse. */
template <int BM, bool SPREAD>
__device__ __forceinline__ int mega_row_tile(const mega_ctx &c, int e, int p)
{
    if constexpr (SPREAD) {
        return p / mega_spread_step(c, e);
    } else if constexpr (BM == 144) {
        const int big = mega_big_tiles(c.off[e + 1] - c.off[e], c.tile_off[e + 1] - c.tile_off[e]), edge = 144 * big;
        return p < edge ? p / 144 : big + (p - edge) / 128;
    } else {
        return p / BM;
    }
}

/* ---- The register tile's item protocol ----------------------------------
 * A GEMM item's done counter is raised (release_pending) not at the item's
 * end, where the fence waits ~1 us for the epilogue's stores to drain, but
 * in the block's next tile once its first loads are issued (at 128 rows:
 * once its first stage is widened; mega_tile_hook::loads_issued), so that
 * the drain overlaps their flight;
 * and the next item's inputs are looked at when it is claimed, while thread
 * 0 waits for the consumers anyway (mega_tile_hook::claimed), so that the
 * item then starts without a wait's round trip. Deadlock-free: a block
 * raises its pending counter before any wait that might need it (the item
 * loop, for every item but one whose inputs were seen to exist; the exit). */

/* Thread 0, every thread's writes of the item ordered before it by a
 * barrier: the red's release (fence.acq_rel.gpu) publishes them too, since
 * the PTX model's release is cumulative over what precedes it in causality
 * order (the barrier included), as grid sync's one fence after its barrier
 * relies on. No __threadfence before it: a fence.sc.gpu and an L1
 * invalidation on thread 0, the 128-row tile's TMA issuer, every item. */
__device__ __forceinline__ void release_pending(mega_shared *sh)
{
    if (!sh->pending) return;
    red_release_add(sh->pending, 1);
    sh->pending = nullptr;
}

/* The counter GEMM item `item` (the loop's index) waits for, and its target;
 * NULL: not a GEMM item. From the shared block alone (the tile's hook has no args). */
__device__ __forceinline__ const int32_t *gemm_dependency(const mega_shared *sh, int item, int32_t &target)
{
    const int j = item - sh->n_send - sh->n_count - sh->n_groups - sh->n_fold1, n_g1 = sh->tiles * sh->n1;
    if (item < 0 || j < 0) return nullptr;
    const int32_t *g1_done = sh->ready + sh->E, *f1_done = g1_done + 2 * sh->max_m_tiles;
    if (j < n_g1) { /* GEMM1 item j: m tile j / n1 (gemm_item_tile's order) */
        if (sh->n_fold1) return target = 1, f1_done + j / sh->n1;
        const int32_t *off = (const int32_t *)(sh + 1), *tile_off = off + sh->E + 1;
        const int e = tile_expert(tile_off, sh->E, j / sh->n1);
        target = off[e + 1] - off[e];
        return sh->ready + e;
    }
    const int j2 = j - n_g1 - sh->n_fold; /* GEMM2 item j2 (the fold items of GEMM2 before it) */
    if (j2 < 0 || j2 >= sh->tiles * sh->n2) return nullptr;
    if (sh->n_fold) return target = 1, f1_done + sh->max_m_tiles + j2 / sh->n2; /* fold2_done[mt] */
    target = sh->n1;
    return g1_done + j2 / sh->n2;
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
        /* the item loop's failure check, here beside the consumers' work
         * rather than on its own round trip between the items */
        if constexpr (MEGA_CLAIM_CHECKS(MODE)) sh->claim_failed = moe_ep_dev_failed(sh->error);
        int32_t target = 0;
        const int32_t *ctr = gemm_dependency(sh, item, target);
        sh->dep_item = ctr && ld_acquire(ctr) >= target ? item : -1;
    }
    static __device__ __forceinline__ void loads_issued()
    {
        if constexpr (MEGA_DEFERS(MODE)) release_pending(shared());
    }
};

/* Whether the tile that claimed this item saw its inputs (mega_tile_hook::claimed): no wait then. */
template <int MODE>
__device__ __forceinline__ bool claim_saw_inputs(const mega_shared *sh)
{
    return MEGA_DEFERS(MODE) && sh->dep_item == sh->item;
}

template <int BM, int MODE, int SB, bool A16, bool FIRST>
__device__ bool gemm_item(const mega_params &p, mega_shared *sh, uint8_t *smem, int i)
{
    const moe_ep_mega_args_t &a = p.a;
    int mt, e, row0, rows_valid, n0; /* row0 32-bit (rows < 2^31, layer.c): a 64-bit one held into the tile spilled */
    {
        const mega_ctx c = ctx_of(a, sh);
        gemm_item_tile<MODE>(c, a.d.E, FIRST ? c.n1 : c.n2, i, e, mt, n0);
#ifdef MOE_EP_MEGA_TRACE /* the trace's stall of a GEMM item: 1 where it takes block_wait */
        if (threadIdx.x == 0) sh->trace_stall = claim_saw_inputs<MODE>(sh) ? 0 : 1;
#endif
        bool ok;
        if constexpr (A16) /* the m tile's rows in fp16: by its fold item (mega_fold.cuh), the dispatch's or GEMM1's epilogue */
            ok = claim_saw_inputs<MODE>(sh) ||
                 (FIRST && !sh->n_fold1
                      ? block_wait(&c.ready[e], c.off[e + 1] - c.off[e], a, MOE_EP_MEGA_WAIT_ROWS, (uint32_t)e)
                  : !FIRST && !sh->n_fold
                      ? block_wait(&c.g1_done[mt], c.n1, a, MOE_EP_MEGA_WAIT_GEMM1, (uint32_t)mt)
                      : block_wait(mega_fold_done(a, c, FIRST, mt), 1, a, MOE_EP_MEGA_WAIT_FOLD, (uint32_t)mt));
        else
            ok = claim_saw_inputs<MODE>(sh) ||
                 (FIRST ? block_wait(&c.ready[e], c.off[e + 1] - c.off[e], a, MOE_EP_MEGA_WAIT_ROWS, (uint32_t)e)
                        : block_wait(&c.g1_done[mt], c.n1, a, MOE_EP_MEGA_WAIT_GEMM1, (uint32_t)mt));
        if (!ok) return false;
        mega_tile_rows<BM, MODE == MODE_WGMMA>(c, e, mt, row0, rows_valid); /* after the wait: nothing more held across it */
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
        constexpr bool AFTER = BM >= 128 || FR_PAIRED(FMT, BM);
        fp8_rs_tile<FMT, BM, BM <= 64, !AFTER, mega_tile_hook<BM, MODE>, FR_CTAS_OF(FMT, BM), A16>(
            FIRST ? p.g1 : p.g2, FIRST ? &p.ta1 : &p.ta2, FIRST ? &p.tb1 : &p.tb2, smem, e, row0, rows_valid, n0);
        if constexpr (AFTER) fr_epilogue_after<FMT, BM, A16>(FIRST ? p.g1 : p.g2, smem);
    }
    else
        gemm_tile<BM, MEGA_BN, MODE, SB, true>(FIRST ? p.g1 : p.g2, smem, e, row0, rows_valid, n0);
    sh = (mega_shared *)(smem + mega_shared_offset<BM, MODE>(a.d)); /* recomputed: no register kept across the tile */
    const mega_ctx c = ctx_of(a, sh);
    if constexpr (MODE_RS(MODE))
        if (threadIdx.x == 0) sh->next = fr_claimed<RS_FMT_OF(MODE), BM, A16>(smem); /* the item loop's next item */
    if constexpr (MEGA_DEFERS(MODE)) { /* the counter is raised later (release_pending), the item's writes drained by then */
        if (threadIdx.x == 0) sh->pending = FIRST ? &c.g1_done[sh->mt] : &c.g2_done[sh->mt];
    } else {
        block_signal(FIRST ? &c.g1_done[sh->mt] : &c.g2_done[sh->mt]);
    }
    return true;
}

#endif
