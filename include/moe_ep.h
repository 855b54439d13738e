/*
 * moe_ep: one Mixture-of-Experts layer with expert parallelism on NVIDIA GPUs.
 *
 * The whole public C API. Every function returns a moe_ep_status_t; outputs go
 * through pointers. On failure moe_ep_last_error() gives a message with detail
 * (thread-local, valid until the next failing call on the same thread) and
 * outputs are left untouched.
 *
 * Objects:
 *   moe_ep_group_t  an EP group of R ranks. An emulated group holds all R ranks
 *                   in this process (on the CPU, or on one GPU); a forward call
 *                   then carries the inputs of every rank at once.
 *   moe_ep_layer_t  one MoE layer on a group: geometry, compute path, combine
 *                   wire format, backend, weights, and the buffers it needs.
 *
 * Parameter structs start with `size` (set by their ..._INIT macro) so the
 * library can check the caller was built against the same header.
 */
#ifndef MOE_EP_H
#define MOE_EP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define MOE_EP_API
#else
#define MOE_EP_API __attribute__((visibility("default")))
#endif

#define MOE_EP_VERSION_MAJOR 0
#define MOE_EP_VERSION_MINOR 1
#define MOE_EP_VERSION_PATCH 0

/* CUDA stream handle without including CUDA headers (same type as cudaStream_t). */
typedef struct CUstream_st *moe_ep_stream_t;

typedef enum moe_ep_status {
    MOE_EP_SUCCESS = 0,
    MOE_EP_ERROR_INVALID_ARGUMENT = 1, /* bad pointer, size, enum, or state       */
    MOE_EP_ERROR_OUT_OF_MEMORY = 2,    /* host or device allocation failed        */
    MOE_EP_ERROR_UNSUPPORTED = 3,      /* valid request this build/device can't do */
    MOE_EP_ERROR_CUDA = 4,             /* a CUDA runtime/driver call failed       */
    MOE_EP_ERROR_NCCL = 5,             /* an NCCL call failed                      */
    MOE_EP_ERROR_TIMEOUT = 6,          /* a bounded wait inside a kernel expired   */
    MOE_EP_ERROR_INTERNAL = 7          /* a bug in moe_ep: please report           */
} moe_ep_status_t;

/* Element formats of the host codec (moe_ep_quantize / moe_ep_dequantize) and of
 * pre-quantized weights. Exact rules: docs/formats.md. */
typedef enum moe_ep_format {
    MOE_EP_FORMAT_BF16 = 0,      /* 2 bytes per element, no scales                     */
    MOE_EP_FORMAT_MXFP8 = 1,     /* E4M3 + UE8M0 scale byte per 32                     */
    MOE_EP_FORMAT_NVFP4 = 2,     /* E2M1 + E4M3 scale byte per 16 + fp32 global scale  */
    MOE_EP_FORMAT_MXFP4 = 3,     /* E2M1 + UE8M0 scale byte per 32                     */
    MOE_EP_FORMAT_FP8_BLOCK = 4, /* E4M3 + fp32 scale per 128 (4 bytes per block)      */
    MOE_EP_FORMAT_FP4_WIRE = 5,  /* E2M1 + bf16 scale per 16 (2 bytes per block)       */
    MOE_EP_FORMAT_COUNT_ = 6
} moe_ep_format_t;

/* Compute paths: weight format x activation format. */
typedef enum moe_ep_path {
    MOE_EP_PATH_BF16 = 0,      /* bf16 weights, bf16 activations                         */
    MOE_EP_PATH_MXFP8 = 1,     /* W8A8: MXFP8 weights and activations                    */
    MOE_EP_PATH_NVFP4 = 2,     /* W4A4: NVFP4 weights and activations                    */
    MOE_EP_PATH_W4A8 = 3,      /* MXFP4 weights, MXFP8 activations                       */
    MOE_EP_PATH_FP8_BLOCK = 4, /* DeepSeek FP8: 128x128 weight blocks, 1x128 activations */
    MOE_EP_PATH_COUNT_ = 5
} moe_ep_path_t;

/* Format of the expert outputs y on their way back to the token's rank. */
typedef enum moe_ep_wire {
    MOE_EP_WIRE_BF16 = 0,
    MOE_EP_WIRE_MXFP8 = 1, /* MXFP8 along H, blocks of 32                     */
    MOE_EP_WIRE_FP4 = 2,   /* MOE_EP_FORMAT_FP4_WIRE along H, blocks of 16    */
    MOE_EP_WIRE_COUNT_ = 3
} moe_ep_wire_t;

typedef enum moe_ep_backend {
    MOE_EP_BACKEND_REFERENCE = 0, /* CPU oracle: host pointers everywhere              */
    MOE_EP_BACKEND_SPLIT = 1,     /* GPU: communication, then separate kernels         */
    MOE_EP_BACKEND_MEGA = 2,      /* GPU: one persistent kernel per forward (H % 256 == 0) */
    MOE_EP_BACKEND_COUNT_ = 3
} moe_ep_backend_t;

/* ------------------------------------------------------------------------- */
/* Status and errors                                                          */

MOE_EP_API const char *moe_ep_status_string(moe_ep_status_t status);
/* Detail of the last failure on this thread ("" if none). */
MOE_EP_API const char *moe_ep_last_error(void);
MOE_EP_API void moe_ep_version(int *major, int *minor, int *patch);

/* ------------------------------------------------------------------------- */
/* Host codec (bit-exact with the device codec)                               */
/*
 * x and out: [rows][cols] fp32 row-major; cols a multiple of the format's block
 * (32 MX, 16 NVFP4 and FP4_WIRE, 128 FP8_BLOCK; any for BF16).
 * data: FP8 formats [rows][cols] bytes, FP4 formats [rows][cols/2] bytes (element
 *       2j in the low nibble of byte j), BF16 [rows][cols] uint16 little-endian.
 * scales: [rows][cols/block] entries of 1 byte (MX, NVFP4), 2 bytes (FP4_WIRE,
 *       bf16) or 4 bytes (FP8_BLOCK, fp32); NULL for BF16.
 * global_scale: NVFP4 encode scale S (> 0, finite); ignored otherwise.
 */
MOE_EP_API moe_ep_status_t moe_ep_quantize(moe_ep_format_t format, const float *x, int64_t rows,
                                           int64_t cols, float global_scale, uint8_t *data,
                                           uint8_t *scales);
MOE_EP_API moe_ep_status_t moe_ep_dequantize(moe_ep_format_t format, const uint8_t *data,
                                             const uint8_t *scales, int64_t rows, int64_t cols,
                                             float global_scale, float *out);
/* FP8-BLOCK weights: one fp32 scale per 128x128 tile. rows and cols multiples of
 * 128; scales [rows/128][cols/128] fp32. Dequantize with the same layout. */
MOE_EP_API moe_ep_status_t moe_ep_quantize_fp8_block_weight(const float *x, int64_t rows,
                                                            int64_t cols, uint8_t *data,
                                                            float *scales);
MOE_EP_API moe_ep_status_t moe_ep_dequantize_fp8_block_weight(const uint8_t *data,
                                                              const float *scales, int64_t rows,
                                                              int64_t cols, float *out);
/* NVFP4 encode scale for a tensor with absolute maximum amax: 2688 / amax
 * (448 * 6 / amax), or 1.0f when amax is 0 or not finite. */
MOE_EP_API float moe_ep_nvfp4_global_scale(float amax);

/* ------------------------------------------------------------------------- */
/* Groups                                                                     */

typedef struct moe_ep_group_s *moe_ep_group_t;

/* An emulated group: world_size ranks in this process. device = -1 keeps it on
 * the CPU (reference backend only); device >= 0 puts every rank on that GPU. */
MOE_EP_API moe_ep_status_t moe_ep_group_create_emulated(int world_size, int device,
                                                        moe_ep_group_t *group);
MOE_EP_API moe_ep_status_t moe_ep_group_destroy(moe_ep_group_t group);
MOE_EP_API moe_ep_status_t moe_ep_group_world_size(moe_ep_group_t group, int *world_size);
/* Ranks this process drives: world_size for an emulated group, 1 otherwise. */
MOE_EP_API moe_ep_status_t moe_ep_group_local_ranks(moe_ep_group_t group, int *first_rank,
                                                    int *num_local_ranks);
/* Errors found on the device after a forward was enqueued (an expert id out of
 * range, a bounded wait that timed out). The kernels record the first one in a
 * host-mapped word, so this call never synchronizes: it reports what finished
 * kernels recorded (synchronize the stream first to see a given forward).
 * *status is MOE_EP_SUCCESS when none; else the error, with detail in
 * moe_ep_last_error(). A forward that finds a recorded error does nothing and
 * leaves its outputs untouched until moe_ep_group_reset_async_error. */
MOE_EP_API moe_ep_status_t moe_ep_group_get_async_error(moe_ep_group_t group,
                                                        moe_ep_status_t *status);
MOE_EP_API moe_ep_status_t moe_ep_group_reset_async_error(moe_ep_group_t group);

/* NCCL groups: one rank per process and GPU (local_ranks 1, first_rank = rank),
 * split and mega backends, world size 1..64 (mega: the GPUs must reach each
 * other's memory, NVLink or PCIe peer access). Only in builds with NCCL (>= 2.28); else
 * these return MOE_EP_ERROR_UNSUPPORTED. On an NCCL group these calls are
 * collective (every rank makes them, in the same order, on the same layers):
 * group creation and destruction, layer creation and destruction, forward.
 * Every rank must pass the same layer configuration; a difference fails layer
 * creation on every rank with MOE_EP_ERROR_INVALID_ARGUMENT. A rank that does
 * not reach a collective makes the others fail after timeout_seconds with
 * MOE_EP_ERROR_TIMEOUT (moe_ep_group_get_async_error after a forward); the
 * group's communicator is then aborted: destroy the group and make a new one.
 * Group creation itself waits for every rank as ncclCommInitRank does.
 * Design and memory: docs/design.md, "Communication across GPUs". */
#define MOE_EP_UNIQUE_ID_BYTES 128 /* NCCL_UNIQUE_ID_BYTES */
typedef struct moe_ep_unique_id {
    char internal[MOE_EP_UNIQUE_ID_BYTES];
} moe_ep_unique_id_t;

/* A new id on one rank (it opens NCCL's bootstrap socket); pass its bytes to
 * every rank (a file, a socket, MPI) for moe_ep_group_create_from_id. */
MOE_EP_API moe_ep_status_t moe_ep_get_unique_id(moe_ep_unique_id_t *id);
/* Creates an NCCL communicator of world_size ranks (rank of this process) on
 * CUDA device `device`, owned by the group. */
MOE_EP_API moe_ep_status_t moe_ep_group_create_from_id(const moe_ep_unique_id_t *id, int world_size,
                                                       int rank, int device,
                                                       moe_ep_group_t *group);
/* From a communicator the caller owns (an ncclComm_t, on CUDA device `device`):
 * the group splits a private communicator from it (ncclCommSplit, collective),
 * so moe_ep never uses or aborts the caller's; the caller may destroy its
 * communicator at any time after this call. */
struct ncclComm;
MOE_EP_API moe_ep_status_t moe_ep_group_create_nccl(struct ncclComm *comm, int device,
                                                    moe_ep_group_t *group);

/* ------------------------------------------------------------------------- */
/* Layers                                                                     */

typedef struct moe_ep_layer_s *moe_ep_layer_t;

/* Kernel knobs: choices that change speed, never results (tested bit for bit).
 * 0 = not set. Sources, in order of precedence: explicit (config.knobs),
 * autotuned (config.autotune: candidates timed at the first forward of each
 * token bucket, the fastest kept and written to the cache), the knob cache
 * file, built-in heuristics. The cache file: MOE_EP_KNOB_CACHE (a path, or
 * "off"), else $XDG_CACHE_HOME/moe_ep/knobs.txt, else ~/.cache/moe_ep/knobs.txt;
 * format in docs/knobs.md. */
typedef struct moe_ep_knobs {
    size_t size;          /* sizeof(moe_ep_knobs_t), set by MOE_EP_KNOBS_INIT */
    int gemm_tile_rows;   /* rows per grouped-GEMM tile: 16, 64, or 128 (the TMA + wgmma tile:
                             bf16 with hidden % 256 == 0 and intermediate % 128 == 0 only;
                             the quantized paths with those shapes: 128, 64, 32 or 16
                             only, the register tile, fp8_block with fp8_fast_accum
                             too); mega: 64 means its large tile, 32 rows for bf16,
                             and bf16's 128 its 144-row wide form where the tile is
                             swapped on the bf16 wire; NVFP4's, MXFP8's and W4A8's 128
                             their 144-row form above 128 rows an expert (the same
                             bits; docs/knobs.md) */
    int gemm_ctas_per_sm; /* resident GEMM CTAs per SM (mega: blocks per SM): 1..4,
                             capped by occupancy */
} moe_ep_knobs_t;

#define MOE_EP_KNOBS_INIT { sizeof(moe_ep_knobs_t), 0, 0 }

typedef enum moe_ep_knob_source {
    MOE_EP_KNOBS_HEURISTIC = 0,
    MOE_EP_KNOBS_CACHE = 1,
    MOE_EP_KNOBS_AUTOTUNED = 2,
    MOE_EP_KNOBS_EXPLICIT = 3
} moe_ep_knob_source_t;

typedef struct moe_ep_layer_config {
    size_t size;             /* sizeof(moe_ep_layer_config_t), set by the INIT macro   */
    int num_experts;         /* E, global; a multiple of the world size                */
    int top_k;               /* K, 1..64                                               */
    int hidden;              /* H, a multiple of 128                                   */
    int intermediate;        /* I, a multiple of 128                                   */
    int max_tokens_per_rank; /* upper bound of T on every rank, >= 1                   */
    moe_ep_path_t path;
    moe_ep_wire_t wire;
    moe_ep_backend_t backend;
    float swiglu_limit;      /* c in silu(min(g,c)) * clamp(u,-c,c); 0 = no clamp      */
    /* NVFP4 path only: the static encode scales S of the activations, as NVFP4
     * checkpoints carry them (1 / the fc1 and fc2 "input_scale"). 0 = not set:
     * then moe_ep_layer_calibrate_nvfp4 must run before forward. */
    float fc1_input_scale;   /* for x                                                  */
    float fc2_input_scale;   /* for the SwiGLU output a                                */
    int num_threads;         /* reference backend: worker threads, 0 = all cores       */
    double timeout_seconds;  /* bound on every wait (mega kernel, NCCL; a GEMM tile's
                                pipeline waits: at most 4 s), 0 = default 10 s          */
    const moe_ep_knobs_t *knobs; /* explicit knobs (copied at creation), NULL = none   */
    int autotune;            /* 1: time knob candidates at first use (GPU backends)    */
    int num_sms;             /* GPU backends: SMs the layer's persistent grids fill (the mega
                                kernel; split's GEMMs), 0 = all; leaves the rest to
                                work overlapping the layer. More than the GPU has: all */
    int fp8_fast_accum;      /* fp8_block path, GPU backends: 1 = sum FP8 products in the
                                FP8 tensor cores (QGMMA, promoted to fp32 every 128 of K,
                                as DeepSeek's FP8 GEMMs): up to 1.5x faster at large
                                batches, about 5e-3 from the fp32 sums (docs/formats.md); 0 = exact products, fp32
                                sums. Other paths: no effect */
} moe_ep_layer_config_t;

#define MOE_EP_LAYER_CONFIG_INIT                                                              \
    {                                                                                         \
        sizeof(moe_ep_layer_config_t), -1, -1, -1, -1, -1, MOE_EP_PATH_BF16, MOE_EP_WIRE_BF16, \
            MOE_EP_BACKEND_REFERENCE, 0.0f, 0.0f, 0.0f, 0, 0.0, NULL, 0, 0, 0                 \
    }

/* Memory a layer would take, before creating it: on the device (weights in the
 * kernel layout, workspaces, symmetric buffers) and on the host. */
MOE_EP_API moe_ep_status_t moe_ep_layer_memory_size(moe_ep_group_t group,
                                                    const moe_ep_layer_config_t *config,
                                                    size_t *device_bytes, size_t *host_bytes);
MOE_EP_API moe_ep_status_t moe_ep_layer_create(moe_ep_group_t group,
                                               const moe_ep_layer_config_t *config,
                                               moe_ep_layer_t *layer);
MOE_EP_API moe_ep_status_t moe_ep_layer_destroy(moe_ep_layer_t layer);

/* Weights of consecutive experts [first_expert, first_expert + num_experts), in
 * checkpoint layout. Every expert owned by this process's ranks must be loaded
 * once before forward; an expert not owned here is INVALID_ARGUMENT.
 *
 * format BF16: checkpoint bf16; the layer quantizes to the path's weight format.
 * Otherwise the path's own weight format, already quantized:
 *   MXFP8 (path MXFP8), NVFP4 (path NVFP4), MXFP4 (path W4A8), FP8_BLOCK (path FP8_BLOCK).
 *
 *   w13 [n][2I][H]  rows 0..I-1 gate, I..2I-1 up      (FP4: [n][2I][H/2] bytes)
 *   w2  [n][H][I]                                      (FP4: [n][H][I/2] bytes)
 *   scales as moe_ep_quantize lays them out, one matrix after another; FP8_BLOCK:
 *   [n][2I/128][H/128] and [n][H/128][I/128] fp32 (128x128 tiles).
 *   NVFP4: w13_global_scale, w2_global_scale [n] fp32 encode scales S.
 */
typedef struct moe_ep_expert_weights {
    size_t size;
    moe_ep_format_t format;
    int first_expert;
    int num_experts;
    int on_device;                 /* 0: host memory; 1: device memory (GPU backends) */
    const void *w13;
    const void *w13_scales;
    const float *w13_global_scale;
    const void *w2;
    const void *w2_scales;
    const float *w2_global_scale;
} moe_ep_expert_weights_t;

#define MOE_EP_EXPERT_WEIGHTS_INIT                                                      \
    {                                                                                   \
        sizeof(moe_ep_expert_weights_t), MOE_EP_FORMAT_BF16, -1, -1, 0, NULL, NULL, NULL, \
            NULL, NULL, NULL                                                            \
    }

MOE_EP_API moe_ep_status_t moe_ep_layer_load_experts(moe_ep_layer_t layer,
                                                     const moe_ep_expert_weights_t *weights,
                                                     moe_ep_stream_t stream);

/* One forward pass on every local rank (see moe_ep_group_local_ranks). Arrays
 * below are indexed by local rank. Pointers are host memory for the reference
 * backend and device memory otherwise.
 *   x[r]            [T_r][H] bf16 (uint16 bit patterns)
 *   topk_ids[r]     [T_r][K] int32, global expert ids, -1 = unused slot
 *   topk_weights[r] [T_r][K] fp32
 *   out[r]          [T_r][H] bf16; tokens with every slot -1 get zeros
 * T_r = num_tokens[r] (host), or, when num_tokens_device is set, read on the
 * device from num_tokens_device[r] (int32) at run time, so that one captured
 * CUDA graph serves every batch size <= max_tokens_per_rank; then every
 * rank's four arrays must be given (non-NULL), since any count may be > 0.
 */
typedef struct moe_ep_forward_args {
    size_t size;
    const int32_t *num_tokens;
    const int32_t *num_tokens_device;
    const uint16_t *const *x;
    const int32_t *const *topk_ids;
    const float *const *topk_weights;
    uint16_t *const *out;
} moe_ep_forward_args_t;

#define MOE_EP_FORWARD_ARGS_INIT \
    { sizeof(moe_ep_forward_args_t), NULL, NULL, NULL, NULL, NULL, NULL }

MOE_EP_API moe_ep_status_t moe_ep_layer_forward(moe_ep_layer_t layer,
                                                const moe_ep_forward_args_t *args,
                                                moe_ep_stream_t stream);

/* NVFP4 path: compute fc1_input_scale and fc2_input_scale from a calibration
 * batch (same arguments as forward, out may be NULL; host pointers; reference
 * backend layers only: GPU layers take the scales through their config). fc1 from amax(x), fc2 from
 * amax of the SwiGLU output computed with the layer's (quantized) weights and
 * unquantized x. Sets them in the layer and returns them (either may be NULL). */
MOE_EP_API moe_ep_status_t moe_ep_layer_calibrate_nvfp4(moe_ep_layer_t layer,
                                                        const moe_ep_forward_args_t *args,
                                                        float *fc1_input_scale,
                                                        float *fc2_input_scale);

/* The knobs a forward with num_tokens tokens per rank runs with, and where
 * they came from (GPU backends; the reference backend has none and reports
 * zeros from MOE_EP_KNOBS_HEURISTIC). */
MOE_EP_API moe_ep_status_t moe_ep_layer_get_knobs(moe_ep_layer_t layer, int num_tokens,
                                                  moe_ep_knobs_t *knobs,
                                                  moe_ep_knob_source_t *source);

/* The layer's configuration as created (defaults filled in). */
MOE_EP_API moe_ep_status_t moe_ep_layer_get_config(moe_ep_layer_t layer,
                                                   moe_ep_layer_config_t *config);

/* Names for printing and parsing ("bf16", "mxfp8", "nvfp4", "w4a8", "fp8_block";
 * wires "bf16", "mxfp8", "fp4"; backends "reference", "split", "mega"). */
MOE_EP_API const char *moe_ep_path_name(moe_ep_path_t path);
MOE_EP_API const char *moe_ep_wire_name(moe_ep_wire_t wire);
MOE_EP_API const char *moe_ep_backend_name(moe_ep_backend_t backend);
MOE_EP_API const char *moe_ep_format_name(moe_ep_format_t format);

#ifdef __cplusplus
}
#endif
#endif /* MOE_EP_H */
