/* A CUDA runtime failure as a moe_ep status (host code built with CUDA). */
#ifndef MOE_EP_CUDA_STATUS_H
#define MOE_EP_CUDA_STATUS_H

#include "core/internal.h"

#include <cuda_runtime_api.h>

/* e's status (OUT_OF_MEMORY for a failed allocation, else CUDA) with `what`
 * and the runtime's message, the runtime's last error cleared first: the
 * failure travels in the status, and the caller's own next cudaGetLastError()
 * must not see it (a failed cudaMalloc otherwise stays there: the bench's
 * next launch check failed with the layer's out of memory). */
#define MOE_EP_CUDA_FAIL(e, what)                                                                       \
    ((void)cudaGetLastError(),                                                                          \
     MOE_EP_FAIL((e) == cudaErrorMemoryAllocation ? MOE_EP_ERROR_OUT_OF_MEMORY : MOE_EP_ERROR_CUDA, "%s: %s", \
                 (what), cudaGetErrorString(e)))

#endif
