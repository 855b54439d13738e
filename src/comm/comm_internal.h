/* The NCCL side of a group, shared by the C files of src/comm (NCCL builds only). */
#ifndef MOE_EP_COMM_INTERNAL_H
#define MOE_EP_COMM_INTERNAL_H

#include "comm/comm.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <pthread.h>

#define MOE_EP_CONFIG_DIGEST_INTS 16

/* Progress words (host-mapped, xchg_kernels.h): entered, left, which, abort. */
enum { PROGRESS_ENTER = 0, PROGRESS_LEAVE = 1, PROGRESS_WHICH = 2, PROGRESS_ABORT = 3, PROGRESS_WORDS = 4 };

struct moe_ep_comm {
    ncclComm_t nccl;         /* owned by the group (made from an id, or split) */
    int rank, world;
    cudaStream_t stream;     /* host-side collectives: config check, warm-ups */
    /* Watchdog (a thread per group): aborts the communicator when an exchange
     * has been in flight on the device, or a host-side collective has been
     * blocking, for longer than timeout seconds. */
    pthread_t thread;
    int thread_started;
    pthread_mutex_t lock;    /* held while enqueueing forward exchanges */
    int stop;                /* __atomic */
    int aborted;             /* __atomic: the communicator is gone */
    double timeout;          /* seconds: the largest of its layers' (10 before any) */
    int64_t host_deadline;   /* monotonic microseconds while a host-side collective runs, else 0 */
    volatile uint32_t *progress; /* host-mapped [PROGRESS_WORDS] */
    uint32_t *progress_dev;  /* its device address */
    uint32_t *seq_dev;       /* device counter of exchanges entered */
    int32_t checked[MOE_EP_CONFIG_DIGEST_INTS]; /* last config that passed */
    int have_checked;
};

/* Status of a failed NCCL call, with its text. */
moe_ep_status_t moe_ep_nccl_fail(ncclResult_t r, const char *what, const char *file, int line);
#define MOE_EP_NCCL_CHECK(call)                                                  \
    do {                                                                         \
        ncclResult_t r_ = (call);                                                \
        if (r_ != ncclSuccess) return moe_ep_nccl_fail(r_, #call, __FILE__, __LINE__); \
    } while (0)

/* A host-side collective: the watchdog aborts the communicator when it takes
 * longer than the timeout. end returns MOE_EP_ERROR_TIMEOUT if it did. */
void moe_ep_comm_host_begin(struct moe_ep_comm *c);
moe_ep_status_t moe_ep_comm_host_end(struct moe_ep_comm *c, moe_ep_status_t st);
/* Waits for c->stream with the watchdog armed (between host_begin/end). */
moe_ep_status_t moe_ep_comm_wait(struct moe_ep_comm *c);
/* Raises the watchdog's timeout to at least seconds. */
void moe_ep_comm_set_timeout(struct moe_ep_comm *c, double seconds);

#endif
