/* The device side of a group: the error word kernels write, and the queries
 * that read it without synchronizing. Stubs without CUDA. */
#include "comm/comm.h"
#include "core/objects.h"
#include "kernels/split_kernels.h"

#ifdef MOE_EP_HAVE_CUDA
#include <cuda_runtime_api.h>

moe_ep_status_t moe_ep_group_device_init(moe_ep_group_t g)
{
    cudaError_t e = cudaSetDevice(g->device);
    uint32_t *host = NULL;
    if (e == cudaSuccess) e = cudaMalloc((void **)&g->error_dev, sizeof(uint32_t));
    if (e == cudaSuccess) e = cudaMemset(g->error_dev, 0, sizeof(uint32_t));
    if (e == cudaSuccess) e = cudaHostAlloc((void **)&host, sizeof(uint32_t), cudaHostAllocMapped);
    if (e == cudaSuccess) {
        *host = 0;
        g->error_host = host;
        e = cudaHostGetDevicePointer((void **)&g->error_mapped_dev, host, 0);
    }
    if (e != cudaSuccess)
        return MOE_EP_FAIL(MOE_EP_ERROR_CUDA, "group error word on device %d: %s", g->device,
                           cudaGetErrorString(e));
    return MOE_EP_SUCCESS;
}

void moe_ep_group_device_fini(moe_ep_group_t g)
{
    if (g->device < 0) return;
    cudaSetDevice(g->device);
    if (g->error_dev) cudaFree(g->error_dev);
    if (g->error_host) cudaFreeHost((void *)g->error_host);
    g->error_dev = NULL;
    g->error_host = NULL;
}

moe_ep_status_t moe_ep_group_reset_async_error(moe_ep_group_t group)
{
    moe_ep_clear_error();
    MOE_EP_REQUIRE(group != NULL, "group is NULL");
    if (group->device < 0) return MOE_EP_SUCCESS;
    cudaSetDevice(group->device);
    cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess) e = cudaMemset(group->error_dev, 0, sizeof(uint32_t));
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess) return MOE_EP_FAIL(MOE_EP_ERROR_CUDA, "reset: %s", cudaGetErrorString(e));
    *group->error_host = 0;
    return MOE_EP_SUCCESS;
}
#else
moe_ep_status_t moe_ep_group_device_init(moe_ep_group_t g)
{
    return MOE_EP_FAIL(MOE_EP_ERROR_UNSUPPORTED, "device %d: built without CUDA", g->device);
}

void moe_ep_group_device_fini(moe_ep_group_t g) { (void)g; }

moe_ep_status_t moe_ep_group_reset_async_error(moe_ep_group_t group)
{
    moe_ep_clear_error();
    MOE_EP_REQUIRE(group != NULL, "group is NULL");
    return MOE_EP_SUCCESS;
}
#endif

/* The mega kernel's wait kinds (kernels/mega_kernels.h: detail = kind << 20 | index). */
static const char *mega_wait_name(uint32_t kind)
{
    static const char *names[] = {"?", "the routing counts (index)", "the rows of local expert",
                                  "the GEMM1 tiles of m tile", "the GEMM2 tiles of m tile",
                                  "the previous forward of rank", "the tokens of rank",
                                  "the output rows of token", "the fold item of m tile"};
    return names[kind <= 8 ? kind : 0];
}

moe_ep_status_t moe_ep_group_get_async_error(moe_ep_group_t group, moe_ep_status_t *status)
{
    moe_ep_clear_error();
    MOE_EP_REQUIRE(group != NULL && status != NULL, "NULL argument");
    uint32_t w = group->error_host ? *group->error_host : 0u;
    uint32_t kind = w >> 24, detail = w & 0xFFFFFFu;
    *status = MOE_EP_SUCCESS;
    if (kind == MOE_EP_DEVERR_BAD_EXPERT)
        *status = MOE_EP_FAIL(MOE_EP_ERROR_INVALID_ARGUMENT,
                              "device: expert id out of range (slot %u of rank-major [R][max_tokens][K])", detail);
    else if (kind == MOE_EP_DEVERR_BAD_TOKENS)
        *status = MOE_EP_FAIL(MOE_EP_ERROR_INVALID_ARGUMENT,
                              "device: num_tokens_device[%u] outside [0, max_tokens_per_rank]", detail);
    else if (kind == MOE_EP_DEVERR_TIMEOUT && detail >= MOE_EP_WAIT_NCCL_TOKENS && detail <= MOE_EP_WAIT_NCCL_HOST)
        *status = MOE_EP_FAIL(MOE_EP_ERROR_TIMEOUT,
                              "NCCL %s did not complete within timeout_seconds (a rank did not take "
                              "part): the communicator was aborted; destroy the group",
                              detail == MOE_EP_WAIT_NCCL_TOKENS    ? "token exchange of a forward"
                              : detail == MOE_EP_WAIT_NCCL_OUTPUTS ? "output exchange of a forward"
                                                                   : "host-side collective");
    else if (kind == MOE_EP_DEVERR_TIMEOUT && (detail >> 20) >= 1 && (detail >> 20) <= 8)
        *status = MOE_EP_FAIL(MOE_EP_ERROR_TIMEOUT,
                              "mega kernel: a wait for %s %u timed out (timeout_seconds); a rank "
                              "did not take part or its tokens did not arrive", mega_wait_name(detail >> 20), detail & 0xFFFFFu);
    else if (kind == MOE_EP_DEVERR_TIMEOUT && detail == MOE_EP_WAIT_TILE)
        *status = MOE_EP_FAIL(MOE_EP_ERROR_INTERNAL,
                              "device: a GEMM tile's pipeline wait did not complete within timeout_seconds "
                              "(a bug in moe_ep: a lost arrival or copy); this forward's outputs are wrong");
    else if (kind == MOE_EP_DEVERR_TIMEOUT)
        *status = MOE_EP_FAIL(MOE_EP_ERROR_TIMEOUT, "device: wait %u timed out", detail);
    else if (kind == MOE_EP_DEVERR_PEER)
        *status = MOE_EP_FAIL(MOE_EP_ERROR_INVALID_ARGUMENT,
                              "rank %u reported an error in a forward (its moe_ep_group_get_async_error "
                              "says which); this rank skipped it too", detail);
    else if (kind == MOE_EP_DEVERR_SMEM_ALIGN)
        *status = MOE_EP_FAIL(MOE_EP_ERROR_INTERNAL,
                              "mega kernel: its shared memory at 0x%x, not 1024-byte aligned (a bug in moe_ep); "
                              "nothing was computed", detail);
    else if (w != 0)
        *status = MOE_EP_FAIL(MOE_EP_ERROR_INTERNAL, "device error word 0x%08x", w);
    return MOE_EP_SUCCESS;
}
