/* Grouped GEMMs of the expert stage (first version: correctness first).
 *
 *   GEMM1: h[rows][2I] = xq[rows][H] . W13[e]^T, then a = SwiGLU(gate, up)
 *          (fp32), rounded once into the activation format -> aq[rows][I].
 *   GEMM2: y[rows][H] = aq[rows][I] . W2[e]^T, rounded once into the wire
 *          format -> y[rows][H].
 *
 * Tiles: BM = 64 rows of one expert x BN columns (256 for GEMM1: 128 gate +
 * 128 up columns of the interleaved W13; 128 for GEMM2), K in steps of 32.
 * A persistent grid walks the tiles; tile -> (expert, row block) through the
 * tile prefix of the plan.
 *
 * Operands are loaded from their stored formats and converted to bf16 in
 * shared memory (exact for every format once power-of-two / E4M3 block scales
 * are folded in; FP8-BLOCK scales are applied per 128-wide K block to an fp32
 * partial sum; the NVFP4 global scales S in the epilogue). The tensor-core
 * instruction is mma.sync m16n8k16 bf16 -> fp32: 8 warps as 2 (M) x 4 (N),
 * each warp 32 x BN/4.
 *
 * Each output element's K reduction runs in a fixed order whatever tile or
 * rank its row landed in: results are position independent. */
#include "kernels/gpu_common.cuh"

#define BM MOE_EP_GEMM_BM
#define BK 32
#define KPAD 8 /* bf16 padding per smem row: 80-byte rows, no ldmatrix conflicts */
#define THREADS 256

struct gemm_args {
    moe_ep_format_t a_fmt, b_fmt, out_fmt;
    const uint8_t *a, *a_scales;   /* [rows][K] activation rows */
    const uint8_t *b, *b_scales;   /* [experts][N][K] weights (kernel layout) */
    const float *b_gs;             /* [experts] NVFP4 S of the weights */
    float a_gs;                    /* NVFP4 S of the activation */
    uint8_t *out, *out_scales;     /* [rows][N_out] */
    float out_gs;                  /* NVFP4 S of the output (GEMM1) */
    int K, N, N_out, E;
    float swiglu_limit;
    const int32_t *expert_offset, *tile_offset;
    const uint32_t *error;
};

__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void *p)
{
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

__device__ __forceinline__ void ldmatrix_x2(uint32_t r[2], const void *p)
{
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
}

__device__ __forceinline__ void mma_bf16(float c[4], const uint32_t a[4], const uint32_t b[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* Expert of m-tile mt: the last e with tile_offset[e] <= mt. */
__device__ __forceinline__ int tile_expert(const int32_t *tile_offset, int E, int mt)
{
    int lo = 0, hi = E - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (tile_offset[mid] <= mt) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* Loads the A (BM x BK) and B (BN x BK) tiles at k0 into shared memory as bf16. */
template <int BN>
__device__ __forceinline__ void load_tiles(const gemm_args &g, int64_t row0, int rows_valid,
                                           const uint8_t *bw, const uint8_t *bws, int k0,
                                           __nv_bfloat16 (*As)[BK + KPAD], __nv_bfloat16 (*Bs)[BK + KPAD])
{
    int64_t a_rb = moe_ep_dev_row_bytes(g.a_fmt, g.K), a_sb = moe_ep_dev_scale_row_bytes(g.a_fmt, g.K);
    int64_t b_rb = moe_ep_dev_row_bytes(g.b_fmt, g.K), b_sb = moe_ep_dev_scale_row_bytes(g.b_fmt, g.K);
    for (int c = threadIdx.x; c < BM * BK / 8; c += THREADS) {
        int m = c / (BK / 8), kc = (c % (BK / 8)) * 8;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (m < rows_valid)
            v = moe_ep_load8_bf16(g.a_fmt, g.a + (row0 + m) * a_rb, g.a_scales + (row0 + m) * a_sb, k0 + kc);
        *(uint4 *)&As[m][kc] = v;
    }
    for (int c = threadIdx.x; c < BN * BK / 8; c += THREADS) {
        int n = c / (BK / 8), kc = (c % (BK / 8)) * 8;
        *(uint4 *)&Bs[n][kc] = moe_ep_load8_bf16(g.b_fmt, bw + (int64_t)n * b_rb, bws + (int64_t)n * b_sb, k0 + kc);
    }
}

/* Writes one block of an output row: encode n values v into format f at
 * element offset c of a row of N_out elements. */
__device__ __forceinline__ void store_out_block(moe_ep_format_t f, const float *v, int blk, int64_t row,
                                                int64_t N_out, int64_t c, float S, uint8_t *out,
                                                uint8_t *out_scales)
{
    uint8_t *d = out + row * moe_ep_dev_row_bytes(f, N_out);
    uint8_t *s = out_scales + row * moe_ep_dev_scale_row_bytes(f, N_out);
    if (f == MOE_EP_FORMAT_BF16) {
        for (int i = 0; i < blk; i += 2) *(uint32_t *)(d + 2 * (c + i)) = moe_ep_pack_bf16x2(v[i], v[i + 1]);
    } else if (f == MOE_EP_FORMAT_MXFP8) {
        s[c / 32] = moe_ep_mxfp8_block_encode(v, d + c);
    } else if (f == MOE_EP_FORMAT_FP8_BLOCK) {
        ((float *)s)[c / 128] = moe_ep_fp8_block_encode(v, d + c);
    } else {
        uint8_t q[16];
        if (f == MOE_EP_FORMAT_NVFP4) s[c / 16] = moe_ep_nvfp4_block_encode(v, S, q);
        else ((uint16_t *)s)[c / 16] = moe_ep_fp4_wire_block_encode(v, q);
        for (int i = 0; i < 8; i++) d[c / 2 + i] = (uint8_t)(q[2 * i] | (q[2 * i + 1] << 4));
    }
}

/* Epilogue. GEMM1 (BN = 256): C holds h; a = SwiGLU(C[m][j], C[m][128 + j]) for
 * the tile's 128 outputs, rounded to out_fmt. GEMM2 (BN = 128): C holds y,
 * rounded to the wire format. */
template <int BN>
__device__ void epilogue(const gemm_args &g, float (*C)[BN + 4], int64_t row0, int rows_valid, int n0)
{
    const bool glu = BN == 256;
    const int width = glu ? 128 : BN; /* output columns of this tile */
    int blk = g.out_fmt == MOE_EP_FORMAT_BF16 ? 8 : moe_ep_dev_block(g.out_fmt);
    int64_t c0 = glu ? n0 / 2 : n0; /* first output column */
    for (int item = threadIdx.x; item < BM * (width / blk); item += THREADS) {
        int m = item / (width / blk), j = (item % (width / blk)) * blk;
        if (m >= rows_valid) continue;
        float *v = &C[m][j];
        if (glu)
            for (int i = 0; i < blk; i++) v[i] = moe_ep_swiglu(v[i], C[m][128 + j + i], g.swiglu_limit);
        store_out_block(g.out_fmt, v, blk, row0 + m, g.N_out, c0 + j, g.out_gs, g.out, g.out_scales);
    }
}

template <int BN, bool BLOCK_SCALED>
__global__ void __launch_bounds__(THREADS) grouped_gemm(gemm_args g)
{
    extern __shared__ __align__(16) uint8_t smem[];
    typedef __nv_bfloat16 Row[BK + KPAD];
    Row *As = (Row *)smem;
    Row *Bs = (Row *)(smem + sizeof(Row) * BM);
    float(*C)[BN + 4] = (float(*)[BN + 4])smem; /* reused after the main loop */
    constexpr int WN = BN / 4, NF = WN / 8;
    if (moe_ep_dev_failed(g.error)) return;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, wm = warp & 1, wn = warp >> 1;
    int n_tiles = g.N / BN, tiles = g.tile_offset[g.E] * n_tiles;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int mt = tile / n_tiles, nt = tile % n_tiles, n0 = nt * BN;
        int e = tile_expert(g.tile_offset, g.E, mt);
        int64_t row0 = g.expert_offset[e] + (int64_t)(mt - g.tile_offset[e]) * BM;
        int rows_valid = (int)min((int64_t)BM, (int64_t)g.expert_offset[e + 1] - row0);
        int64_t b_rows = (int64_t)e * g.N + n0;
        const uint8_t *bw = g.b + b_rows * moe_ep_dev_row_bytes(g.b_fmt, g.K);
        const uint8_t *bws = g.b_scales + b_rows * moe_ep_dev_scale_row_bytes(g.b_fmt, g.K);
        float acc[2][NF][4], part[2][NF][BLOCK_SCALED ? 4 : 1];
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < NF; j++)
                for (int q = 0; q < 4; q++) {
                    acc[i][j][q] = 0.0f;
                    if (BLOCK_SCALED) part[i][j][q] = 0.0f;
                }
        for (int k0 = 0; k0 < g.K; k0 += BK) {
            __syncthreads();
            load_tiles<BN>(g, row0, rows_valid, bw, bws, k0, As, Bs);
            __syncthreads();
            for (int kk = 0; kk < BK; kk += 16) {
                uint32_t af[2][4], bf[NF][2];
                for (int i = 0; i < 2; i++) ldmatrix_x4(af[i], &As[wm * 32 + i * 16 + (lane & 15)][kk + (lane >> 4) * 8]);
                for (int j = 0; j < NF; j++) ldmatrix_x2(bf[j], &Bs[wn * WN + j * 8 + (lane & 7)][kk + ((lane >> 3) & 1) * 8]);
                for (int i = 0; i < 2; i++)
                    for (int j = 0; j < NF; j++) mma_bf16(BLOCK_SCALED ? part[i][j] : acc[i][j], af[i], bf[j]);
            }
            if (BLOCK_SCALED && (k0 + BK) % 128 == 0) {
                /* acc += part * (a scale of the row * w scale of the column) for this K block. */
                int kb = k0 / 128;
                int64_t a_sb = moe_ep_dev_scale_row_bytes(g.a_fmt, g.K), b_sb = moe_ep_dev_scale_row_bytes(g.b_fmt, g.K);
                for (int i = 0; i < 2; i++)
                    for (int h = 0; h < 2; h++) {
                        int m = wm * 32 + i * 16 + (lane >> 2) + 8 * h;
                        float sa = m < rows_valid ? moe_ep_fp8_block_row_scale(g.a_scales + (row0 + m) * a_sb, kb) : 0.0f;
                        for (int j = 0; j < NF; j++)
                            for (int q = 0; q < 2; q++) {
                                int n = wn * WN + j * 8 + (lane & 3) * 2 + q;
                                float sw = moe_ep_fp8_block_row_scale(bws + (int64_t)n * b_sb, kb);
                                acc[i][j][2 * h + q] = fmaf(part[i][j][2 * h + q], sa * sw, acc[i][j][2 * h + q]);
                                part[i][j][2 * h + q] = 0.0f;
                            }
                    }
            }
        }
        __syncthreads();
        float scale = 1.0f; /* NVFP4: undo the global scales of both operands */
        if (g.a_fmt == MOE_EP_FORMAT_NVFP4) scale = __fdiv_rn(1.0f, __fmul_rn(g.a_gs, g.b_gs[e]));
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < NF; j++)
                for (int q = 0; q < 4; q++) {
                    int m = wm * 32 + i * 16 + (lane >> 2) + 8 * (q >> 1), n = wn * WN + j * 8 + (lane & 3) * 2 + (q & 1);
                    C[m][n] = __fmul_rn(acc[i][j][q], scale);
                }
        __syncthreads();
        epilogue<BN>(g, C, row0, rows_valid, n0);
    }
}

template <int BN, bool BLOCK_SCALED>
static moe_ep_status_t launch_gemm(const gemm_args &g, int num_sms, cudaStream_t s, const char *name)
{
    size_t smem_tiles = sizeof(__nv_bfloat16) * (BK + KPAD) * (BM + BN);
    size_t smem_c = sizeof(float) * BM * (BN + 4);
    size_t smem = smem_tiles > smem_c ? smem_tiles : smem_c;
    cudaError_t e = cudaFuncSetAttribute(grouped_gemm<BN, BLOCK_SCALED>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return MOE_EP_FAIL(MOE_EP_ERROR_CUDA, "%s: %s", name, cudaGetErrorString(e));
    int per_sm = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, grouped_gemm<BN, BLOCK_SCALED>, THREADS, smem);
    if (per_sm < 1) per_sm = 1;
    grouped_gemm<BN, BLOCK_SCALED><<<num_sms * per_sm, THREADS, smem, s>>>(g);
    return moe_ep_launch_check(name);
}

extern "C" moe_ep_status_t moe_ep_launch_experts(const moe_ep_split_dims_t *d, const moe_ep_split_bufs_t *b,
                                                 moe_ep_stream_t stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    moe_ep_format_t af = moe_ep_path_act_format_dev(d->path), wf = moe_ep_path_weight_format_dev(d->path);
    gemm_args g1 = {af, wf, af, b->xq, b->xq_scales, b->w13, b->w13_scales, b->w13_gs, d->fc1_scale,
                    b->aq, b->aq_scales, d->fc2_scale, d->H, 2 * d->I, d->I, d->E, d->swiglu_limit,
                    b->expert_offset, b->tile_offset, b->error};
    bool bs = af == MOE_EP_FORMAT_FP8_BLOCK;
    moe_ep_status_t st = bs ? launch_gemm<256, true>(g1, d->num_sms, s, "grouped_gemm1_swiglu")
                            : launch_gemm<256, false>(g1, d->num_sms, s, "grouped_gemm1_swiglu");
    if (st != MOE_EP_SUCCESS) return st;
    gemm_args g2 = {af, wf, moe_ep_wire_format_dev(d->wire), b->aq, b->aq_scales, b->w2, b->w2_scales, b->w2_gs,
                    d->fc2_scale, b->y, b->y_scales, 1.0f, d->I, d->H, d->H, d->E, 0.0f,
                    b->expert_offset, b->tile_offset, b->error};
    return bs ? launch_gemm<128, true>(g2, d->num_sms, s, "grouped_gemm2_wire")
              : launch_gemm<128, false>(g2, d->num_sms, s, "grouped_gemm2_wire");
}
