/* EP groups. The emulated group drives all R ranks from this process; NCCL
 * groups (one rank per process) are made in src/comm/group_nccl.c. */
#include "comm/comm.h"
#include "core/objects.h"
#include "kernels/split_kernels.h"

#include <stdlib.h>

#ifdef MOE_EP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define MOE_EP_MAX_WORLD_SIZE 1024

static moe_ep_status_t check_device(int device)
{
    if (device < 0) return MOE_EP_SUCCESS;
#ifdef MOE_EP_HAVE_CUDA
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess)
        return MOE_EP_FAIL(MOE_EP_ERROR_UNSUPPORTED, "no CUDA device usable: %s",
                           cudaGetErrorString(err));
    MOE_EP_REQUIRE(device < count, "device %d does not exist (%d devices)", device, count);
    return MOE_EP_SUCCESS;
#else
    return MOE_EP_FAIL(MOE_EP_ERROR_UNSUPPORTED, "device %d asked for, but built without CUDA",
                       device);
#endif
}

moe_ep_status_t moe_ep_group_create_emulated(int world_size, int device, moe_ep_group_t *group)
{
    moe_ep_clear_error();
    MOE_EP_REQUIRE(group != NULL, "group is NULL");
    MOE_EP_REQUIRE(world_size >= 1 && world_size <= MOE_EP_MAX_WORLD_SIZE,
                   "world_size %d not in [1, %d]", world_size, MOE_EP_MAX_WORLD_SIZE);
    MOE_EP_REQUIRE(device >= -1, "device %d: use -1 for the CPU or a CUDA ordinal", device);
    MOE_EP_REQUIRE(device < 0 || world_size <= MOE_EP_GPU_MAX_RANKS,
                   "an emulated group on a GPU holds at most %d ranks (asked %d)",
                   MOE_EP_GPU_MAX_RANKS, world_size);
    MOE_EP_CHECK(check_device(device));
    struct moe_ep_group_s *g = calloc(1, sizeof *g);
    if (!g) return MOE_EP_FAIL(MOE_EP_ERROR_OUT_OF_MEMORY, "group");
    g->world_size = world_size;
    g->device = device;
    g->first_rank = 0;
    g->local_ranks = world_size;
    g->emulated = 1;
    if (device >= 0) {
        moe_ep_status_t st = moe_ep_group_device_init(g);
        if (st != MOE_EP_SUCCESS) {
            moe_ep_group_device_fini(g);
            free(g);
            return st;
        }
    }
    *group = g;
    return MOE_EP_SUCCESS;
}

moe_ep_status_t moe_ep_group_destroy(moe_ep_group_t group)
{
    moe_ep_clear_error();
    if (group) moe_ep_comm_destroy(group);
    if (group) moe_ep_group_device_fini(group);
    free(group);
    return MOE_EP_SUCCESS;
}

moe_ep_status_t moe_ep_group_world_size(moe_ep_group_t group, int *world_size)
{
    moe_ep_clear_error();
    MOE_EP_REQUIRE(group != NULL && world_size != NULL, "NULL argument");
    *world_size = group->world_size;
    return MOE_EP_SUCCESS;
}

moe_ep_status_t moe_ep_group_local_ranks(moe_ep_group_t group, int *first_rank,
                                         int *num_local_ranks)
{
    moe_ep_clear_error();
    MOE_EP_REQUIRE(group != NULL && first_rank != NULL && num_local_ranks != NULL,
                   "NULL argument");
    *first_rank = group->first_rank;
    *num_local_ranks = group->local_ranks;
    return MOE_EP_SUCCESS;
}
