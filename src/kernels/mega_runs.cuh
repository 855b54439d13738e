/* The mega kernel's bf16 GEMM runs (mega.cu only): a block's consecutive
 * GEMM items pipelined over one ring (MODE_WGMMA). */
#ifndef MOE_EP_MEGA_RUNS_CUH
#define MOE_EP_MEGA_RUNS_CUH

#include "kernels/mega_gemm.cuh"

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
        mega_tile_rows<BM, true>(c, e, mt, row0, rows_valid); /* a bf16 run: MODE_WGMMA */
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
        if (h == 1 && t == 0) { /* every consumer's stores before the barrier: the release publishes them (release_pending) */
            const mega_ctx c = ctx_of(p.a, sh);
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

#endif
