/* The knob cache file: measured kernel knobs per (device, layer shape, token
 * bucket), read by layers and written by autotuning and `moe_ep tune`.
 * Format and lookup rules: docs/knobs.md. Internal to the library.
 *
 * Reading never fails on bad content: a malformed line is skipped and counted,
 * and a file whose first line is not `moe_ep-knobs 1` is ignored as a whole;
 * loading a file prints at most one warning line on stderr. Writing is a
 * read-modify-write under an flock on `<path>.lock`, through a temporary file
 * renamed over the cache, so concurrent writers lose no entries and readers
 * never see a partial file. */
#ifndef MOE_EP_KNOB_CACHE_H
#define MOE_EP_KNOB_CACHE_H

#include "core/internal.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MOE_EP_KNOB_CACHE_VERSION 1
#define MOE_EP_KNOB_DEVICE_MAX 128         /* bytes of a device name, NUL included */
#define MOE_EP_KNOB_MAX_TOKENS (1 << 30)   /* largest token bucket */
#define MOE_EP_KNOB_FILE_MAX ((size_t)16 << 20) /* larger cache files are ignored */

/* What an entry applies to (everything left of the colon but the bucket). */
typedef struct moe_ep_knob_key {
    char device[MOE_EP_KNOB_DEVICE_MAX]; /* device name, unsafe bytes as '_' */
    moe_ep_path_t path;
    moe_ep_wire_t wire;
    moe_ep_backend_t backend;
    int world, E, K, H, I;
} moe_ep_knob_key_t;

typedef struct moe_ep_knob_entry {
    moe_ep_knob_key_t key;
    int tokens;      /* token bucket: a power of two */
    int tile_rows;   /* 16, 32, 64 or 128 */
    int ctas_per_sm; /* 1..4 */
    double us;       /* measured p50, informational */
} moe_ep_knob_entry_t;

typedef struct moe_ep_knob_table {
    moe_ep_knob_entry_t *entries;
    int count, capacity;
    int malformed; /* lines skipped by the parses into this table */
    int rejected;  /* a whole file was ignored (unknown version, too large): never overwrite it */
} moe_ep_knob_table_t;

/* The token bucket of T tokens: the smallest power of two >= T (T = 0 -> 1).
 * T in [0, MOE_EP_KNOB_MAX_TOKENS]. */
moe_ep_status_t moe_ep_knob_bucket(int64_t tokens, int *bucket);

/* Sets key->device from a device name: spaces and every byte that is not
 * printable ASCII, ':', '=' or '#' become '_'; longer names are cut. */
moe_ep_status_t moe_ep_knob_key_set_device(moe_ep_knob_key_t *key, const char *name);

/* The cache file: $MOE_EP_KNOB_CACHE ("off": *enabled = 0), else
 * $XDG_CACHE_HOME/moe_ep/knobs.txt, else $HOME/.cache/moe_ep/knobs.txt
 * (neither set: *enabled = 0). */
moe_ep_status_t moe_ep_knob_cache_path(char *path, size_t size, int *enabled);

/* Parses a cache file's bytes (any bytes: NULs, no final newline, ...) into t,
 * adding entries (a later line for the same key and bucket replaces an
 * earlier one) and counting skipped lines in t->malformed. t must be zeroed
 * or come from an earlier parse. Prints nothing. */
moe_ep_status_t moe_ep_knob_table_parse(moe_ep_knob_table_t *t, const char *text, size_t len);

/* Reads and parses a cache file into an empty table t. A missing file gives an
 * empty table silently; skipped lines or an ignored file print one warning
 * line on stderr. Fails (with t empty) only when the file exists but cannot be
 * read, or on allocation failure. */
moe_ep_status_t moe_ep_knob_table_load(moe_ep_knob_table_t *t, const char *path);

/* The entry for key and T tokens: the bucket of T, else the nearest larger
 * bucket, else the nearest smaller one, among entries with exactly this key.
 * *found = NULL when there is none. */
moe_ep_status_t moe_ep_knob_table_lookup(const moe_ep_knob_table_t *t, const moe_ep_knob_key_t *key,
                                         int64_t tokens, const moe_ep_knob_entry_t **found);

/* Adds e, or replaces the entry with the same key and bucket. e must be valid. */
moe_ep_status_t moe_ep_knob_table_put(moe_ep_knob_table_t *t, const moe_ep_knob_entry_t *e);

/* Writes the whole file (version line, then one line per entry) to f. */
moe_ep_status_t moe_ep_knob_table_write(const moe_ep_knob_table_t *t, FILE *file);

void moe_ep_knob_table_free(moe_ep_knob_table_t *t);

/* Adds or replaces e in the file at path: creates missing parent directories,
 * takes an exclusive flock on <path>.lock, reads the file, writes
 * <path>.tmp.<pid>.<n> and renames it over path. Refuses (INVALID_ARGUMENT) to
 * overwrite a file it had to ignore as a whole. */
moe_ep_status_t moe_ep_knob_cache_store(const char *path, const moe_ep_knob_entry_t *e);

/* Checks an entry's values (key names, bucket a power of two, knobs valid). */
moe_ep_status_t moe_ep_knob_entry_check(const moe_ep_knob_entry_t *e);
/* Knob values an entry may hold: tile rows 16, 32, 64 or 128, CTAs per SM 1..4. */
int moe_ep_knob_values_ok(int tile_rows, int ctas_per_sm);

#ifdef __cplusplus
}
#endif
#endif
