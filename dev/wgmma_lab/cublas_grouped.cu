/* Kernel lab: what cuBLAS does with the EP8 slice's two bf16 GEMMs, as a yardstick for the
 * library's bf16 tiles (issue #4's 1.25x of the floor above T = 512).
 *
 * For one geometry and T tokens, the slice's rows per expert come from the bench's own
 * routing (tools/synth.c, the slice's seed and first set). GEMM1 is rows x 2I x H, GEMM2
 * rows x H x I, bf16 in and out, fp32 sums; weights [N][K] as the checkpoint holds them.
 * Forms, each timed sustained (1500 ms of it first, then the median of 20):
 *   dense    one GEMM over all rows (one expert holding every row: no partial tiles);
 *   batched  strided batched, every expert the mean rows (rounded up): equal experts;
 *   grouped  cublasGemmGroupedBatchedEx with each expert's own rows;
 *   loop     one cublasGemmEx an expert, the same rows, one stream.
 * Printed: us of GEMM1 + GEMM2 and TFLOP/s over the real rows' FLOPs (2 rows 3 H I).
 *
 * Build (device or CI machine):
 *   nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -I../../tools -o ../../build-carry/cublas_lab \
 *     cublas_grouped.cu ../../tools/synth.c -lcublas
 * Run: cublas_lab GEOMETRY T [T ...], GEOMETRY flash or pro; CUBLAS_LAB_ONCE=1 in the
 * environment runs each form once, untimed (for Nsight Compute: dev/ncu_cublas.sh). */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern "C" {
#include "synth.h"
}

static void ck(cudaError_t e, const char *what, int line)
{
    if (e != cudaSuccess) printf("CUDA error %s at line %d: %s\n", what, line, cudaGetErrorString(e)), exit(1);
}
static void cb_ok(cublasStatus_t s, const char *what, int line)
{
    if (s != CUBLAS_STATUS_SUCCESS) printf("cuBLAS error %d at line %d: %s\n", (int)s, line, what), exit(1);
}
#define CK(x) ck((x), #x, __LINE__)
#define CB(x) cb_ok((x), #x, __LINE__)

enum { MAX_E = 64, FORMS = 4 };
static const char *form_name[FORMS] = {"dense", "batched", "grouped", "loop"};

struct lab {
    int H, I, E8, K;
    int rows[MAX_E], total, mean_up;
    __nv_bfloat16 *x, *w13, *w2, *h, *y; /* x/h/y sized for E8 x max(rows) rows */
    size_t slot;                          /* rows of one expert's slot in x, h, y */
    cublasHandle_t cb;
    /* grouped: device pointer arrays, GEMM1 then GEMM2 */
    const void **dA1, **dB1, **dA2, **dB2;
    void **dC1, **dC2;
};

__global__ void fill(__nv_bfloat16 *p, size_t n, uint32_t seed)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t v = (uint32_t)i * 2654435761u ^ seed;
        v ^= v >> 16, v *= 0x7feb352d, v ^= v >> 15;
        p[i] = __float2bfloat16(((float)(v & 0xFFFF) / 65536.0f - 0.5f) * 0.1f);
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* C[M][N] = A[M][K] W[N][K]^T in row-major terms: column-major C^T = W^T' A^T'. */
static void gemm(struct lab *L, const __nv_bfloat16 *A, const __nv_bfloat16 *W, __nv_bfloat16 *C, int M, int N,
                 int K)
{
    float one = 1.0f, zero = 0.0f;
    CB(cublasGemmEx(L->cb, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, W, CUDA_R_16BF, K, A, CUDA_R_16BF, K, &zero, C,
                    CUDA_R_16BF, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

static void run_batched(struct lab *L, int M)
{
    float one = 1.0f, zero = 0.0f;
    long long sx = (long long)L->slot * L->H, sh = (long long)L->slot * 2 * L->I;
    CB(cublasGemmStridedBatchedEx(L->cb, CUBLAS_OP_T, CUBLAS_OP_N, 2 * L->I, M, L->H, &one, L->w13, CUDA_R_16BF,
                                  L->H, 2ll * L->I * L->H, L->x, CUDA_R_16BF, L->H, sx, &zero, L->h, CUDA_R_16BF,
                                  2 * L->I, sh, L->E8, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    /* GEMM2 reads the first I columns of h (the SwiGLU's output width), ld 2I */
    CB(cublasGemmStridedBatchedEx(L->cb, CUBLAS_OP_T, CUBLAS_OP_N, L->H, M, L->I, &one, L->w2, CUDA_R_16BF, L->I,
                                  (long long)L->H * L->I, L->h, CUDA_R_16BF, 2 * L->I, sh, &zero, L->y, CUDA_R_16BF,
                                  L->H, sx, L->E8, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

static void run_grouped(struct lab *L)
{
    static cublasOperation_t ta[MAX_E], tb[MAX_E];
    static int m1[MAX_E], n1[MAX_E], k1[MAX_E], m2[MAX_E], n2[MAX_E], k2[MAX_E], size[MAX_E];
    static int lda1[MAX_E], ldb1[MAX_E], ldc1[MAX_E], lda2[MAX_E], ldb2[MAX_E], ldc2[MAX_E];
    static float alpha[MAX_E], beta[MAX_E];
    int G = 0;
    for (int e = 0; e < L->E8; e++) {
        if (L->rows[e] == 0) continue;
        ta[G] = CUBLAS_OP_T, tb[G] = CUBLAS_OP_N, size[G] = 1, alpha[G] = 1.0f, beta[G] = 0.0f;
        m1[G] = 2 * L->I, n1[G] = L->rows[e], k1[G] = L->H, lda1[G] = L->H, ldb1[G] = L->H, ldc1[G] = 2 * L->I;
        m2[G] = L->H, n2[G] = L->rows[e], k2[G] = L->I, lda2[G] = L->I, ldb2[G] = 2 * L->I, ldc2[G] = L->H;
        G++;
    }
    CB(cublasGemmGroupedBatchedEx(L->cb, ta, tb, m1, n1, k1, alpha, L->dA1, CUDA_R_16BF, lda1, L->dB1, CUDA_R_16BF,
                                  ldb1, beta, L->dC1, CUDA_R_16BF, ldc1, G, size, CUBLAS_COMPUTE_32F));
    CB(cublasGemmGroupedBatchedEx(L->cb, ta, tb, m2, n2, k2, alpha, L->dA2, CUDA_R_16BF, lda2, L->dB2, CUDA_R_16BF,
                                  ldb2, beta, L->dC2, CUDA_R_16BF, ldc2, G, size, CUBLAS_COMPUTE_32F));
}

static void run_form(struct lab *L, int f)
{
    size_t sx = L->slot * L->H, sh = L->slot * 2 * L->I;
    if (f == 0) {
        gemm(L, L->x, L->w13, L->h, L->total, 2 * L->I, L->H);
        /* GEMM2 as one dense GEMM over all rows, ld of h is 2I */
        float one = 1.0f, zero = 0.0f;
        CB(cublasGemmEx(L->cb, CUBLAS_OP_T, CUBLAS_OP_N, L->H, L->total, L->I, &one, L->w2, CUDA_R_16BF, L->I, L->h,
                        CUDA_R_16BF, 2 * L->I, &zero, L->y, CUDA_R_16BF, L->H, CUBLAS_COMPUTE_32F,
                        CUBLAS_GEMM_DEFAULT));
    } else if (f == 1) {
        run_batched(L, L->mean_up);
    } else if (f == 2) {
        run_grouped(L);
    } else {
        float one = 1.0f, zero = 0.0f;
        for (int e = 0; e < L->E8; e++)
            if (L->rows[e]) gemm(L, L->x + e * sx, L->w13 + (size_t)e * 2 * L->I * L->H, L->h + e * sh, L->rows[e],
                                 2 * L->I, L->H);
        for (int e = 0; e < L->E8; e++)
            if (L->rows[e])
                CB(cublasGemmEx(L->cb, CUBLAS_OP_T, CUBLAS_OP_N, L->H, L->rows[e], L->I, &one,
                                L->w2 + (size_t)e * L->H * L->I, CUDA_R_16BF, L->I, L->h + e * sh, CUDA_R_16BF,
                                2 * L->I, &zero, L->y + e * sx, CUDA_R_16BF, L->H, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT));
    }
}

static int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* 1500 ms of the form back to back, then the median of 20 event-timed runs (us). */
static float time_form(struct lab *L, int f)
{
    if (getenv("CUBLAS_LAB_ONCE")) { /* under a profiler: each form once, untimed */
        run_form(L, f);
        CK(cudaDeviceSynchronize());
        return 0.0f;
    }
    double t0 = now_s();
    while (now_s() - t0 < 1.5) {
        for (int i = 0; i < 5; i++) run_form(L, f);
        CK(cudaDeviceSynchronize());
    }
    cudaEvent_t ev[21];
    for (int i = 0; i < 21; i++) CK(cudaEventCreate(&ev[i]));
    CK(cudaEventRecord(ev[0], 0));
    for (int i = 0; i < 20; i++) run_form(L, f), CK(cudaEventRecord(ev[i + 1], 0));
    CK(cudaEventSynchronize(ev[20]));
    float ms[20];
    for (int i = 0; i < 20; i++) CK(cudaEventElapsedTime(&ms[i], ev[i], ev[i + 1]));
    for (int i = 0; i < 21; i++) CK(cudaEventDestroy(ev[i]));
    qsort(ms, 20, sizeof(float), cmp_f);
    return 1000.0f * 0.5f * (ms[9] + ms[10]);
}

static void setup_pointers(struct lab *L)
{
    const void *hA1[MAX_E], *hB1[MAX_E], *hA2[MAX_E], *hB2[MAX_E];
    void *hC1[MAX_E], *hC2[MAX_E];
    size_t sx = L->slot * L->H, sh = L->slot * 2 * L->I;
    int G = 0;
    for (int e = 0; e < L->E8; e++) {
        if (L->rows[e] == 0) continue;
        hA1[G] = L->w13 + (size_t)e * 2 * L->I * L->H, hB1[G] = L->x + e * sx, hC1[G] = L->h + e * sh;
        hA2[G] = L->w2 + (size_t)e * L->H * L->I, hB2[G] = L->h + e * sh, hC2[G] = L->y + e * sx;
        G++;
    }
    size_t b = sizeof(void *) * MAX_E;
    CK(cudaMalloc((void **)&L->dA1, b)), CK(cudaMalloc((void **)&L->dB1, b)), CK(cudaMalloc((void **)&L->dC1, b));
    CK(cudaMalloc((void **)&L->dA2, b)), CK(cudaMalloc((void **)&L->dB2, b)), CK(cudaMalloc((void **)&L->dC2, b));
    CK(cudaMemcpy(L->dA1, hA1, b, cudaMemcpyHostToDevice)), CK(cudaMemcpy(L->dB1, hB1, b, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(L->dC1, hC1, b, cudaMemcpyHostToDevice)), CK(cudaMemcpy(L->dA2, hA2, b, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(L->dB2, hB2, b, cudaMemcpyHostToDevice)), CK(cudaMemcpy(L->dC2, hC2, b, cudaMemcpyHostToDevice));
}

static void run_tokens(struct lab *L, int T)
{
    int maxT = 8192;
    int32_t *ids = (int32_t *)malloc(sizeof(int32_t) * maxT * L->K);
    float *w = (float *)malloc(sizeof(float) * maxT * L->K);
    synth_routing(ids, w, maxT, L->K, L->E8, 1 /* SLICE_SEED */, (1ull << 41) + 0);
    memset(L->rows, 0, sizeof(L->rows));
    for (int j = 0; j < T * L->K; j++) L->rows[ids[j]]++;
    free(ids), free(w);
    int mx = 0;
    L->total = 0;
    for (int e = 0; e < L->E8; e++) L->total += L->rows[e], mx = L->rows[e] > mx ? L->rows[e] : mx;
    L->mean_up = (L->total + L->E8 - 1) / L->E8;
    L->slot = (size_t)(mx > L->mean_up ? mx : L->mean_up);
    size_t nx = L->slot * L->E8 * L->H, nh = L->slot * L->E8 * 2 * L->I;
    if ((size_t)L->total * L->H > nx) nx = (size_t)L->total * L->H;
    CK(cudaMalloc(&L->x, nx * 2)), CK(cudaMalloc(&L->h, nh * 2)), CK(cudaMalloc(&L->y, nx * 2));
    fill<<<1024, 256>>>(L->x, nx, 7), fill<<<1024, 256>>>(L->h, nh, 9);
    CK(cudaGetLastError());
    setup_pointers(L);
    double flop = 2.0 * L->total * 3.0 * L->H * L->I;
    printf("T %d: %d rows over %d experts (mean %.1f, max %d)\n", T, L->total, L->E8, (double)L->total / L->E8, mx);
    for (int f = 0; f < FORMS; f++) {
        float us = time_form(L, f);
        printf("  %-8s %10.1f us  %6.1f TFLOP/s\n", form_name[f], us, flop / us * 1e-6);
    }
    CK(cudaFree(L->x)), CK(cudaFree(L->h)), CK(cudaFree(L->y));
    CK(cudaFree(L->dA1)), CK(cudaFree(L->dB1)), CK(cudaFree(L->dC1));
    CK(cudaFree(L->dA2)), CK(cudaFree(L->dB2)), CK(cudaFree(L->dC2));
}

int main(int argc, char **argv)
{
    if (argc < 3) return printf("usage: cublas_lab flash|pro T [T ...]\n"), 2;
    struct lab L;
    memset(&L, 0, sizeof(L));
    int pro = strcmp(argv[1], "pro") == 0;
    L.H = pro ? 7168 : 4096, L.I = pro ? 3072 : 2048, L.E8 = (pro ? 384 : 256) / 8, L.K = 6;
    size_t n13 = (size_t)L.E8 * 2 * L.I * L.H, n2 = (size_t)L.E8 * L.H * L.I;
    CK(cudaMalloc(&L.w13, n13 * 2)), CK(cudaMalloc(&L.w2, n2 * 2));
    fill<<<1024, 256>>>(L.w13, n13, 3), fill<<<1024, 256>>>(L.w2, n2, 5);
    CK(cudaGetLastError());
    CB(cublasCreate(&L.cb));
    printf("cublas_lab %s: H %d I %d experts %d top-%d; sustained, median of 20\n", argv[1], L.H, L.I, L.E8, L.K);
    for (int i = 2; i < argc; i++) run_tokens(&L, atoi(argv[i]));
    CB(cublasDestroy(L.cb));
    CK(cudaFree(L.w13)), CK(cudaFree(L.w2));
    return 0;
}
