/* The FP8-BLOCK TMA + QGMMA tile as a device function, for the split
 * backend's grouped GEMM (wgmma_gemm.cu) and the mega kernel: one 64 x 256
 * output tile of one expert, computed by a block of WG_THREADS = 384 threads.
 *
 * Operands: A = 64 activation rows, B = 256 weight rows, both E4M3 and
 * K-major, K in steps of QG_BK = 128 (one FP8-BLOCK scale block, one 128-byte
 * swizzle atom per row). Warpgroup 0 produces (one thread issues the TMA
 * copies of each K step into a ring of QG_STAGES stages completing on
 * mbarriers); warpgroups 1 and 2 consume, warpgroup 1 the tile's columns
 * 0..127 (GEMM1: the 128 gate columns), warpgroup 2 columns 128..255 (the up
 * columns), each with 4 wgmma m64n128k32 per K step into a partial sum that
 * is then promoted: acc = fmaf(part, sa[row] * sw, acc), with sa the row's
 * activation scale and sw the weight block's scale of this K block (one per
 * 128 x 128 weight block: a warpgroup's 128 columns are one block).
 *
 * Registers: 64 fp32 accumulators + two sets of 64 partial sums per thread
 * (QG_CONSUMER_REGS after setmaxnreg; the producer gives its registers up):
 * K step kt's wgmmas run while step kt - 1's sums are promoted. Two 64 x 256
 * (or one 128 x 256) warpgroup tiles would need 384.
 *
 * Opt-in (config.fp8_fast_accum): the FP8 tensor cores sum their products at
 * reduced precision (measured on the H200: FP8-BLOCK outputs 5e-3 from the
 * fp32 reference with the bf16 wire, where the exact mma.sync path is within
 * 1e-4; promoting every k32 instead of every k128 only gains 1.5x and costs
 * 20 %), as in DeepSeek's own FP8 GEMMs. A layer that opts in runs this tile
 * at every T on both GPU backends: its bits differ from the FP8 mma.sync's,
 * so one layer never mixes the two. */
#ifndef MOE_EP_QGMMA_TILE_CUH
#define MOE_EP_QGMMA_TILE_CUH

#include "kernels/sm90/wgmma_tile.cuh"

#define QG_BM 64
#define QG_BN 256
#define QG_BK 128 /* E4M3 elements (= bytes) per row per K step */
#define QG_STAGES 4
/* Registers per thread: the launch's (384 threads), the producer's and the
 * consumers' after setmaxnreg (40 x 128 + 232 x 256 <= 65536). */
#define QG_LAUNCH_REGS 168
#define QG_PRODUCER_REGS 40
#define QG_CONSUMER_REGS 232

struct qg_smem {
    uint8_t a[QG_STAGES][QG_BM * QG_BK]; /* 8 KB per stage, 1024-byte aligned */
    uint8_t b[QG_STAGES][QG_BN * QG_BK]; /* 32 KB per stage */
    uint64_t full[QG_STAGES], empty[QG_STAGES];
};

#define QG_SMEM_BYTES (sizeof(qg_smem) + 1024)

/* FP8-BLOCK scales of a consumer thread (fp32): the activation scale rows of
 * its fragment rows r and r + 8 (0 past rows_valid: those rows are never
 * stored) and its warpgroup's weight block, on the block's first row (one
 * scale per 128 x 128 weight block: a warpgroup's 128 columns are one block).
 * Read through L2: rows may come from other SMs of this launch. */
struct fp8_block_scales {
    const float *sa0, *sa1, *sw;
    bool v0, v1;
};

__device__ __forceinline__ fp8_block_scales fp8_scales_of(const gemm_args &g, int e, int64_t row0, int rows_valid,
                                                          int n0, int h, int r)
{
    fp8_block_scales s;
    s.sa0 = (const float *)(g.a_scales + (row0 + r) * g.a_scale_stride);
    s.sa1 = (const float *)(g.a_scales + (row0 + r + 8) * g.a_scale_stride);
    s.sw = (const float *)(g.b_scales + ((int64_t)e * g.N + n0 + 128 * h) * moe_ep_row_scale_bytes(g.b_fmt, g.K));
    s.v0 = r < rows_valid, s.v1 = r + 8 < rows_valid;
    return s;
}

/* The products s_x * s_w of K block kb for rows r (s0) and r + 8 (s1). */
__device__ __forceinline__ void fp8_scales_at(const fp8_block_scales &s, int kb, float &s0, float &s1)
{
    float w = __ldcg(s.sw + kb);
    s0 = s.v0 ? __ldcg(s.sa0 + kb) * w : 0.0f, s1 = s.v1 ? __ldcg(s.sa1 + kb) * w : 0.0f;
}

/* acc += part * (s0 for the fragment's row r, s1 for row r + 8). */
__device__ __forceinline__ void fp8_promote(float *acc, const float *part, float s0, float s1)
{
#pragma unroll
    for (int j = 0; j < 16; j++) {
        acc[4 * j] = fmaf(part[4 * j], s0, acc[4 * j]);
        acc[4 * j + 1] = fmaf(part[4 * j + 1], s0, acc[4 * j + 1]);
        acc[4 * j + 2] = fmaf(part[4 * j + 2], s1, acc[4 * j + 2]);
        acc[4 * j + 3] = fmaf(part[4 * j + 3], s1, acc[4 * j + 3]);
    }
}

/* K step kt of a consumer warpgroup issued: 4 x m64n128k32 into part
 * (zeroed first), committed as one group, not waited for. */
__device__ __forceinline__ void qg_issue(float *part, const uint8_t *a, const uint8_t *b)
{
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < QG_BK / 32; kk++) /* +32 bytes (2 x 16 B) per k32 step */
        wgmma_m64n128k32_e4m3(part, smem_desc(a) + 2 * kk, smem_desc(b) + 2 * kk, kk > 0 ? 1 : 0);
    wgmma_commit();
}

/* The sums of a finished wgmma group, pinned after its wait: nothing reads
 * them before it. */
__device__ __forceinline__ void qg_pin(float *part)
{
#pragma unroll
    for (int i = 0; i < 64; i++) asm volatile("" : "+f"(part[i])::"memory");
}

/* Consumer state across K steps: the ring, the scales, the promoted sums. */
struct qg_consumer {
    qg_smem *s;
    fp8_block_scales sc;
    int h;
    float s0, s1; /* scale products of the step whose sums are in flight */
};

/* K step kt (>= 1): wait for step kt - 1 (its sums in `prev`) and free its
 * stage, issue kt into `next`, then promote kt - 1 while kt runs. Freeing
 * kt - 1 before waiting for kt keeps the whole ring loading (at decode a
 * stage freed only after the next one landed cost 2-4 %). The scales of kt
 * are read before its wgmmas and used one step later. */
__device__ __forceinline__ void qg_step(const gemm_args &g, qg_consumer &c, float *acc, float *next, float *prev, int kt)
{
    const int st = kt % QG_STAGES;
    float s0, s1;
    fp8_scales_at(c.sc, kt, s0, s1);
    wgmma_wait<0>();
    qg_pin(prev);
    mbar_arrive(&c.s->empty[(kt - 1) % QG_STAGES]);
    tile_wait(g, &c.s->full[st], (kt / QG_STAGES) & 1);
    qg_issue(next, c.s->a[st], &c.s->b[st][128 * c.h * QG_BK]);
    fp8_promote(acc, prev, c.s0, c.s1);
    c.s0 = s0, c.s1 = s1;
}

/* The last K step's sums: wait for them, free the stage, promote them. */
__device__ __forceinline__ void qg_last(qg_consumer &c, float *acc, float *last, int n_k)
{
    wgmma_wait<0>();
    qg_pin(last);
    mbar_arrive(&c.s->empty[(n_k - 1) % QG_STAGES]);
    fp8_promote(acc, last, c.s0, c.s1);
}

/* A consumer warpgroup's K loop: steps in pairs so that the two sets of
 * sums stay in named registers. */
__device__ __forceinline__ void qg_k_loop(const gemm_args &g, qg_consumer &c, float *acc, int n_k)
{
    float p0[64], p1[64];
    fp8_scales_at(c.sc, 0, c.s0, c.s1);
    tile_wait(g, &c.s->full[0], 0);
    qg_issue(p0, c.s->a[0], &c.s->b[0][128 * c.h * QG_BK]);
    int kt = 1;
#pragma unroll 1
    for (; kt + 1 < n_k; kt += 2) {
        qg_step(g, c, acc, p1, p0, kt);
        qg_step(g, c, acc, p0, p1, kt + 1);
    }
    if (kt < n_k) { /* odd n_k: the last step's sums in p1 */
        qg_step(g, c, acc, p1, p0, kt);
        qg_last(c, acc, p1, n_k);
    } else {
        qg_last(c, acc, p0, n_k);
    }
}

/* Every thread of a 384-thread block calls it. smem_raw: QG_SMEM_BYTES of
 * dynamic shared memory. ta / tb: tensor maps of A ([rows][K] bytes, box
 * 64 x 128) and B ([E * N][K] bytes, box 256 x 128). The tile covers rows
 * [row0, row0 + rows_valid) of expert e and columns [n0, n0 + 256). Ends with
 * the block synchronised and shared memory free again. */
__device__ __forceinline__ void qgmma_tile(const gemm_args &g, const CUtensorMap *ta, const CUtensorMap *tb,
                                           uint8_t *smem_raw, int e, int64_t row0, int rows_valid, int n0)
{
    qg_smem &s = *(qg_smem *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    int wg = threadIdx.x / 128, t = threadIdx.x % 128, n_k = g.K / QG_BK;
    if (threadIdx.x == 0) wg_ring_init<QG_STAGES>(g, s.full, s.empty);
    __syncthreads();
    if (wg == 0) { /* producer */
        setmaxnreg_dec<QG_PRODUCER_REGS>();
        if (t == 0)
            wg_produce<QG_STAGES>(g, s.full, s.empty, s.a[0], sizeof s.a[0], s.b[0], sizeof s.b[0], ta, tb, n_k, QG_BK,
                                  (int)row0, e * g.N + n0);
        wg_registers_back_wait(); /* asleep until the consumers gave their registers back */
        setmaxnreg_inc<QG_LAUNCH_REGS>();
    } else { /* consumers: warpgroup h = wg - 1 owns columns [128 h, 128 h + 128) */
        setmaxnreg_inc<QG_CONSUMER_REGS>();
        int h = wg - 1, warp = t / 32, lane = t % 32, r = 16 * warp + lane / 4; /* rows r and r + 8 */
        qg_consumer c;
        c.s = &s, c.h = h, c.sc = fp8_scales_of(g, e, row0, rows_valid, n0, h, r);
        float acc[64];
#pragma unroll
        for (int i = 0; i < 64; i++) acc[i] = 0.0f;
        qg_k_loop(g, c, acc, n_k);
        wg_epilogue<16, QG_BM, QG_BN>(g, &s, acc, r, 128 * h, lane, row0, rows_valid, n0);
        setmaxnreg_dec<QG_LAUNCH_REGS>();
        wg_registers_back_arrive();
    }
    __syncthreads(); /* every TMA landed, every arrival made: the ring and C are free */
    if (threadIdx.x == 0) wg_ring_inval<QG_STAGES>(g, s.full, s.empty);
}

/* 1 if the GEMM can run on this tile: FP8-BLOCK operands, N % 256, K % 128. */
__host__ __device__ __forceinline__ bool qg_fits(const gemm_args &g)
{
    return g.a_fmt == MOE_EP_FORMAT_FP8_BLOCK && g.b_fmt == MOE_EP_FORMAT_FP8_BLOCK && g.N % QG_BN == 0 &&
           g.K % QG_BK == 0;
}

/* The tensor maps of one GEMM (A rows, B weights) for the tile. */
static inline moe_ep_status_t qg_make_maps(const gemm_args &g, int64_t rows_capacity, CUtensorMap *ta, CUtensorMap *tb)
{
    if (!qg_fits(g)) return MOE_EP_FAIL(MOE_EP_ERROR_INTERNAL, "the QGMMA tile takes FP8-BLOCK operands, N %% 256, K %% 128");
    MOE_EP_CHECK(tma_map_k_major(ta, g.a, rows_capacity, g.K, 1, QG_BM));
    return tma_map_k_major(tb, g.b, (int64_t)g.E * g.N, g.K, 1, QG_BN);
}

#endif
