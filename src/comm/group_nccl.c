/* NCCL groups: creation from a unique id or from the caller's communicator,
 * the watchdog that bounds every wait on other ranks, the collective check of
 * layer configurations, and symmetric heaps. Stubs without NCCL. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, nanosleep, pthread_mutex_timedlock */
#include "comm/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int moe_ep_comm_source_ranks(moe_ep_group_t g)
{
    return g->comm ? g->world_size : g->local_ranks;
}

#ifdef MOE_EP_HAVE_NCCL
#include "comm/comm_internal.h"
#include "core/cuda_status.h"
#include "comm/xchg_kernels.h"

#include <time.h>

#define DEFAULT_TIMEOUT_S 10.0
#define WATCHDOG_PERIOD_US 2000
#define ABORT_GRACE_S 5.0 /* a stream still busy this long after an abort is left behind */

_Static_assert(sizeof(ncclUniqueId) == MOE_EP_UNIQUE_ID_BYTES, "moe_ep_unique_id_t size");

moe_ep_status_t moe_ep_nccl_fail(ncclResult_t r, const char *what, const char *file, int line)
{
    return moe_ep_fail_at(MOE_EP_ERROR_NCCL, file, line, "%s: %s", what, ncclGetErrorString(r));
}

static moe_ep_status_t cuda_fail(cudaError_t e, const char *what) { return MOE_EP_CUDA_FAIL(e, what); }

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* ---- watchdog ------------------------------------------------------------ */

static int64_t timeout_us(const struct moe_ep_comm *c)
{
    double t;
    __atomic_load(&c->timeout, &t, __ATOMIC_RELAXED);
    return (int64_t)(t * 1e6);
}

void moe_ep_comm_set_timeout(struct moe_ep_comm *c, double seconds)
{
    double t;
    __atomic_load(&c->timeout, &t, __ATOMIC_RELAXED);
    if (seconds > t) __atomic_store(&c->timeout, &seconds, __ATOMIC_RELAXED);
}

/* The device learns of the abort through the progress word (the exchange's
 * exit mark turns it into a TIMEOUT in the error word, so the rest of the
 * forward does nothing); the host query sees it at once. */
static void fire(moe_ep_group_t g, uint32_t which)
{
    struct moe_ep_comm *c = g->comm;
    c->progress[PROGRESS_ABORT] = 1u;
    if (g->error_host && *g->error_host == 0u)
        *g->error_host = (MOE_EP_DEVERR_TIMEOUT << 24) | (which & 0xFFFFFFu);
    __sync_synchronize();
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 1; /* an enqueue never blocks after the warm-ups: wait for it, briefly */
    int locked = pthread_mutex_timedlock(&c->lock, &ts) == 0;
    fprintf(stderr, "moe_ep: rank %d: a collective (0x%x) waited longer than %.1f s: aborting the NCCL communicator\n",
            c->rank, which, (double)timeout_us(c) / 1e6);
    ncclResult_t r = ncclCommAbort(c->nccl);
    fprintf(stderr, "moe_ep: rank %d: ncclCommAbort: %s\n", c->rank, ncclGetErrorString(r));
    __atomic_store_n(&c->aborted, 1, __ATOMIC_SEQ_CST);
    if (locked) pthread_mutex_unlock(&c->lock);
}

static void *watchdog(void *arg)
{
    moe_ep_group_t g = arg;
    struct moe_ep_comm *c = g->comm;
    uint32_t last = c->progress[PROGRESS_ENTER];
    int64_t since = now_us();
    while (!__atomic_load_n(&c->stop, __ATOMIC_ACQUIRE)) {
        sleep_us(WATCHDOG_PERIOD_US);
        int64_t t = now_us();
        uint32_t entered = c->progress[PROGRESS_ENTER], left = c->progress[PROGRESS_LEAVE];
        if (entered == left || entered != last) {
            last = entered, since = t;
        } else if (t - since > timeout_us(c)) {
            fire(g, c->progress[PROGRESS_WHICH]);
            break;
        }
        int64_t deadline;
        __atomic_load(&c->host_deadline, &deadline, __ATOMIC_ACQUIRE);
        if (deadline != 0 && t > deadline) {
            fire(g, MOE_EP_WAIT_NCCL_HOST);
            break;
        }
    }
    return NULL;
}

void moe_ep_comm_host_begin(struct moe_ep_comm *c)
{
    int64_t d = now_us() + timeout_us(c);
    __atomic_store(&c->host_deadline, &d, __ATOMIC_RELEASE);
}

static moe_ep_status_t aborted_fail(void)
{
    return MOE_EP_FAIL(MOE_EP_ERROR_TIMEOUT,
                       "a rank did not join a collective within timeout_seconds: the group's NCCL "
                       "communicator was aborted; destroy the group and create a new one");
}

moe_ep_status_t moe_ep_comm_host_end(struct moe_ep_comm *c, moe_ep_status_t st)
{
    int64_t zero = 0;
    __atomic_store(&c->host_deadline, &zero, __ATOMIC_RELEASE);
    if (__atomic_load_n(&c->aborted, __ATOMIC_SEQ_CST)) return aborted_fail();
    return st;
}

moe_ep_status_t moe_ep_comm_wait(struct moe_ep_comm *c)
{
    int64_t gave_up = 0;
    for (;;) {
        cudaError_t e = cudaStreamQuery(c->stream);
        if (e == cudaSuccess) return MOE_EP_SUCCESS;
        if (e != cudaErrorNotReady) return cuda_fail(e, "collective on the group's stream");
        if (__atomic_load_n(&c->aborted, __ATOMIC_SEQ_CST)) {
            if (!gave_up) gave_up = now_us() + (int64_t)(ABORT_GRACE_S * 1e6);
            else if (now_us() > gave_up) return aborted_fail();
        }
        sleep_us(50);
    }
}

moe_ep_status_t moe_ep_comm_usable(moe_ep_group_t g)
{
    if (!g->comm) return MOE_EP_SUCCESS;
    return __atomic_load_n(&g->comm->aborted, __ATOMIC_SEQ_CST) ? aborted_fail() : MOE_EP_SUCCESS;
}

/* ---- groups -------------------------------------------------------------- */

static moe_ep_status_t check_device(int device)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess)
        return MOE_EP_FAIL(MOE_EP_ERROR_UNSUPPORTED, "no CUDA device usable: %s", cudaGetErrorString(e));
    MOE_EP_REQUIRE(device >= 0 && device < count, "device %d does not exist (%d devices)", device, count);
    e = cudaSetDevice(device);
    return e == cudaSuccess ? MOE_EP_SUCCESS : cuda_fail(e, "cudaSetDevice");
}

static moe_ep_status_t comm_init(moe_ep_group_t g)
{
    struct moe_ep_comm *c = g->comm;
    c->timeout = DEFAULT_TIMEOUT_S;
    cudaError_t e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    uint32_t *host = NULL;
    if (e == cudaSuccess) e = cudaHostAlloc((void **)&host, PROGRESS_WORDS * sizeof(uint32_t), cudaHostAllocMapped);
    if (e == cudaSuccess) {
        memset(host, 0, PROGRESS_WORDS * sizeof(uint32_t));
        c->progress = host;
        e = cudaHostGetDevicePointer((void **)&c->progress_dev, host, 0);
    }
    if (e == cudaSuccess) e = cudaMalloc((void **)&c->seq_dev, sizeof(uint32_t));
    if (e == cudaSuccess) e = cudaMemset(c->seq_dev, 0, sizeof(uint32_t));
    if (e != cudaSuccess) return cuda_fail(e, "NCCL group state");
    if (pthread_mutex_init(&c->lock, NULL) != 0) return MOE_EP_FAIL(MOE_EP_ERROR_INTERNAL, "mutex");
    if (pthread_create(&c->thread, NULL, watchdog, g) != 0)
        return MOE_EP_FAIL(MOE_EP_ERROR_INTERNAL, "watchdog thread");
    c->thread_started = 1;
    return MOE_EP_SUCCESS;
}

/* A group around nccl (owned from here on: destroyed on failure). */
static moe_ep_status_t make_group(ncclComm_t nccl, int device, moe_ep_group_t *out)
{
    int world = 0, rank = 0;
    ncclCommCount(nccl, &world);
    ncclCommUserRank(nccl, &rank);
    struct moe_ep_group_s *g = calloc(1, sizeof *g);
    struct moe_ep_comm *c = calloc(1, sizeof *c);
    if (!g || !c) {
        free(g), free(c);
        ncclCommDestroy(nccl);
        return MOE_EP_FAIL(MOE_EP_ERROR_OUT_OF_MEMORY, "group");
    }
    g->world_size = world, g->device = device, g->first_rank = rank, g->local_ranks = 1;
    g->emulated = 0, g->comm = c;
    c->nccl = nccl, c->rank = rank, c->world = world;
    moe_ep_status_t st = moe_ep_group_device_init(g);
    if (st == MOE_EP_SUCCESS) st = comm_init(g);
    if (st != MOE_EP_SUCCESS) {
        moe_ep_comm_destroy(g);
        moe_ep_group_device_fini(g);
        free(g);
        return st;
    }
    *out = g;
    return MOE_EP_SUCCESS;
}

moe_ep_status_t moe_ep_get_unique_id(moe_ep_unique_id_t *id)
{
    moe_ep_clear_error();
    MOE_EP_REQUIRE(id != NULL, "id is NULL");
    ncclUniqueId u;
    MOE_EP_NCCL_CHECK(ncclGetUniqueId(&u));
    memcpy(id->internal, u.internal, sizeof u.internal);
    return MOE_EP_SUCCESS;
}

moe_ep_status_t moe_ep_group_create_from_id(const moe_ep_unique_id_t *id, int world_size, int rank,
                                            int device, moe_ep_group_t *group)
{
    moe_ep_clear_error();
    MOE_EP_REQUIRE(id != NULL && group != NULL, "NULL argument");
    MOE_EP_REQUIRE(world_size >= 1, "world_size %d < 1", world_size);
    MOE_EP_REQUIRE(rank >= 0 && rank < world_size, "rank %d not in [0, %d)", rank, world_size);
    MOE_EP_CHECK(check_device(device));
    ncclUniqueId u;
    memcpy(u.internal, id->internal, sizeof u.internal);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 1;
    ncclComm_t nccl = NULL;
    MOE_EP_NCCL_CHECK(ncclCommInitRankConfig(&nccl, world_size, u, rank, &cfg));
    return make_group(nccl, device, group);
}

moe_ep_status_t moe_ep_group_create_nccl(struct ncclComm *comm, int device, moe_ep_group_t *group)
{
    moe_ep_clear_error();
    MOE_EP_REQUIRE(comm != NULL && group != NULL, "NULL argument");
    MOE_EP_CHECK(check_device(device));
    int dev = -1, rank = 0;
    MOE_EP_NCCL_CHECK(ncclCommCuDevice(comm, &dev));
    MOE_EP_REQUIRE(dev == device, "the communicator is on CUDA device %d, not %d", dev, device);
    MOE_EP_NCCL_CHECK(ncclCommUserRank(comm, &rank));
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 1, cfg.splitShare = 0;
    ncclComm_t own = NULL;
    MOE_EP_NCCL_CHECK(ncclCommSplit(comm, 0, rank, &own, &cfg));
    return make_group(own, device, group);
}

void moe_ep_comm_destroy(moe_ep_group_t g)
{
    struct moe_ep_comm *c = g->comm;
    if (!c) return;
    cudaSetDevice(g->device);
    if (c->thread_started) {
        __atomic_store_n(&c->stop, 1, __ATOMIC_RELEASE);
        pthread_join(c->thread, NULL);
        pthread_mutex_destroy(&c->lock);
    }
    /* After an error a peer may be gone: abort rather than flush. */
    int failed = g->error_host && *g->error_host != 0u;
    if (c->nccl && !__atomic_load_n(&c->aborted, __ATOMIC_SEQ_CST)) {
        if (failed) ncclCommAbort(c->nccl);
        else ncclCommDestroy(c->nccl);
    }
    if (c->stream) cudaStreamDestroy(c->stream);
    if (c->progress) cudaFreeHost((void *)c->progress);
    if (c->seq_dev) cudaFree(c->seq_dev);
    free(c);
    g->comm = NULL;
}

/* ---- configuration check ------------------------------------------------- */

enum { D_MAGIC, D_VALID, D_E, D_K, D_H, D_I, D_TMAX, D_PATH, D_WIRE, D_BACKEND, D_FIRST_FIELD = D_E, D_END = D_BACKEND + 1 };
static const char *const field_names[D_END] = {
    "", "", "num_experts", "top_k", "hidden", "intermediate", "max_tokens_per_rank", "path", "wire", "backend"};

static void digest(const moe_ep_layer_config_t *cfg, int32_t d[MOE_EP_CONFIG_DIGEST_INTS])
{
    memset(d, 0, MOE_EP_CONFIG_DIGEST_INTS * sizeof d[0]);
    d[D_MAGIC] = 0x6d6f6570; /* "moep" */
    if (!cfg || cfg->size != sizeof(moe_ep_layer_config_t)) return;
    d[D_VALID] = 1;
    d[D_E] = cfg->num_experts, d[D_K] = cfg->top_k, d[D_H] = cfg->hidden, d[D_I] = cfg->intermediate;
    d[D_TMAX] = cfg->max_tokens_per_rank, d[D_PATH] = (int32_t)cfg->path;
    d[D_WIRE] = (int32_t)cfg->wire, d[D_BACKEND] = (int32_t)cfg->backend;
}

/* Host all-gather of `one` bytes per rank (collective, under the watchdog):
 * all[q * one ...] = rank q's mine. */
static moe_ep_status_t allgather_host(moe_ep_group_t g, const void *mine, size_t one, void *all, const char *what)
{
    struct moe_ep_comm *c = g->comm;
    uint8_t *dev = NULL;
    cudaError_t e = cudaMalloc((void **)&dev, one * (size_t)c->world);
    if (e != cudaSuccess) return cuda_fail(e, what);
    moe_ep_comm_host_begin(c);
    moe_ep_status_t st = MOE_EP_SUCCESS;
    e = cudaMemcpyAsync(dev + one * (size_t)c->rank, mine, one, cudaMemcpyHostToDevice, c->stream);
    if (e != cudaSuccess) st = cuda_fail(e, what);
    ncclResult_t r = st ? ncclSuccess : ncclAllGather(dev + one * (size_t)c->rank, dev, one, ncclUint8, c->nccl, c->stream);
    if (r != ncclSuccess) st = moe_ep_nccl_fail(r, what, __FILE__, __LINE__);
    if (!st && (e = cudaMemcpyAsync(all, dev, one * (size_t)c->world, cudaMemcpyDeviceToHost, c->stream)) != cudaSuccess)
        st = cuda_fail(e, what);
    if (!st) st = moe_ep_comm_wait(c);
    st = moe_ep_comm_host_end(c, st);
    cudaFree(dev);
    return st;
}

static moe_ep_status_t gather_digests(moe_ep_group_t g, const int32_t *mine, int32_t *all)
{
    return allgather_host(g, mine, MOE_EP_CONFIG_DIGEST_INTS * sizeof(int32_t), all, "ncclAllGather (layer config)");
}

static moe_ep_status_t compare_digests(const int32_t *all, int world)
{
    const int n = MOE_EP_CONFIG_DIGEST_INTS;
    for (int q = 0; q < world; q++)
        MOE_EP_REQUIRE(all[q * n + D_VALID] == 1,
                       "rank %d passed a NULL layer config or one of another size (every rank must "
                       "pass the same config)", q);
    for (int q = 1; q < world; q++)
        for (int f = D_FIRST_FIELD; f < D_END; f++)
            MOE_EP_REQUIRE(all[q * n + f] == all[f],
                           "the layer config differs across ranks: %s is %d on rank 0 but %d on rank %d",
                           field_names[f], all[f], all[q * n + f], q);
    return MOE_EP_SUCCESS;
}

/* What an NCCL group supports (the same answer on every rank: same config). */
static moe_ep_status_t check_nccl_limits(moe_ep_group_t g, const moe_ep_layer_config_t *cfg)
{
    if (cfg->backend == MOE_EP_BACKEND_REFERENCE)
        return MOE_EP_FAIL(MOE_EP_ERROR_UNSUPPORTED,
                           "the reference backend runs on emulated groups only; NCCL groups take "
                           "the split backend");
    if (cfg->backend != MOE_EP_BACKEND_SPLIT && cfg->backend != MOE_EP_BACKEND_MEGA)
        return MOE_EP_SUCCESS; /* the layer says why */
    const char *name = moe_ep_backend_name(cfg->backend);
    if (g->world_size > MOE_EP_NCCL_SPLIT_MAX_RANKS)
        return MOE_EP_FAIL(MOE_EP_ERROR_UNSUPPORTED, "%s backend on NCCL: world size %d > %d", name,
                           g->world_size, MOE_EP_NCCL_SPLIT_MAX_RANKS);
    int64_t rows = (int64_t)g->world_size * cfg->max_tokens_per_rank * cfg->top_k;
    MOE_EP_REQUIRE(cfg->max_tokens_per_rank >= 1 && cfg->top_k >= 1 && rows < ((int64_t)1 << 31),
                   "%s backend on NCCL: world size x max_tokens_per_rank x top_k = %lld rows, "
                   "at most 2^31 - 1", name, (long long)rows);
    return MOE_EP_SUCCESS;
}

moe_ep_status_t moe_ep_group_check_config(moe_ep_group_t g, const moe_ep_layer_config_t *cfg)
{
    MOE_EP_REQUIRE(g != NULL, "group is NULL");
    if (!g->comm) return MOE_EP_SUCCESS;
    struct moe_ep_comm *c = g->comm;
    int32_t mine[MOE_EP_CONFIG_DIGEST_INTS];
    digest(cfg, mine);
    if (c->have_checked && memcmp(mine, c->checked, sizeof mine) == 0) return MOE_EP_SUCCESS;
    MOE_EP_CHECK(moe_ep_comm_usable(g));
    if (cfg && cfg->size == sizeof *cfg && cfg->timeout_seconds > 0.0)
        moe_ep_comm_set_timeout(c, cfg->timeout_seconds);
    int32_t *all = malloc(sizeof mine * (size_t)c->world);
    if (!all) return MOE_EP_FAIL(MOE_EP_ERROR_OUT_OF_MEMORY, "config check");
    moe_ep_status_t st = gather_digests(g, mine, all);
    if (st == MOE_EP_SUCCESS) st = compare_digests(all, c->world);
    free(all);
    MOE_EP_CHECK(st);
    MOE_EP_CHECK(check_nccl_limits(g, cfg));
    memcpy(c->checked, mine, sizeof mine);
    c->have_checked = 1;
    return MOE_EP_SUCCESS;
}

/* ---- symmetric heaps ----------------------------------------------------- */

/* peers[]: this rank's own heap only, so far. Peer pointers through NCCL's
 * device API (ncclGetLsaPointer on the window, in a kernel) faulted with an
 * illegal address on the H200 even at world size 1 (2026-11-29; it probably
 * needs a device communicator from ncclDevCommCreate): until that is settled
 * on a multi-GPU machine, no peer is load/store reachable (lsa_size 1) and
 * cross-GPU traffic goes through NCCL collectives. */
static moe_ep_status_t heap_peers(moe_ep_group_t g, moe_ep_heap_t *h)
{
    struct moe_ep_comm *c = g->comm;
    cudaError_t e = cudaMemsetAsync(h->peers, 0, sizeof(void *) * (size_t)c->world, c->stream);
    h->lsa_size = 1;
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(h->peers + c->rank, &h->base, sizeof(void *), cudaMemcpyHostToDevice, c->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(c->stream);
    return e == cudaSuccess ? MOE_EP_SUCCESS : cuda_fail(e, "heap peers");
}

moe_ep_status_t moe_ep_heap_create(moe_ep_group_t g, size_t bytes, moe_ep_heap_t *h)
{
    memset(h, 0, sizeof *h);
    if (!g->comm) return MOE_EP_FAIL(MOE_EP_ERROR_UNSUPPORTED, "symmetric heaps need an NCCL group");
    struct moe_ep_comm *c = g->comm;
    MOE_EP_CHECK(moe_ep_comm_usable(g));
    cudaSetDevice(g->device);
    h->bytes = (bytes + NCCL_WIN_REQUIRED_ALIGNMENT - 1) / NCCL_WIN_REQUIRED_ALIGNMENT * NCCL_WIN_REQUIRED_ALIGNMENT;
    void *p = NULL;
    if (ncclMemAlloc(&p, h->bytes) == ncclSuccess) {
        h->nccl_alloc = 1;
    } else {
        p = NULL;
        cudaError_t e = cudaMalloc(&p, h->bytes);
        if (e != cudaSuccess) return cuda_fail(e, "symmetric heap");
    }
    h->base = p;
    cudaError_t e = cudaMemset(p, 0, h->bytes);
    if (e == cudaSuccess) e = cudaMalloc((void **)&h->peers, sizeof(void *) * (size_t)c->world);
    if (e != cudaSuccess) {
        moe_ep_heap_destroy(g, h);
        return cuda_fail(e, "symmetric heap");
    }
    moe_ep_status_t st = MOE_EP_SUCCESS;
    if (h->nccl_alloc) {
        ncclWindow_t win = NULL;
        moe_ep_comm_host_begin(c);
        ncclResult_t r = ncclCommWindowRegister(c->nccl, p, h->bytes, &win, NCCL_WIN_COLL_SYMMETRIC);
        st = moe_ep_comm_host_end(c, MOE_EP_SUCCESS);
        if (r == ncclSuccess) h->window = win; /* else: plain collectives on plain memory */
    }
    if (st == MOE_EP_SUCCESS) st = heap_peers(g, h);
    if (st != MOE_EP_SUCCESS) moe_ep_heap_destroy(g, h);
    return st;
}

/* Every rank's heap opened here through CUDA IPC (cudaMalloc memory; ncclMemAlloc's
 * cannot be exported this way). Collective, and all-or-nothing: each rank
 * learns whether every rank mapped every peer. */
static moe_ep_status_t map_peers(moe_ep_group_t g, moe_ep_heap_t *h)
{
    struct moe_ep_comm *c = g->comm;
    cudaIpcMemHandle_t mine, *all = calloc((size_t)c->world, sizeof mine);
    int32_t ok = 1, *oks = calloc((size_t)c->world, sizeof ok);
    h->peer_host = calloc((size_t)c->world, sizeof(void *));
    if (!all || !oks || !h->peer_host) {
        free(all), free(oks);
        return MOE_EP_FAIL(MOE_EP_ERROR_OUT_OF_MEMORY, "peer heaps");
    }
    cudaError_t e = cudaIpcGetMemHandle(&mine, h->base);
    if (e != cudaSuccess) ok = 0, memset(&mine, 0, sizeof mine);
    moe_ep_status_t st = allgather_host(g, &mine, sizeof mine, all, "ncclAllGather (heap handles)");
    int bad = -1;
    for (int r = 0; r < c->world && st == MOE_EP_SUCCESS && ok; r++) {
        if (r == c->rank) {
            h->peer_host[r] = h->base;
        } else if ((e = cudaIpcOpenMemHandle(&h->peer_host[r], all[r], cudaIpcMemLazyEnablePeerAccess)) != cudaSuccess) {
            h->peer_host[r] = NULL, ok = 0, bad = r;
            (void)cudaGetLastError();
        }
    }
    if (st == MOE_EP_SUCCESS) st = allgather_host(g, &ok, sizeof ok, oks, "ncclAllGather (heap mapping)");
    for (int r = 0; r < c->world && st == MOE_EP_SUCCESS; r++)
        if (!oks[r])
            st = MOE_EP_FAIL(MOE_EP_ERROR_UNSUPPORTED,
                             "rank %d could not map every rank's heap through CUDA IPC (here: rank %d, %s): "
                             "the mega backend needs load/store access between the GPUs (NVLink or PCIe "
                             "peer access)", r, bad, bad >= 0 ? cudaGetErrorString(e) : "mapped");
    if (st == MOE_EP_SUCCESS) {
        e = cudaMemcpy(h->peers, h->peer_host, sizeof(void *) * (size_t)c->world, cudaMemcpyHostToDevice);
        if (e != cudaSuccess) st = cuda_fail(e, "peer heaps");
        h->lsa_size = c->world;
    }
    free(all), free(oks);
    return st;
}

moe_ep_status_t moe_ep_heap_create_mapped(moe_ep_group_t g, size_t bytes, moe_ep_heap_t *h)
{
    memset(h, 0, sizeof *h);
    if (!g->comm) return MOE_EP_FAIL(MOE_EP_ERROR_UNSUPPORTED, "symmetric heaps need an NCCL group");
    MOE_EP_CHECK(moe_ep_comm_usable(g));
    cudaSetDevice(g->device);
    h->bytes = (bytes + 4095) / 4096 * 4096;
    cudaError_t e = cudaMalloc((void **)&h->base, h->bytes);
    if (e == cudaSuccess) e = cudaMemset(h->base, 0, h->bytes);
    if (e == cudaSuccess) e = cudaMalloc((void **)&h->peers, sizeof(void *) * (size_t)g->comm->world);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    moe_ep_status_t st = e == cudaSuccess ? map_peers(g, h) : cuda_fail(e, "mapped heap");
    if (st != MOE_EP_SUCCESS) moe_ep_heap_destroy(g, h);
    return st;
}

void moe_ep_heap_destroy(moe_ep_group_t g, moe_ep_heap_t *h)
{
    if (h->peer_host) {
        cudaSetDevice(g->device);
        for (int r = 0; r < g->world_size; r++)
            if (h->peer_host[r] && h->peer_host[r] != h->base) cudaIpcCloseMemHandle(h->peer_host[r]);
        free(h->peer_host);
        h->peer_host = NULL;
    }
    if (!h->base) return;
    cudaSetDevice(g->device);
    int live = g->comm && !__atomic_load_n(&g->comm->aborted, __ATOMIC_SEQ_CST);
    if (h->window && live) ncclCommWindowDeregister(g->comm->nccl, (ncclWindow_t)h->window);
    if (h->nccl_alloc) ncclMemFree(h->base);
    else cudaFree(h->base);
    if (h->peers) cudaFree(h->peers);
    memset(h, 0, sizeof *h);
}

#else /* no NCCL: NCCL groups do not exist */

static moe_ep_status_t no_nccl(void)
{
    return MOE_EP_FAIL(MOE_EP_ERROR_UNSUPPORTED, "NCCL groups: moe_ep was built without NCCL");
}

moe_ep_status_t moe_ep_get_unique_id(moe_ep_unique_id_t *id)
{
    moe_ep_clear_error();
    (void)id;
    return no_nccl();
}

moe_ep_status_t moe_ep_group_create_from_id(const moe_ep_unique_id_t *id, int world_size, int rank,
                                            int device, moe_ep_group_t *group)
{
    moe_ep_clear_error();
    (void)id, (void)world_size, (void)rank, (void)device, (void)group;
    return no_nccl();
}

moe_ep_status_t moe_ep_group_create_nccl(struct ncclComm *comm, int device, moe_ep_group_t *group)
{
    moe_ep_clear_error();
    (void)comm, (void)device, (void)group;
    return no_nccl();
}

void moe_ep_comm_destroy(moe_ep_group_t g) { (void)g; }

moe_ep_status_t moe_ep_comm_usable(moe_ep_group_t g)
{
    (void)g;
    return MOE_EP_SUCCESS;
}

moe_ep_status_t moe_ep_group_check_config(moe_ep_group_t g, const moe_ep_layer_config_t *cfg)
{
    (void)cfg;
    MOE_EP_REQUIRE(g != NULL, "group is NULL");
    return MOE_EP_SUCCESS;
}

moe_ep_status_t moe_ep_heap_create(moe_ep_group_t g, size_t bytes, moe_ep_heap_t *h)
{
    (void)g, (void)bytes;
    memset(h, 0, sizeof *h);
    return no_nccl();
}

void moe_ep_heap_destroy(moe_ep_group_t g, moe_ep_heap_t *h) { (void)g, (void)h; }

moe_ep_status_t moe_ep_heap_create_mapped(moe_ep_group_t g, size_t bytes, moe_ep_heap_t *h)
{
    (void)g, (void)bytes;
    memset(h, 0, sizeof *h);
    return no_nccl();
}
#endif
