/* `moe_ep bench --nccl`: one rank of a real NCCL group, one process per GPU,
 * started by scripts/nccl_launch.sh W. Each rank builds its share of the layer
 * that the emulated `--ranks W` bench builds: num_experts = W x E/8, the
 * slice's E/8 experts loaded as this rank's, T tokens routed over all
 * W x E/8 experts (the same inputs as emulated rank `rank`). For every
 * geometry, path, backend and T it times the whole forward (median of
 * cudaEvent pairs on the rank's stream) and counts the bytes a perfect
 * dispatch + combine puts on NVLink; rank 0 writes the table, every rank
 * prints its own medians (skew between ranks shows there). */
#define _POSIX_C_SOURCE 200809L
#include "bench.h"

#ifndef MOE_EP_HAVE_CUDA

int bench_nccl(const bench_opts_t *o)
{
    (void)o;
    return slice_needs_gpu_build("bench --nccl");
}

#else

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ID_WAIT_MS 60000 /* ranks > 0 wait at most 60 s for rank 0's id file */
#define ID_POLL_MS 10

extern char **environ;

typedef struct {
    int rank, world;
    moe_ep_group_t g;
    cudaStream_t s;
} nccl_rank_t;

enum { NCELL_NONE = 0, NCELL_OK = 1, NCELL_NA = 2 };

typedef struct {
    int state;
    double p50_us;       /* this rank's median forward, microseconds */
    double nvlink_bytes; /* per forward, for this rank's T tokens (mean over input sets) */
    double wall_us;      /* host wall time per forward of the timing loop (enqueue + final sync) */
    char why[240];       /* NCELL_NA: status and the library's message */
} ncell_t;

/* ---- joining the group ------------------------------------------------------------ */

static int env_int(const char *name, int fallback)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : fallback;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Rank 0: a new id into `path`, through a temporary name and a rename, so
 * that readers never see part of it. */
static int write_id(const char *path, moe_ep_unique_id_t *id)
{
    char tmp[4096];
    if (!slice_layer_ok(moe_ep_get_unique_id(id), "moe_ep_get_unique_id")) return 0;
    int ok = snprintf(tmp, sizeof tmp, "%s.tmp", path) < (int)sizeof tmp;
    FILE *f = ok ? fopen(tmp, "wb") : NULL;
    ok = f && fwrite(id, sizeof *id, 1, f) == 1;
    if (f && fclose(f) != 0) ok = 0;
    ok = ok && rename(tmp, path) == 0;
    if (!ok) fprintf(stderr, "moe_ep bench --nccl: cannot write the NCCL id to %s\n", path);
    return ok;
}

/* Ranks > 0: polls `path` for the id, at most ID_WAIT_MS. */
static int read_id(const char *path, moe_ep_unique_id_t *id)
{
    for (int waited_ms = 0; waited_ms < ID_WAIT_MS; waited_ms += ID_POLL_MS) {
        FILE *f = fopen(path, "rb");
        size_t n = f ? fread(id, sizeof *id, 1, f) : 0;
        if (f) fclose(f);
        if (n == 1) return 1;
        sleep_ms(ID_POLL_MS);
    }
    fprintf(stderr, "moe_ep bench --nccl: no NCCL id in %s after %d s\n", path, ID_WAIT_MS / 1000);
    return 0;
}

/* Rank and world size from nccl_launch.sh's environment; the rank's GPU. */
static int read_env(nccl_rank_t *r)
{
    int count = 0;
    r->rank = env_int("MOE_EP_RANK", -1), r->world = env_int("MOE_EP_WORLD_SIZE", -1);
    if (r->rank < 0 || r->world < 1 || r->rank >= r->world || r->world > SLICE_MAX_WORLD) {
        fprintf(stderr, "moe_ep bench --nccl: needs MOE_EP_RANK and MOE_EP_WORLD_SIZE (1..%d), as set by\n"
                        "  scripts/nccl_launch.sh W build/tools/moe_ep bench --nccl [options]\n", SLICE_MAX_WORLD);
        return 0;
    }
    if (!CK(cudaGetDeviceCount(&count))) return 0;
    if (count <= r->rank)
        return fprintf(stderr, "moe_ep bench --nccl: rank %d needs GPU %d; %d usable\n", r->rank, r->rank, count), 0;
    return CK(cudaSetDevice(r->rank));
}

/* The id from rank 0 (MOE_EP_NCCL_ID_FILE), the group, the rank's stream. */
static int join_group(nccl_rank_t *r)
{
    const char *path = getenv("MOE_EP_NCCL_ID_FILE");
    moe_ep_unique_id_t id;
    memset(&id, 0, sizeof id);
    if (!path || !*path) return fprintf(stderr, "moe_ep bench --nccl: MOE_EP_NCCL_ID_FILE is not set\n"), 0;
    if (!(r->rank == 0 ? write_id(path, &id) : read_id(path, &id))) return 0;
    fprintf(stderr, "rank %d/%d: joining the NCCL group on GPU %d\n", r->rank, r->world, r->rank);
    return slice_layer_ok(moe_ep_group_create_from_id(&id, r->world, r->rank, r->rank, &r->g),
                          "moe_ep_group_create_from_id") &&
           CK(cudaStreamCreateWithFlags(&r->s, cudaStreamNonBlocking));
}

/* ---- NVLink bytes ------------------------------------------------------------------- */

/* Bytes this rank puts on NVLink for a perfect dispatch + combine of the
 * first T tokens of one input set (global ids; rank q holds experts
 * [q E/8, (q + 1) E/8)): each token's x (bf16, 2H bytes) once to every
 * distinct remote rank among its experts, and one wire row (wire_row bytes)
 * back from every slot routed to a remote rank. */
static double nvlink_bytes_set(const slice_t *sl, const int32_t *ids, int T, int rank, double wire_row)
{
    double ranks_sent = 0, remote_slots = 0;
    for (int t = 0; t < T; t++) {
        const int32_t *e = ids + (size_t)t * (size_t)sl->K;
        for (int k = 0; k < sl->K; k++) {
            int q = e[k] / sl->E8, first = 1;
            if (e[k] < 0 || q == rank) continue;
            for (int j = 0; j < k; j++) first &= e[j] < 0 || e[j] / sl->E8 != q;
            remote_slots += 1, ranks_sent += first;
        }
    }
    return ranks_sent * 2.0 * sl->H + remote_slots * wire_row;
}

static double nvlink_bytes(const slice_t *sl, int T, int rank, moe_ep_wire_t w)
{
    double sum = 0, wire_row = bench_wire_bytes_per_elem(w) * sl->H; /* bytes per row */
    for (int i = 0; i < sl->nsets; i++) sum += nvlink_bytes_set(sl, sl->sets[i].host_ids, T, rank, wire_row);
    return sum / sl->nsets;
}

/* ---- timing ------------------------------------------------------------------------- */

/* Monotonic wall clock in microseconds. */
static double wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void print_cell(const nccl_rank_t *r, const slice_t *sl, moe_ep_path_t p, moe_ep_backend_t b, int T,
                       const ncell_t *c)
{
    fprintf(stderr, "rank %d/%d: %s T=%d %s/%s: ", r->rank, r->world, sl->g->name, T, moe_ep_path_name(p),
            moe_ep_backend_name(b));
    if (c->state == NCELL_OK)
        fprintf(stderr, "p50 %.1f us, NVLink %.3f MB, %.1f GB/s; host wall %.1f us per forward (enqueue + sync)\n",
                c->p50_us, c->nvlink_bytes / 1e6, c->nvlink_bytes / (c->p50_us * 1e3), c->wall_us);
    else fprintf(stderr, "n/a (%s)\n", c->why);
}

/* cells[t] for every T of one path and backend; 0 on an error, after which
 * the ranks are no longer in step (the caller stops). Every rank makes the
 * same calls: layer creation (collective; a refusal such as the mega backend's
 * on more than one rank comes from the config check, the same on every rank),
 * then warmup + iters forwards per T (collective), then destruction. */
static int bench_layer(const bench_opts_t *o, const nccl_rank_t *r, const slice_t *sl, moe_ep_path_t p,
                       moe_ep_backend_t b, ncell_t *cells)
{
    moe_ep_layer_t l = NULL;
    moe_ep_status_t st = slice_create_layer(sl, p, o->wire, b, r->g, r->s, &l);
    if (st == MOE_EP_ERROR_UNSUPPORTED && !l) { /* refused before any forward: n/a */
        for (int t = 0; t < o->ntok; t++) {
            cells[t].state = NCELL_NA;
            snprintf(cells[t].why, sizeof cells[t].why, "%s: %s", moe_ep_status_string(st), moe_ep_last_error());
            print_cell(r, sl, p, b, o->tokens[t], &cells[t]);
        }
        return 1;
    }
    if (!slice_layer_ok(st, "layer create/load")) return 0;
    for (int t = 0; t < o->ntok; t++) {
        run_ctx_t c = {sl, l, o->tokens[t]};
        double t0 = wall_us();
        if (!slice_time_steps(&c, slice_flush_step, slice_forward_step, o->warmup, o->iters, r->s, &cells[t].p50_us) ||
            !slice_no_async_error(r->g))
            return 0;
        cells[t].wall_us = (wall_us() - t0) / (o->warmup + o->iters);
        cells[t].state = NCELL_OK;
        print_cell(r, sl, p, b, o->tokens[t], &cells[t]);
    }
    return slice_layer_ok(moe_ep_layer_destroy(l), "moe_ep_layer_destroy");
}

/* cells [npath][nback][ntok] of one geometry; 0 on an error. */
static int bench_geometry(const bench_opts_t *o, const nccl_rank_t *r, const geometry_t *g, ncell_t *cells)
{
    int n = o->npath * o->nback * o->ntok;
    if (g->num_experts % 8 || g->top_k > g->num_experts / 8) { /* the same on every rank: no calls */
        for (int i = 0; i < n; i++)
            cells[i].state = NCELL_NA, snprintf(cells[i].why, sizeof cells[i].why, "needs E %% 8 == 0 and K <= E/8");
        return 1;
    }
    slice_t sl;
    int ok = slice_make_rank(&sl, g, bench_max_tokens(o), r->world, r->rank);
    sl.fp8_fast_accum = o->fp8_fast_accum, sl.tile_rows = o->tile_rows, sl.flush_kind = o->flush_kind;
    for (int i = 0; ok && i < n; i++) cells[i].nvlink_bytes = nvlink_bytes(&sl, o->tokens[i % o->ntok], r->rank, o->wire);
    for (int p = 0; ok && p < o->npath; p++)
        for (int b = 0; ok && b < o->nback; b++)
            ok = bench_layer(o, r, &sl, o->paths[p], o->backends[b], &cells[(p * o->nback + b) * o->ntok]);
    slice_free(&sl);
    return ok;
}

/* ---- report (rank 0) ----------------------------------------------------------------- */

typedef struct {
    const bench_opts_t *o;
    const nccl_rank_t *r;
    const bench_stamp_t *st;
    const ncell_t *cells;
} nccl_report_t;

static void print_nccl_env(FILE *f)
{
    int n = 0;
    fprintf(f, "- NCCL env:");
    for (char **e = environ; *e; e++)
        if (strncmp(*e, "NCCL_", 5) == 0) fprintf(f, " `%s`", *e), n++;
    fprintf(f, "%s\n", n ? "" : " no NCCL_* variable set (NCCL's defaults)");
}

static void print_nccl_header(FILE *f, const nccl_report_t *rep)
{
    const bench_opts_t *o = rep->o;
    int W = rep->r->world;
    fprintf(f, "# moe_ep bench --nccl\n\n");
    fprintf(f, "- machine: %s x %d (one process per GPU, rank r on GPU r)\n", rep->st->device, W);
    fprintf(f, "- date: %s\n- commit: %s\n", rep->st->date, rep->st->commit);
    fprintf(f, "- W = %d: an NCCL group (moe_ep_group_create_from_id), each rank an EP8 slice: E/8 experts"
               " (the slice's weights), num_experts = %d x E/8; T tokens per rank routed uniformly over all"
               " %d x E/8 experts (slot k of token t of rank r on rank (r + tK + k) %% %d: the inputs of"
               " `--ranks %d`); max_tokens_per_rank = %d for every T (pass one --tokens value to size the"
               " layer for it); config timeout %.0f s\n",
            W, W, W, W, W, bench_max_tokens(o), SLICE_NCCL_TIMEOUT_S);
    fprintf(f, "- wire %s; p50 = rank 0's median of %d forwards after %d warm-up, each between cudaEvents on"
               " its stream, in us (every rank runs the same forwards and prints its own p50); L2 flushed"
               " before each timed forward; inputs rotate over >= 2 sets\n",
            moe_ep_wire_name(o->wire), o->iters, o->warmup);
    if (o->tile_rows) fprintf(f, "- knobs: gemm_tile_rows %d on every layer (--tile-rows; not the heuristic's)\n", o->tile_rows);
    fprintf(f, "- NVLink MB/rank = bytes rank 0 must put on NVLink per forward for a perfect dispatch +"
               " combine (MB = 1e6 bytes, mean over the input sets): per token, x (bf16, 2H) once to each"
               " distinct remote rank among its top-K experts, plus one wire row (bf16 2H, mxfp8 H + H/32,"
               " fp4 H/2 + H/8 bytes) per slot on a remote rank; GB/s = those bytes / p50 (a lower bound"
               " on the traffic, not what the exchanges move)\n");
    print_nccl_env(f);
    fprintf(f, "\n");
}

static void print_nccl_report(FILE *f, const void *ctx)
{
    const nccl_report_t *rep = ctx;
    const bench_opts_t *o = rep->o;
    print_nccl_header(f, rep);
    fprintf(f, "| geometry | path | T/rank | backend | p50 us (rank 0) | NVLink MB/rank | GB/s |\n"
               "|---|---|---:|---|---:|---:|---:|\n");
    for (int gi = 0; gi < o->ngeo; gi++)
        for (int p = 0; p < o->npath; p++)
            for (int t = 0; t < o->ntok; t++)
                for (int b = 0; b < o->nback; b++) {
                    const ncell_t *c = &rep->cells[((gi * o->npath + p) * o->nback + b) * o->ntok + t];
                    fprintf(f, "| %s | %s | %d | %s |", o->geos[gi]->name, moe_ep_path_name(o->paths[p]),
                            o->tokens[t], moe_ep_backend_name(o->backends[b]));
                    if (c->state == NCELL_OK)
                        fprintf(f, " %.1f | %.3f | %.1f |\n", c->p50_us, c->nvlink_bytes / 1e6,
                                c->nvlink_bytes / (c->p50_us * 1e3));
                    else fprintf(f, " n/a (%s) | %.3f | - |\n", c->why, c->nvlink_bytes / 1e6);
                }
}

int bench_nccl(const bench_opts_t *o)
{
    nccl_rank_t r;
    bench_stamp_t st;
    memset(&r, 0, sizeof r);
    memset(&st, 0, sizeof st);
    if (!read_env(&r) || (r.rank == 0 && !bench_stamp(&st, r.rank)) || !join_group(&r)) return 1;
    size_t per_geo = (size_t)o->npath * o->nback * o->ntok;
    ncell_t *cells = calloc(per_geo * (size_t)o->ngeo, sizeof *cells);
    int ok = cells != NULL;
    for (int gi = 0; ok && gi < o->ngeo; gi++) ok = bench_geometry(o, &r, o->geos[gi], cells + gi * per_geo);
    if (!ok) { /* no collective teardown: the other ranks are not in step any more */
        fprintf(stderr, "moe_ep bench --nccl: rank %d stops on the error above\n", r.rank);
        free(cells);
        return 1;
    }
    nccl_report_t rep = {o, &r, &st, cells};
    int rc = r.rank == 0 ? bench_emit(o->out, print_nccl_report, &rep) : 0;
    free(cells);
    ok = slice_layer_ok(moe_ep_group_destroy(r.g), "moe_ep_group_destroy") && CK(cudaStreamDestroy(r.s));
    return rc || !ok ? 1 : 0;
}

#endif /* MOE_EP_HAVE_CUDA */
