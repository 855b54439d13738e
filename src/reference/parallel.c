/* A minimal parallel-for over pthreads for the reference backend. */
#define _POSIX_C_SOURCE 200809L
#include "reference/reference.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#define MOE_EP_MAX_THREADS 256

typedef struct {
    void (*fn)(void *ctx, int item, int thread);
    void *ctx;
    int n;
    atomic_int next;
} pool_job_t;

typedef struct {
    pool_job_t *job;
    int thread;
} pool_worker_t;

static void *worker_main(void *arg)
{
    pool_worker_t *w = arg;
    for (;;) {
        int item = atomic_fetch_add(&w->job->next, 1);
        if (item >= w->job->n) break;
        w->job->fn(w->job->ctx, item, w->thread);
    }
    return NULL;
}

int moe_ep_cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (n > MOE_EP_MAX_THREADS ? MOE_EP_MAX_THREADS : (int)n);
}

moe_ep_status_t moe_ep_parallel_for(int n, int threads, void (*fn)(void *ctx, int item, int thread),
                                    void *ctx)
{
    if (threads <= 0) threads = moe_ep_cpu_count();
    if (threads > MOE_EP_MAX_THREADS) threads = MOE_EP_MAX_THREADS;
    if (threads > n) threads = n;
    if (threads < 1) threads = 1;
    pool_job_t job = {fn, ctx, n, 0};
    pool_worker_t workers[MOE_EP_MAX_THREADS];
    pthread_t tids[MOE_EP_MAX_THREADS];
    int started = 0;
    for (int t = 1; t < threads; t++) {
        workers[t].job = &job;
        workers[t].thread = t;
        if (pthread_create(&tids[t], NULL, worker_main, &workers[t]) != 0) break;
        started = t;
    }
    workers[0].job = &job;
    workers[0].thread = 0;
    worker_main(&workers[0]);
    for (int t = 1; t <= started; t++) pthread_join(tids[t], NULL);
    return MOE_EP_SUCCESS;
}
