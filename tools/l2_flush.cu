/* The bench's L2 flush by reads (slice.c: slice_flush_step). Reading twice
 * the L2's bytes of a buffer nothing else touches evicts what the last step
 * left there, and writes back its dirty lines within this step: the next
 * timed call starts with a cold L2 of clean lines and pays for no write-back
 * of the flush's own bytes, as a memset flush would make it (the memset's
 * last ~L2 bytes stay dirty and are written back while the next call runs). */
#include <cuda_runtime.h>
#include <stdint.h>

/* Every 16 bytes of p[0 .. n) read once through L2 (ld.global.cg); sink is
 * written only if the XOR of all words equals a value it almost never has,
 * so the loads are kept. */
__global__ void l2_read_sweep(const uint4 *p, size_t n, uint32_t *sink)
{
    uint32_t acc = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const uint4 v = __ldcg(p + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9E3779B9u) *sink = acc;
}

/* C entry (tools are C): bytes a multiple of 16, sink one device word; the launch's status. */
extern "C" cudaError_t slice_l2_read_sweep(const void *buf, size_t bytes, uint32_t *sink, cudaStream_t s)
{
    int dev = 0, sms = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (e != cudaSuccess) return e;
    l2_read_sweep<<<4 * sms, 512, 0, s>>>((const uint4 *)buf, bytes / 16, sink);
    return cudaGetLastError();
}
