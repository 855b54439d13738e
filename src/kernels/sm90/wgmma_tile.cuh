/* The bf16 TMA + wgmma tile as a device function, for the split backend's
 * grouped GEMM (wgmma_gemm.cu) and the mega kernel: one 128 x 256 output tile
 * of one expert, computed by a block of WG_THREADS = 384 threads.
 *
 * Warpgroup 0 produces (one thread issues the TMA copies of A = 128
 * activation rows x 64 and B = 256 weight rows x 64 per K step, 128-byte
 * swizzled, into a ring of 4 stages completing on mbarriers), warpgroups 1
 * and 2 consume (wgmma m64n256k16, 64 rows each, fp32 accumulators in
 * registers). After the K loop the accumulators go to shared memory (over the
 * drained stages) and the shared epilogue applies SwiGLU + requantization
 * (GEMM1) or the wire rounding (GEMM2).
 *
 * HGMMA accumulates each output element over K in the same k16 order as the
 * mma.sync tile and gives the same bits (dev/wgmma_lab checks this), so the
 * choice of tile never changes results. */
#ifndef MOE_EP_WGMMA_TILE_CUH
#define MOE_EP_WGMMA_TILE_CUH

#include "kernels/sm90/gemm_common.cuh"
#include "kernels/sm90/hopper.cuh"
#include "kernels/sm90/tma_map.cuh"
#include "kernels/sm90/wgmma_bf16_n.cuh"

/* A tile's pipeline wait, bounded by the layer's timeout (hopper.cuh:
 * mbar_wait_bounded). */
__device__ __forceinline__ void tile_wait(const gemm_args &g, uint64_t *b, int parity)
{
    mbar_wait_bounded(b, parity, g.wait_ns);
}

#define WG_BM 128
/* Mega's wide swapped bf16 tile: up to 144 rows (tokens) x 256 weight rows,
 * for forwards whose experts get 128 < rows <= 512 on average (mega.c:
 * set_knobs), so an expert of 256-288 rows takes 2 tiles, not 3 (the kernel
 * lab, fortieth session: 0.915-0.95 of the 128-row tile's GEMM at pro
 * T = 2048, claimed as mega claims; 0.95-0.97 at flash 2048). Its consumers
 * need WG_WIDE_CONSUMER_REGS (setmaxnreg in mega's GEMM runs). */
#define WG_BM_WIDE 144
#define WG_WIDE_PRODUCER_REGS 72
#define WG_WIDE_CONSUMER_REGS 216
#define WG_BN 256
#define WG_BK 64
#define WG_STAGES 4
#define WG_THREADS 384

/* The bf16 tiles' row step: an expert's `rows` spread evenly over its
 * m_e = ceil(rows / WG_BM) m tiles (tile i: rows [i * step, +step)), not
 * 128, 128, ..., remainder, so that an expert's last tile keeps both consumer
 * warpgroups busy and the tiles of split's static tile loop even (bf16
 * split stage 0.88-0.98x as long at T >= 2048; mega, claiming items
 * dynamically, within +-2.5 %: docs/benchmarks.md, thirtieth session). Each
 * output row is the same wgmma chain whatever tile holds it: bits unchanged.
 * step <= WG_BM, and the last tile keeps >= 1 row. */
__host__ __device__ __forceinline__ int wg_tile_step(int rows, int m_e) { return (rows + m_e - 1) / m_e; }

/* bf16 elements of one consumer warp's store staging (wg_store_bf16): 16 rows x 64 columns */
#define WG_STAGE_ELEMS (16 * 64)

/* The ring of a tile of BMA rows: WG_BM, or mega's wide swapped tile
 * (WG_BM_WIDE). HALF: where the swapped tile's second m64 block's
 * accumulators start (d[0 .. HALF): weight rows 64 h .., d[HALF ..): 128 +
 * 64 h ..), fixed for every width NW <= BMA (at d + NW / 2, the kernel lab's
 * ptxas put every width's accumulators on the stack). */
template <int BMA>
struct wg_smem_t {
    static constexpr int ROWS = BMA, HALF = BMA / 2;
    __nv_bfloat16 a[WG_STAGES][BMA * WG_BK];   /* 16 KB per stage (18 KB wide), 1024-byte aligned */
    __nv_bfloat16 b[WG_STAGES][WG_BN * WG_BK]; /* 32 KB per stage */
    __nv_bfloat16 stage[8 * WG_STAGE_ELEMS];   /* the 8 consumer warps' bf16 store staging, 2 KB each */
    uint64_t full[WG_STAGES], empty[WG_STAGES];
};
typedef wg_smem_t<WG_BM> wg_smem;

/* Dynamic shared memory of the tile: the ring plus room to align it. */
#define WG_SMEM_BYTES_OF(BMA) (sizeof(wg_smem_t<BMA>) + 1024)
#define WG_SMEM_BYTES WG_SMEM_BYTES_OF(WG_BM)

__device__ __forceinline__ void wg_consumer_barrier() { asm volatile("bar.sync 1, 256;\n" ::: "memory"); }
/* Barrier 3 (the register tile): the consumers arrive once their
 * setmaxnreg.dec gave the registers back, and the producer waits there
 * before its setmaxnreg.inc. Without it the producer's warps spun in
 * setmaxnreg.inc through the consumers' last stage and epilogue, taking
 * issue slots (Nsight Compute: 2 M retries in one W4A8 decode kernel,
 * 2026-11-30). */
__device__ __forceinline__ void wg_registers_back_arrive() { asm volatile("bar.arrive 3, 384;\n" ::: "memory"); }
__device__ __forceinline__ void wg_registers_back_wait() { asm volatile("bar.sync 3, 384;\n" ::: "memory"); }

/* The ring's mbarriers, by thread 0 (then the caller synchronises): full[i]
 * completes on the producers' arrivals (one, or mega's gathering warpgroup:
 * 129) plus the TMA bytes, empty[i] on the 256 consumer threads' arrivals
 * (the bounded waits are armed once per kernel). */
template <int NS>
__device__ __forceinline__ void wg_ring_init(const gemm_args &g, uint64_t *full, uint64_t *empty, int producers = 1)
{
    for (int i = 0; i < NS; i++) mbar_init(&full[i], producers), mbar_init(&empty[i], 256);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

/* After the block synchronised at the end of a tile: the next tile (mega)
 * initialises the barriers again; a wait that gave up is reported. */
template <int NS>
__device__ __forceinline__ void wg_ring_inval(const gemm_args &g, uint64_t *full, uint64_t *empty)
{
    tile_wait_report(g.error);
    for (int i = 0; i < NS; i++) mbar_inval(&full[i]), mbar_inval(&empty[i]);
}

/* A wgmma D fragment of NJ 8-column blocks into the fp32 tile C (pitch BN + 4)
 * at rows r (and r + 8) and columns c0 + 8j + 2 (lane % 4): warp w of a
 * warpgroup holds rows 16w..16w+15 of its 64; per block j, d[4j..4j+1] at
 * row lane/4, d[4j+2..4j+3] at row lane/4 + 8. */
template <int NJ, int BN>
__device__ __forceinline__ void wg_store_fragment(float (*C)[BN + 4], const float *d, int r, int c0, int lane)
{
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        int c = c0 + 8 * j + (lane % 4) * 2;
        C[r][c] = d[4 * j], C[r][c + 1] = d[4 * j + 1];
        C[r + 8][c] = d[4 * j + 2], C[r + 8][c + 1] = d[4 * j + 3];
    }
}

/* Tile `tile` of a GEMM: its expert, first row, valid rows and first column. */
struct tile_pos {
    int e, n0, rows_valid;
    int64_t row0;
};

/* ---- The swapped tile (bf16 outputs) --------------------------------------
 * The same tile, loads and ring, with the operands' roles swapped: the
 * weight rows are the wgmma's M (warpgroup h: the m64 blocks of B rows 64 h ..
 * and 128 + 64 h .., so that W13's gate / up pair j, j + 128 meets in one
 * thread) and the tile's rows its N, nw = rows_valid rounded up to 8 (PTX:
 * any multiple of 8). A tile of 90 rows then issues 96 / 128 of a whole
 * tile's tensor work, not all of it (the kernel lab, thirty-first session:
 * 0.89-0.92 of the GEMM at pro / flash T = 2048). The same products summed in
 * the same order: the same bits (the lab compares them). Rows past
 * rows_valid (gathered tiles: unwritten) only feed outputs never stored.
 *
 * A kernel runs every tile swapped or none (SWAP, chosen per forward by the
 * host: moe_ep_bf16_swapped). Both forms in one kernel put mega's WGMMA
 * instance into ptxas's C7511 (at 168 registers, and spilling with setmaxnreg
 * in its runs), so the choice is not per tile. */

__device__ __forceinline__ int wg_swap_width(int rows_valid) { return (rows_valid + 7) & ~7; }

/* Consumer warpgroup h: the swapped tile's K loop of width NW into d[0..63]
 * (B rows 64 h ..) and d[64..127] (B rows 128 + 64 h ..): d[64 b + 4 j ..
 * 4 j + 3] = weight rows R = 16 warp + lane / 4 (and R + 8 for the upper
 * two) x tile rows 8 j + 2 (lane % 4) + {0, 1}. As wg_mma_tile otherwise. */
template <int NW, typename S>
__device__ __forceinline__ void wg_swap_k_loop(const gemm_args &g, S &s, float *d, int h, int n_k, int &kg,
                                               bool a_by_threads)
{
    for (int kt = 0; kt < n_k; kt++, kg++) {
        const int st = kg % WG_STAGES;
        tile_wait(g, &s.full[st], (kg / WG_STAGES) & 1);
        if (a_by_threads) fence_proxy_async_shared();
        wgmma_fence();
        const uint32_t x = (uint32_t)smem_desc(&s.a[st][0]), w0 = (uint32_t)smem_desc(&s.b[st][64 * h * WG_BK]),
                       w1 = (uint32_t)smem_desc(&s.b[st][(128 + 64 * h) * WG_BK]);
#pragma unroll
        for (int kk = 0; kk < WG_BK / 16; kk++) {
            wgmma_bf16_n_lo<NW>(d, w0, x, kk, (kt > 0 || kk > 0) ? 1 : 0);
            wgmma_bf16_n_lo<NW>(d + S::HALF, w1, x, kk, (kt > 0 || kk > 0) ? 1 : 0);
        }
        wgmma_commit();
        wgmma_wait<1>();
        if (kt > 0) mbar_arrive(&s.empty[(kg - 1) % WG_STAGES]);
    }
    wgmma_wait<0>();
    mbar_arrive(&s.empty[(kg - 1) % WG_STAGES]); /* the tile's last stage */
}

#define WG_SWAP_WIDTHS(X) \
    X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15) X(16) X(17) X(18)

template <typename S>
__device__ __forceinline__ void wg_swap_mma_tile(const gemm_args &g, S &s, float *d, int h, int n_k, int &kg,
                                                 bool a_by_threads, int nw)
{
    switch (nw / 8) {
#define WG_SWAP_K_LOOP(i) \
    case i: if constexpr (8 * i <= S::ROWS) wg_swap_k_loop<8 * i>(g, s, d, h, n_k, kg, a_by_threads); break;
        WG_SWAP_WIDTHS(WG_SWAP_K_LOOP)
#undef WG_SWAP_K_LOOP
    }
}

/* One bf16x2 of the bf16 tiles' outputs: accumulators d[4 j + 2 half], + 1
 * (plain tile: columns 8 j + 2 (lane % 4), + 1 at row lane / 4 + 8 half of
 * the warp's 16; swapped: weight row lane / 4 + 8 half, tile rows 8 j +
 * 2 (lane % 4), + 1), rounded as epilogue_chunks does (moe_ep_pack_bf16x2;
 * GLU: SwiGLU with the up value 64 accumulators on first, in its .ftz form:
 * moe_ep_swiglu's bits, 7 instructions fewer an output, and ptxas-clean here
 * where the bf16 chunk epilogue's was not, gemm_common.cuh's swiglu_of). */
template <bool GLU, int UP = 64>
__device__ __forceinline__ uint32_t wg_bf16_pair(const gemm_args &g, const float *d, int j, int half)
{
    float lo = d[4 * j + 2 * half], hi = d[4 * j + 2 * half + 1];
    if constexpr (GLU) {
        lo = moe_ep_swiglu_ftz(lo, d[4 * j + UP + 2 * half], g.swiglu_limit);
        hi = moe_ep_swiglu_ftz(hi, d[4 * j + UP + 2 * half + 1], g.swiglu_limit);
    }
    return moe_ep_pack_bf16x2(lo, hi);
}

/* Warpgroup h's own barrier (4 + h: 0-3 are taken), over its 128 threads. */
__device__ __forceinline__ void wg_group_barrier(int h) { asm volatile("bar.sync %0, 128;\n" ::"r"(4 + h) : "memory"); }

/* One m64 block of the swapped tile's outputs: d[4 j ..] (GLU: the gate,
 * d[64 + 4 j ..] its up) of weight rows R = 16 warp + lane / 4, R + 8 and tile
 * rows 8 j + 2 (lane % 4), + 1 into output columns col0 + R of the tile's
 * rows c < rows_valid. Through the warpgroup's 8 KB of staging (buf: 64 tile
 * rows x 64 columns at a time, 16-byte units XOR-swizzled by row):
 * stmatrix.trans turns each 8 x 8 block of weight rows x tile rows into 8
 * columns of 8 output rows, then each thread stores 16 bytes, a warp
 * instruction four whole 128-byte row pieces. The accumulators past the
 * tile's width were never written and are never stored. */
template <bool GLU, int ROWS, int HALF>
__device__ __forceinline__ void wg_swap_store_block(const gemm_args &g, const float *d, uint8_t *out,
                                                    int64_t pitch, int rows_valid, uint32_t buf, int h, int t)
{
    const int warp = t / 32, lane = t % 32, i = lane % 8, m = lane / 8;
#pragma unroll
    for (int tc = 0; tc < (ROWS + 63) / 64; tc++) { /* tile rows 64 tc .. 64 tc + 63: j = 8 tc .. 8 tc + 7 */
        if (64 * tc >= rows_valid) break; /* warpgroup-uniform */
#pragma unroll
        for (int pp = 0; pp < 4; pp++) {
            /* matrix x: j = 8 tc + 2 pp + x / 2, weight rows + 8 (x % 2); the wide
             * tile's last 16 rows (j 16, 17) need only pp = 0 (j past ROWS / 8:
             * no accumulators, and rows past 144 are never read back) */
            const int j = 8 * tc + 2 * pp, row = 8 * (2 * pp + (m >> 1)) + i; /* lane l: row i of matrix m */
            if (j >= ROWS / 8) break;
            stmatrix_x4_trans(buf + row * 128 + (((2 * warp + (m & 1)) ^ i) << 4), wg_bf16_pair<GLU, HALF>(g, d, j, 0),
                              wg_bf16_pair<GLU, HALF>(g, d, j, 1), wg_bf16_pair<GLU, HALF>(g, d, j + 1, 0),
                              wg_bf16_pair<GLU, HALF>(g, d, j + 1, 1));
        }
        wg_group_barrier(h);
#pragma unroll
        for (int it = 0; it < 4; it++) { /* tile row 64 tc + R, unit t % 8 (output columns col0 + 8 unit ..) */
            const int R = 16 * it + t / 8, u = t % 8;
            const uint4 val = ld_shared_v4(buf + R * 128 + ((u ^ (R & 7)) << 4));
            if (64 * tc + R < rows_valid) *(uint4 *)(out + (64 * tc + R) * pitch + 16 * u) = val;
        }
        wg_group_barrier(h); /* read before the next rows overwrite it */
    }
}

/* The swapped tile's bf16 outputs, as wg_store_bf16 rounds them. GLU: output
 * column n0 / 2 + 64 h + R is the SwiGLU of gate d[4 j ..] and up
 * d[64 + 4 j ..]; else d[64 b ..] is column n0 + 128 b + 64 h + R. The two
 * blocks are stored one after the other through the warpgroup's staging. */
template <bool GLU, int ROWS, int HALF>
__device__ __forceinline__ void wg_swap_store_bf16(const gemm_args &g, const float *d, const tile_pos &p, int h, int t,
                                                   __nv_bfloat16 *stage)
{
    const int64_t pitch = 2 * (int64_t)g.N_out; /* bytes per output row */
    const uint32_t buf = smem_u32(stage + 4 * h * WG_STAGE_ELEMS); /* the warpgroup's 4 warps' staging */
    uint8_t *out = g.out + p.row0 * pitch;
    if constexpr (GLU) {
        wg_swap_store_block<true, ROWS, HALF>(g, d, out + 2 * (p.n0 / 2 + 64 * h), pitch, p.rows_valid, buf, h, t);
    } else {
        wg_swap_store_block<false, ROWS, HALF>(g, d, out + 2 * (p.n0 + 64 * h), pitch, p.rows_valid, buf, h, t);
        wg_swap_store_block<false, ROWS, HALF>(g, d + HALF, out + 2 * (p.n0 + 128 + 64 * h), pitch, p.rows_valid, buf, h, t);
    }
}

/* The producer, by one thread: K steps 0..n_k-1 into a ring of NS stages
 * (stage st of A at a + st * a_bytes, of B at b + st * b_bytes), each after
 * its slot is free, both copies completing on full[st]; the maps' boxes are
 * k_step elements of K wide. A may have been written by other blocks of this
 * launch (generic proxy, made visible by the caller's acquire): the fence
 * orders those writes before this thread's TMA (async proxy) reads. */
template <int NS>
__device__ __forceinline__ void wg_produce(const gemm_args &g, uint64_t *full, uint64_t *empty, uint8_t *a, int a_bytes, uint8_t *b,
                                           int b_bytes, const CUtensorMap *ta, const CUtensorMap *tb, int n_k,
                                           int k_step, int a_row, int b_row)
{
    asm volatile("fence.proxy.async.global;\n" ::: "memory");
    for (int kt = 0; kt < n_k; kt++) {
        int st = kt % NS;
        tile_wait(g, &empty[st], ((kt / NS) & 1) ^ 1);
        mbar_expect_tx(&full[st], a_bytes + b_bytes);
        tma_load_2d(a + st * a_bytes, ta, &full[st], kt * k_step, a_row);
        tma_load_2d(b + st * b_bytes, tb, &full[st], kt * k_step, b_row);
    }
}

/* The consumer warpgroups after their K loop: their D fragments (NJ 8-column
 * blocks from column c0, rows r and r + 8) into the fp32 tile C over the
 * drained ring (smem), then the shared epilogue by the 256 consumer threads
 * (epilogue_chunks where epilogue_by_chunks picks it: bf16 outputs, say). */
template <int NJ, int BM, int BN>
__device__ __forceinline__ void wg_epilogue(const gemm_args &g, void *smem, const float *d, int r, int c0, int lane,
                                            int64_t row0, int rows_valid, int n0)
{
    wg_consumer_barrier(); /* every stage read; C may now overwrite them */
    float(*C)[BN + 4] = (float(*)[BN + 4])smem;
    wg_store_fragment<NJ, BN>(C, d, r, c0, lane);
    wg_consumer_barrier();
    epilogue<BM, BN, BN == 256, false, false>(g, C, row0, rows_valid, n0, threadIdx.x - 128, 256);
}

/* The bf16 tile's bf16 outputs from the accumulators of warpgroup h (rows
 * 64 h + 16 warp + lane / 4, + 8; columns 8 j + 2 (lane % 4), + 1), the same
 * bytes as epilogue_chunks. Each warp turns its 16 rows into whole lines
 * through its own 2 KB of `stage` (16 rows x 64 columns at a time, 16-byte
 * units XOR-swizzled by row: stmatrix and the reads conflict-free), then
 * stores 16 bytes a lane, four 128-byte row pieces a warp instruction: 8x
 * fewer store transactions than a bf16x2 a lane, which wrote 16 bytes of each
 * of 8 rows an instruction. No C tile: the ring keeps filling for the next
 * tile meanwhile. */
template <bool GLU>
__device__ __forceinline__ void wg_store_bf16(const gemm_args &g, const float *d, const tile_pos &p, int h, int t,
                                              __nv_bfloat16 *stage)
{
    const int warp = t / 32, lane = t % 32, i = lane % 8, m = lane / 8, r_warp = 64 * h + 16 * warp;
    if (r_warp >= p.rows_valid) return; /* warp-uniform: none of its rows is valid */
    const int64_t c0 = GLU ? p.n0 / 2 : p.n0, pitch = 2 * (int64_t)g.N_out; /* bytes per output row */
    const uint32_t buf = smem_u32(stage + (4 * h + warp) * WG_STAGE_ELEMS);
    /* stmatrix: lane l gives row i of matrix m = (16-byte unit 2 pp + m / 2, half m % 2) */
    const uint32_t st_row = buf + (8 * (m & 1) + i) * 128;
#pragma unroll
    for (int cc = 0; cc < (GLU ? 2 : 4); cc++) { /* 64 output columns: j = 8 cc .. 8 cc + 7 */
#pragma unroll
        for (int pp = 0; pp < 4; pp++) {
            const int j = 8 * cc + 2 * pp;
            stmatrix_x4(st_row + (((2 * pp + (m >> 1)) ^ i) << 4), wg_bf16_pair<GLU>(g, d, j, 0),
                        wg_bf16_pair<GLU>(g, d, j, 1), wg_bf16_pair<GLU>(g, d, j + 1, 0), wg_bf16_pair<GLU>(g, d, j + 1, 1));
        }
        __syncwarp();
#pragma unroll
        for (int it = 0; it < 4; it++) { /* rows 4 it + lane / 8, unit lane % 8 */
            const int R = 4 * it + m;
            const uint4 v = ld_shared_v4(buf + R * 128 + ((i ^ (R & 7)) << 4));
            if (r_warp + R < p.rows_valid)
                *(uint4 *)(g.out + (p.row0 + r_warp + R) * pitch + 2 * (c0 + 64 * cc + 8 * i)) = v;
        }
        __syncwarp(); /* read before the next columns overwrite it */
    }
}

/* The pipelined bf16 tiles (split's wg_persistent, mega's GEMM runs): one
 * ring over a block's tiles, its K steps counted over them (kg: each step's
 * slot and parity), so that the producer loads the next tile while the
 * consumers store the last one's outputs from registers. */

/* Producer thread: the tile's K steps kt0 .. kt1 - 1 (A rows from a_row, B
 * rows from b_row); `others` more arrivals per stage for producers the ring
 * counts that load nothing. */
template <typename S>
__device__ __forceinline__ void wg_load_steps(const gemm_args &g, S &s, const CUtensorMap *ta, const CUtensorMap *tb,
                                              int kt0, int kt1, int a_row, int b_row, int &kg, uint32_t others)
{
    for (int kt = kt0; kt < kt1; kt++, kg++) {
        const int st = kg % WG_STAGES;
        tile_wait(g, &s.empty[st], ((kg / WG_STAGES) & 1) ^ 1);
        mbar_expect_tx(&s.full[st], sizeof s.a[0] + sizeof s.b[0]);
        if (others) mbar_arrive_n(&s.full[st], others);
        tma_load_2d(s.a[st], ta, &s.full[st], kt * WG_BK, a_row);
        tma_load_2d(s.b[st], tb, &s.full[st], kt * WG_BK, b_row);
    }
}

/* Producer thread: the tile's n_k K steps. */
__device__ __forceinline__ void wg_load_tile(const gemm_args &g, wg_smem &s, const CUtensorMap *ta, const CUtensorMap *tb,
                                             int n_k, int a_row, int b_row, int &kg)
{
    wg_load_steps(g, s, ta, tb, 0, n_k, a_row, b_row, kg, 0);
}

/* Consumer warpgroup h (rows 64 h .. 64 h + 63): the tile's K loop into d,
 * every stage given back when done. a_by_threads: A came by cp.async
 * (generic proxy), so each stage is fenced before wgmma reads it. idle: none
 * of the warpgroup's rows is valid (decode: a few rows per expert), so it
 * only keeps the ring's protocol (waits, gives back) and issues no wgmma,
 * leaving the tensor cores to the other warpgroup; d is then left as it was
 * and no output of it is stored. */
__device__ __forceinline__ void wg_mma_tile(const gemm_args &g, wg_smem &s, float *d, int h, int n_k, int &kg,
                                            bool a_by_threads = false, bool idle = false)
{
    for (int kt = 0; kt < n_k; kt++, kg++) {
        const int st = kg % WG_STAGES;
        tile_wait(g, &s.full[st], (kg / WG_STAGES) & 1);
        if (!idle) {
            if (a_by_threads) fence_proxy_async_shared();
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < WG_BK / 16; kk++) /* +32 bytes (2 x 16 B) per k16 step */
                wgmma_m64n256k16_bf16(d, smem_desc(&s.a[st][64 * h * WG_BK]) + 2 * kk, smem_desc(&s.b[st][0]) + 2 * kk,
                                      (kt > 0 || kk > 0) ? 1 : 0);
            wgmma_commit();
            wgmma_wait<1>();
        }
        if (kt > 0) mbar_arrive(&s.empty[(kg - 1) % WG_STAGES]);
    }
    wgmma_wait<0>();
    mbar_arrive(&s.empty[(kg - 1) % WG_STAGES]); /* the tile's last stage */
}

/* A tile with bf16 outputs (wg_persistent, mega's runs): its K loop into d,
 * swapped (SWAP) or not, then its outputs the same way. */
template <bool SWAP, typename S>
__device__ __forceinline__ void wg_bf16_mma(const gemm_args &g, S &s, float *d, int h, int n_k, int &kg,
                                            bool a_by_threads, int rows_valid)
{
    if constexpr (SWAP) {
        wg_swap_mma_tile(g, s, d, h, n_k, kg, a_by_threads, wg_swap_width(rows_valid));
    } else {
        static_assert(S::ROWS == WG_BM, "the wide ring (WG_BM_WIDE) runs swapped tiles only");
        wg_mma_tile(g, s, d, h, n_k, kg, a_by_threads, 64 * h >= rows_valid);
    }
}

template <bool GLU, bool SWAP, typename S>
__device__ __forceinline__ void wg_bf16_store(const gemm_args &g, S &s, const float *d, const tile_pos &p, int h,
                                              int t)
{
    if constexpr (SWAP) {
        wg_swap_store_bf16<GLU, S::ROWS, S::HALF>(g, d, p, h, t, s.stage);
    } else {
        static_assert(S::ROWS == WG_BM, "the wide ring (WG_BM_WIDE) runs swapped tiles only");
        wg_store_bf16<GLU>(g, d, p, h, t, s.stage);
    }
}

/* Every thread of a 384-thread block calls it. smem_raw: WG_SMEM_BYTES of
 * dynamic shared memory. ta / tb: tensor maps of A ([rows][K], box 128 x 64)
 * and B ([E * N][K], box 256 x 64), in parameter or global memory. The tile
 * covers rows [row0, row0 + rows_valid) of expert e and columns [n0, n0 + 256).
 * Ends with the block synchronised and shared memory free again. */
__device__ __forceinline__ void wgmma_tile(const gemm_args &g, const CUtensorMap *ta, const CUtensorMap *tb,
                                           uint8_t *smem_raw, int e, int64_t row0, int rows_valid, int n0)
{
    wg_smem &s = *(wg_smem *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    int wg = threadIdx.x / 128, t = threadIdx.x % 128, n_k = g.K / WG_BK;
    if (threadIdx.x == 0) wg_ring_init<WG_STAGES>(g, s.full, s.empty);
    __syncthreads();
    if (wg == 0) { /* producer */
        if (t == 0)
            wg_produce<WG_STAGES>(g, s.full, s.empty, (uint8_t *)s.a, sizeof s.a[0], (uint8_t *)s.b, sizeof s.b[0], ta, tb,
                                  n_k, WG_BK, (int)row0, e * g.N + n0);
    } else { /* consumers */
        float d[128];
#pragma unroll
        for (int i = 0; i < 128; i++) d[i] = 0.0f;
        int kg = 0; /* the ring starts afresh with the tile */
        wg_mma_tile(g, s, d, wg - 1, n_k, kg, false, 64 * (wg - 1) >= rows_valid);
        int warp = t / 32, lane = t % 32;
        wg_epilogue<32, WG_BM, WG_BN>(g, &s, d, (wg - 1) * 64 + 16 * warp + lane / 4, 0, lane, row0, rows_valid, n0);
    }
    __syncthreads(); /* every TMA landed, every arrival made: the ring and C are free */
    if (threadIdx.x == 0) wg_ring_inval<WG_STAGES>(g, s.full, s.empty);
}

/* The tensor maps of one GEMM (A rows, B weights) for the tile. */
static inline moe_ep_status_t wg_make_maps(const gemm_args &g, int64_t rows_capacity, CUtensorMap *ta, CUtensorMap *tb,
                                           int box_rows = WG_BM)
{
    if (g.a_fmt != MOE_EP_FORMAT_BF16 || g.b_fmt != MOE_EP_FORMAT_BF16 || g.N % WG_BN || g.K % WG_BK)
        return MOE_EP_FAIL(MOE_EP_ERROR_INTERNAL, "the wgmma tile takes bf16 operands, N %% 256, K %% 64");
    MOE_EP_CHECK(tma_map_k_major(ta, g.a, rows_capacity, g.K, 2, box_rows)); /* A: box_rows x 64 */
    return tma_map_k_major(tb, g.b, (int64_t)g.E * g.N, g.K, 2, WG_BN);
}

#endif
