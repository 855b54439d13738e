/* Kernel lab: what makes the bf16 grouped GEMM slower than its floor?
 * First asked: does a 2-CTA cluster that shares the weight tile by TMA
 * multicast make it faster (design.md: "The bf16 tile's L2 traffic"; ncu put
 * split's bf16 GEMMs at 70-73 % of L2 throughput)? Measured: no, 1.36-1.66x
 * slower; the partial tiles of experts with spread rows are what costs
 * (docs/benchmarks.md, "The bf16 tile in the kernel lab"), so the tile
 * lists below try fixes for them.
 *
 * Both kernels are persistent (one CTA per SM) and pipelined over their
 * tiles as split's wg_persistent: warpgroup 0's thread 0 issues TMA into a
 * 4-stage ring, warpgroups 1-2 run wgmma m64n256k16 (64 rows each) and
 * store bf16 from registers while the producer loads the next tile.
 *   plain:     tile (expert e, m tile mt, column block nb), split's order
 *              (an expert's tiles column block by column block).
 *   multicast: __cluster_dims__(2): the pair takes m tiles 2 mp and 2 mp + 1
 *              of one (e, nb); each CTA loads its own 128 x 64 A box and half
 *              of the 256 x 64 B box (128 rows), multicast to both, so each
 *              block reads 32 KB a stage from L2 instead of 48. A stage is
 *              free again once the consumers of both CTAs are done with it:
 *              each consumer warp arrives on its own CTA's empty barrier
 *              and on the peer's (count 16 = 8 warps x 2 CTAs).
 *   pair, no multicast / plain in clusters: the multicast kernel's parts
 *              apart: its pair protocol with each CTA loading the whole B
 *              itself; the plain kernel launched in 2-CTA clusters. Found
 *              (thirty-first session): the peer arrival's explicit
 *              .release.cluster was a MEMBAR.ALL.GPU a warp a stage, the
 *              whole 1.4-1.8x; with the default semantics the pair runs at
 *              1.00 and multicast at 0.99-1.00 of plain (L2 does not bind).
 *   pair list: the balanced tile list in 2-CTA pairs sharing B (an
 *              expert's m tiles 2 p, 2 p + 1) or A (an odd last m tile over
 *              column blocks nb, nb + 1) by multicast: 0.98-0.99.
 *   swapped:   tiles of 128 weight rows x <= 256 tokens, the tokens as the
 *              wgmma's N (a multiple of 16) -- see gemm_swap.
 *   swapped in place: the tile list's own tiles and loads with the tokens
 *              as N (valid rows rounded up to 8), two m64 blocks of weight
 *              rows a warpgroup: 0.89-0.92 at T = 2048 (bit-equal outputs);
 *              1.06-1.13 at pro GEMM1 T = 8192 (not understood).
 *   claimed:   tiles claimed from an atomic counter (as mega), not block +
 *              k x grid: as fast as static (thirty-third session, `mc_lab
 *              claimed`; its 1.14-1.23x in `sustained` was the 4th form's
 *              turn, where the power controller dips: static timed there too
 *              took 1.14-1.35x).
 *   gathered:  A's rows read through a row map, as mega's GEMM1 reads x: by
 *              cp.async (mega's form) or one TMA a row (`mc_lab gather [MS]`;
 *              thirty-third session: cp.async 0.98-1.01 of the tile list, a
 *              TMA a row 2.3-5.3x: one 128-byte TMA per row binds the tile).
 *   `mc_lab sustained MS`: forms timed sustained (the power cap:
 *              docs/benchmarks.md, "The bench at the power cap"), in turns
 *              since the thirty-third session (time_interleaved; before, one
 *              after another, the 4th form met the power controller's dip).
 *   `mc_lab claimed [MS [ORDER]]`: the static (s) and the claimed (c) tile
 *              list sustained, in turns (ORDER, default scsccs), so that drift
 *              shows as s against s.
 *   swapped wide (`mc_lab wide MS`, `wstep MS`; fortieth session): the
 *              in-place tile with up to 160 / 192 tokens a tile (fewer tiles
 *              an expert): 0.95-0.97 at flash T = 2048, 0.94-0.96 of the
 *              tile list at T = 8192; pro GEMM1 T = 2048 1.03-1.15 in the
 *              static order, 0.915 claimed (kernel 21: the static order
 *              drifts apart the m tiles that share a weight slice).
 *   every thread arrives: 256 arrivals free a stage (the library's wg_mma_tile).
 *   tile list: experts of M_e +- J rows (uniform routing's spread), the last
 *              tile of an expert partial, a warpgroup with no valid row
 *              idle (as wg_mma_tile); also with the partial tiles moved
 *              last, with every tile cut to 64 rows (one warpgroup), with
 *              an expert's rows spread evenly over its tiles (balanced),
 *              and with an expert's last tile of <= 64 rows as wide tiles
 *              (two column blocks, WIDE_TILE).
 * E experts of M_e rows (uniform kernels: a multiple of 256), C[e rows][N] bf16 =
 * A[e rows][K] . B[e N][K]^T; A, B K-major bf16. Every wait bounded (1 s).
 * Checks: every variant against the shape's first kernel bit for bit (same
 * wgmma chains: they must be identical), that one against a naive fp32 GEMM
 * (rel L2) on the small shapes; outputs NaN-poisoned before each run.
 * Build here (CI machine) or there:
 *   nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -I../../src -I../../include -o mc_lab gemm_bf16_multicast.cu -lcuda
 * Prints per shape: best-of-N time and TFLOP/s of each kernel and their ratio. */
#include "../../src/kernels/sm90/hopper.cuh" /* mbarrier, TMA, descriptors, wgmma */

#include "lab_common.cuh"
#include "../../src/kernels/sm90/wgmma_bf16_n.cuh" /* the swapped tiles' m64nNk16, N = 8 .. 256 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <algorithm>
#include <vector>

#define BM 128
#define BN 256
#define BK 64
#define STAGES 4
#define WAIT_NS 1000000000u

struct smem_t {
    __nv_bfloat16 a[STAGES][BM * BK]; /* 16 KB each, 1024-aligned */
    __nv_bfloat16 b[STAGES][BN * BK]; /* 32 KB each; multicast: rows [128 r, 128 r + 128) from CTA r */
    uint64_t full[STAGES], empty[STAGES];
    uint64_t qf[2], qe[2]; /* DYN: the claimed tile's queue, producer thread -> consumers */
    int q[2];
};

struct lab_args {
    int E, M_e, N, K;
    __nv_bfloat16 *C;
    unsigned *failed;  /* a wait gave up somewhere */
    const int4 *tiles; /* LIST: every tile's (row0, valid rows, expert, n0) in split's order */
    int n_tiles;
    const int4 *pairs; /* the pair list: pair i is CTA 0's tile 2 i and CTA 1's 2 i + 1 (n0 | SHARE_A) */
    int n_pairs;
    const int4 *swap; /* the swapped tiles: (row0, tokens nt <= 256, expert, n0: 128 weight rows) */
    int n_swap;
    unsigned *counter; /* DYN: the next tile to claim, zeroed before each launch */
    const __nv_bfloat16 *A_src; /* gathered forms: A's rows in token order (row i of A is row row_src[i] here) */
    const int *row_src;
    unsigned long long *stamp; /* NULL, or [n_tiles]: each tile's start (globaltimer ns) by the producer ("claimed") */
    const int4 *wide[3];       /* the wide swapped tiles (kernels 15-20): <= 192 / 160 / 144 tokens x 256 weight rows */
    int n_wide[3];
};

__device__ __forceinline__ uint32_t cluster_rank()
{
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
__device__ __forceinline__ uint32_t cluster_id() { uint32_t r; asm volatile("mov.u32 %0, %%clusterid.x;\n" : "=r"(r)); return r; }
__device__ __forceinline__ uint32_t cluster_count() { uint32_t r; asm volatile("mov.u32 %0, %%nclusterid.x;\n" : "=r"(r)); return r; }

/* Every thread of both CTAs: what one wrote before (barrier inits, the last
 * stage's use) is seen by the other after. */
__device__ __forceinline__ void cluster_sync()
{
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

/* The box at (x, y) of map into dst of every CTA in mask, completing its
 * bytes on the barrier at bar's offset in each. */
__device__ __forceinline__ void tma_load_2d_multicast(void *dst, const CUtensorMap *map, uint64_t *bar, int x, int y,
                                                      uint16_t mask)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(smem_u32(dst)),
                 "l"((uint64_t)map), "r"(x), "r"(y), "r"(smem_u32(bar)), "h"(mask)
                 : "memory");
}

/* One arrival on the barrier at b's offset in CTA `rank` of the cluster.
 * The default semantics (release at CTA scope): the stage's reads were
 * wgmma's, already waited for. An explicit .release.cluster put a
 * MEMBAR.ALL.GPU before every arrival (SASS), the pair kernels' 1.4-1.8x. */
__device__ __forceinline__ void mbar_arrive_cluster(uint64_t *b, uint32_t rank)
{
    asm volatile("{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
                 "mbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n" ::"r"(smem_u32(b)),
                 "r"(rank)
                 : "memory");
}

/* A consumer warp is done with a stage (its wgmmas waited for): one lane
 * arrives (ALL: every thread, as the library), MC: lane 1 also on the peer's. */
template <bool MC, bool ALL>
__device__ __forceinline__ void release_stage(uint64_t *empty, int lane, uint32_t rank)
{
    if (ALL) {
        mbar_arrive(empty);
        return;
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(empty);
    if (MC && lane == 1) mbar_arrive_cluster(empty, rank ^ 1u);
}

/* A tile-list entry's n0 with this bit: a wide tile, <= 64 rows x 512
 * columns (two column blocks), each warpgroup on the same rows and its own
 * 256 columns; a K step takes two ring slots (A and the first 256 weight
 * rows in the first, the other 256 in the second's B). */
#define WIDE_TILE (1 << 30)

/* A pair-list entry's n0 with this bit: the pair shares A (the same rows,
 * column blocks n0 and n0 + 256; each CTA loads 64 of the 128 A rows,
 * multicast to both, and its own whole B). Without it the pair shares B
 * (one expert's two m tiles of one column block; each CTA loads its own A
 * and 128 of the 256 B rows, multicast). Either way 32 KB a stage from L2
 * a CTA (A shared: 8 + 32 = 40), not 48. */
#define SHARE_A (1 << 29)

/* Tile i of the order (MC: pair i, this CTA's m tile of it): expert, first row, first column. */
template <bool MC, bool LIST>
__device__ __forceinline__ void tile_of(const lab_args &g, int i, int &row0, int &n0, int &valid, int &e)
{
    if (LIST) {
        const int4 t = MC ? g.pairs[2 * i + (int)cluster_rank()] : g.tiles[i];
        row0 = t.x, valid = t.y, e = t.z, n0 = t.w & ~(WIDE_TILE | SHARE_A);
        return;
    }
    const int nb = g.N / BN, mt_e = g.M_e / BM, per_e = (MC ? mt_e / 2 : mt_e) * nb;
    const int li = i % per_e, m_units = MC ? mt_e / 2 : mt_e;
    e = i / per_e;
    const int mt = MC ? 2 * (li % m_units) + (int)cluster_rank() : li % m_units;
    row0 = e * g.M_e + mt * BM, n0 = (li / m_units) * BN, valid = BM;
}

/* D fragment of a warp (rows r and r + 8 of the tile, those below valid)
 * into C at columns n0 ..: per 8 columns j, d[4j], d[4j+1] at row r,
 * d[4j+2..3] at row r + 8 (warp w of a warpgroup: rows 16 w .. 16 w + 15). */
__device__ __forceinline__ void store_rows(const lab_args &g, const float *d, int row0, int r, int valid, int n0, int lane)
{
    __nv_bfloat16 *c0 = g.C + (size_t)(row0 + r) * g.N + n0 + 2 * (lane % 4), *c1 = c0 + (size_t)8 * g.N;
    if (r < valid)
#pragma unroll
        for (int j = 0; j < 32; j++) *(__nv_bfloat162 *)(c0 + 8 * j) = __floats2bfloat162_rn(d[4 * j], d[4 * j + 1]);
    if (r + 8 < valid)
#pragma unroll
        for (int j = 0; j < 32; j++) *(__nv_bfloat162 *)(c1 + 8 * j) = __floats2bfloat162_rn(d[4 * j + 2], d[4 * j + 3]);
}

/* A wide tile's K loop for warpgroup h: rows 0-63 of slot s0's A against the
 * B of slot s0 (h = 0) or s1 (h = 1). Both warpgroups wait for both slots and
 * free both (every slot's phase then counts all 8 warps, as the others). */
template <bool ALL>
__device__ __forceinline__ void wide_tile(const lab_args &g, smem_t &s, float *d, int h, int lane, int &kg, int n_k)
{
    for (int kt = 0; kt < n_k; kt++, kg += 2) {
        const int s0 = kg % STAGES, s1 = (kg + 1) % STAGES;
        mbar_wait_bounded(&s.full[s0], (kg / STAGES) & 1, WAIT_NS);
        mbar_wait_bounded(&s.full[s1], ((kg + 1) / STAGES) & 1, WAIT_NS);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++)
            wgmma_m64n256k16_bf16(d, smem_desc(&s.a[s0][0]) + 2 * kk, smem_desc(&s.b[h ? s1 : s0][0]) + 2 * kk,
                                  (kt > 0 || kk > 0) ? 1 : 0);
        wgmma_commit();
        wgmma_wait<1>();
        if (kt > 0) {
            release_stage<false, ALL>(&s.empty[(kg - 2) % STAGES], lane, 0u);
            release_stage<false, ALL>(&s.empty[(kg - 1) % STAGES], lane, 0u);
        }
    }
    wgmma_wait<0>();
    release_stage<false, ALL>(&s.empty[(kg - 2) % STAGES], lane, 0u);
    release_stage<false, ALL>(&s.empty[(kg - 1) % STAGES], lane, 0u);
}

/* Warpgroup h's K loop of a 128-row tile (rows 64 h ..) into d, every stage
 * given back; idle: none of its rows valid (waits and gives back only).
 * FENCE: A came by cp.async (generic proxy), fenced before wgmma reads it. */
template <bool MC, bool ALL, bool FENCE>
__device__ __forceinline__ void plain_k_loop(smem_t &s, float *d, int h, int lane, int &kg, int n_k, bool idle,
                                             uint32_t rank)
{
    for (int kt = 0; kt < n_k; kt++, kg++) {
        const int st = kg % STAGES;
        mbar_wait_bounded(&s.full[st], (kg / STAGES) & 1, WAIT_NS);
        if (!idle) {
            if (FENCE) fence_proxy_async_shared();
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BK / 16; kk++)
                wgmma_m64n256k16_bf16(d, smem_desc(&s.a[st][64 * h * BK]) + 2 * kk, smem_desc(&s.b[st][0]) + 2 * kk,
                                      (kt > 0 || kk > 0) ? 1 : 0);
            wgmma_commit();
            wgmma_wait<1>();
        }
        if (kt > 0) release_stage<MC, ALL>(&s.empty[(kg - 1) % STAGES], lane, rank);
    }
    wgmma_wait<0>();
    release_stage<MC, ALL>(&s.empty[(kg - 1) % STAGES], lane, rank);
}

/* Thread 0 of a one-CTA kernel: the ring's barriers (full: full_arrivals a
 * phase; empty: one lane of each of the 8 consumer warps). */
__device__ __forceinline__ void ring_init_cta(smem_t &s, int full_arrivals)
{
    if (threadIdx.x != 0) return;
    tile_wait_arm();
    for (int i = 0; i < STAGES; i++) mbar_init(&s.full[i], full_arrivals), mbar_init(&s.empty[i], 8);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

/* The swapped tile (kernel 8): C^T = B . A^T per tile, so the tokens are the
 * wgmma's N, which PTX lets be any multiple of 8 (here of 16), not its M
 * (64 rows a warpgroup). A tile is 128 weight rows (output columns n0 ..
 * n0 + 127, 64 a warpgroup) x nt <= 256 tokens of one expert, computed as
 * nw = nt rounded up to 16: an expert of 270 rows takes 2 x 144 token slots
 * where the 128-row tiles take 3 x 128 (spread) with the weight slice
 * streamed for each. A stage: W 128 x 64 (s.a, 16 KB) and X nw x 64 (s.b,
 * nw x 128 B, by TMA boxes of 128 / 64 / 32 / 16 rows). The accumulator of
 * m64nNk16: d[4 j .. 4 j + 3] = weight rows r (= 16 w + lane / 4), r + 8 x
 * tokens 8 j + 2 (lane % 4) + {0, 1}, whatever N. */
template <int NW>
__device__ __forceinline__ void swap_k_loop(smem_t &s, float *d, int h, int lane, int &kg, int n_k)
{
    for (int kt = 0; kt < n_k; kt++, kg++) {
        const int st = kg % STAGES;
        mbar_wait_bounded(&s.full[st], (kg / STAGES) & 1, WAIT_NS);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++)
            wgmma_bf16_n<NW>(d, smem_desc(&s.a[st][64 * h * BK]) + 2 * kk, smem_desc(&s.b[st][0]) + 2 * kk,
                             (kt > 0 || kk > 0) ? 1 : 0);
        wgmma_commit();
        wgmma_wait<1>();
        if (kt > 0) release_stage<false, false>(&s.empty[(kg - 1) % STAGES], lane, 0u);
    }
    wgmma_wait<0>();
    release_stage<false, false>(&s.empty[(kg - 1) % STAGES], lane, 0u);
}

/* The K loop of width nw (a multiple of 16, <= 256): one instance a width. */
__device__ __forceinline__ void swap_k_loop_n(int nw, smem_t &s, float *d, int h, int lane, int &kg, int n_k)
{
#define SWAP_WIDTH(i) \
    case i: swap_k_loop<16 * i>(s, d, h, lane, kg, n_k); break;
    switch (nw / 16) {
        SWAP_WIDTH(1) SWAP_WIDTH(2) SWAP_WIDTH(3) SWAP_WIDTH(4) SWAP_WIDTH(5) SWAP_WIDTH(6) SWAP_WIDTH(7) SWAP_WIDTH(8)
        SWAP_WIDTH(9) SWAP_WIDTH(10) SWAP_WIDTH(11) SWAP_WIDTH(12) SWAP_WIDTH(13) SWAP_WIDTH(14) SWAP_WIDTH(15)
        SWAP_WIDTH(16)
    }
#undef SWAP_WIDTH
}

/* An m64 block's D (NJ 8-token blocks) into C[row0 + token][col0 + its weight row], tokens < nt.
 * Lanes L and L ^ 4 hold adjacent weight rows (r even, r + 1) of the same
 * tokens, so one shuffle a value pair gives each a bf16x2 of two columns:
 * the even lane token c, the odd one c + 1. */
template <int NJ>
__device__ __forceinline__ void store_swapped(const lab_args &g, const float *d, int row0, int nt, int nw, int col0,
                                              int warp, int lane)
{
    const bool odd = (lane / 4) & 1;
    const int col = col0 + ((16 * warp + lane / 4) & ~1); /* col0: the m64 block's first weight row */
#pragma unroll
    for (int j = 0; j < NJ; j++) { /* tokens past nw: never < nt (no break on nw: it put ptxas into C7511) */
#pragma unroll
        for (int q = 0; q < 2; q++) { /* rows r, r + 8 */
            const float a = d[4 * j + 2 * q], b = d[4 * j + 2 * q + 1]; /* tokens c0, c0 + 1 */
            const float got = __shfl_xor_sync(0xffffffffu, odd ? a : b, 4);
            const int c = 8 * j + 2 * (lane % 4) + (odd ? 1 : 0);
            if (c < nt)
                *(__nv_bfloat162 *)(g.C + (size_t)(row0 + c) * g.N + col + 8 * q) =
                    odd ? __floats2bfloat162_rn(got, b) : __floats2bfloat162_rn(a, got);
        }
    }
}


/* The tile list's tiles swapped in place (kernel 9): the same tiles, order
 * and loads (X: 128 token rows x 64 in s.a, W: 256 weight rows x 64 in s.b),
 * with the tokens as the wgmma's N = nw = valid rows rounded up to 8 (<= 128):
 * warpgroup h takes the m64 blocks of W rows 64 h .. and 128 + 64 h .. (so
 * that the library's gate / up columns j, j + 128 meet in one thread), d[0..63]
 * and d[64..127]. A tile of 90 rows costs 96 / 128 of a whole one, not 1. */
/* ST stages of ring S; the second block's accumulators at d + HALF (a fixed
 * offset for every width: with d + NW / 2 ptxas put them on the stack). */
template <int NW, int ST = STAGES, int HALF = 64, typename S = smem_t>
__device__ __forceinline__ void swapin_k_loop(S &s, float *d, int h, int lane, int &kg, int n_k)
{
    for (int kt = 0; kt < n_k; kt++, kg++) {
        const int st = kg % ST;
        mbar_wait_bounded(&s.full[st], (kg / ST) & 1, WAIT_NS);
        wgmma_fence();
        const uint32_t x = (uint32_t)smem_desc(&s.a[st][0]), w0 = (uint32_t)smem_desc(&s.b[st][64 * h * BK]),
                       w1 = (uint32_t)smem_desc(&s.b[st][(128 + 64 * h) * BK]);
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) {
            wgmma_bf16_n_lo<NW>(d, w0, x, kk, (kt > 0 || kk > 0) ? 1 : 0);
            wgmma_bf16_n_lo<NW>(d + HALF, w1, x, kk, (kt > 0 || kk > 0) ? 1 : 0);
        }
        wgmma_commit();
        wgmma_wait<1>();
        if (kt > 0) release_stage<false, false>(&s.empty[(kg - 1) % ST], lane, 0u);
    }
    wgmma_wait<0>();
    release_stage<false, false>(&s.empty[(kg - 1) % ST], lane, 0u);
}

/* A whole swapped-in-place tile of width NW: its K loop, then its stores
 * (NW / 8 token blocks: the accumulators never flow out of the instance;
 * with one store after a switch over the K loops ptxas serialised the
 * wgmmas, C7511). */
template <int NW>
__device__ __forceinline__ void swapin_tile(const lab_args &g, smem_t &s, int h, int warp, int lane, int &kg, int n_k,
                                            int row0, int valid, int n0)
{
    float d[128];
    swapin_k_loop<NW>(s, d, h, lane, kg, n_k);
    store_swapped<NW / 8>(g, d, row0, valid, NW, n0 + 64 * h, warp, lane);
    store_swapped<NW / 8>(g, d + 64, row0, valid, NW, n0 + 128 + 64 * h, warp, lane);
}

__device__ __forceinline__ void swapin_tile_n(const lab_args &g, int nw, smem_t &s, int h, int warp, int lane, int &kg,
                                              int n_k, int row0, int valid, int n0)
{
#define SWAPIN_WIDTH(i) \
    case i: swapin_tile<8 * i>(g, s, h, warp, lane, kg, n_k, row0, valid, n0); break;
    switch (nw / 8) {
        SWAPIN_WIDTH(1) SWAPIN_WIDTH(2) SWAPIN_WIDTH(3) SWAPIN_WIDTH(4) SWAPIN_WIDTH(5) SWAPIN_WIDTH(6) SWAPIN_WIDTH(7)
        SWAPIN_WIDTH(8) SWAPIN_WIDTH(9) SWAPIN_WIDTH(10) SWAPIN_WIDTH(11) SWAPIN_WIDTH(12) SWAPIN_WIDTH(13)
        SWAPIN_WIDTH(14) SWAPIN_WIDTH(15) SWAPIN_WIDTH(16)
    }
#undef SWAPIN_WIDTH
}

/* MC: the cluster kernel (uniform experts, or LIST: the pair list; MCAST: B by multicast, else
 * each CTA loads the whole B box itself, the pair still in lockstep through
 * the cross-CTA empty arrivals); ALL: every consumer thread
 * arrives on the empty barrier (the library's wg_mma_tile) instead of one
 * lane a warp; LIST: tiles from g.tiles (experts of any rows: the last tile
 * partial, a warpgroup with no valid row idle, as wg_mma_tile). */
/* DYN (LIST, not MC): tiles claimed one by one from g.counter (as mega's
 * items), not tile = block + k x grid (split's wg_persistent): the tiles
 * running at once stay neighbours in the list whatever each costs. */
template <bool MC, bool ALL, bool LIST, bool MCAST = MC, int SWAPIN = 0, bool DYN = false> /* SWAPIN: 0, or the width's rounding (8, 16) */
__device__ void gemm_body(const lab_args &g, const CUtensorMap *ta, const CUtensorMap *tb, const CUtensorMap *ta64,
                          const CUtensorMap *tbh = NULL)
{
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    smem_t &s = *(smem_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    const int wg = threadIdx.x / 128, t = threadIdx.x % 128, n_k = g.K / BK;
    const int total = LIST ? (MC ? g.n_pairs : g.n_tiles) : g.E * (g.M_e / BM / (MC ? 2 : 1)) * (g.N / BN);
    const int first = MC ? (int)cluster_id() : (int)blockIdx.x, step = MC ? (int)cluster_count() : (int)gridDim.x;
    const uint32_t rank = MC ? cluster_rank() : 0u;
    if (threadIdx.x == 0) {
        tile_wait_arm();
        for (int i = 0; i < STAGES; i++) mbar_init(&s.full[i], 1), mbar_init(&s.empty[i], ALL ? 256 : MC ? 16 : 8);
        for (int i = 0; i < 2; i++) mbar_init(&s.qf[i], 1), mbar_init(&s.qe[i], 8);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    if (MC) cluster_sync(); /* the peer's barriers exist before any copy or arrival reaches them */
    else __syncthreads();
    if (wg == 0) {
        setmaxnreg_dec<40>();
        if (t == 0) {
            int kg = 0;
            for (int n = 0;; n++) {
                int i = first + n * step;
                if (DYN) {
                    i = (int)atomicAdd(g.counter, 1u);
                    mbar_wait_bounded(&s.qe[n & 1], ((n >> 1) & 1) ^ 1, WAIT_NS);
                    *(volatile int *)&s.q[n & 1] = i;
                    mbar_arrive(&s.qf[n & 1]);
                }
                if (i >= total) break;
                if (g.stamp) g.stamp[i] = (unsigned long long)global_ns();
                int row0, n0, valid, e;
                tile_of<MC, LIST>(g, i, row0, n0, valid, e);
                if (MC && LIST) { /* the pair list: one operand shared by multicast */
                    const bool share_a = g.pairs[2 * i + (int)rank].w & SHARE_A;
                    for (int kt = 0; kt < n_k; kt++, kg++) {
                        const int st = kg % STAGES;
                        mbar_wait_bounded(&s.empty[st], ((kg / STAGES) & 1) ^ 1, WAIT_NS);
                        mbar_expect_tx(&s.full[st], (BM + BN) * BK * 2);
                        if (share_a) {
                            tma_load_2d_multicast(&s.a[st][64 * rank * BK], ta64, &s.full[st], kt * BK,
                                                  row0 + 64 * (int)rank, (uint16_t)3);
                            tma_load_2d(s.b[st], tb, &s.full[st], kt * BK, e * g.N + n0);
                        } else {
                            tma_load_2d(s.a[st], ta, &s.full[st], kt * BK, row0);
                            tma_load_2d_multicast(&s.b[st][128 * rank * BK], tbh, &s.full[st], kt * BK,
                                                  e * g.N + n0 + 128 * (int)rank, (uint16_t)3);
                        }
                    }
                    continue;
                }
                if (LIST && !SWAPIN && (g.tiles[i].w & WIDE_TILE)) {
                    for (int kt = 0; kt < n_k; kt++, kg += 2) {
                        const int s0 = kg % STAGES, s1 = (kg + 1) % STAGES;
                        mbar_wait_bounded(&s.empty[s0], ((kg / STAGES) & 1) ^ 1, WAIT_NS);
                        mbar_expect_tx(&s.full[s0], (64 + BN) * BK * 2);
                        tma_load_2d(s.a[s0], ta64, &s.full[s0], kt * BK, row0);
                        tma_load_2d(s.b[s0], tb, &s.full[s0], kt * BK, e * g.N + n0);
                        mbar_wait_bounded(&s.empty[s1], (((kg + 1) / STAGES) & 1) ^ 1, WAIT_NS);
                        mbar_expect_tx(&s.full[s1], BN * BK * 2);
                        tma_load_2d(s.b[s1], tb, &s.full[s1], kt * BK, e * g.N + n0 + BN);
                    }
                    continue;
                }
                for (int kt = 0; kt < n_k; kt++, kg++) {
                    const int st = kg % STAGES;
                    mbar_wait_bounded(&s.empty[st], ((kg / STAGES) & 1) ^ 1, WAIT_NS);
                    mbar_expect_tx(&s.full[st], (BM + BN) * BK * 2); /* A + the whole B, both halves */
                    tma_load_2d(s.a[st], ta, &s.full[st], kt * BK, row0);
                    if (MC && MCAST)
                        tma_load_2d_multicast(&s.b[st][128 * rank * BK], tb, &s.full[st], kt * BK,
                                              e * g.N + n0 + 128 * (int)rank, (uint16_t)3);
                    else tma_load_2d(s.b[st], tb, &s.full[st], kt * BK, e * g.N + n0);
                }
            }
        }
    } else {
        setmaxnreg_inc<232>();
        const int h = wg - 1, warp = t / 32, lane = t % 32;
        int kg = 0;
        for (int n = 0;; n++) {
            int i = first + n * step;
            if (DYN) {
                mbar_wait_bounded(&s.qf[n & 1], (n >> 1) & 1, WAIT_NS);
                i = *(volatile int *)&s.q[n & 1];
                __syncwarp();
                if (lane == 0) mbar_arrive(&s.qe[n & 1]);
            }
            if (i >= total) break;
            int row0, n0, valid, e;
            tile_of<MC, LIST>(g, i, row0, n0, valid, e);
            float d[128];
            if (LIST && !MC && !SWAPIN && (g.tiles[i].w & WIDE_TILE)) {
                wide_tile<ALL>(g, s, d, h, lane, kg, n_k);
                const int r = 16 * warp + lane / 4;
                store_rows(g, d, row0, r, valid, n0 + BN * h, lane);
                continue;
            }
            if constexpr (SWAPIN) {
                swapin_tile_n(g, (valid + SWAPIN - 1) / SWAPIN * SWAPIN, s, h, warp, lane, kg, n_k, row0, valid, n0);
                continue;
            }
            plain_k_loop<MC, ALL, false>(s, d, h, lane, kg, n_k, 64 * h >= valid, rank);
            /* D fragment: warp w holds rows 16 w .. 16 w + 15 of the warpgroup's
             * 64; per 8 columns j: d[4j], d[4j+1] at row lane/4, d[4j+2..3] 8 below */
            store_rows(g, d, row0, 64 * h + 16 * warp + lane / 4, valid, n0, lane);
        }
    }
    if (MC) cluster_sync(); /* no CTA leaves while the peer's copies or arrivals may still reach it */
    else __syncthreads();
    if (threadIdx.x == 0 && tile_wait_failed) atomicAdd(g.failed, 1u);
}

template <bool ALL, bool LIST>
__global__ void __launch_bounds__(384, 1) gemm_plain(const lab_args g, const __grid_constant__ CUtensorMap ta,
                                                     const __grid_constant__ CUtensorMap tb,
                                                     const __grid_constant__ CUtensorMap ta64)
{
    gemm_body<false, ALL, LIST>(g, &ta, &tb, &ta64);
}

__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(384, 1)
    gemm_multicast(const lab_args g, const __grid_constant__ CUtensorMap ta, const __grid_constant__ CUtensorMap tb)
{
    gemm_body<true, false, false>(g, &ta, &tb, &ta);
}

/* The multicast kernel's parts apart (what costs it 1.36-1.66x?): the pair's
 * protocol with every CTA loading its whole B (tb: the 256-row box), and
 * the plain kernel launched in 2-CTA clusters (the clusters' placement). */
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(384, 1)
    gemm_pair_no_multicast(const lab_args g, const __grid_constant__ CUtensorMap ta, const __grid_constant__ CUtensorMap tb)
{
    gemm_body<true, false, false, false>(g, &ta, &tb, &ta);
}

__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(384, 1)
    gemm_plain_in_clusters(const lab_args g, const __grid_constant__ CUtensorMap ta, const __grid_constant__ CUtensorMap tb)
{
    gemm_body<false, false, false>(g, &ta, &tb, &ta);
}

__global__ void __launch_bounds__(384, 1) gemm_swapin(const lab_args g, const __grid_constant__ CUtensorMap ta,
                                                      const __grid_constant__ CUtensorMap tb)
{
    gemm_body<false, false, true, false, 8>(g, &ta, &tb, &ta);
}

__global__ void __launch_bounds__(384, 1) gemm_list_dyn(const lab_args g, const __grid_constant__ CUtensorMap ta,
                                                        const __grid_constant__ CUtensorMap tb)
{
    gemm_body<false, false, true, false, 0, true>(g, &ta, &tb, &ta);
}

__global__ void __launch_bounds__(384, 1) gemm_swapin_dyn(const lab_args g, const __grid_constant__ CUtensorMap ta,
                                                          const __grid_constant__ CUtensorMap tb)
{
    gemm_body<false, false, true, false, 8, true>(g, &ta, &tb, &ta);
}

__global__ void __launch_bounds__(384, 1) gemm_swapin16(const lab_args g, const __grid_constant__ CUtensorMap ta,
                                                        const __grid_constant__ CUtensorMap tb)
{
    gemm_body<false, false, true, false, 16>(g, &ta, &tb, &ta);
}

/* Wide swapped tiles (kernels 15-17; fortieth session): the swapped in-place
 * tile (kernel 9: 256 weight rows as two m64 blocks a warpgroup, the tokens
 * as N) with up to TW tokens a tile instead of 128, an expert's rows spread
 * evenly over ceil(rows / TW) tiles (rounded up to 8). The per-tile cost of
 * the in-place form has a large fixed part (its time follows N from 88 to
 * 128 as ~0.28 + 0.0054 N of a whole tile: each tile streams its 32 KB of
 * weights a K step whatever N), so fewer, wider tiles should pay where
 * experts get 128-512 rows: flash T = 2048 (384 +- 33) in 2-3 tiles instead
 * of 3-4, pro 2048 (256 +- 27) in 2 instead of 2-3. Accumulators: N / 2 a
 * block, 192 registers at N = 192 (consumers at 232). Stages of TW x 64 tokens
 * + 256 x 64 weights: 56 KB at 192 (3 or 4 stages: 4 fit only without the
 * library's 8 KB of tables), 52 KB at 160 (4). */
#ifndef WS_HALF
#define WS_HALF 96 /* the second m64 block's accumulators start here (a fixed layout for every width) */
#endif
#ifndef WS_MAXQ
#define WS_MAXQ 24 /* widths 8 .. 8 WS_MAXQ compiled (a ptxas experiment) */
#endif
template <int TW, int ST>
struct ws_smem_t {
    __nv_bfloat16 a[ST][TW * BK]; /* tokens, TW x 64 (TW * 128 bytes: a multiple of 1024) */
    __nv_bfloat16 b[ST][BN * BK]; /* weights, 256 x 64 */
    uint64_t full[ST], empty[ST];
    uint64_t qf[2], qe[2]; /* DYN: the claimed tile's queue, producer thread -> consumers */
    int q[2];
};

template <int TW, int ST, int NW>
__device__ __forceinline__ void ws_tile(const lab_args &g, ws_smem_t<TW, ST> &s, int h, int warp, int lane, int &kg,
                                        int n_k, int row0, int valid, int n0)
{
    float d[2 * WS_HALF]; /* d[0 .. NW / 2): weight rows 64 h .., d[WS_HALF ..): 128 + 64 h .. */
    swapin_k_loop<NW, ST, WS_HALF>(s, d, h, lane, kg, n_k);
    store_swapped<NW / 8>(g, d, row0, valid, NW, n0 + 64 * h, warp, lane);
    store_swapped<NW / 8>(g, d + WS_HALF, row0, valid, NW, n0 + 128 + 64 * h, warp, lane);
}

/* RND: the widths' rounding (8, 16, 32: fewer K-loop instances); DYN: tiles
 * claimed from g.counter (mega's order: tiles sharing a weight slice stay
 * neighbours in time), not block + k x grid (split's). */
template <int TW, int ST, int RND = 8, bool DYN = false>
__global__ void __launch_bounds__(384, 1) gemm_swapwide(const lab_args g, const __grid_constant__ CUtensorMap tx,
                                                        const __grid_constant__ CUtensorMap tb)
{
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    ws_smem_t<TW, ST> &s = *(ws_smem_t<TW, ST> *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    const int wg = threadIdx.x / 128, t = threadIdx.x % 128, n_k = g.K / BK, L = TW == 192 ? 0 : TW == 160 ? 1 : 2;
    if (threadIdx.x == 0) {
        tile_wait_arm();
        for (int i = 0; i < ST; i++) mbar_init(&s.full[i], 1), mbar_init(&s.empty[i], 8);
        for (int i = 0; i < 2; i++) mbar_init(&s.qf[i], 1), mbar_init(&s.qe[i], 8);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    int kg = 0;
    if (wg == 0) {
#ifndef WS_NO_SETMAXNREG
        setmaxnreg_dec<TW == 192 ? 24 : 40>(); /* 192: the consumers at 240 (2 x 240 + 24 = 3 x 168) */
#endif
        if (t == 0)
            for (int n = 0;; n++) {
                int i = blockIdx.x + n * gridDim.x;
                if (DYN) {
                    i = (int)atomicAdd(g.counter, 1u);
                    mbar_wait_bounded(&s.qe[n & 1], ((n >> 1) & 1) ^ 1, WAIT_NS);
                    *(volatile int *)&s.q[n & 1] = i;
                    mbar_arrive(&s.qf[n & 1]);
                }
                if (i >= g.n_wide[L]) break;
                const int4 tl = g.wide[L][i];
                for (int kt = 0; kt < n_k; kt++, kg++) {
                    const int st = kg % ST;
                    mbar_wait_bounded(&s.empty[st], ((kg / ST) & 1) ^ 1, WAIT_NS);
                    mbar_expect_tx(&s.full[st], (TW + BN) * BK * 2);
                    tma_load_2d(s.a[st], &tx, &s.full[st], kt * BK, tl.x);
                    tma_load_2d(s.b[st], &tb, &s.full[st], kt * BK, tl.z * g.N + tl.w);
                }
            }
        /* as the library's register tile: the moves bracketed, the producer
         * asleep until the consumers gave theirs back (without the brackets
         * ptxas kept these consumers at 168 registers and spilled 4-20 KB) */
#ifndef WS_NO_SETMAXNREG
        asm volatile("bar.sync 3, 384;\n" ::: "memory");
        setmaxnreg_inc<168>();
#endif
    } else {
#ifndef WS_NO_SETMAXNREG
        setmaxnreg_inc<TW == 192 ? 240 : 232>();
#endif
        const int h = wg - 1, warp = t / 32, lane = t % 32;
        for (int n = 0;; n++) {
            int i = blockIdx.x + n * gridDim.x;
            if (DYN) {
                mbar_wait_bounded(&s.qf[n & 1], (n >> 1) & 1, WAIT_NS);
                i = *(volatile int *)&s.q[n & 1];
                __syncwarp();
                if (lane == 0) mbar_arrive(&s.qe[n & 1]);
            }
            if (i >= g.n_wide[L]) break;
            const int4 tl = g.wide[L][i];
            switch ((tl.y + RND - 1) / RND * (RND / 8)) {
#define WS_WIDTH(q) \
    case q: if constexpr (8 * q <= TW && q <= WS_MAXQ && q % (RND / 8) == 0) ws_tile<TW, ST, 8 * q>(g, s, h, warp, lane, kg, n_k, tl.x, tl.y, tl.w); break;
                WS_WIDTH(1) WS_WIDTH(2) WS_WIDTH(3) WS_WIDTH(4) WS_WIDTH(5) WS_WIDTH(6) WS_WIDTH(7) WS_WIDTH(8)
                WS_WIDTH(9) WS_WIDTH(10) WS_WIDTH(11) WS_WIDTH(12) WS_WIDTH(13) WS_WIDTH(14) WS_WIDTH(15) WS_WIDTH(16)
                WS_WIDTH(17) WS_WIDTH(18) WS_WIDTH(19) WS_WIDTH(20) WS_WIDTH(21) WS_WIDTH(22) WS_WIDTH(23) WS_WIDTH(24)
#undef WS_WIDTH
            }
        }
#ifndef WS_NO_SETMAXNREG
        setmaxnreg_dec<168>();
        asm volatile("bar.arrive 3, 384;\n" ::: "memory");
#endif
    }
    __syncthreads();
    if (threadIdx.x == 0 && tile_wait_failed) atomicAdd(g.failed, 1u);
}

/* Gathered A (kernels 13, 14; thirty-second session): the tile list's tiles
 * (static order, as split), with A's rows read through a row map (row i of
 * the expert-sorted A is row row_src[i] of A_src, tokens in their own order),
 * as mega's GEMM1 reads its tokens' x rows without a dispatch copy. Does the
 * gather cost the tile what mega's GEMM1 loses to split's TMA of copied rows?
 *   GATHER 1, mega's form: every producer thread cp.asyncs 16 bytes of 8
 *     rows a stage into the 128-byte-swizzled layout (chunk c of row r at
 *     c ^ r % 8) and arrives when they land (129 arrivals a stage with thread
 *     0's expect_tx); the consumers fence each stage (generic -> async proxy).
 *   GATHER 2: one TMA a row (box 64 x 1 over A_src, 128-byte swizzle) from
 *     the producer's warp 0, lane l rows l + 32 i: TMA swizzles by the
 *     destination's absolute shared address, so rows copied one by one at
 *     128-byte steps should land as one 128-row box puts them (the bit-for-bit
 *     check against the tile list says whether they do). Rows past the valid
 *     ones are not loaded: their outputs are never stored. */
template <int GATHER>
__global__ void __launch_bounds__(384, 1) gemm_gather(const lab_args g, const __grid_constant__ CUtensorMap tb,
                                                      const __grid_constant__ CUtensorMap ta_row)
{
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    smem_t &s = *(smem_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    const int wg = threadIdx.x / 128, t = threadIdx.x % 128, n_k = g.K / BK;
    ring_init_cta(s, GATHER == 1 ? 129 : 1);
    __syncthreads();
    if (wg == 0) {
        setmaxnreg_dec<40>();
        int kg = 0;
        for (int i = blockIdx.x; i < g.n_tiles; i += gridDim.x) {
            int row0, n0, valid, e;
            tile_of<false, true>(g, i, row0, n0, valid, e);
            if (GATHER == 1) {
                const __nv_bfloat16 *src[8];
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    const int r = (t >> 3) + 16 * j;
                    src[j] = r < valid ? g.A_src + (size_t)g.row_src[row0 + r] * g.K + 8 * (t & 7) : NULL;
                }
                const uint32_t off = (uint32_t)(t >> 3) * 128u + ((uint32_t)((t & 7) ^ ((t >> 3) & 7)) << 4);
                for (int kt = 0; kt < n_k; kt++, kg++) {
                    const int st = kg % STAGES;
                    mbar_wait_bounded(&s.empty[st], ((kg / STAGES) & 1) ^ 1, WAIT_NS);
                    if (t == 0) {
                        mbar_expect_tx(&s.full[st], BN * BK * 2);
                        tma_load_2d(s.b[st], &tb, &s.full[st], kt * BK, e * g.N + n0);
                    }
                    const uint32_t base = smem_u32(s.a[st]) + off;
#pragma unroll
                    for (int j = 0; j < 8; j++)
                        if (src[j]) cp_async16(base + 16u * 128u * (uint32_t)j, src[j] + kt * BK);
                    cp_async_mbar_arrive(&s.full[st]);
                }
            } else if (t < 32) {
                int src[4];
#pragma unroll
                for (int j = 0; j < 4; j++) src[j] = t + 32 * j < valid ? g.row_src[row0 + t + 32 * j] : -1;
                for (int kt = 0; kt < n_k; kt++, kg++) {
                    const int st = kg % STAGES;
                    if (t == 0) {
                        mbar_wait_bounded(&s.empty[st], ((kg / STAGES) & 1) ^ 1, WAIT_NS);
                        mbar_expect_tx(&s.full[st], (BN + valid) * BK * 2); /* before any row's bytes */
                        tma_load_2d(s.b[st], &tb, &s.full[st], kt * BK, e * g.N + n0);
                    }
                    __syncwarp();
#pragma unroll
                    for (int j = 0; j < 4; j++)
                        if (src[j] >= 0) tma_load_2d(&s.a[st][(t + 32 * j) * BK], &ta_row, &s.full[st], kt * BK, src[j]);
                }
            }
        }
    } else {
        setmaxnreg_inc<232>();
        const int h = wg - 1, warp = t / 32, lane = t % 32;
        int kg = 0;
        for (int i = blockIdx.x; i < g.n_tiles; i += gridDim.x) {
            int row0, n0, valid, e;
            tile_of<false, true>(g, i, row0, n0, valid, e);
            float d[128];
            plain_k_loop<false, false, GATHER == 1>(s, d, h, lane, kg, n_k, 64 * h >= valid, 0u);
            store_rows(g, d, row0, 64 * h + 16 * warp + lane / 4, valid, n0, lane);
        }
    }
    __syncthreads();
    if (threadIdx.x == 0 && tile_wait_failed) atomicAdd(g.failed, 1u);
}

/* The pair list (make_shape's pairs), balanced rows: every pair shares B or A. */
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(384, 1)
    gemm_pair_list(const lab_args g, const __grid_constant__ CUtensorMap ta, const __grid_constant__ CUtensorMap tb,
                   const __grid_constant__ CUtensorMap tbh, const __grid_constant__ CUtensorMap ta64)
{
    gemm_body<true, false, true>(g, &ta, &tb, &ta64, &tbh);
}

/* X rows [row0, row0 + nw) of K step kt into x, by boxes of 128 / 64 / 32 / 16 rows. */
__device__ __forceinline__ void swap_load_x(__nv_bfloat16 *x, const CUtensorMap *const *tx, uint64_t *bar, int kt, int row0,
                                            int nw)
{
    int off = 0;
    if (nw == 256) {
        tma_load_2d(x, tx[0], bar, kt * BK, row0);
        tma_load_2d(x + 128 * BK, tx[0], bar, kt * BK, row0 + 128);
        return;
    }
    for (int i = 0; i < 4; i++)
        if (nw & (128 >> i)) {
            tma_load_2d(x + off * BK, tx[i], bar, kt * BK, row0 + off);
            off += 128 >> i;
        }
}

__global__ void __launch_bounds__(384, 1)
    gemm_swap(const lab_args g, const __grid_constant__ CUtensorMap tw, const __grid_constant__ CUtensorMap tx128,
              const __grid_constant__ CUtensorMap tx64, const __grid_constant__ CUtensorMap tx32,
              const __grid_constant__ CUtensorMap tx16)
{
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    smem_t &s = *(smem_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    const int wg = threadIdx.x / 128, t = threadIdx.x % 128, n_k = g.K / BK;
    ring_init_cta(s, 1);
    __syncthreads();
    if (wg == 0) {
        setmaxnreg_dec<40>();
        if (t == 0) {
            const CUtensorMap *tx[4] = {&tx128, &tx64, &tx32, &tx16};
            int kg = 0;
            for (int i = blockIdx.x; i < g.n_swap; i += gridDim.x) {
                const int4 tl = g.swap[i];
                const int nw = (tl.y + 15) & ~15;
                for (int kt = 0; kt < n_k; kt++, kg++) {
                    const int st = kg % STAGES;
                    mbar_wait_bounded(&s.empty[st], ((kg / STAGES) & 1) ^ 1, WAIT_NS);
                    mbar_expect_tx(&s.full[st], (128 + nw) * BK * 2);
                    tma_load_2d(s.a[st], &tw, &s.full[st], kt * BK, tl.z * g.N + tl.w);
                    swap_load_x(s.b[st], tx, &s.full[st], kt, tl.x, nw);
                }
            }
        }
    } else {
        setmaxnreg_inc<232>();
        const int h = wg - 1, warp = t / 32, lane = t % 32;
        int kg = 0;
        for (int i = blockIdx.x; i < g.n_swap; i += gridDim.x) {
            const int4 tl = g.swap[i];
            const int nw = (tl.y + 15) & ~15;
            float d[128];
            swap_k_loop_n(nw, s, d, h, lane, kg, n_k);
            store_swapped<32>(g, d, tl.x, tl.y, nw, tl.w + 64 * h, warp, lane);
        }
    }
    __syncthreads();
    if (threadIdx.x == 0 && tile_wait_failed) atomicAdd(g.failed, 1u);
}

/* C (fp32) of every row with its expert's weights (row_e[m]), naive, for the check. */
__global__ void gemm_naive(const __nv_bfloat16 *A, const __nv_bfloat16 *B, const int *row_e, float *C, int N, int K)
{
    int n = blockIdx.x * blockDim.x + threadIdx.x, m = blockIdx.y, e = row_e[m];
    if (n >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; k++)
        acc += __bfloat162float(A[(size_t)m * K + k]) * __bfloat162float(B[((size_t)e * N + n) * K + k]);
    C[(size_t)m * N + n] = acc;
}

/* One shape's buffers: rows of every expert (rows_e), A over them (+ a tile
 * of padding), B, two NaN-poisoned outputs, the tile list in split's order
 * (an expert's tiles column block by column block). */
struct shape {
    int E, N, K;
    size_t rows;
    __nv_bfloat16 *A, *B, *C[2];
    int4 *tiles, *pairs, *swap;
    int n_tiles, *row_e, n_pairs, n_swap;
    __nv_bfloat16 *A_src; /* A's rows in a token order (gathered forms): row i of A at row row_src[i] */
    int *row_src;
    int4 *wide[3]; /* the wide swapped tiles: [0] <= 192 tokens a tile, [1] <= 160, [2] <= 144 (gemm_swapwide) */
    int n_wide[3];
};

/* The tile list's forms: split's order; the same tiles with every partial
 * one moved after the full ones (does a partial tile cost the full tiles
 * running beside it?); every tile cut to its first 64 rows (one warpgroup a
 * tile: what a tile costs with one warpgroup idle; outputs of the other rows
 * unwritten, so timing only); an expert's rows spread evenly over its tiles
 * (the same tile count, every tile's warpgroups both busy where rows allow);
 * an expert's last tile, where it holds <= 64 rows, as wide tiles of two
 * column blocks each (WIDE_TILE: half as many, both warpgroups busy). */
enum { LIST_SPLIT_ORDER = 0, LIST_PARTIAL_LAST = 1, LIST_HALF_ROWS = 2, LIST_BALANCED = 3, LIST_WIDE = 4, LIST_STEP = 5 };
static int g_list_step = 128; /* LIST_STEP: every tile of g_list_step rows (an expert's last: the rest) */

static shape make_shape(int E, int M_e, int jitter, int N, int K, int form = LIST_SPLIT_ORDER)
{
    shape sh = {E, N, K, 0, NULL, NULL, {NULL, NULL}, NULL, NULL, NULL, 0, NULL, 0, 0, NULL, NULL, {NULL, NULL, NULL}, {0, 0, 0}};
    int *rows_e = (int *)malloc(sizeof(int) * E);
    for (int e = 0; e < E; e++) /* deterministic, spread over [-jitter, jitter] (uniform routing's spread) */
        rows_e[e] = M_e + (jitter ? (int)(((uint32_t)e * 2654435761u >> 7) % (2 * jitter + 1)) - jitter : 0), sh.rows += rows_e[e];
    /* tiles of >= 64 rows (LIST_STEP's), an expert's last partial: at most rows / 64 + E an expert's column block */
    const size_t max_tiles = (sh.rows / 64 + E) * (N / BN) + 2;
    int4 *ht = (int4 *)malloc(sizeof(int4) * max_tiles);
    int4 *hp = (int4 *)malloc(sizeof(int4) * max_tiles); /* pairs: as many tiles */
    int4 *hs = (int4 *)malloc(sizeof(int4) * (sh.rows / 128 + E) * (N / 128)); /* swapped: <= 256 tokens x 128 */
    int *hre = (int *)malloc(sizeof(int) * sh.rows);
    int4 *hw[3] = {(int4 *)malloc(sizeof(int4) * max_tiles), (int4 *)malloc(sizeof(int4) * max_tiles),
                   (int4 *)malloc(sizeof(int4) * max_tiles)};
    int n_wide[3] = {0, 0, 0};
    size_t row0 = 0;
    for (int e = 0; e < E; e++) {
        const int mt = form == LIST_STEP ? (rows_e[e] + g_list_step - 1) / g_list_step : (rows_e[e] + BM - 1) / BM;
        /* LIST_BALANCED: the expert's rows over its mt tiles evenly (rows a
         * multiple of 8), so that no tile leaves a warpgroup idle */
        const int step = form == LIST_BALANCED ? ((rows_e[e] + mt - 1) / mt + 7) / 8 * 8 : form == LIST_STEP ? g_list_step : BM;
        const int last = rows_e[e] - (mt - 1) * BM, wide = form == LIST_WIDE && last <= 64 && (N / BN) % 2 == 0;
        for (int nb = 0; nb < N / BN; nb++)
            for (int m = 0; m < mt; m++) {
                const int left = rows_e[e] - m * step;
                if (wide && m == mt - 1) { /* the last tile: column blocks nb and nb + 1 at once */
                    if (nb % 2 == 0) ht[sh.n_tiles++] = make_int4((int)row0 + m * BM, last, e, (nb * BN) | WIDE_TILE);
                    continue;
                }
                ht[sh.n_tiles++] = make_int4((int)row0 + m * step, left < step ? left : step, e, nb * BN);
            }
        /* the pair list (the same tiles, balanced or not): m tiles 2 p, 2 p + 1 of a
         * column block share B; an odd expert's last m tile of column blocks
         * nb, nb + 1 (nb even) shares A */
        for (int nb = 0; form != LIST_WIDE && N / BN % 2 == 0 && nb < N / BN; nb++)
            for (int m = 0; m < mt; m++) {
                const int left = rows_e[e] - m * step;
                const int4 t = make_int4((int)row0 + m * step, left < step ? left : step, e, nb * BN);
                if (m + 1 < mt || mt % 2 == 0) hp[sh.n_pairs++] = t; /* a B pair, m even then odd */
                else if (nb % 2 == 0) {
                    hp[sh.n_pairs++] = make_int4(t.x, t.y, e, t.w | SHARE_A);
                    hp[sh.n_pairs++] = make_int4(t.x, t.y, e, (t.w + BN) | SHARE_A);
                }
            }
        /* the swapped tiles: the expert's rows over ceil(rows / 256) token tiles
         * of step rows (a multiple of 16), an expert's tiles of a weight block together */
        const int mts = (rows_e[e] + 255) / 256, sstep = ((rows_e[e] + mts - 1) / mts + 15) / 16 * 16;
        for (int nb = 0; nb < N / 128; nb++)
            for (int m = 0; m < mts; m++) {
                const int left = rows_e[e] - m * sstep;
                if (left > 0) hs[sh.n_swap++] = make_int4((int)row0 + m * sstep, left < sstep ? left : sstep, e, nb * 128);
            }
        /* the wide swapped tiles: the expert's rows over ceil(rows / tw) tiles, evenly (a multiple of 8) */
        for (int l = 0; l < 3; l++) {
            const int tw = l == 0 ? 192 : l == 1 ? 160 : 144, mw = (rows_e[e] + tw - 1) / tw, wstep = ((rows_e[e] + mw - 1) / mw + 7) / 8 * 8;
            for (int nb = 0; nb < N / BN; nb++)
                for (int m = 0; m < mw; m++) {
                    const int left = rows_e[e] - m * wstep;
                    if (left > 0) hw[l][n_wide[l]++] = make_int4((int)row0 + m * wstep, left < wstep ? left : wstep, e, nb * BN);
                }
        }
        for (int r = 0; r < rows_e[e]; r++) hre[row0 + r] = e;
        row0 += rows_e[e];
    }
    for (int l = 0; l < 3; l++) {
        sh.n_wide[l] = n_wide[l];
        CHECK(cudaMalloc(&sh.wide[l], sizeof(int4) * (n_wide[l] + 1)));
        CHECK(cudaMemcpy(sh.wide[l], hw[l], sizeof(int4) * n_wide[l], cudaMemcpyHostToDevice));
        free(hw[l]);
    }
    if (form == LIST_PARTIAL_LAST) { /* stable: full tiles in their order, then the partial ones */
        int4 *moved = (int4 *)malloc(sizeof(int4) * sh.n_tiles);
        int n = 0;
        for (int pass = 0; pass < 2; pass++)
            for (int i = 0; i < sh.n_tiles; i++)
                if ((ht[i].y == BM) == (pass == 0)) moved[n++] = ht[i];
        memcpy(ht, moved, sizeof(int4) * sh.n_tiles);
        free(moved);
    }
    if (form == LIST_HALF_ROWS)
        for (int i = 0; i < sh.n_tiles; i++) ht[i].y = ht[i].y < 64 ? ht[i].y : 64;
    CHECK(cudaMalloc(&sh.A, (sh.rows + BM) * K * 2));
    CHECK(cudaMalloc(&sh.B, (size_t)E * N * K * 2));
    for (int v = 0; v < 2; v++) CHECK(cudaMalloc(&sh.C[v], sh.rows * N * 2));
    CHECK(cudaMalloc(&sh.tiles, sizeof(int4) * sh.n_tiles));
    CHECK(cudaMalloc(&sh.pairs, sizeof(int4) * (sh.n_pairs + 2)));
    CHECK(cudaMemcpy(sh.pairs, hp, sizeof(int4) * sh.n_pairs, cudaMemcpyHostToDevice));
    sh.n_pairs /= 2; /* entries were tiles */
    CHECK(cudaMalloc(&sh.swap, sizeof(int4) * sh.n_swap));
    CHECK(cudaMemcpy(sh.swap, hs, sizeof(int4) * sh.n_swap, cudaMemcpyHostToDevice));
    CHECK(cudaMalloc(&sh.row_e, sizeof(int) * sh.rows));
    CHECK(cudaMemcpy(sh.tiles, ht, sizeof(int4) * sh.n_tiles, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(sh.row_e, hre, sizeof(int) * sh.rows, cudaMemcpyHostToDevice));
    lab_fill_bf16<<<1024, 256>>>(sh.A, (sh.rows + BM) * K, 1234u + M_e);
    lab_fill_bf16<<<4096, 256>>>(sh.B, (size_t)E * N * K, 777u + N);
    /* the gathered forms' source: row i of A at row row_src[i], a permutation that spreads an
     * expert's rows over the whole buffer as tokens routed uniformly are */
    int *hsrc = (int *)malloc(sizeof(int) * sh.rows);
    for (size_t i = 0; i < sh.rows; i++) hsrc[i] = (int)i;
    for (size_t i = sh.rows - 1; i > 0; i--) { /* Fisher-Yates, a fixed seed */
        const size_t j = ((uint64_t)i * 2654435761u + 12345u) % (i + 1);
        const int x = hsrc[i];
        hsrc[i] = hsrc[j], hsrc[j] = x;
    }
    CHECK(cudaMalloc(&sh.A_src, sh.rows * K * 2));
    CHECK(cudaMalloc(&sh.row_src, sizeof(int) * sh.rows));
    CHECK(cudaMemcpy(sh.row_src, hsrc, sizeof(int) * sh.rows, cudaMemcpyHostToDevice));
    CHECK(cudaDeviceSynchronize());
    for (size_t i = 0; i < sh.rows; i++) /* row by row: a 2D copy of one row each */
        CHECK(cudaMemcpyAsync(sh.A_src + (size_t)hsrc[i] * K, sh.A + i * K, (size_t)K * 2, cudaMemcpyDeviceToDevice));
    CHECK(cudaDeviceSynchronize());
    free(hsrc);
    free(rows_e), free(ht), free(hp), free(hs), free(hre);
    return sh;
}

static void free_shape(shape &sh)
{
    cudaFree(sh.A), cudaFree(sh.B), cudaFree(sh.C[0]), cudaFree(sh.C[1]), cudaFree(sh.tiles), cudaFree(sh.pairs), cudaFree(sh.swap), cudaFree(sh.row_e);
    cudaFree(sh.A_src), cudaFree(sh.row_src), cudaFree(sh.wide[0]), cudaFree(sh.wide[1]), cudaFree(sh.wide[2]);
}

/* Outputs v of the shape: bf16 bits on the host. */
static uint16_t *fetch(const shape &sh, int v)
{
    uint16_t *h = (uint16_t *)malloc(sh.rows * sh.N * 2);
    CHECK(cudaMemcpy(h, sh.C[v], sh.rows * sh.N * 2, cudaMemcpyDeviceToHost));
    return h;
}

static int g_sms, g_grid_mc;
static float g_sustain_ms; /* "sustained", "gather MS": the forms in turns for this long, then 10 rounds timed (time_interleaved) */
static unsigned *g_failed, *g_counter;
static unsigned long long *g_stamp; /* "claimed": set for one recording launch after each form's timing */
static size_t g_smem;

/* kernel k of the lab: 0 plain, 1 plain ALL, 2 LIST, 3 LIST ALL, 4 multicast,
 * 5 the pair without multicast, 6 plain in clusters, 7 the pair list, 8 the swapped tiles
 * (sw: their maps, W by 128 rows, X by 128 / 64 / 32 / 16), 9 the tile list swapped in place */
static void launch(int k, const shape &sh, int v, const CUtensorMap &ta, const CUtensorMap &tb, const CUtensorMap &tbh,
                   const CUtensorMap &ta64, const CUtensorMap *sw)
{
    lab_args g = {sh.E, (int)(sh.rows / sh.E), sh.N, sh.K, sh.C[v], g_failed, sh.tiles, sh.n_tiles, sh.pairs, sh.n_pairs, sh.swap, sh.n_swap, g_counter,
                  sh.A_src, sh.row_src, g_stamp, {sh.wide[0], sh.wide[1], sh.wide[2]},
                  {sh.n_wide[0], sh.n_wide[1], sh.n_wide[2]}};
    switch (k) {
    case 0: gemm_plain<false, false><<<g_sms, 384, g_smem>>>(g, ta, tb, ta64); break;
    case 1: gemm_plain<true, false><<<g_sms, 384, g_smem>>>(g, ta, tb, ta64); break;
    case 2: gemm_plain<false, true><<<g_sms, 384, g_smem>>>(g, ta, tb, ta64); break;
    case 3: gemm_plain<true, true><<<g_sms, 384, g_smem>>>(g, ta, tb, ta64); break;
    case 4: gemm_multicast<<<g_grid_mc, 384, g_smem>>>(g, ta, tbh); break;
    case 5: gemm_pair_no_multicast<<<g_grid_mc, 384, g_smem>>>(g, ta, tb); break;
    case 6: gemm_plain_in_clusters<<<g_grid_mc, 384, g_smem>>>(g, ta, tb); break;
    case 7: gemm_pair_list<<<g_grid_mc, 384, g_smem>>>(g, ta, tb, tbh, ta64); break;
    case 8: gemm_swap<<<g_sms, 384, g_smem>>>(g, sw[0], sw[1], sw[2], sw[3], sw[4]); break;
    case 9: gemm_swapin<<<g_sms, 384, g_smem>>>(g, ta, tb); break;
    case 10: gemm_swapin16<<<g_sms, 384, g_smem>>>(g, ta, tb); break;
    case 11: CHECK(cudaMemsetAsync(g_counter, 0, 4)); gemm_list_dyn<<<g_sms, 384, g_smem>>>(g, ta, tb); break;
    case 12: CHECK(cudaMemsetAsync(g_counter, 0, 4)); gemm_swapin_dyn<<<g_sms, 384, g_smem>>>(g, ta, tb); break;
    case 13: gemm_gather<1><<<g_sms, 384, g_smem>>>(g, tb, sw[5]); break;
    case 15: gemm_swapwide<192, 3><<<g_sms, 384, sizeof(ws_smem_t<192, 3>) + 1024>>>(g, sw[6], tb); break;
    case 16: gemm_swapwide<192, 4><<<g_sms, 384, sizeof(ws_smem_t<192, 4>) + 1024>>>(g, sw[6], tb); break;
    case 17: gemm_swapwide<160, 4><<<g_sms, 384, sizeof(ws_smem_t<160, 4>) + 1024>>>(g, sw[7], tb); break;
    case 18: gemm_swapwide<160, 4, 16><<<g_sms, 384, sizeof(ws_smem_t<160, 4>) + 1024>>>(g, sw[7], tb); break;
    case 19: gemm_swapwide<160, 4, 32><<<g_sms, 384, sizeof(ws_smem_t<160, 4>) + 1024>>>(g, sw[7], tb); break;
    case 20: gemm_swapwide<144, 4><<<g_sms, 384, sizeof(ws_smem_t<144, 4>) + 1024>>>(g, sw[8], tb); break;
    case 21:
        CHECK(cudaMemsetAsync(g_counter, 0, 4));
        gemm_swapwide<160, 4, 8, true><<<g_sms, 384, sizeof(ws_smem_t<160, 4>) + 1024>>>(g, sw[7], tb);
        break;
    default: gemm_gather<2><<<g_sms, 384, g_smem>>>(g, tb, sw[5]); break;
    }
    CHECK(cudaGetLastError());
}

static const char *kernel_name[22] = {"plain", "plain, every thread arrives", "tile list", "tile list, every thread arrives",
                                     "multicast", "pair, no multicast", "plain in clusters", "pair list", "swapped", "swapped in place", "swapped in place, 16",
                                      "tile list, claimed", "swapped in place, claimed", "gathered, cp.async", "gathered, a TMA a row",
                                      "swapped wide 192, 3 stages", "swapped wide 192, 4 stages", "swapped wide 160, 4 stages",
                                      "swapped wide 160, widths by 16", "swapped wide 160, widths by 32",
                                      "swapped wide 144, 4 stages", "swapped wide 160, claimed"};

/* "claimed": one more launch right after a form's timing, with each tile's
 * start stamped; prints that launch's time, the timed launches' spread, and
 * how far apart in time the tiles sharing B (an expert's m tiles of one
 * column block, neighbours in the list) started: tiles sharing B that run
 * at once read it from HBM once, apart they read it twice. */
static int g_record;
static void record_starts(const shape &sh, int k, const CUtensorMap &ta, const CUtensorMap &tb, const CUtensorMap &tbh,
                          const CUtensorMap &ta64, const CUtensorMap *sw)
{
    const int n = sh.n_tiles;
    CHECK(cudaMalloc(&g_stamp, sizeof(unsigned long long) * n));
    CHECK(cudaMemset(g_stamp, 0, sizeof(unsigned long long) * n));
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    CHECK(cudaEventRecord(e0));
    launch(k, sh, 1, ta, tb, tbh, ta64, sw);
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    unsigned long long *h = (unsigned long long *)malloc(sizeof(unsigned long long) * n);
    int4 *ht = (int4 *)malloc(sizeof(int4) * n);
    CHECK(cudaMemcpy(h, g_stamp, sizeof(unsigned long long) * n, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(ht, sh.tiles, sizeof(int4) * n, cudaMemcpyDeviceToHost));
    CHECK(cudaFree(g_stamp));
    g_stamp = NULL;
    std::vector<double> d;
    unsigned long long t0 = ~0ull;
    for (int i = 0; i < n; i++) t0 = h[i] && h[i] < t0 ? h[i] : t0;
    for (int i = 0; i + 1 < n; i++)
        if (ht[i].z == ht[i + 1].z && ht[i].w == ht[i + 1].w && h[i] && h[i + 1])
            d.push_back(fabs((double)h[i + 1] - (double)h[i]) * 1e-3);
    std::sort(d.begin(), d.end());
    const double tile_us = ms * 1e3 * g_sms / n; /* a tile's average time on its block */
    int apart = 0;
    for (double x : d) apart += x > 0.5 * tile_us;
    printf("    recorded launch %.1f us (timed: %.1f .. %.1f); tiles sharing B: %zu pairs, start apart median %.1f p90 %.1f "
           "max %.1f us, %d (%.0f %%) over half a tile (%.1f us)\n",
           ms * 1e3, lab_sustained_min_ms * 1e3, lab_sustained_max_ms * 1e3, d.size(), d.empty() ? 0 : d[d.size() / 2],
           d.empty() ? 0 : d[d.size() * 9 / 10], d.empty() ? 0 : d.back(), apart, d.empty() ? 0 : 100.0 * apart / d.size(),
           0.5 * tile_us);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    free(h), free(ht);
}

/* Sustained timing of forms ks[0..n) (n <= 8) in turns, as the bench times
 * its backends: round-robin launches for g_sustain_ms, then 10 rounds of one
 * launch each (the order reversed every other round), medians into t[j]. Timed
 * one form after another instead, a form that falls 0.6-0.9 s into the load
 * meets the power controller's dip and takes 1.14-1.35x (`mc_lab claimed`,
 * which keeps that order to show it). */
static void time_interleaved(const shape &sh, const int *ks, int n, const CUtensorMap &ta, const CUtensorMap &tb,
                             const CUtensorMap &tbh, const CUtensorMap &ta64, const CUtensorMap *sw, float *t)
{
    enum { ROUNDS = 10 };
    cudaEvent_t ev[ROUNDS][8][2], r0, r1;
    for (int r = 0; r < ROUNDS; r++)
        for (int j = 0; j < n; j++) {
            CHECK(cudaEventCreate(&ev[r][j][0]));
            CHECK(cudaEventCreate(&ev[r][j][1]));
        }
    CHECK(cudaEventCreate(&r0));
    CHECK(cudaEventCreate(&r1));
    CHECK(cudaEventRecord(r0));
    for (int j = 0; j < n; j++) launch(ks[j], sh, j ? 1 : 0, ta, tb, tbh, ta64, sw);
    CHECK(cudaEventRecord(r1));
    CHECK(cudaEventSynchronize(r1));
    float round_ms;
    CHECK(cudaEventElapsedTime(&round_ms, r0, r1));
    const int warm = (int)(g_sustain_ms / (round_ms > 1e-3f ? round_ms : 1e-3f)) + 1;
    for (int w = 0; w < warm; w++)
        for (int j = 0; j < n; j++) launch(ks[j], sh, j ? 1 : 0, ta, tb, tbh, ta64, sw);
    for (int r = 0; r < ROUNDS; r++)
        for (int i = 0; i < n; i++) {
            const int j = r % 2 ? n - 1 - i : i;
            CHECK(cudaEventRecord(ev[r][j][0]));
            launch(ks[j], sh, j ? 1 : 0, ta, tb, tbh, ta64, sw);
            CHECK(cudaEventRecord(ev[r][j][1]));
        }
    CHECK(cudaDeviceSynchronize());
    for (int j = 0; j < n; j++) {
        float ms[ROUNDS];
        for (int r = 0; r < ROUNDS; r++) CHECK(cudaEventElapsedTime(&ms[r], ev[r][j][0], ev[r][j][1]));
        std::sort(ms, ms + ROUNDS);
        t[j] = ms[ROUNDS / 2];
    }
    for (int r = 0; r < ROUNDS; r++)
        for (int j = 0; j < n; j++) cudaEventDestroy(ev[r][j][0]), cudaEventDestroy(ev[r][j][1]);
    cudaEventDestroy(r0), cudaEventDestroy(r1);
}

/* Kernels ks[0..n) on one shape: outputs against kernel ks[0]'s bit for bit
 * (and ks[0] against the naive GEMM when check), then best-of-iters times. */
static void run(const char *name, int E, int M_e, int jitter, int N, int K, const int *ks, int n, int check, int iters,
                int form = LIST_SPLIT_ORDER)
{
    shape sh = make_shape(E, M_e, jitter, N, K, form);
    CUtensorMap ta = lab_make_map(sh.A, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (int)sh.rows + BM, K, BM, BK);
    CUtensorMap tb = lab_make_map(sh.B, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, E * N, K, BN, BK);
    CUtensorMap tbh = lab_make_map(sh.B, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, E * N, K, BN / 2, BK);
    CUtensorMap ta64 = lab_make_map(sh.A, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (int)sh.rows + BM, K, 64, BK);
    CUtensorMap sw[9]; /* [5]: the gathered forms' rows, one a box; [6], [7], [8]: tokens by 192 / 160 / 144 (wide swapped) */
    sw[0] = lab_make_map(sh.B, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, E * N, K, 128, BK);
    for (int i = 0; i < 4; i++)
        sw[1 + i] = lab_make_map(sh.A, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (int)sh.rows + BM, K, 128 >> i, BK);
    sw[5] = lab_make_map(sh.A_src, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (int)sh.rows, K, 1, BK);
    sw[6] = lab_make_map(sh.A, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (int)sh.rows + BM, K, 192, BK);
    sw[7] = lab_make_map(sh.A, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (int)sh.rows + BM, K, 160, BK);
    sw[8] = lab_make_map(sh.A, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (int)sh.rows + BM, K, 144, BK);
    printf("%s: E=%d rows %zu (%d +- %d an expert) N=%d K=%d, %d tiles (wide: %d at 192, %d at 160)\n", name, E, sh.rows, M_e,
           jitter, N, K, sh.n_tiles, sh.n_wide[0], sh.n_wide[1]);
    CHECK(cudaMemset(sh.C[0], 0xFF, sh.rows * N * 2)); /* NaN-poisoned */
    CHECK(cudaMemset(g_failed, 0, 4));
    launch(ks[0], sh, 0, ta, tb, tbh, ta64, sw);
    CHECK(cudaDeviceSynchronize());
    uint16_t *h0 = fetch(sh, 0);
    size_t nan0 = 0;
    for (size_t i = 0; i < sh.rows * N; i++) nan0 += (h0[i] & 0x7FFF) > 0x7F80;
    if (check) {
        float *R, *hr = (float *)malloc(sh.rows * N * 4);
        CHECK(cudaMalloc(&R, sh.rows * N * 4));
        gemm_naive<<<dim3((N + 255) / 256, (unsigned)sh.rows), 256>>>(sh.A, sh.B, sh.row_e, R, N, K);
        CHECK(cudaDeviceSynchronize());
        CHECK(cudaMemcpy(hr, R, sh.rows * N * 4, cudaMemcpyDeviceToHost));
        double num = 0, den = 0;
        for (size_t i = 0; i < sh.rows * N; i++) {
            uint32_t u = (uint32_t)h0[i] << 16;
            float f;
            memcpy(&f, &u, 4);
            num += ((double)f - hr[i]) * ((double)f - hr[i]), den += (double)hr[i] * hr[i];
        }
        printf("  %s against naive fp32: rel L2 %.3e -> %s\n", kernel_name[ks[0]], sqrt(num / den),
               sqrt(num / den) < 8e-3 ? "OK" : "WRONG");
        cudaFree(R), free(hr);
    }
    if (form == LIST_HALF_ROWS) nan0 = 0, check = 0, n = 1; /* half the rows unwritten by design: timing only */
    printf("  %s: NaN/unwritten %zu -> %s\n", kernel_name[ks[0]], nan0, nan0 ? "WRONG" : "OK");
    for (int j = 1; j < n; j++) {
        CHECK(cudaMemset(sh.C[1], 0xFF, sh.rows * N * 2));
        launch(ks[j], sh, 1, ta, tb, tbh, ta64, sw);
        CHECK(cudaDeviceSynchronize());
        uint16_t *h1 = fetch(sh, 1);
        size_t diff = 0;
        for (size_t i = 0; i < sh.rows * N; i++) diff += h0[i] != h1[i];
        printf("  %s: differs from %s in %zu of %zu -> %s\n", kernel_name[ks[j]], kernel_name[ks[0]], diff, sh.rows * N,
               diff ? "WRONG" : "OK");
        free(h1);
    }
    free(h0);
    unsigned hf;
    CHECK(cudaMemcpy(&hf, g_failed, 4, cudaMemcpyDeviceToHost));
    if (hf) printf("  WRONG: %u blocks had a wait give up\n", hf);
    const double flop = 2.0 * sh.rows * N * K;
    float t[8];
    const bool in_turns = g_sustain_ms > 0 && !g_record; /* "claimed" keeps one form after another */
    if (in_turns) time_interleaved(sh, ks, n, ta, tb, tbh, ta64, sw, t);
    for (int j = 0; j < n; j++) {
        if (!in_turns) { /* one form after another: sustained ("claimed") or best of a burst */
            if (g_sustain_ms > 0) LAB_TIME_SUSTAINED(t[j], 10, g_sustain_ms, launch(ks[j], sh, j ? 1 : 0, ta, tb, tbh, ta64, sw));
            else LAB_TIME_BEST(t[j], iters, launch(ks[j], sh, j ? 1 : 0, ta, tb, tbh, ta64, sw));
        }
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        printf("  time %-32s %9.1f us %5.0f TFLOP/s  / %s %.3f  (ended %02ld:%06.3f)\n", kernel_name[ks[j]], t[j] * 1e3,
               flop / (t[j] * 1e-3) / 1e12, kernel_name[ks[0]], t[j] / t[0], (long)(now.tv_sec / 60 % 60),
               (double)(now.tv_sec % 60) + now.tv_nsec * 1e-9);
        if (g_record) record_starts(sh, ks[j], ta, tb, tbh, ta64, sw);
    }
    free_shape(sh);
}

int main(int argc, char **argv)
{
    CHECK(cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, 0));
    CHECK(cudaMalloc(&g_failed, 4));
    CHECK(cudaMalloc(&g_counter, 4));
    g_smem = sizeof(smem_t) + 1024;
    CHECK(cudaFuncSetAttribute(gemm_plain<false, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)g_smem));
    CHECK(cudaFuncSetAttribute(gemm_plain<true, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)g_smem));
    CHECK(cudaFuncSetAttribute(gemm_plain<false, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)g_smem));
    CHECK(cudaFuncSetAttribute(gemm_plain<true, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)g_smem));
    CHECK(cudaFuncSetAttribute(gemm_multicast, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)g_smem));
    CHECK(cudaFuncSetAttribute(gemm_pair_no_multicast, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)g_smem));
    CHECK(cudaFuncSetAttribute(gemm_plain_in_clusters, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)g_smem));
    CHECK(cudaFuncSetAttribute(gemm_pair_list, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)g_smem));
    CHECK(cudaFuncSetAttribute(gemm_swap, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)g_smem));
    CHECK(cudaFuncSetAttribute(gemm_swapin, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)g_smem));
    CHECK(cudaFuncSetAttribute(gemm_swapin16, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)g_smem));
    CHECK(cudaFuncSetAttribute(gemm_list_dyn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)g_smem));
    CHECK(cudaFuncSetAttribute(gemm_swapin_dyn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)g_smem));
    CHECK(cudaFuncSetAttribute(gemm_gather<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)g_smem));
    CHECK(cudaFuncSetAttribute(gemm_gather<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)g_smem));
    CHECK(cudaFuncSetAttribute(gemm_swapwide<192, 3>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sizeof(ws_smem_t<192, 3>) + 1024));
    CHECK(cudaFuncSetAttribute(gemm_swapwide<192, 4>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sizeof(ws_smem_t<192, 4>) + 1024));
    CHECK(cudaFuncSetAttribute(gemm_swapwide<160, 4>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sizeof(ws_smem_t<160, 4>) + 1024));
    CHECK(cudaFuncSetAttribute(gemm_swapwide<160, 4, 16>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sizeof(ws_smem_t<160, 4>) + 1024));
    CHECK(cudaFuncSetAttribute(gemm_swapwide<160, 4, 32>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sizeof(ws_smem_t<160, 4>) + 1024));
    CHECK(cudaFuncSetAttribute(gemm_swapwide<144, 4>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sizeof(ws_smem_t<144, 4>) + 1024));
    CHECK(cudaFuncSetAttribute(gemm_swapwide<160, 4, 8, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sizeof(ws_smem_t<160, 4>) + 1024));
    /* pairs of SMs in one GPC: fewer than sms / 2 may be resident at once,
     * and a persistent grid must not wait for a second wave */
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension, attr.val.clusterDim.x = 2, attr.val.clusterDim.y = 1,
    attr.val.clusterDim.z = 1;
    cfg.gridDim = dim3(g_sms & ~1), cfg.blockDim = dim3(384), cfg.dynamicSmemBytes = g_smem, cfg.attrs = &attr, cfg.numAttrs = 1;
    int clusters = 0;
    CHECK(cudaOccupancyMaxActiveClusters(&clusters, (void *)gemm_multicast, &cfg));
    g_grid_mc = 2 * (clusters < g_sms / 2 ? clusters : g_sms / 2);
    printf("%d SMs, %d 2-CTA clusters resident at once: multicast grid %d\n", g_sms, clusters, g_grid_mc);
    if (argc >= 2 && strcmp(argv[1], "wide") == 0) { /* `mc_lab wide [MS]`: the wide swapped tiles against in place (fortieth session) */
        g_sustain_ms = argc >= 3 ? (float)atof(argv[2]) : 0.0f;
        const int wk[4] = {9, 12, 17, 21}, wk8[5] = {2, 9, 12, 17, 21}; /* 12: in place, claimed */
        run("small, 600 +- 90 rows", 3, 600, 90, 512, 448, wk8, 5, 1, 3, LIST_BALANCED);
        run("pro GEMM1 T=2048, balanced", 48, 256, 27, 6144, 7168, wk, 4, 0, 5, LIST_BALANCED);
        run("pro GEMM1 T=2048, balanced, again", 48, 256, 27, 6144, 7168, wk, 4, 0, 5, LIST_BALANCED);
        run("pro GEMM1 T=2048, exact 256 rows", 48, 256, 0, 6144, 7168, wk, 4, 0, 5, LIST_BALANCED);
        run("pro GEMM1 T=2048, exact 288 rows", 48, 288, 0, 6144, 7168, wk, 4, 0, 5, LIST_BALANCED);
        run("pro GEMM2 T=2048, balanced", 48, 256, 27, 7168, 3072, wk, 4, 0, 5, LIST_BALANCED);
        run("flash GEMM1 T=2048, balanced", 32, 384, 33, 4096, 4096, wk, 4, 0, 5, LIST_BALANCED);
        run("flash GEMM2 T=2048, balanced", 32, 384, 33, 4096, 2048, wk, 4, 0, 5, LIST_BALANCED);
        run("flash GEMM1 T=512, balanced", 32, 96, 16, 4096, 4096, wk, 4, 0, 5, LIST_BALANCED);
        run("pro GEMM1 T=8192, balanced", 48, 1024, 54, 6144, 7168, wk8, 5, 0, 3, LIST_BALANCED);
        run("flash GEMM1 T=8192, balanced", 32, 1536, 66, 4096, 4096, wk8, 5, 0, 3, LIST_BALANCED);
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "wstep") == 0) { /* `mc_lab wstep [MS]`: the wide tile's rate against its width N */
        g_sustain_ms = argc >= 3 ? (float)atof(argv[2]) : 0.0f;
        const int wk[2] = {9, 17};
        char name[96];
        for (int v = 96; v <= 160; v += 8) { /* experts of exactly 2 v rows: 2 wide tiles of v (in place: 2 or 3 tiles) */
            snprintf(name, sizeof name, "pro GEMM1 shape, every expert 2 x %d rows", v);
            run(name, 48, 2 * v, 0, 6144, 7168, wk, 2, 0, 3, LIST_BALANCED);
        }
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "gather") == 0) { /* gathered A rows (mega's GEMM1) against TMA of copied rows */
        g_sustain_ms = argc >= 3 ? (float)atof(argv[2]) : 0.0f;
        const int gk[3] = {2, 13, 14};
        run("small, gathered", 3, 256, 40, 512, 448, gk, 3, 1, 3, LIST_BALANCED);
        run("pro GEMM1 T=2048, gathered", 48, 256, 27, 6144, 7168, gk, 3, 0, 5, LIST_BALANCED);
        run("flash GEMM1 T=2048, gathered", 32, 384, 33, 4096, 4096, gk, 3, 0, 5, LIST_BALANCED);
        run("pro GEMM1 T=512, gathered", 48, 64, 14, 6144, 7168, gk, 3, 0, 5, LIST_BALANCED);
        run("flash GEMM1 T=8192, gathered", 32, 1536, 66, 4096, 4096, gk, 3, 0, 3, LIST_BALANCED);
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "claimed") == 0) { /* static against claimed, sustained, in turns (drift shows as A != A) */
        g_sustain_ms = argc >= 3 ? (float)atof(argv[2]) : 200.0f, g_record = 1;
        printf("claimed: static and claimed tile lists in turns, each timed (median of 10) after %.0f ms of its own launches\n",
               g_sustain_ms);
        /* argv[3]: the turns, s (static) and c (claimed), up to 8 (default scsccs) */
        const char *order = argc >= 4 ? argv[3] : "scsccs";
        int turns[8], n_turns = 0;
        for (; order[n_turns] && n_turns < 8; n_turns++) turns[n_turns] = order[n_turns] == 'c' ? 11 : 2;
        run("pro GEMM1 T=2048, balanced", 48, 256, 27, 6144, 7168, turns, n_turns, 0, 1, LIST_BALANCED);
        run("flash GEMM1 T=2048, balanced", 32, 384, 33, 4096, 4096, turns, n_turns, 0, 1, LIST_BALANCED);
        run("pro GEMM2 T=2048, balanced", 48, 256, 27, 7168, 3072, turns, n_turns, 0, 1, LIST_BALANCED);
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "sustained") == 0) { /* the thirty-second session's set: forms under the power cap */
        g_sustain_ms = argc >= 3 ? (float)atof(argv[2]) : 300.0f;
        printf("sustained: the forms launched in turns for %.0f ms, then 10 rounds timed (medians)\n", g_sustain_ms);
        const int mc[3] = {0, 4, 6}, lists[4] = {2, 9, 7, 11};
        run("dense 8192^3", 1, 8192, 0, 8192, 8192, mc, 3, 0, 1);
        run("pro GEMM1 T=2048, exact rows", 48, 256, 0, 6144, 7168, mc, 3, 0, 1);
        run("pro GEMM1 T=8192, exact rows", 48, 1024, 0, 6144, 7168, mc, 3, 0, 1);
        run("pro GEMM1 T=2048, balanced", 48, 256, 27, 6144, 7168, lists, 4, 0, 1, LIST_BALANCED);
        run("pro GEMM2 T=2048, balanced", 48, 256, 27, 7168, 3072, lists, 4, 0, 1, LIST_BALANCED);
        run("pro GEMM1 T=8192, balanced", 48, 1024, 54, 6144, 7168, lists, 4, 0, 1, LIST_BALANCED);
        run("flash GEMM1 T=2048, balanced", 32, 384, 33, 4096, 4096, lists, 4, 0, 1, LIST_BALANCED);
        return 0;
    }
    if (argc < 2 || strcmp(argv[1], "all")) { /* the thirty-first session's set: the pair list; "all": every form */
        const int sl[5] = {2, 11, 9, 12, 8};
        run("small, balanced", 3, 256, 40, 512, 448, sl, 5, 1, 3, LIST_BALANCED);
        run("small, 600 +- 90 rows", 3, 600, 90, 512, 448, sl, 5, 1, 3, LIST_BALANCED);
        run("pro GEMM1 T=2048, balanced", 48, 256, 27, 6144, 7168, sl, 5, 0, 5, LIST_BALANCED);
        run("pro GEMM2 T=2048, balanced", 48, 256, 27, 7168, 3072, sl, 5, 0, 5, LIST_BALANCED);
        run("pro GEMM1 T=8192, balanced", 48, 1024, 54, 6144, 7168, sl, 5, 0, 3, LIST_BALANCED);
        run("pro GEMM2 T=8192, balanced", 48, 1024, 54, 7168, 3072, sl, 5, 0, 3, LIST_BALANCED);
        run("flash GEMM1 T=2048, balanced", 32, 384, 33, 4096, 4096, sl, 5, 0, 5, LIST_BALANCED);
        run("flash GEMM2 T=2048, balanced", 32, 384, 33, 4096, 2048, sl, 5, 0, 5, LIST_BALANCED);
        run("flash GEMM1 T=8192, balanced", 32, 1536, 66, 4096, 4096, sl, 5, 0, 3, LIST_BALANCED);
        run("pro GEMM1 T=512, balanced", 48, 64, 14, 6144, 7168, sl, 5, 0, 5, LIST_BALANCED);
        return 0;
    }
    const int uniform[5] = {0, 1, 4, 5, 6}, listed[2] = {2, 3}, same[2] = {0, 2};
    run("small", 2, 256, 0, 512, 512, uniform, 5, 1, 3);
    run("small, the list", 2, 256, 0, 512, 512, same, 2, 0, 3);
    run("small, partial tiles", 3, 256, 40, 512, 448, listed, 2, 1, 3);
    /* EP8 slices (../../../shared/geometries.md): rows per expert = T * 6 / experts */
    run("pro GEMM1 T=2048", 48, 256, 0, 6144, 7168, uniform, 5, 0, 5);
    run("pro GEMM1 T=2048, partial tiles", 48, 256, 27, 6144, 7168, listed, 2, 0, 5);
    run("pro GEMM2 T=2048, partial tiles", 48, 256, 27, 7168, 3072, listed, 2, 0, 5);
    run("pro GEMM1 T=8192", 48, 1024, 0, 6144, 7168, uniform, 5, 0, 3);
    run("pro GEMM1 T=8192, partial tiles", 48, 1024, 54, 6144, 7168, listed, 2, 0, 3);
    run("pro GEMM2 T=8192, partial tiles", 48, 1024, 54, 7168, 3072, listed, 2, 0, 3);
    run("flash GEMM1 T=8192, partial tiles", 32, 1536, 66, 4096, 4096, listed, 2, 0, 3);
    /* why partial tiles cost more than their share */
    const int list_only[1] = {2};
    run("small, partial tiles last", 3, 256, 40, 512, 448, list_only, 1, 1, 3, LIST_PARTIAL_LAST);
    run("pro GEMM1 T=2048, partial tiles last", 48, 256, 27, 6144, 7168, list_only, 1, 0, 5, LIST_PARTIAL_LAST);
    run("pro GEMM1 T=8192, partial tiles last", 48, 1024, 54, 6144, 7168, list_only, 1, 0, 3, LIST_PARTIAL_LAST);
    run("small, balanced tiles", 3, 256, 40, 512, 448, list_only, 1, 1, 3, LIST_BALANCED);
    run("small, wide last tiles", 3, 256, 40, 512, 448, listed, 2, 1, 3, LIST_WIDE);
    run("pro GEMM1 T=2048, wide last tiles", 48, 256, 27, 6144, 7168, list_only, 1, 0, 5, LIST_WIDE);
    run("pro GEMM2 T=2048, wide last tiles", 48, 256, 27, 7168, 3072, list_only, 1, 0, 5, LIST_WIDE);
    run("pro GEMM1 T=8192, wide last tiles", 48, 1024, 54, 6144, 7168, list_only, 1, 0, 3, LIST_WIDE);
    run("pro GEMM2 T=8192, wide last tiles", 48, 1024, 54, 7168, 3072, list_only, 1, 0, 3, LIST_WIDE);
    run("pro GEMM1 T=2048, balanced tiles", 48, 256, 27, 6144, 7168, list_only, 1, 0, 5, LIST_BALANCED);
    run("pro GEMM2 T=2048, balanced tiles", 48, 256, 27, 7168, 3072, list_only, 1, 0, 5, LIST_BALANCED);
    run("pro GEMM1 T=8192, balanced tiles", 48, 1024, 54, 6144, 7168, list_only, 1, 0, 3, LIST_BALANCED);
    run("pro GEMM1 T=2048, every tile 64 rows", 48, 256, 0, 6144, 7168, list_only, 1, 0, 5, LIST_HALF_ROWS);
    run("pro GEMM1 T=8192, every tile 64 rows", 48, 1024, 0, 6144, 7168, list_only, 1, 0, 3, LIST_HALF_ROWS);
    run("dense 8192^3", 1, 8192, 0, 8192, 8192, uniform, 5, 0, 5);
    return 0;
}
