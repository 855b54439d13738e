/* The knob cache file (see knob_cache.h and docs/knobs.md): a line parser that
 * takes any bytes, lookups by token bucket, and atomic, locked updates. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* flock */
#include "tune/knob_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define LINE_BYTES_MAX 4096 /* longer lines are malformed */
#define PATH_BYTES 4096
#define DIM_MAX (1 << 24)  /* world, E, K, H, I */
#define US_MAX 1e12

/* ---- values ---------------------------------------------------------------- */

static int safe_char(unsigned char c) { return c > 0x20 && c < 0x7f && c != ':' && c != '=' && c != '#'; }

static int device_ok(const char *d)
{
    const char *end = memchr(d, '\0', MOE_EP_KNOB_DEVICE_MAX);
    if (!end || end == d) return 0;
    for (const char *p = d; p < end; p++)
        if (!safe_char((unsigned char)*p)) return 0;
    return 1;
}

static int bucket_ok(int t) { return t >= 1 && t <= MOE_EP_KNOB_MAX_TOKENS && (t & (t - 1)) == 0; }
static int dim_ok(int v) { return v >= 1 && v <= DIM_MAX; }
int moe_ep_knob_values_ok(int tile_rows, int ctas_per_sm)
{
    return (tile_rows == 16 || tile_rows == 32 || tile_rows == 64 || tile_rows == 128) && ctas_per_sm >= 1 &&
           ctas_per_sm <= 4;
}
static int us_ok(double us) { return isfinite(us) && us >= 0.0 && us < US_MAX; }

static int key_ok(const moe_ep_knob_key_t *k)
{
    return device_ok(k->device) && (unsigned)k->path < MOE_EP_PATH_COUNT_ &&
           (unsigned)k->wire < MOE_EP_WIRE_COUNT_ && (unsigned)k->backend < MOE_EP_BACKEND_COUNT_ &&
           dim_ok(k->world) && dim_ok(k->E) && dim_ok(k->K) && dim_ok(k->H) && dim_ok(k->I);
}

moe_ep_status_t moe_ep_knob_entry_check(const moe_ep_knob_entry_t *e)
{
    MOE_EP_REQUIRE(e != NULL, "knob entry is NULL");
    MOE_EP_REQUIRE(key_ok(&e->key),
                   "knob entry: bad key (device name empty or with unsafe bytes, unknown path, wire "
                   "or backend, or world/E/K/H/I not in [1, %d])", DIM_MAX);
    MOE_EP_REQUIRE(bucket_ok(e->tokens), "knob entry: tokens %d is not a power of two in [1, %d]",
                   e->tokens, MOE_EP_KNOB_MAX_TOKENS);
    MOE_EP_REQUIRE(moe_ep_knob_values_ok(e->tile_rows, e->ctas_per_sm),
                   "knob entry: gemm_tile_rows %d (16, 32, 64 or 128) or gemm_ctas_per_sm %d (1..4) invalid",
                   e->tile_rows, e->ctas_per_sm);
    MOE_EP_REQUIRE(us_ok(e->us), "knob entry: us %g not in [0, %g)", e->us, US_MAX);
    return MOE_EP_SUCCESS;
}

moe_ep_status_t moe_ep_knob_bucket(int64_t tokens, int *bucket)
{
    MOE_EP_REQUIRE(bucket != NULL, "bucket is NULL");
    MOE_EP_REQUIRE(tokens >= 0 && tokens <= MOE_EP_KNOB_MAX_TOKENS, "tokens %lld not in [0, %d]",
                   (long long)tokens, MOE_EP_KNOB_MAX_TOKENS);
    int b = 1;
    while (b < tokens) b *= 2;
    *bucket = b;
    return MOE_EP_SUCCESS;
}

moe_ep_status_t moe_ep_knob_key_set_device(moe_ep_knob_key_t *key, const char *name)
{
    MOE_EP_REQUIRE(key != NULL && name != NULL, "NULL argument");
    size_t n = strnlen(name, MOE_EP_KNOB_DEVICE_MAX - 1);
    MOE_EP_REQUIRE(n > 0, "empty device name");
    for (size_t i = 0; i < n; i++) key->device[i] = safe_char((unsigned char)name[i]) ? name[i] : '_';
    key->device[n] = '\0';
    return MOE_EP_SUCCESS;
}

moe_ep_status_t moe_ep_knob_cache_path(char *path, size_t size, int *enabled)
{
    MOE_EP_REQUIRE(path != NULL && size > 0 && enabled != NULL, "NULL argument");
    const char *env = getenv("MOE_EP_KNOB_CACHE"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char buf[PATH_BYTES];
    int n;
    if (env && *env && strcmp(env, "off") == 0) return (*enabled = 0), MOE_EP_SUCCESS;
    if (env && *env) n = snprintf(buf, sizeof buf, "%s", env);
    else if (xdg && xdg[0] == '/') n = snprintf(buf, sizeof buf, "%s/moe_ep/knobs.txt", xdg);
    else if (home && *home) n = snprintf(buf, sizeof buf, "%s/.cache/moe_ep/knobs.txt", home);
    else return (*enabled = 0), MOE_EP_SUCCESS; /* nowhere to keep it */
    MOE_EP_REQUIRE(n >= 0 && (size_t)n < size && (size_t)n < sizeof buf - 32,
                   "knob cache path too long (%d bytes)", n);
    memcpy(path, buf, (size_t)n + 1);
    *enabled = 1;
    return MOE_EP_SUCCESS;
}

/* ---- parsing ---------------------------------------------------------------- */

typedef struct {
    const char *s;
    size_t n;
} span_t;

enum { F_DEVICE, F_PATH, F_WIRE, F_BACKEND, F_WORLD, F_E, F_K, F_H, F_I, F_TOKENS, F_TILE, F_CTAS, F_US, F_COUNT };
#define F_KEYS F_TILE /* fields left of the colon: [0, F_KEYS) */

static const char *const field_names[F_COUNT] = {"device", "path", "wire", "backend", "world", "E", "K",
                                                 "H", "I", "tokens", "gemm_tile_rows", "gemm_ctas_per_sm", "us"};

static int span_is(span_t a, const char *lit)
{
    size_t n = strlen(lit);
    return a.n == n && memcmp(a.s, lit, n) == 0;
}

static int is_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

static span_t trim(span_t a)
{
    while (a.n > 0 && is_blank(a.s[0])) a.s++, a.n--;
    while (a.n > 0 && is_blank(a.s[a.n - 1])) a.n--;
    return a;
}

/* The next blank-separated token of *line (n = 0 at the end). */
static span_t next_token(span_t *line)
{
    *line = trim(*line);
    span_t tok = {line->s, 0};
    while (tok.n < line->n && !is_blank(line->s[tok.n])) tok.n++;
    line->s += tok.n, line->n -= tok.n;
    return tok;
}

/* Decimal integer in [lo, hi]: optional '-', then 1..12 digits. */
static int parse_int(span_t v, int64_t lo, int64_t hi, int *out)
{
    size_t i = v.n > 0 && v.s[0] == '-';
    if (i == v.n || v.n - i > 12) return 0;
    int64_t x = 0;
    for (size_t j = i; j < v.n; j++) {
        if (v.s[j] < '0' || v.s[j] > '9') return 0;
        x = x * 10 + (v.s[j] - '0');
    }
    x = i ? -x : x;
    if (x < lo || x > hi) return 0;
    *out = (int)x;
    return 1;
}

/* Microseconds: digits, optionally '.' and digits (no locale involved). */
static int parse_us(span_t v, double *out)
{
    double x = 0, unit = 1;
    int digits = 0, dot = 0;
    for (size_t i = 0; i < v.n; i++) {
        char c = v.s[i];
        if (c == '.' && !dot) {
            dot = 1;
            continue;
        }
        if (c < '0' || c > '9' || ++digits > 18) return 0;
        if (dot) unit /= 10, x += unit * (c - '0');
        else x = x * 10 + (c - '0');
    }
    if (digits == 0 || !us_ok(x)) return 0;
    *out = x;
    return 1;
}

static const char *path_str(int i) { return moe_ep_path_name((moe_ep_path_t)i); }
static const char *wire_str(int i) { return moe_ep_wire_name((moe_ep_wire_t)i); }
static const char *backend_str(int i) { return moe_ep_backend_name((moe_ep_backend_t)i); }

static int parse_name(span_t v, const char *(*name)(int), int count, int *out)
{
    for (int i = 0; i < count; i++)
        if (span_is(v, name(i))) return (*out = i), 1;
    return 0;
}

static int parse_device(span_t v, char *out)
{
    if (v.n == 0 || v.n >= MOE_EP_KNOB_DEVICE_MAX) return 0;
    for (size_t i = 0; i < v.n; i++)
        if (!safe_char((unsigned char)v.s[i])) return 0;
    memcpy(out, v.s, v.n);
    out[v.n] = '\0';
    return 1;
}

static int parse_field(moe_ep_knob_entry_t *e, int f, span_t v)
{
    moe_ep_knob_key_t *k = &e->key;
    int x = 0, ok;
    switch (f) {
    case F_DEVICE: return parse_device(v, k->device);
    case F_PATH:
        ok = parse_name(v, path_str, MOE_EP_PATH_COUNT_, &x), k->path = (moe_ep_path_t)x;
        return ok;
    case F_WIRE:
        ok = parse_name(v, wire_str, MOE_EP_WIRE_COUNT_, &x), k->wire = (moe_ep_wire_t)x;
        return ok;
    case F_BACKEND:
        ok = parse_name(v, backend_str, MOE_EP_BACKEND_COUNT_, &x), k->backend = (moe_ep_backend_t)x;
        return ok;
    case F_WORLD: return parse_int(v, 1, DIM_MAX, &k->world);
    case F_E: return parse_int(v, 1, DIM_MAX, &k->E);
    case F_K: return parse_int(v, 1, DIM_MAX, &k->K);
    case F_H: return parse_int(v, 1, DIM_MAX, &k->H);
    case F_I: return parse_int(v, 1, DIM_MAX, &k->I);
    case F_TOKENS: return parse_int(v, 1, MOE_EP_KNOB_MAX_TOKENS, &e->tokens) && bucket_ok(e->tokens);
    case F_TILE: return parse_int(v, 16, 128, &e->tile_rows) && moe_ep_knob_values_ok(e->tile_rows, 1);
    case F_CTAS: return parse_int(v, 1, 4, &e->ctas_per_sm);
    default: return parse_us(v, &e->us);
    }
}

static int field_index(span_t name, int first, int end)
{
    for (int f = first; f < end; f++)
        if (span_is(name, field_names[f])) return f;
    return -1;
}

/* One entry line (trimmed, not blank, not a comment): 1 and *e if valid. Every
 * key field once left of a lone ':'; right of it the two knobs once, us at
 * most once, unknown name=value pairs skipped. */
static int parse_entry(span_t line, moe_ep_knob_entry_t *e)
{
    unsigned seen = 0, need = ((1u << F_KEYS) - 1) | (1u << F_TILE) | (1u << F_CTAS);
    int after = 0;
    memset(e, 0, sizeof *e);
    for (span_t tok = next_token(&line); tok.n > 0; tok = next_token(&line)) {
        if (span_is(tok, ":")) {
            if (after++) return 0;
            continue;
        }
        const char *eq = memchr(tok.s, '=', tok.n);
        if (!eq || eq == tok.s) return 0;
        span_t name = {tok.s, (size_t)(eq - tok.s)}, value = {eq + 1, tok.n - name.n - 1};
        int f = after ? field_index(name, F_KEYS, F_COUNT) : field_index(name, 0, F_KEYS);
        if (f < 0 && after) continue; /* a newer writer's knob: ignored */
        if (f < 0 || (seen & (1u << f)) || !parse_field(e, f, value)) return 0;
        seen |= 1u << f;
    }
    return after && (seen & need) == need;
}

static int is_header(span_t line)
{
    char want[32];
    snprintf(want, sizeof want, "moe_ep-knobs %d", MOE_EP_KNOB_CACHE_VERSION);
    return span_is(line, want);
}

static moe_ep_status_t append(moe_ep_knob_table_t *t, const moe_ep_knob_entry_t *e)
{
    if (t->count == t->capacity) {
        int cap = t->capacity ? 2 * t->capacity : 16;
        moe_ep_knob_entry_t *p = cap > 0 && (size_t)cap < SIZE_MAX / sizeof *p
                                     ? realloc(t->entries, sizeof *p * (size_t)cap) : NULL;
        if (!p) return MOE_EP_FAIL(MOE_EP_ERROR_OUT_OF_MEMORY, "knob table of %d entries", cap);
        t->entries = p, t->capacity = cap;
    }
    t->entries[t->count++] = *e;
    return MOE_EP_SUCCESS;
}

static int key_cmp(const moe_ep_knob_key_t *a, const moe_ep_knob_key_t *b)
{
    int c = strcmp(a->device, b->device);
    const int x[] = {(int)a->path, (int)a->wire, (int)a->backend, a->world, a->E, a->K, a->H, a->I};
    const int y[] = {(int)b->path, (int)b->wire, (int)b->backend, b->world, b->E, b->K, b->H, b->I};
    for (int i = 0; c == 0 && i < 8; i++) c = (x[i] > y[i]) - (x[i] < y[i]);
    return c;
}

typedef struct {
    moe_ep_knob_entry_t e;
    int seq;
} ordered_t;

static int ordered_cmp(const void *pa, const void *pb)
{
    const ordered_t *a = pa, *b = pb;
    int c = key_cmp(&a->e.key, &b->e.key);
    if (c == 0) c = (a->e.tokens > b->e.tokens) - (a->e.tokens < b->e.tokens);
    return c ? c : (a->seq > b->seq) - (a->seq < b->seq);
}

/* Keeps the last entry of each (key, bucket), sorted: O(n log n) for big files. */
static moe_ep_status_t dedupe(moe_ep_knob_table_t *t)
{
    if (t->count < 2) return MOE_EP_SUCCESS;
    ordered_t *o = malloc(sizeof *o * (size_t)t->count);
    if (!o) return MOE_EP_FAIL(MOE_EP_ERROR_OUT_OF_MEMORY, "knob table of %d entries", t->count);
    for (int i = 0; i < t->count; i++) o[i].e = t->entries[i], o[i].seq = i;
    qsort(o, (size_t)t->count, sizeof *o, ordered_cmp);
    int n = 0;
    for (int i = 0; i < t->count; i++) {
        int last = i + 1 == t->count || key_cmp(&o[i].e.key, &o[i + 1].e.key) != 0 ||
                   o[i].e.tokens != o[i + 1].e.tokens;
        if (last) t->entries[n++] = o[i].e;
    }
    t->count = n;
    free(o);
    return MOE_EP_SUCCESS;
}

moe_ep_status_t moe_ep_knob_table_parse(moe_ep_knob_table_t *t, const char *text, size_t len)
{
    MOE_EP_REQUIRE(t != NULL && (text != NULL || len == 0), "NULL argument");
    for (size_t pos = 0, first = 1; pos < len; first = 0) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - text) : len;
        span_t line = trim((span_t){text + pos, end - pos});
        pos = nl ? end + 1 : len;
        if (first && !is_header(line)) return (t->rejected = 1), MOE_EP_SUCCESS;
        if (first || line.n == 0 || line.s[0] == '#') continue;
        moe_ep_knob_entry_t e;
        if (line.n > LINE_BYTES_MAX || memchr(line.s, '\0', line.n) || !parse_entry(line, &e)) {
            t->malformed++;
            continue;
        }
        MOE_EP_CHECK(append(t, &e));
    }
    return dedupe(t);
}

/* ---- tables ----------------------------------------------------------------- */

moe_ep_status_t moe_ep_knob_table_lookup(const moe_ep_knob_table_t *t, const moe_ep_knob_key_t *key,
                                         int64_t tokens, const moe_ep_knob_entry_t **found)
{
    MOE_EP_REQUIRE(t != NULL && key != NULL && found != NULL, "NULL argument");
    int b = 1;
    MOE_EP_CHECK(moe_ep_knob_bucket(tokens, &b));
    const moe_ep_knob_entry_t *exact = NULL, *above = NULL, *below = NULL;
    for (int i = 0; i < t->count; i++) {
        const moe_ep_knob_entry_t *e = &t->entries[i];
        if (key_cmp(&e->key, key) != 0) continue;
        if (e->tokens == b) exact = e;
        else if (e->tokens > b && (!above || e->tokens < above->tokens)) above = e;
        else if (e->tokens < b && (!below || e->tokens > below->tokens)) below = e;
    }
    *found = exact ? exact : above ? above : below;
    return MOE_EP_SUCCESS;
}

moe_ep_status_t moe_ep_knob_table_put(moe_ep_knob_table_t *t, const moe_ep_knob_entry_t *e)
{
    MOE_EP_REQUIRE(t != NULL, "table is NULL");
    MOE_EP_CHECK(moe_ep_knob_entry_check(e));
    for (int i = 0; i < t->count; i++)
        if (t->entries[i].tokens == e->tokens && key_cmp(&t->entries[i].key, &e->key) == 0)
            return (t->entries[i] = *e), MOE_EP_SUCCESS;
    return append(t, e);
}

void moe_ep_knob_table_free(moe_ep_knob_table_t *t)
{
    if (!t) return;
    free(t->entries);
    memset(t, 0, sizeof *t);
}

static void write_entry(FILE *f, const moe_ep_knob_entry_t *e)
{
    const moe_ep_knob_key_t *k = &e->key;
    long long tenths = llround(e->us * 10.0);
    fprintf(f, "device=%s path=%s wire=%s backend=%s world=%d E=%d K=%d H=%d I=%d tokens=%d : "
               "gemm_tile_rows=%d gemm_ctas_per_sm=%d us=%lld.%lld\n",
            k->device, moe_ep_path_name(k->path), moe_ep_wire_name(k->wire), moe_ep_backend_name(k->backend),
            k->world, k->E, k->K, k->H, k->I, e->tokens, e->tile_rows, e->ctas_per_sm, tenths / 10, tenths % 10);
}

moe_ep_status_t moe_ep_knob_table_write(const moe_ep_knob_table_t *t, FILE *f)
{
    MOE_EP_REQUIRE(t != NULL && f != NULL, "NULL argument");
    for (int i = 0; i < t->count; i++) MOE_EP_CHECK(moe_ep_knob_entry_check(&t->entries[i]));
    fprintf(f, "moe_ep-knobs %d\n# kernel knobs measured by moe_ep (docs/knobs.md); rewritten on each update\n",
            MOE_EP_KNOB_CACHE_VERSION);
    for (int i = 0; i < t->count; i++) write_entry(f, &t->entries[i]);
    if (fflush(f) != 0 || ferror(f))
        return MOE_EP_FAIL(MOE_EP_ERROR_INVALID_ARGUMENT, "writing the knob cache: %s", strerror(errno));
    return MOE_EP_SUCCESS;
}

/* ---- files ------------------------------------------------------------------ */

static moe_ep_status_t read_fd(int fd, const char *path, size_t size, char **out, size_t *len)
{
    char *buf = malloc(size + 1);
    if (!buf) return MOE_EP_FAIL(MOE_EP_ERROR_OUT_OF_MEMORY, "knob cache %s: %zu bytes", path, size);
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            free(buf);
            return MOE_EP_FAIL(MOE_EP_ERROR_INVALID_ARGUMENT, "knob cache %s: read: %s", path, strerror(errno));
        }
        if (r == 0) break; /* shrank meanwhile: parse what is there */
        got += (size_t)r;
    }
    *out = buf, *len = got;
    return MOE_EP_SUCCESS;
}

/* The file's bytes in *buf (NULL when it does not exist). A file too large to
 * be a cache is ignored with a warning (t->rejected). */
static moe_ep_status_t read_cache_file(const char *path, moe_ep_knob_table_t *t, char **buf, size_t *len)
{
    *buf = NULL, *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0 && errno == ENOENT) return MOE_EP_SUCCESS;
    if (fd < 0) return MOE_EP_FAIL(MOE_EP_ERROR_INVALID_ARGUMENT, "knob cache %s: %s", path, strerror(errno));
    struct stat st;
    moe_ep_status_t s = MOE_EP_SUCCESS;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        s = MOE_EP_FAIL(MOE_EP_ERROR_INVALID_ARGUMENT, "knob cache %s: not a regular file", path);
    else if ((uint64_t)st.st_size > MOE_EP_KNOB_FILE_MAX) {
        fprintf(stderr, "moe_ep: knob cache %s: larger than %zu bytes, ignoring it\n", path, MOE_EP_KNOB_FILE_MAX);
        t->rejected = 1;
    } else
        s = read_fd(fd, path, (size_t)st.st_size, buf, len);
    close(fd);
    return s;
}

moe_ep_status_t moe_ep_knob_table_load(moe_ep_knob_table_t *t, const char *path)
{
    MOE_EP_REQUIRE(t != NULL && path != NULL, "NULL argument");
    memset(t, 0, sizeof *t);
    char *buf;
    size_t len;
    MOE_EP_CHECK(read_cache_file(path, t, &buf, &len));
    moe_ep_status_t s = buf ? moe_ep_knob_table_parse(t, buf, len) : MOE_EP_SUCCESS;
    free(buf);
    if (s != MOE_EP_SUCCESS) return moe_ep_knob_table_free(t), s;
    if (buf && t->rejected)
        fprintf(stderr, "moe_ep: knob cache %s: first line is not \"moe_ep-knobs %d\", ignoring the file\n", path,
                MOE_EP_KNOB_CACHE_VERSION);
    else if (t->malformed)
        fprintf(stderr, "moe_ep: knob cache %s: ignoring %d malformed lines\n", path, t->malformed);
    return MOE_EP_SUCCESS;
}

static moe_ep_status_t make_parents(const char *path)
{
    char dir[PATH_BYTES];
    MOE_EP_REQUIRE(strlen(path) < sizeof dir, "knob cache path too long");
    strcpy(dir, path);
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(dir, 0777) != 0 && errno != EEXIST)
            return MOE_EP_FAIL(MOE_EP_ERROR_INVALID_ARGUMENT, "knob cache: cannot create %s: %s", dir, strerror(errno));
        *p = '/';
    }
    return MOE_EP_SUCCESS;
}

static moe_ep_status_t lock_cache(const char *path, int *fd)
{
    char lock[PATH_BYTES];
    snprintf(lock, sizeof lock, "%s.lock", path);
    int f = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (f < 0) return MOE_EP_FAIL(MOE_EP_ERROR_INVALID_ARGUMENT, "knob cache lock %s: %s", lock, strerror(errno));
    while (flock(f, LOCK_EX) != 0)
        if (errno != EINTR) {
            int err = errno;
            close(f);
            return MOE_EP_FAIL(MOE_EP_ERROR_INVALID_ARGUMENT, "knob cache lock %s: %s", lock, strerror(err));
        }
    *fd = f;
    return MOE_EP_SUCCESS;
}

static moe_ep_status_t write_atomically(const char *path, const moe_ep_knob_table_t *t)
{
    static atomic_uint counter;
    char tmp[PATH_BYTES];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%u", path, (long)getpid(), atomic_fetch_add(&counter, 1u));
    FILE *f = fopen(tmp, "wx");
    if (!f) return MOE_EP_FAIL(MOE_EP_ERROR_INVALID_ARGUMENT, "knob cache %s: %s", tmp, strerror(errno));
    moe_ep_status_t s = moe_ep_knob_table_write(t, f);
    if (fclose(f) != 0 && s == MOE_EP_SUCCESS)
        s = MOE_EP_FAIL(MOE_EP_ERROR_INVALID_ARGUMENT, "knob cache %s: close: %s", tmp, strerror(errno));
    if (s == MOE_EP_SUCCESS && rename(tmp, path) != 0)
        s = MOE_EP_FAIL(MOE_EP_ERROR_INVALID_ARGUMENT, "knob cache: rename %s to %s: %s", tmp, path, strerror(errno));
    if (s != MOE_EP_SUCCESS) unlink(tmp);
    return s;
}

/* Read-modify-write; the caller holds the lock. */
static moe_ep_status_t update_locked(const char *path, const moe_ep_knob_entry_t *e)
{
    moe_ep_knob_table_t t;
    MOE_EP_CHECK(moe_ep_knob_table_load(&t, path));
    moe_ep_status_t s = t.rejected ? MOE_EP_FAIL(MOE_EP_ERROR_INVALID_ARGUMENT,
                                                 "knob cache %s: not a file this version reads; not "
                                                 "overwriting it (remove it to start a new one)", path)
                                   : moe_ep_knob_table_put(&t, e);
    if (s == MOE_EP_SUCCESS) s = write_atomically(path, &t);
    moe_ep_knob_table_free(&t);
    return s;
}

moe_ep_status_t moe_ep_knob_cache_store(const char *path, const moe_ep_knob_entry_t *e)
{
    MOE_EP_REQUIRE(path != NULL && path[0] != '\0', "knob cache path is empty");
    MOE_EP_REQUIRE(strlen(path) < PATH_BYTES - 64, "knob cache path too long");
    MOE_EP_CHECK(moe_ep_knob_entry_check(e));
    MOE_EP_CHECK(make_parents(path));
    int lock = -1;
    MOE_EP_CHECK(lock_cache(path, &lock));
    moe_ep_status_t s = update_locked(path, e);
    close(lock);
    return s;
}
