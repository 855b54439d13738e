/* Kernel knobs on the CPU: the cache file (format round trip, lookup order,
 * version and malformed lines, a parser fuzz, concurrent writers, the path
 * and MOE_EP_KNOB_CACHE=off), the precedence explicit > autotuned > cache >
 * heuristic through the layer's knob table, and the public API on reference
 * layers. Files live in a mkdtemp directory under /tmp, removed at the end. */
#define _POSIX_C_SOURCE 200809L
#define _XOPEN_SOURCE 700 /* nftw */
#include "test_util.h"

#include "core/knobs.h"
#include "kernels/split_kernels.h" /* moe_ep_bf16_swapped */
#include "tune/knob_cache.h"

#include <fcntl.h>
#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmp_root[64];

static int quick(void) { return getenv("MOE_EP_TEST_QUICK") != NULL; }

static void tmp_path(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", tmp_root, name); }

static void write_file(const char *path, const char *text, size_t len)
{
    FILE *f = fopen(path, "wb");
    EXPECT(f != NULL, "cannot write %s", path);
    if (!f) return;
    EXPECT(fwrite(text, 1, len, f) == len, "short write to %s", path);
    fclose(f);
}

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static int remove_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(p);
}

static void remove_tree(const char *dir) { nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS); }

static const char *path_name(int i) { return moe_ep_path_name((moe_ep_path_t)i); }

static moe_ep_knob_entry_t entry(const char *device, moe_ep_path_t path, int E, int tokens, int tile, int ctas)
{
    moe_ep_knob_entry_t e;
    memset(&e, 0, sizeof e);
    moe_ep_knob_key_set_device(&e.key, device);
    e.key.path = path, e.key.wire = MOE_EP_WIRE_BF16, e.key.backend = MOE_EP_BACKEND_SPLIT;
    e.key.world = 1, e.key.E = E, e.key.K = 6, e.key.H = 4096, e.key.I = 2048;
    e.tokens = tokens, e.tile_rows = tile, e.ctas_per_sm = ctas, e.us = 12.5;
    return e;
}

/* Runs fn with stderr sent to a file; returns the number of lines it wrote
 * there and copies the first of them into first (may be NULL). */
static int stderr_lines(void (*fn)(void *), void *arg, char *first, size_t n)
{
    char path[128], buf[4096];
    tmp_path(path, sizeof path, "stderr.txt");
    fflush(stderr);
    int saved = dup(2), fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0600);
    dup2(fd, 2);
    fn(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ssize_t got = pread(fd, buf, sizeof buf - 1, 0);
    close(fd);
    buf[got > 0 ? got : 0] = '\0';
    if (first) snprintf(first, n, "%.*s", (int)strcspn(buf, "\n"), buf);
    int lines = 0;
    for (char *p = buf; *p; p++) lines += *p == '\n';
    return lines;
}

/* ---- format ----------------------------------------------------------------- */

static void test_bucket(void)
{
    static const int64_t in[] = {0, 1, 2, 3, 8, 9, 64, 65, 1000, 1 << 30};
    static const int want[] = {1, 1, 2, 4, 8, 16, 64, 128, 1024, 1 << 30};
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
        int b = -1;
        EXPECT(moe_ep_knob_bucket(in[i], &b) == MOE_EP_SUCCESS && b == want[i], "bucket(%lld) = %d",
               (long long)in[i], b);
    }
    int b = 7;
    EXPECT(moe_ep_knob_bucket(-1, &b) == MOE_EP_ERROR_INVALID_ARGUMENT && b == 7, "bucket(-1)");
    EXPECT(moe_ep_knob_bucket(((int64_t)1 << 30) + 1, &b) == MOE_EP_ERROR_INVALID_ARGUMENT, "bucket(2^30 + 1)");
}

static int same_entry(const moe_ep_knob_entry_t *a, const moe_ep_knob_entry_t *b)
{
    const moe_ep_knob_key_t *x = &a->key, *y = &b->key;
    return strcmp(x->device, y->device) == 0 && x->path == y->path && x->wire == y->wire &&
           x->backend == y->backend && x->world == y->world && x->E == y->E && x->K == y->K && x->H == y->H &&
           x->I == y->I && a->tokens == b->tokens && a->tile_rows == b->tile_rows &&
           a->ctas_per_sm == b->ctas_per_sm && a->us > b->us - 0.051 && a->us < b->us + 0.051;
}

static const moe_ep_knob_entry_t *find(const moe_ep_knob_table_t *t, const moe_ep_knob_entry_t *e)
{
    for (int i = 0; i < t->count; i++)
        if (same_entry(&t->entries[i], e)) return &t->entries[i];
    return NULL;
}

static void test_round_trip(void)
{
    moe_ep_knob_table_t t, back;
    memset(&t, 0, sizeof t), memset(&back, 0, sizeof back);
    moe_ep_knob_entry_t e[6] = {
        entry("NVIDIA H200", MOE_EP_PATH_MXFP8, 32, 8, 16, 1), entry("NVIDIA H200", MOE_EP_PATH_BF16, 32, 512, 64, 2),
        entry("NVIDIA H100 80GB HBM3", MOE_EP_PATH_NVFP4, 48, 1 << 20, 64, 4),
        entry("odd:name=#x\xff", MOE_EP_PATH_W4A8, 1, 1, 16, 3), entry("gpu", MOE_EP_PATH_FP8_BLOCK, 256, 64, 64, 1),
        entry("gpu", MOE_EP_PATH_FP8_BLOCK, 256, 128, 16, 2)};
    e[1].key.wire = MOE_EP_WIRE_FP4, e[2].key.backend = MOE_EP_BACKEND_MEGA, e[3].us = 0.0, e[4].us = 123456.75;
    e[5].key.world = 8, e[5].key.wire = MOE_EP_WIRE_MXFP8;
    EXPECT(strcmp(e[0].key.device, "NVIDIA_H200") == 0, "device name: %s", e[0].key.device);
    EXPECT(strcmp(e[3].key.device, "odd_name__x_") == 0, "unsafe bytes: %s", e[3].key.device);
    for (int i = 0; i < 6; i++) EXPECT(moe_ep_knob_table_put(&t, &e[i]) == MOE_EP_SUCCESS, "put %d: %s", i, moe_ep_last_error());
    moe_ep_knob_entry_t again = e[1];
    again.tile_rows = 16;
    EXPECT(moe_ep_knob_table_put(&t, &again) == MOE_EP_SUCCESS && t.count == 6, "put replaces (count %d)", t.count);
    e[1] = again;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    EXPECT(moe_ep_knob_table_write(&t, f) == MOE_EP_SUCCESS, "write: %s", moe_ep_last_error());
    fclose(f);
    EXPECT(strncmp(text, "moe_ep-knobs 1\n", 15) == 0, "first line: %.20s", text);
    EXPECT(strstr(text, "device=NVIDIA_H200 path=bf16 wire=fp4 backend=split world=1 E=32 K=6 H=4096 I=2048 "
                        "tokens=512 : gemm_tile_rows=16 gemm_ctas_per_sm=2 us=12.5\n") != NULL,
           "line format:\n%s", text);
    EXPECT(moe_ep_knob_table_parse(&back, text, len) == MOE_EP_SUCCESS, "parse: %s", moe_ep_last_error());
    EXPECT(back.count == 6 && back.malformed == 0 && !back.rejected, "read back %d entries, %d malformed", back.count,
           back.malformed);
    for (int i = 0; i < 6; i++) EXPECT(find(&back, &e[i]) != NULL, "entry %d not read back", i);
    free(text);
    moe_ep_knob_table_free(&t), moe_ep_knob_table_free(&back);
    moe_ep_knob_entry_t bad = e[0];
    bad.tile_rows = 48;
    EXPECT(moe_ep_knob_entry_check(&bad) == MOE_EP_ERROR_INVALID_ARGUMENT, "tile rows 48 accepted");
    bad = e[0], bad.tokens = 24;
    EXPECT(moe_ep_knob_table_put(&t, &bad) == MOE_EP_ERROR_INVALID_ARGUMENT, "tokens 24 accepted");
    moe_ep_knob_table_free(&t);
}

static void test_lookup(void)
{
    moe_ep_knob_table_t t;
    memset(&t, 0, sizeof t);
    static const int buckets[] = {8, 64, 512};
    for (int i = 0; i < 3; i++) {
        moe_ep_knob_entry_t e = entry("gpu", MOE_EP_PATH_MXFP8, 32, buckets[i], 16, i + 1);
        moe_ep_knob_table_put(&t, &e);
    }
    moe_ep_knob_entry_t other = entry("gpu", MOE_EP_PATH_MXFP8, 64, 128, 64, 4); /* E differs */
    moe_ep_knob_table_put(&t, &other);
    moe_ep_knob_key_t key = entry("gpu", MOE_EP_PATH_MXFP8, 32, 1, 16, 1).key;
    static const int64_t tokens[] = {64, 33, 100, 1000, 0, 8, 9, 511};
    static const int want[] = {64, 64, 512, 512, 8, 8, 64, 512}; /* exact, larger, smaller */
    for (size_t i = 0; i < sizeof tokens / sizeof tokens[0]; i++) {
        const moe_ep_knob_entry_t *e = NULL;
        EXPECT(moe_ep_knob_table_lookup(&t, &key, tokens[i], &e) == MOE_EP_SUCCESS && e && e->tokens == want[i],
               "T=%lld: bucket %d, want %d", (long long)tokens[i], e ? e->tokens : -1, want[i]);
    }
    /* Any other key field: no entry (never the E=64 one either). */
    for (int f = 0; f < 9; f++) {
        moe_ep_knob_key_t k = key;
        int *dims[] = {&k.world, &k.E, &k.K, &k.H, &k.I};
        if (f < 5) *dims[f] += 1;
        else if (f == 5) k.path = MOE_EP_PATH_BF16;
        else if (f == 6) k.wire = MOE_EP_WIRE_FP4;
        else if (f == 7) k.backend = MOE_EP_BACKEND_MEGA;
        else moe_ep_knob_key_set_device(&k, "gpu2");
        const moe_ep_knob_entry_t *e = &t.entries[0];
        EXPECT(moe_ep_knob_table_lookup(&t, &k, 64, &e) == MOE_EP_SUCCESS && e == NULL, "key field %d ignored", f);
    }
    moe_ep_knob_table_free(&t);
}

/* ---- reading bad files ------------------------------------------------------- */

typedef struct {
    const char *path;
    moe_ep_knob_table_t t;
    moe_ep_status_t st;
} load_t;

static void do_load(void *arg)
{
    load_t *l = arg;
    l->st = moe_ep_knob_table_load(&l->t, l->path);
}

#define GOOD_LINE "device=gpu path=mxfp8 wire=bf16 backend=split world=1 E=32 K=6 H=4096 I=2048 tokens=64 : gemm_tile_rows=16 gemm_ctas_per_sm=2 us=5.0\n"

static void test_version(void)
{
    static const char *heads[] = {"moe_ep-knobs 2\n", "moe_ep-knobs\n", "# comment first\n", "\n", "moe_ep-knobs 1 extra\n"};
    char path[128], text[512], first[512];
    tmp_path(path, sizeof path, "version.txt");
    for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++) {
        snprintf(text, sizeof text, "%s" GOOD_LINE, heads[i]);
        write_file(path, text, strlen(text));
        load_t l = {path, {0}, MOE_EP_ERROR_INTERNAL};
        int lines = stderr_lines(do_load, &l, first, sizeof first);
        EXPECT(l.st == MOE_EP_SUCCESS && l.t.count == 0 && l.t.rejected, "header %zu: %d entries", i, l.t.count);
        EXPECT(lines == 1 && strstr(first, "moe_ep: knob cache") && strstr(first, path), "header %zu: %d warning lines: %s",
               i, lines, first);
        moe_ep_knob_table_free(&l.t);
    }
    /* A file the writer cannot read is not overwritten. */
    moe_ep_knob_entry_t e = entry("gpu", MOE_EP_PATH_BF16, 8, 16, 16, 1);
    fflush(stderr);
    int saved = dup(2), null = open("/dev/null", O_WRONLY);
    dup2(null, 2);
    moe_ep_status_t st = moe_ep_knob_cache_store(path, &e);
    dup2(saved, 2), close(saved), close(null);
    EXPECT(st == MOE_EP_ERROR_INVALID_ARGUMENT && moe_ep_last_error()[0], "store over a version-2 file: %s",
           moe_ep_status_string(st));
    /* Missing file: silent and empty. */
    tmp_path(path, sizeof path, "missing.txt");
    load_t l = {path, {0}, MOE_EP_ERROR_INTERNAL};
    EXPECT(stderr_lines(do_load, &l, NULL, 0) == 0 && l.st == MOE_EP_SUCCESS && l.t.count == 0 && !l.t.rejected,
           "missing file");
    /* A directory is an error, never a crash. */
    l.path = tmp_root;
    stderr_lines(do_load, &l, NULL, 0);
    EXPECT(l.st == MOE_EP_ERROR_INVALID_ARGUMENT && l.t.count == 0, "directory as cache: %s", moe_ep_status_string(l.st));
}

static void test_malformed(void)
{
    static const char *bad[] = {
        "device=gpu path=mxfp8 wire=bf16 backend=split world=1 E=32 K=6 H=4096 I=2048 tokens=64 : gemm_tile_rows=48 gemm_ctas_per_sm=2",
        "device=gpu path=mxfp8 wire=bf16 backend=split world=1 E=32 K=6 H=4096 I=2048 tokens=64 : gemm_tile_rows=16 gemm_ctas_per_sm=5",
        "device=gpu path=mxfp8 wire=bf16 backend=split world=1 E=32 K=6 H=4096 I=2048 tokens=64 : gemm_tile_rows=16 gemm_ctas_per_sm=0",
        "device=gpu path=mxfp8 wire=bf16 backend=split world=1 E=32 K=6 H=4096 I=2048 tokens=64 : gemm_tile_rows=16",
        "device=gpu path=mxfp8 wire=bf16 backend=split world=1 E=32 K=6 H=4096 I=2048 tokens=48 : gemm_tile_rows=16 gemm_ctas_per_sm=1",
        "device=gpu path=mxfp8 wire=bf16 backend=split world=1 E=32 K=6 H=4096 I=2048 tokens=64 gemm_tile_rows=16 gemm_ctas_per_sm=1",
        "device=gpu path=mxfp8 wire=bf16 backend=split world=1 E=32 K=6 H=4096 I=2048 tokens=64 : : gemm_tile_rows=16 gemm_ctas_per_sm=1",
        "device=gpu path=mxfp8 wire=bf16 backend=split world=1 E=32 E=32 K=6 H=4096 I=2048 tokens=64 : gemm_tile_rows=16 gemm_ctas_per_sm=1",
        "device=gpu path=mxfp8 wire=bf16 backend=split world=1 E=32 K=6 H=4096 I=2048 tokens=64 color=red : gemm_tile_rows=16 gemm_ctas_per_sm=1",
        "device=gpu path=mxfp9 wire=bf16 backend=split world=1 E=32 K=6 H=4096 I=2048 tokens=64 : gemm_tile_rows=16 gemm_ctas_per_sm=1",
        "device=gpu path=mxfp8 wire=bf16 backend=split world=-1 E=32 K=6 H=4096 I=2048 tokens=64 : gemm_tile_rows=16 gemm_ctas_per_sm=1",
        "device=gpu path=mxfp8 wire=bf16 backend=split world=1 E=99999999999999999999 K=6 H=4096 I=2048 tokens=64 : gemm_tile_rows=16 gemm_ctas_per_sm=1",
        "device=gpu path=mxfp8 wire=bf16 backend=split world=1 E=32 K=6 H=4096 I=2048 tokens=64 : gemm_tile_rows=16 gemm_ctas_per_sm=1 us=-3",
        "device=gpu path=mxfp8 wire=bf16 backend=split world=1 E=32 K=6 H=4096 I=2048 tokens=64 : gemm_tile_rows=16 gemm_ctas_per_sm=1 stray",
        "device=gpu path=mxfp8 wire=bf16 backend=split world=1 E=32 K=6 H=4096 I=2048 tok",
        "just some text",
    };
    char path[128], first[512];
    size_t cap = 1 << 16, len = 0;
    char *text = malloc(cap);
    len += (size_t)snprintf(text, cap, "moe_ep-knobs 1\n# a comment\n\n   \n" GOOD_LINE);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) len += (size_t)snprintf(text + len, cap - len, "%s\n", bad[i]);
    len += (size_t)snprintf(text + len, cap - len, "device=gpu path=bf16 wire=fp4 backend=split world=1 E=32 K=6 H=4096 "
                                                   "I=2048 tokens=8 : future_knob=7 gemm_ctas_per_sm=1 gemm_tile_rows=64\r\n");
    memcpy(text + len, "device=g\0u bad", 14), len += 14, text[len++] = '\n'; /* a NUL byte */
    memset(text + len, 'x', 9000), len += 9000, text[len++] = '\n';         /* a huge line */
    len += (size_t)snprintf(text + len, cap - len, "%s", GOOD_LINE);
    len--; /* no newline at the end; this line repeats the first good one: one entry */
    int nbad = (int)(sizeof bad / sizeof bad[0]) + 2;
    tmp_path(path, sizeof path, "malformed.txt");
    write_file(path, text, len);
    load_t l = {path, {0}, MOE_EP_ERROR_INTERNAL};
    int lines = stderr_lines(do_load, &l, first, sizeof first);
    char want[64];
    snprintf(want, sizeof want, "ignoring %d malformed lines", nbad);
    EXPECT(l.st == MOE_EP_SUCCESS && l.t.count == 2 && l.t.malformed == nbad, "%d entries, %d malformed (want 2, %d)",
           l.t.count, l.t.malformed, nbad);
    EXPECT(lines == 1 && strstr(first, want) != NULL, "%d warning lines, first: %s", lines, first);
    moe_ep_knob_table_free(&l.t);
    free(text);
}

/* ---- fuzz ------------------------------------------------------------------- */

static size_t base_file(char *out, size_t cap)
{
    size_t n = (size_t)snprintf(out, cap, "moe_ep-knobs 1\n# comment\n");
    for (int i = 0; i < 5; i++)
        n += (size_t)snprintf(out + n, cap - n,
                              "device=NVIDIA_H200 path=%s wire=bf16 backend=split world=1 E=%d K=6 H=4096 I=2048 "
                              "tokens=%d : gemm_tile_rows=%d gemm_ctas_per_sm=%d us=%d.5\n",
                              path_name(i), 32 + i, 1 << (3 * i), i % 2 ? 64 : 16, 1 + i % 4, 100 * i);
    return n;
}

static void parse_check(const char *text, size_t len, int *entries)
{
    moe_ep_knob_table_t t;
    memset(&t, 0, sizeof t);
    moe_ep_status_t st = moe_ep_knob_table_parse(&t, text, len);
    EXPECT(st == MOE_EP_SUCCESS, "parse of %zu bytes: %s", len, moe_ep_last_error());
    for (int i = 0; i < t.count; i++)
        EXPECT(moe_ep_knob_entry_check(&t.entries[i]) == MOE_EP_SUCCESS, "parsed an invalid entry");
    if (entries) *entries = t.count;
    moe_ep_knob_table_free(&t);
}

static const char *const snippets[] = {"=", ":", " : ", "\n", "\0", "\xff\xfe", "tokens=64", "gemm_tile_rows=64",
                                       "E=32", "99999999999999999999999", "-16", "-0", "#", "moe_ep-knobs 1\n",
                                       "gemm_ctas_per_sm=", "us=1.2.3", "device=", "\r\n", "\t", "tile_rowz=16"};

/* One random edit of buf (len bytes, capacity cap). */
static size_t mutate(char *buf, size_t len, size_t cap, uint64_t *rng)
{
    uint64_t r = test_rand_u64(rng);
    size_t at = len ? (size_t)(test_rand_u64(rng) % len) : 0;
    switch (r % 6) {
    case 0:                                                                     /* random byte */
        if (len) buf[at] = (char)(test_rand_u64(rng) & 0xFF);
        return len;
    case 1: return at;                                                          /* truncate */
    case 2: {                                                                   /* delete a range */
        size_t n = (size_t)(test_rand_u64(rng) % 40);
        n = n > len - at ? len - at : n;
        memmove(buf + at, buf + at + n, len - at - n);
        return len - n;
    }
    case 3: {                                                                   /* insert a snippet */
        const char *s = snippets[test_rand_u64(rng) % (sizeof snippets / sizeof snippets[0])];
        size_t n = s[0] ? strlen(s) : 1;
        if (len + n > cap) return len;
        memmove(buf + at + n, buf + at, len - at);
        memcpy(buf + at, s, n);
        return len + n;
    }
    case 4: {                                                                   /* duplicate a slice */
        size_t n = (size_t)(test_rand_u64(rng) % 200);
        n = n > len - at ? len - at : n;
        if (len + n > cap) return len;
        memmove(buf + at + n, buf + at, len - at);
        return len + n;
    }
    default: {                                                                  /* a very long run */
        size_t n = 1000 + (size_t)(test_rand_u64(rng) % 8000);
        if (len + n > cap) return len;
        memmove(buf + at + n, buf + at, len - at);
        memset(buf + at, (int)(r >> 8) & 1 ? '9' : 'a', n);
        return len + n;
    }
    }
}

static void test_fuzz(uint64_t *rng)
{
    enum { CAP = 1 << 17 };
    char *base = malloc(CAP), *buf = malloc(CAP), path[128];
    size_t n = base_file(base, CAP);
    int full = -1, got;
    parse_check(base, n, &full);
    EXPECT(full == 5, "base file: %d entries", full);
    for (size_t i = 0; i <= n; i++) { /* truncated at every position */
        parse_check(base, i, &got);
        EXPECT(got <= full, "truncation at %zu: %d entries", i, got);
    }
    int iters = quick() ? 1500 : 20000, via_file = quick() ? 300 : 50;
    tmp_path(path, sizeof path, "fuzz.txt");
    for (int it = 0; it < iters; it++) {
        memcpy(buf, base, n);
        size_t len = n;
        int edits = 1 + (int)(test_rand_u64(rng) % 8);
        for (int e = 0; e < edits; e++) len = mutate(buf, len, CAP, rng);
        parse_check(buf, len, NULL);
        if (it % via_file == 0) { /* the same bytes through the file loader */
            write_file(path, buf, len);
            load_t l = {path, {0}, MOE_EP_ERROR_INTERNAL};
            EXPECT(stderr_lines(do_load, &l, NULL, 0) <= 1 && l.st == MOE_EP_SUCCESS, "load of mutation %d", it);
            moe_ep_knob_table_free(&l.t);
        }
    }
    printf("fuzz: %zu truncations and %d random mutations parsed\n", n + 1, iters);
    free(base), free(buf);
}

/* ---- writers ---------------------------------------------------------------- */

enum { WRITERS = 4, PER_WRITER = 50 };

static moe_ep_knob_entry_t writer_entry(int w, int i)
{
    return entry("gpu", (moe_ep_path_t)(i % MOE_EP_PATH_COUNT_), 100 * (w + 1) + i, 1 << (i % 8), i % 2 ? 64 : 16,
                 1 + w);
}

static void test_concurrent_writers(void)
{
    char path[128];
    tmp_path(path, sizeof path, "sub/dir/knobs.txt"); /* parents are created */
    pid_t pids[WRITERS];
    for (int w = 0; w < WRITERS; w++) {
        if ((pids[w] = fork()) != 0) continue;
        int bad = 0;
        for (int i = 0; i < PER_WRITER; i++) {
            moe_ep_knob_entry_t e = writer_entry(w, i);
            bad += moe_ep_knob_cache_store(path, &e) != MOE_EP_SUCCESS;
        }
        _exit(bad ? 1 : 0);
    }
    for (int w = 0; w < WRITERS; w++) {
        int status = -1;
        EXPECT(pids[w] > 0 && waitpid(pids[w], &status, 0) == pids[w] && WIFEXITED(status) && WEXITSTATUS(status) == 0,
               "writer %d failed (status %d)", w, status);
    }
    load_t l = {path, {0}, MOE_EP_ERROR_INTERNAL};
    EXPECT(stderr_lines(do_load, &l, NULL, 0) == 0 && l.st == MOE_EP_SUCCESS, "load after writers");
    EXPECT(l.t.count == WRITERS * PER_WRITER && l.t.malformed == 0, "%d entries, %d malformed, want %d", l.t.count,
           l.t.malformed, WRITERS * PER_WRITER);
    int missing = 0;
    for (int w = 0; w < WRITERS; w++)
        for (int i = 0; i < PER_WRITER; i++) {
            moe_ep_knob_entry_t e = writer_entry(w, i);
            missing += find(&l.t, &e) == NULL;
        }
    EXPECT(missing == 0, "%d entries lost", missing);
    moe_ep_knob_table_free(&l.t);
    char tmp[160];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.0", path, (long)pids[0]);
    EXPECT(!file_exists(tmp), "temporary file %s left behind", tmp);
}

/* ---- path and precedence ------------------------------------------------------ */

static void test_cache_path(void)
{
    char p[256], want[256];
    int on = -1;
    setenv("MOE_EP_KNOB_CACHE", "/x/y/knobs.txt", 1);
    EXPECT(moe_ep_knob_cache_path(p, sizeof p, &on) == MOE_EP_SUCCESS && on && strcmp(p, "/x/y/knobs.txt") == 0, "env: %s", p);
    setenv("MOE_EP_KNOB_CACHE", "off", 1);
    EXPECT(moe_ep_knob_cache_path(p, sizeof p, &on) == MOE_EP_SUCCESS && on == 0, "off");
    unsetenv("MOE_EP_KNOB_CACHE");
    setenv("XDG_CACHE_HOME", tmp_root, 1);
    snprintf(want, sizeof want, "%s/moe_ep/knobs.txt", tmp_root);
    EXPECT(moe_ep_knob_cache_path(p, sizeof p, &on) == MOE_EP_SUCCESS && on && strcmp(p, want) == 0, "xdg: %s", p);
    setenv("XDG_CACHE_HOME", "relative", 1);
    setenv("HOME", "/home/someone", 1);
    EXPECT(moe_ep_knob_cache_path(p, sizeof p, &on) == MOE_EP_SUCCESS && on &&
               strcmp(p, "/home/someone/.cache/moe_ep/knobs.txt") == 0, "home: %s", p);
    unsetenv("XDG_CACHE_HOME"), unsetenv("HOME");
    EXPECT(moe_ep_knob_cache_path(p, sizeof p, &on) == MOE_EP_SUCCESS && on == 0, "no HOME: enabled %d", on);
    EXPECT(moe_ep_knob_cache_path(p, 8, &on) == MOE_EP_SUCCESS, "no HOME, small buffer");
    setenv("MOE_EP_KNOB_CACHE", "/a/long/path/name", 1);
    EXPECT(moe_ep_knob_cache_path(p, 8, &on) == MOE_EP_ERROR_INVALID_ARGUMENT, "path longer than the buffer");
}

static moe_ep_layer_t ref_layer(moe_ep_group_t g, moe_ep_path_t path, int hidden, const moe_ep_knobs_t *knobs, int autotune)
{
    moe_ep_layer_config_t c = MOE_EP_LAYER_CONFIG_INIT;
    c.num_experts = 8, c.top_k = 2, c.hidden = hidden, c.intermediate = 128, c.max_tokens_per_rank = 4096;
    c.path = path, c.knobs = knobs, c.autotune = autotune;
    moe_ep_layer_t l = NULL;
    EXPECT(moe_ep_layer_create(g, &c, &l) == MOE_EP_SUCCESS, "create: %s", moe_ep_last_error());
    return l;
}

static moe_ep_knobs_t resolve(moe_ep_layer_t l, int T, int may_read, moe_ep_knob_source_t *src)
{
    moe_ep_knobs_t k = MOE_EP_KNOBS_INIT;
    int64_t rows = (int64_t)T * 2 * 2; /* 2 local ranks, top-2 */
    EXPECT(moe_ep_knobs_resolve(l, T, rows, may_read, &k, src) == MOE_EP_SUCCESS, "resolve: %s", moe_ep_last_error());
    return k;
}

#define EXPECT_KNOBS(k, src, tile, ctas, want_src)                                                         \
    EXPECT((k).gemm_tile_rows == (tile) && (k).gemm_ctas_per_sm == (ctas) && (src) == (want_src),          \
           "knobs (%d, %d) from %d, want (%d, %d) from %d", (k).gemm_tile_rows, (k).gemm_ctas_per_sm, (int)(src), \
           tile, ctas, (int)(want_src))

/* A cache entry for ref_layer's key (device "cpu", reference backend, world 2). */
static void put_ref_entry(const char *path, int tokens, int tile, int ctas)
{
    moe_ep_knob_entry_t e = entry("cpu", MOE_EP_PATH_NVFP4, 8, tokens, tile, ctas);
    e.key.backend = MOE_EP_BACKEND_REFERENCE, e.key.world = 2, e.key.K = 2, e.key.H = 128, e.key.I = 128;
    EXPECT(moe_ep_knob_cache_store(path, &e) == MOE_EP_SUCCESS, "store: %s", moe_ep_last_error());
}

static void test_precedence(moe_ep_group_t g)
{
    char path[128];
    tmp_path(path, sizeof path, "layer/knobs.txt");
    setenv("MOE_EP_KNOB_CACHE", path, 1);
    put_ref_entry(path, 64, 64, 2);
    moe_ep_knob_source_t src;
    moe_ep_layer_t l = ref_layer(g, MOE_EP_PATH_NVFP4, 128, NULL, 0);
    moe_ep_knobs_t k = resolve(l, 3, 0, &src); /* capturing: no file read yet */
    EXPECT_KNOBS(k, src, 16, 0, MOE_EP_KNOBS_HEURISTIC);
    k = resolve(l, 64, 1, &src);
    EXPECT_KNOBS(k, src, 64, 2, MOE_EP_KNOBS_CACHE);
    k = resolve(l, 3, 1, &src); /* bucket 4: nearest larger entry */
    EXPECT_KNOBS(k, src, 64, 2, MOE_EP_KNOBS_CACHE);
    put_ref_entry(path, 4, 16, 3); /* read once per layer: not seen by l */
    k = resolve(l, 3, 1, &src);
    EXPECT_KNOBS(k, src, 64, 2, MOE_EP_KNOBS_CACHE);
    k = (moe_ep_knobs_t)MOE_EP_KNOBS_INIT;
    k.gemm_tile_rows = 64, k.gemm_ctas_per_sm = 1;
    EXPECT(moe_ep_knobs_set_tuned(l, 3, &k, 9.0) == MOE_EP_SUCCESS, "set_tuned");
    k = resolve(l, 3, 1, &src);
    EXPECT_KNOBS(k, src, 64, 1, MOE_EP_KNOBS_AUTOTUNED);
    moe_ep_layer_destroy(l);
    moe_ep_knobs_t x = MOE_EP_KNOBS_INIT;
    x.gemm_tile_rows = 16; /* explicit tile rows; CTAs from the cache */
    l = ref_layer(g, MOE_EP_PATH_NVFP4, 128, &x, 0);
    k = resolve(l, 3, 1, &src);
    EXPECT_KNOBS(k, src, 16, 1, MOE_EP_KNOBS_EXPLICIT); /* the tuned entry (64, 1) was written for bucket 4 */
    k = resolve(l, 4000, 1, &src);                      /* bucket 4096: nearest smaller is 64 */
    EXPECT_KNOBS(k, src, 16, 2, MOE_EP_KNOBS_EXPLICIT);
    moe_ep_layer_destroy(l);
    put_ref_entry(path, 1024, 128, 1); /* a stray 128 (wgmma) entry for an nvfp4 layer: the heuristic's tile */
    l = ref_layer(g, MOE_EP_PATH_NVFP4, 128, NULL, 0);
    k = resolve(l, 1024, 1, &src);
    EXPECT_KNOBS(k, src, 64, 1, MOE_EP_KNOBS_CACHE);
    moe_ep_layer_destroy(l);
    setenv("MOE_EP_KNOB_CACHE", "off", 1); /* no reads */
    l = ref_layer(g, MOE_EP_PATH_NVFP4, 128, NULL, 0);
    k = resolve(l, 64, 1, &src);
    EXPECT_KNOBS(k, src, 64, 0, MOE_EP_KNOBS_HEURISTIC);
    moe_ep_layer_destroy(l);
}

static void test_heuristic_and_tuning(moe_ep_group_t g)
{
    char path[128];
    moe_ep_knob_source_t src;
    tmp_path(path, sizeof path, "off/knobs.txt");
    setenv("XDG_CACHE_HOME", tmp_root, 1); /* would be <tmp>/moe_ep/knobs.txt */
    setenv("MOE_EP_KNOB_CACHE", "off", 1);
    moe_ep_layer_t l = ref_layer(g, MOE_EP_PATH_BF16, 256, NULL, 1);
    /* bf16 with H % 256 == 0 and I % 128 == 0: 128 (wgmma) at every T */
    moe_ep_knobs_t k = resolve(l, 1, 1, &src);
    EXPECT_KNOBS(k, src, 128, 0, MOE_EP_KNOBS_HEURISTIC);
    k = resolve(l, 48, 1, &src);
    EXPECT_KNOBS(k, src, 128, 0, MOE_EP_KNOBS_HEURISTIC);
    k = resolve(l, 256, 1, &src);
    EXPECT_KNOBS(k, src, 128, 0, MOE_EP_KNOBS_HEURISTIC);
    moe_ep_knobs_t cand[8];
    int n = -1;
    EXPECT(moe_ep_knobs_tune_candidates(l, 256, cand, 8, &n) == MOE_EP_SUCCESS && n == 5 &&
               cand[4].gemm_tile_rows == 128, "bf16 candidates: %d", n);
    EXPECT(moe_ep_knobs_tune_candidates(l, 200, cand, 8, &n) == MOE_EP_SUCCESS && n == 0, "tuned once per bucket");
    EXPECT(moe_ep_knobs_set_tuned(l, 256, &cand[1], 1.0) == MOE_EP_SUCCESS, "set_tuned");
    char xdg_file[160];
    snprintf(xdg_file, sizeof xdg_file, "%s/moe_ep/knobs.txt", tmp_root);
    EXPECT(!file_exists(xdg_file) && !file_exists(path), "MOE_EP_KNOB_CACHE=off wrote a file");
    moe_ep_layer_destroy(l);
    l = ref_layer(g, MOE_EP_PATH_NVFP4, 128, NULL, 1);
    k = resolve(l, 48, 1, &src); /* 8 local experts: rows <= 192 -> 16, else 64 */
    EXPECT_KNOBS(k, src, 16, 0, MOE_EP_KNOBS_HEURISTIC);
    k = resolve(l, 49, 1, &src);
    EXPECT_KNOBS(k, src, 64, 0, MOE_EP_KNOBS_HEURISTIC);
    k = resolve(l, 256, 1, &src);
    EXPECT_KNOBS(k, src, 64, 0, MOE_EP_KNOBS_HEURISTIC);
    EXPECT(moe_ep_knobs_tune_candidates(l, 256, cand, 8, &n) == MOE_EP_SUCCESS && n == 4, "nvfp4 candidates: %d", n);
    moe_ep_layer_destroy(l);
    static const moe_ep_path_t one_tile[4] = {MOE_EP_PATH_FP8_BLOCK, MOE_EP_PATH_MXFP8, MOE_EP_PATH_W4A8,
                                              MOE_EP_PATH_NVFP4};
    for (int i = 0; i < 4; i++) { /* with H % 256, I % 128: the register tile at every T; rows per expert */
        const char *name = moe_ep_path_name(one_tile[i]); /* on average <= 8: 16, <= 28: 32, <= 60: 64 */
        l = ref_layer(g, one_tile[i], 256, NULL, 1);
        moe_ep_knobs_t x = MOE_EP_KNOBS_INIT;
        k = resolve(l, 1, 1, &src);
        EXPECT_KNOBS(k, src, 16, 0, MOE_EP_KNOBS_HEURISTIC);
        k = resolve(l, 16, 1, &src); /* 64 rows over 8 experts */
        EXPECT_KNOBS(k, src, 16, 0, MOE_EP_KNOBS_HEURISTIC);
        k = resolve(l, 17, 1, &src);
        EXPECT_KNOBS(k, src, 32, 0, MOE_EP_KNOBS_HEURISTIC);
        k = resolve(l, 56, 1, &src); /* 224 rows over 8 experts */
        EXPECT_KNOBS(k, src, 32, 0, MOE_EP_KNOBS_HEURISTIC);
        k = resolve(l, 57, 1, &src);
        EXPECT_KNOBS(k, src, 64, 0, MOE_EP_KNOBS_HEURISTIC);
        k = resolve(l, 120, 1, &src); /* 480 rows over 8 experts */
        EXPECT_KNOBS(k, src, 64, 0, MOE_EP_KNOBS_HEURISTIC);
        k = resolve(l, 121, 1, &src);
        EXPECT_KNOBS(k, src, 128, 0, MOE_EP_KNOBS_HEURISTIC);
        EXPECT(moe_ep_knobs_tune_candidates(l, 8, cand, 8, &n) == MOE_EP_SUCCESS && n == 0, "%s candidates: %d", name, n);
        x.gemm_tile_rows = 48;
        EXPECT(moe_ep_knobs_force(l, &x) != MOE_EP_SUCCESS, "%s: 48-row knobs accepted", name);
        x.gemm_tile_rows = 16;
        EXPECT(moe_ep_knobs_force(l, &x) == MOE_EP_SUCCESS, "%s: 16-row knobs refused", name);
        x.gemm_tile_rows = 32;
        EXPECT(moe_ep_knobs_force(l, &x) == MOE_EP_SUCCESS, "%s: 32-row knobs refused", name);
        moe_ep_layer_destroy(l);
    }
    moe_ep_knobs_t x = MOE_EP_KNOBS_INIT;
    x.gemm_ctas_per_sm = 3;
    l = ref_layer(g, MOE_EP_PATH_NVFP4, 128, &x, 1);
    EXPECT(moe_ep_knobs_tune_candidates(l, 8, cand, 8, &n) == MOE_EP_SUCCESS && n == 2 &&
               cand[0].gemm_ctas_per_sm == 3 && cand[1].gemm_ctas_per_sm == 3, "explicit CTAs: %d candidates", n);
    moe_ep_layer_destroy(l);
    unsetenv("XDG_CACHE_HOME");
}

/* ---- public API ---------------------------------------------------------------- */

static void test_layer_api(moe_ep_group_t g)
{
    moe_ep_layer_config_t c = MOE_EP_LAYER_CONFIG_INIT;
    c.num_experts = 8, c.top_k = 2, c.hidden = 128, c.intermediate = 128, c.max_tokens_per_rank = 16;
    moe_ep_knobs_t k = MOE_EP_KNOBS_INIT;
    moe_ep_layer_t l = (moe_ep_layer_t)0x1;
    c.knobs = &k;
    static const int bad[][3] = {{1, 0, 0}, {0, 32, 0}, {0, 128, 0}, {0, -16, 0}, {0, 16, 5}, {0, 0, -1}, {0, 64, 9}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        k = (moe_ep_knobs_t)MOE_EP_KNOBS_INIT;
        k.size += (size_t)bad[i][0], k.gemm_tile_rows = bad[i][1], k.gemm_ctas_per_sm = bad[i][2];
        moe_ep_status_t st = moe_ep_layer_create(g, &c, &l);
        EXPECT(st == MOE_EP_ERROR_INVALID_ARGUMENT && moe_ep_last_error()[0] && l == (moe_ep_layer_t)0x1,
               "bad knobs %zu: %s", i, moe_ep_status_string(st));
    }
    /* 128 (a wgmma tile): only with hidden % 256 == 0 and intermediate % 128 == 0 */
    k = (moe_ep_knobs_t)MOE_EP_KNOBS_INIT;
    k.gemm_tile_rows = 128, c.hidden = 128, c.path = MOE_EP_PATH_NVFP4;
    EXPECT(moe_ep_layer_create(g, &c, &l) == MOE_EP_ERROR_INVALID_ARGUMENT, "128 rows on nvfp4, hidden 128");
    c.hidden = 256, c.path = MOE_EP_PATH_MXFP8; /* the quantized paths: their register tile, 16 to 128 rows, only */
    EXPECT(moe_ep_layer_create(g, &c, &l) == MOE_EP_SUCCESS, "128 rows on mxfp8: %s", moe_ep_last_error());
    moe_ep_layer_destroy(l);
    k.gemm_tile_rows = 48;
    EXPECT(moe_ep_layer_create(g, &c, &l) == MOE_EP_ERROR_INVALID_ARGUMENT, "48 rows on mxfp8");
    k.gemm_tile_rows = 16, c.path = MOE_EP_PATH_NVFP4;
    EXPECT(moe_ep_layer_create(g, &c, &l) == MOE_EP_SUCCESS, "16 rows on nvfp4: %s", moe_ep_last_error());
    moe_ep_layer_destroy(l);
    k.gemm_tile_rows = 128, c.path = MOE_EP_PATH_BF16;
    EXPECT(moe_ep_layer_create(g, &c, &l) == MOE_EP_SUCCESS, "128 rows on bf16: %s", moe_ep_last_error());
    moe_ep_layer_destroy(l);
    l = (moe_ep_layer_t)0x1, c.hidden = 128;
    c.knobs = NULL, c.autotune = 2;
    EXPECT(moe_ep_layer_create(g, &c, &l) == MOE_EP_ERROR_INVALID_ARGUMENT, "autotune 2");
    k = (moe_ep_knobs_t)MOE_EP_KNOBS_INIT;
    k.gemm_tile_rows = 16, k.gemm_ctas_per_sm = 2;
    c.knobs = &k, c.autotune = 1;
    EXPECT(moe_ep_layer_create(g, &c, &l) == MOE_EP_SUCCESS, "good knobs: %s", moe_ep_last_error());
    k.gemm_tile_rows = 64; /* the layer keeps its own copy */
    moe_ep_layer_config_t got = MOE_EP_LAYER_CONFIG_INIT;
    EXPECT(moe_ep_layer_get_config(l, &got) == MOE_EP_SUCCESS && got.knobs && got.knobs != &k &&
               got.knobs->gemm_tile_rows == 16 && got.knobs->gemm_ctas_per_sm == 2 && got.autotune == 1,
           "get_config knobs");
    moe_ep_knobs_t out = MOE_EP_KNOBS_INIT;
    moe_ep_knob_source_t src = MOE_EP_KNOBS_CACHE;
    EXPECT(moe_ep_layer_get_knobs(l, 8, &out, &src) == MOE_EP_SUCCESS && out.gemm_tile_rows == 0 &&
               out.gemm_ctas_per_sm == 0 && src == MOE_EP_KNOBS_HEURISTIC, "reference get_knobs");
    EXPECT(moe_ep_layer_get_knobs(l, 0, &out, NULL) == MOE_EP_SUCCESS, "T = 0, no source");
    out.gemm_tile_rows = 77;
    EXPECT(moe_ep_layer_get_knobs(NULL, 8, &out, &src) == MOE_EP_ERROR_INVALID_ARGUMENT, "NULL layer");
    EXPECT(moe_ep_layer_get_knobs(l, 8, NULL, &src) == MOE_EP_ERROR_INVALID_ARGUMENT, "NULL knobs");
    EXPECT(moe_ep_layer_get_knobs(l, -1, &out, &src) == MOE_EP_ERROR_INVALID_ARGUMENT, "T = -1");
    EXPECT(moe_ep_layer_get_knobs(l, 17, &out, &src) == MOE_EP_ERROR_INVALID_ARGUMENT, "T > max");
    out.size = 4;
    EXPECT(moe_ep_layer_get_knobs(l, 8, &out, &src) == MOE_EP_ERROR_INVALID_ARGUMENT && moe_ep_last_error()[0],
           "bad size");
    EXPECT(out.gemm_tile_rows == 77, "knobs written on failure");
    moe_ep_layer_destroy(l);
}

/* The bf16 tile's form per forward (split_kernels.h): swapped where experts
 * get 128 < rows <= 512 on average, the same rule for split and mega. */
static void test_bf16_swapped_rule(void)
{
    static const struct { long long rows; int E, want; } c[] = {
        {128 * 48, 48, 0}, {128 * 48 + 1, 48, 1}, {256 * 48, 48, 1}, {512 * 48, 48, 1},
        {512 * 48 + 1, 48, 0}, {6 * 512, 32, 0}, {6 * 2048, 32, 1}, {6 * 8192, 32, 0}, {0, 8, 0}};
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
        EXPECT(moe_ep_bf16_swapped(c[i].rows, c[i].E) == c[i].want, "moe_ep_bf16_swapped(%lld, %d) != %d", c[i].rows,
               c[i].E, c[i].want);
}

int main(void)
{
    uint64_t rng = test_seed();
    snprintf(tmp_root, sizeof tmp_root, "/tmp/moe_ep_knobs.XXXXXX");
    if (!mkdtemp(tmp_root)) return fprintf(stderr, "mkdtemp failed\n"), 1;
    unsetenv("MOE_EP_KNOB_CACHE");
    test_bucket();
    test_round_trip();
    test_lookup();
    test_version();
    test_malformed();
    test_fuzz(&rng);
    test_concurrent_writers();
    test_cache_path();
    test_bf16_swapped_rule();
    moe_ep_group_t g = NULL;
    EXPECT(moe_ep_group_create_emulated(2, -1, &g) == MOE_EP_SUCCESS, "group");
    test_precedence(g);
    test_heuristic_and_tuning(g);
    test_layer_api(g);
    moe_ep_group_destroy(g);
    remove_tree(tmp_root);
    EXPECT(!file_exists(tmp_root), "temporary directory %s left behind", tmp_root);
    return test_summary("test_knobs");
}
