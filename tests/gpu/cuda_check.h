/* CK(call): a failed CUDA call counts as a failed check, prints where, and
 * ends the test program with its summary (TEST_NAME, defined by the includer). */
#ifndef MOE_EP_TEST_CUDA_CHECK_H
#define MOE_EP_TEST_CUDA_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CK(call)                                                                                         \
    do {                                                                                                 \
        cudaError_t e_ = (call);                                                                         \
        if (e_ != cudaSuccess) {                                                                         \
            fprintf(stderr, "FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            test_failed++;                                                                               \
            exit(test_summary(TEST_NAME));                                                               \
        }                                                                                                \
    } while (0)

#endif
