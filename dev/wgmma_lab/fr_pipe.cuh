/* The register tile's A16 form as one pipeline over a block's tiles (the
 * mega kernel's NVFP4 GEMM runs, mega_runs.cuh; the kernel lab's
 * dev/wgmma_lab/rs_pipe.cu): each tile's epilogue runs beside the next
 * tile's K loop instead of after it. Where the 128-row A16 tile's time went
 * (lab stamps at 1536 rows an expert): its epilogue, 13 % of GEMM1's tile and
 * 17 % of GEMM2's, and the consumers' waits for a ring refilled only after
 * it (the C tile reuses the rings).
 *
 *   - Consumer warpgroup h owns weight rows [64 h, 64 h + 64) of each
 *     128-row half of the tile's 256 (its block 0 in the gate half, its
 *     block 1 (fr_block's B = 2) in the up half), so a thread holds gate and
 *     up of the same output element: GEMM1's SwiGLU runs in registers and
 *     only 128 columns (64 KB of fp32) go through shared memory, in a C
 *     buffer of their own beside the rings. GEMM2's 256 columns go through
 *     it in two halves.
 *   - The producer's thread 0 streams the fp16 stages and the weights of
 *     every tile (stage counter kg over the tiles), never waiting for an
 *     epilogue.
 *   - Warps 1-3 of the producer warpgroup (96 threads: FR_PIPE_EPI) run each
 *     tile's epilogue from the C buffer (c_full / c_empty) while the
 *     consumers run the next tile.
 * The same bits as fp8_rs_tile's A16 form: each output element is the same
 * m64nNk16 chain, SwiGLU and the encoders the same functions (the lab
 * compares the bytes). Kernel lab (H100, NVFP4, flash shapes): GEMM1 at 1536
 * rows an expert 0.93x of split's tile and 0.87x of mega's (its epilogue
 * after the tile on 384 threads), GEMM2 0.97x / 0.93x, at 96 rows 0.95x /
 * 0.86x and 0.99x / 0.90x (docs/benchmarks.md). */
#ifndef MOE_EP_FR_PIPE_CUH
#define MOE_EP_FR_PIPE_CUH

#include "kernels/sm90/fp8_rs_tile.cuh"

/* Rings: 3 fp16 stages and 2 raw weight stages (211 KB with the C buffer;
 * the lab's best of (2, 4), (2, 3), (3, 2)). */
#ifndef FR_PIPE_CVT
#define FR_PIPE_CVT 3
#endif
#ifndef FR_PIPE_RAW
#define FR_PIPE_RAW 2
#endif
#define FR_PIPE_CP 132  /* the C buffer's pitch in floats: 128 columns + 4 (as the tile's 256 + 4) */
#define FR_PIPE_EPI 96  /* the epilogue's threads: the producer warpgroup's warps 1-3 */
#define FR_PIPE_Q 4     /* tile descriptors in flight (the epilogue runs a tile behind the consumers) */

template <int FMT>
struct fr_pipe_smem {
    static constexpr int RAW = FR_PIPE_RAW, CVT = FR_PIPE_CVT, MREC = FR_WREC_WORDS(FMT);
    __half a[CVT][2][128 * 64];            /* fp16 activation stages, by TMA (two 64-wide swizzle atoms) */
    uint8_t rb[RAW][FR_BN * FR_WROW(FMT)]; /* raw weights, 256 rows a stage */
    uint32_t wrec[RAW][MREC];              /* the weights' records (rs_mults.cuh) */
    float C[128][FR_PIPE_CP];              /* the epilogue's 128 columns */
    uint64_t raw_full[RAW], raw_empty[RAW], cvt_full[CVT], cvt_empty[CVT], c_full, c_empty;
    uint64_t q_full[FR_PIPE_Q], q_empty[FR_PIPE_Q]; /* the descriptor queue (the mega runs) */
    int32_t q[FR_PIPE_Q][8];               /* GEMM (1, 2; 0: the run ends), e, mt, row0, rows_valid, n0, the
                                              sums' scale (fr_pipe_scale, float bits), and 1 for the run's last
                                              tile (written before its last loads: seen after them) */
};
#define FR_PIPE_SMEM_BYTES(FMT) (sizeof(fr_pipe_smem<FMT>) + 1024)

/* Thread 0: the rings' barriers (the consumers free each stage: 256 arrivals; C: 256 stores in, FR_PIPE_EPI out). */
template <int FMT>
__device__ __forceinline__ void fr_pipe_init(fr_pipe_smem<FMT> &s)
{
    for (int i = 0; i < FR_PIPE_RAW; i++) mbar_init(&s.raw_full[i], 1), mbar_init(&s.raw_empty[i], 256);
    for (int i = 0; i < FR_PIPE_CVT; i++) mbar_init(&s.cvt_full[i], 1), mbar_init(&s.cvt_empty[i], 256);
    mbar_init(&s.c_full, 256), mbar_init(&s.c_empty, FR_PIPE_EPI);
    for (int i = 0; i < FR_PIPE_Q; i++) mbar_init(&s.q_full[i], 1), mbar_init(&s.q_empty[i], FR_PIPE_EPI);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

template <int FMT>
__device__ __forceinline__ void fr_pipe_inval(fr_pipe_smem<FMT> &s)
{
    for (int i = 0; i < FR_PIPE_RAW; i++) mbar_inval(&s.raw_full[i]), mbar_inval(&s.raw_empty[i]);
    for (int i = 0; i < FR_PIPE_CVT; i++) mbar_inval(&s.cvt_full[i]), mbar_inval(&s.cvt_empty[i]);
    mbar_inval(&s.c_full), mbar_inval(&s.c_empty);
    for (int i = 0; i < FR_PIPE_Q; i++) mbar_inval(&s.q_full[i]), mbar_inval(&s.q_empty[i]);
}

/* Each tile's stages start at slot 0 of both rings (slot kt % ring: a
 * function of the K step alone, so that the consumers' wgmma descriptors
 * stay in uniform registers; a stage counter carried over the tiles made
 * ptxas move each by R2UR, 30 a stage). So each side keeps the phase of
 * every slot in a mask instead (bit slot: weights; bit 8 + slot: fp16 rows),
 * flipped at each use. */
#define FR_PIPE_RAW_BIT(st) (1u << (st))
#define FR_PIPE_CVT_BIT(cs) (1u << (8 + (cs)))

/* Thread 0: K steps kt0 .. kt1 - 1 of a tile (rows row0.., weight rows b_row..); ph: its phases. */
template <int FMT>
__device__ __forceinline__ void fr_pipe_load_steps(fr_pipe_smem<FMT> &s, const gemm_args &g, const CUtensorMap *ta,
                                                   const CUtensorMap *tb, int row0, int64_t b_row, int kt0, int kt1,
                                                   uint32_t &ph)
{
    const int n_k = g.K / FR_BK;
#pragma unroll 1
    for (int kt = kt0; kt < kt1; kt++) {
        const int cs = kt % FR_PIPE_CVT, st = kt % FR_PIPE_RAW;
        tile_wait(g, &s.cvt_empty[cs], (ph & FR_PIPE_CVT_BIT(cs)) == 0);
        mbar_expect_tx(&s.cvt_full[cs], 128 * 256);
        tma_load_2d(s.a[cs][0], ta, &s.cvt_full[cs], kt * FR_BK, row0);
        tma_load_2d(s.a[cs][1], ta, &s.cvt_full[cs], kt * FR_BK + 64, row0);
        tile_wait(g, &s.raw_empty[st], (ph & FR_PIPE_RAW_BIT(st)) == 0 ? 1 : 0);
        mbar_expect_tx(&s.raw_full[st], FR_BN * FR_WROW(FMT) + FR_WREC_BYTES(FMT));
        tma_load_2d(s.rb[st], tb, &s.raw_full[st], kt * FR_WROW(FMT), (int)b_row);
        bulk_load(s.wrec[st], g.b_mult + ((b_row / FR_BN) * n_k + kt) * FR_WREC_WORDS(FMT), FR_WREC_STAGE(FMT),
                  &s.raw_full[st]);
        ph ^= FR_PIPE_CVT_BIT(cs) | FR_PIPE_RAW_BIT(st);
    }
}

/* A consumer thread's addresses: fr_addr_of's, for weight rows 64 h + g (block 0; block 1 at B = 2: + 128). */
template <int FMT>
__device__ __forceinline__ fr_addr fr_pipe_addr_of(const fr_pipe_smem<FMT> &s, int h, int g, int q)
{
    fr_addr a;
    a.frag = smem_u32(s.rb[0]) + (64 * h + g) * FR_WROW(FMT) + 4 * q;
    a.act = smem_u32(s.a[0][0]);
    a.sxw = 0; /* (NVFP4: no promotion, no row references) */
    a.wm = smem_u32(&s.wrec[0][0]) + (64 * h + g) * FR_WREC_MULT(FMT);
    a.sw = smem_u32(&s.wrec[0][0]) + 4 * FR_BN * FR_WREC_MULT(FMT) + (64 * h + g) * 4;
    a.sw_key = FR_E2M1(FMT) ? (g >> 1) & 3 : g & 7, a.q = q;
    return a;
}

/* The consumers' K loop of one tile (NW activation rows a wgmma); ph: their phases (fr_pipe_load_steps). */
template <int NW, int FMT>
__device__ __forceinline__ void fr_pipe_kloop(fr_pipe_smem<FMT> &s, const gemm_args &g, const fr_addr &ad,
                                              float (*acc)[64], uint32_t &ph)
{
    static_assert(FMT == RS_NVFP4, "the pipelined form: NVFP4 (no promotion, no row references)");
#pragma unroll 1
    for (int kt = 0; kt < g.K / FR_BK; kt++) {
        const int rs = kt % FR_PIPE_RAW, cs = kt % FR_PIPE_CVT;
        tile_wait(g, &s.raw_full[rs], (ph & FR_PIPE_RAW_BIT(rs)) != 0);
        tile_wait(g, &s.cvt_full[cs], (ph & FR_PIPE_CVT_BIT(cs)) != 0);
        uint32_t x[2][4], y[2][4]; /* the stage's words, blocks 128 rows apart (BSTEP 2), drained at its end */
        fr_raw r;
        fr_nv_words<2>(x, y, r, ad, rs);
        fr_nv_steps<128, NW, 2>(acc, ad, rs, cs, x, y, r);
        wgmma_wait<0>();
        mbar_arrive(&s.raw_empty[rs]);
        mbar_arrive(&s.cvt_empty[cs]);
        ph ^= FR_PIPE_CVT_BIT(cs) | FR_PIPE_RAW_BIT(rs);
    }
}

/* The whole K loop at the wgmma width the valid rows need (rows from lane 0:
 * ptxas then knows the branch warp-uniform, as fp8_rs_tile's rows). */
template <int FMT>
__device__ __forceinline__ void fr_pipe_consume(fr_pipe_smem<FMT> &s, const gemm_args &g, const fr_addr &ad,
                                                float (*acc)[64], uint32_t &ph, int rows)
{
    rows = __shfl_sync(0xFFFFFFFFu, rows, 0);
#pragma unroll
    for (int i = 0; i < 64; i++) acc[0][i] = 0.0f, acc[1][i] = 0.0f;
    if (rows <= 64) fr_pipe_kloop<64>(s, g, ad, acc, ph);
    else if (rows <= 96) fr_pipe_kloop<96>(s, g, ad, acc, ph);
    else fr_pipe_kloop<128>(s, g, ad, acc, ph);
}

/* The tile's scale of NVFP4's sums, 1 / (S_x S_w) (as fp8_rs_tile's c_scale): by the
 * producer, into the descriptor (the division's slow path, a call, in the consumers spilled). */
__device__ __forceinline__ float fr_pipe_scale(const gemm_args &g, int e)
{
    return __fdiv_rn(1.0f, __fmul_rn(g.a_gs, g.b_gs[e]));
}

/* NVFP4's sums x 2^14 x sc (fr_pipe_scale), then GEMM1's SwiGLU into acc[0]. */
__device__ __forceinline__ void fr_pipe_finish(const gemm_args &g, float (*acc)[64], float sc, bool glu)
{
#pragma unroll
    for (int i = 0; i < 64; i++)
        acc[0][i] = __fmul_rn(__fmul_rn(acc[0][i], 16384.0f), sc), acc[1][i] = __fmul_rn(__fmul_rn(acc[1][i], 16384.0f), sc);
    if (glu) {
#pragma unroll
        for (int i = 0; i < 64; i++) acc[0][i] = moe_ep_swiglu_ftz(acc[0][i], acc[1][i], g.swiglu_limit);
    }
}

/* acc's fragment (activation rows 8 j + 2 q, +1; columns c0 + g, + 8) into C. */
__device__ __forceinline__ void fr_pipe_store(float (*C)[FR_PIPE_CP], const float *acc, int c0, int g, int q)
{
#pragma unroll
    for (int j = 0; j < 16; j++) {
        const int r = 8 * j + 2 * q;
        C[r][c0 + g] = acc[4 * j], C[r + 1][c0 + g] = acc[4 * j + 1];
        C[r][c0 + g + 8] = acc[4 * j + 2], C[r + 1][c0 + g + 8] = acc[4 * j + 3];
    }
}

/* C's 128 columns of rows_valid rows into output columns c0 ..: by chunks of
 * 8 a lane, as epilogue_chunks_of (the same encoders, so the same bytes). */
template <moe_ep_format_t F>
__device__ __forceinline__ void fr_pipe_epilogue_of(const gemm_args &g, float (*C)[FR_PIPE_CP], int64_t row0, int rows_valid,
                                                    int64_t c0, int tid, int nthreads)
{
    constexpr int CHUNKS = 16, BLK = F == MOE_EP_FORMAT_BF16 ? 8 : F == MOE_EP_FORMAT_MXFP8 ? 32 : 16;
    const int64_t row_bytes = moe_ep_row_data_bytes(F, g.N_out);
    const int lane = tid & 31;
    const float inv_S = nvfp4_inv_scale(F, g.out_gs);
    const int items = min(128 * CHUNKS, (rows_valid * CHUNKS + 31) & ~31);
    for (int base = tid - lane; base < items; base += nthreads) { /* warp-uniform: shuffles inside */
        const int item = base + lane, m = item / CHUNKS, j = (item % CHUNKS) * 8;
        const float4 *p = (const float4 *)&C[m][j];
        const float4 lo = p[0], hi = p[1];
        const float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
        const enc_chunk e = encode_chunk_of(F, v, g.out_gs, inv_S);
        if (m >= rows_valid) continue;
        const int64_t c = c0 + j;
        uint8_t *d = g.out + (row0 + m) * row_bytes;
        if constexpr (F == MOE_EP_FORMAT_BF16) {
            *(uint4 *)(d + 2 * c) = e.q;
            continue;
        }
        if constexpr (F == MOE_EP_FORMAT_NVFP4) *(uint32_t *)(d + c / 2) = e.q.x; /* E2M1 nibbles */
        else *(uint2 *)(d + c) = make_uint2(e.q.x, e.q.y);                      /* E4M3 bytes */
        if (c % BLK) continue;
        (g.out_scales + (row0 + m) * g.out_scale_stride)[c / BLK] = (uint8_t)e.scale;
    }
}

/* The outputs the pipelined form's epilogue writes: GEMM1's NVFP4, GEMM2's bf16 or MXFP8 (not the FP4 wire). */
__device__ __forceinline__ bool fr_pipe_out_ok(moe_ep_format_t f, bool glu)
{
    return glu ? f == MOE_EP_FORMAT_NVFP4 : f == MOE_EP_FORMAT_BF16 || f == MOE_EP_FORMAT_MXFP8;
}

/* Half `half` of a tile's epilogue (GEMM1: its only one) by thread tid of nthreads. */
__device__ __forceinline__ void fr_pipe_epilogue(const gemm_args &g, float (*C)[FR_PIPE_CP], int64_t row0, int rows_valid,
                                                 int n0, int half, int tid, int nthreads)
{
    if (g.N != g.N_out) fr_pipe_epilogue_of<MOE_EP_FORMAT_NVFP4>(g, C, row0, rows_valid, n0 / 2, tid, nthreads);
    else if (g.out_fmt == MOE_EP_FORMAT_BF16) fr_pipe_epilogue_of<MOE_EP_FORMAT_BF16>(g, C, row0, rows_valid, n0 + 128 * half, tid, nthreads);
    else fr_pipe_epilogue_of<MOE_EP_FORMAT_MXFP8>(g, C, row0, rows_valid, n0 + 128 * half, tid, nthreads);
}

/* The epilogue's threads with the consumers (the run's last tile) and their barrier. */
#define FR_PIPE_ALL (FR_PIPE_EPI + 256)
__device__ __forceinline__ void fr_pipe_all_barrier() { asm volatile("bar.sync 7, %0;\n" ::"n"(FR_PIPE_ALL) : "memory"); }

/* Consumer thread t of warpgroup h: a finished tile's halves into C, each
 * once the epilogue gave C back (nc: C fills so far, counted on). LAST: the
 * run's last tile (nothing left to overlap its epilogue): the consumers run
 * it beside warps 1-3, then meet them (fr_pipe_all_barrier) so that its done
 * counter follows every store. */
__device__ __forceinline__ void fr_pipe_hand_over(fr_pipe_smem<RS_NVFP4> &s, const gemm_args &g, float (*acc)[64], bool glu,
                                                  int h, int t, int &nc, bool last, int row0, int rows_valid, int n0)
{
    const int lane = t % 32, g8 = 16 * (t / 32) + lane / 4, q = lane % 4;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        if (glu && half) break;
        tile_wait(g, &s.c_empty, (nc & 1) ^ 1);
        fr_pipe_store(s.C, acc[half], 64 * h, g8, q);
        mbar_arrive(&s.c_full); /* release: the stores before it */
        if (last) {
            tile_wait(g, &s.c_full, nc & 1); /* every consumer's stores */
            fr_pipe_epilogue(g, s.C, row0, rows_valid, n0, half, FR_PIPE_EPI + 128 * h + t, FR_PIPE_ALL);
            wg_consumer_barrier(); /* every consumer done reading C before the next half overwrites it */
        }
        nc++;
    }
    if (last) fr_pipe_all_barrier();
}

/* Epilogue thread u of FR_PIPE_EPI: a tile's halves from C (LAST_OF: read
 * once the first half is in, the run's last tile: with the consumers), then
 * the barrier its done counter's release follows. */
template <typename LAST_OF>
__device__ __forceinline__ void fr_pipe_epilogue_tile(fr_pipe_smem<RS_NVFP4> &s, const gemm_args &g, int row0, int rows_valid,
                                                      int n0, bool glu, int u, int &nc, LAST_OF last_of)
{
    bool last = false;
    for (int half = 0; half < (glu ? 1 : 2); half++, nc++) {
        tile_wait(g, &s.c_full, nc & 1);
        if (half == 0) last = last_of();
        fr_pipe_epilogue(g, s.C, row0, rows_valid, n0, half, u, last ? FR_PIPE_ALL : FR_PIPE_EPI);
        mbar_arrive(&s.c_empty);
    }
    if (last) fr_pipe_all_barrier();
    else asm volatile("bar.sync 6, %0;\n" ::"n"(FR_PIPE_EPI) : "memory");
}

#endif
