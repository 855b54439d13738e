/* Tiny test harness: counted checks, seeded random inputs, a summary line. */
#ifndef MOE_EP_TEST_UTIL_H
#define MOE_EP_TEST_UTIL_H

#include <stdint.h>
#include <stdio.h>

extern int test_passed, test_failed;

/* Counts one check; prints the failing expression and location. */
#define EXPECT(cond, ...)                                                  \
    do {                                                                   \
        if (cond) {                                                        \
            test_passed++;                                                 \
        } else {                                                           \
            test_failed++;                                                 \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                  \
            fprintf(stderr, "\n");                                         \
        }                                                                  \
    } while (0)

/* Prints "N passed, N failed" and returns the process exit code. */
int test_summary(const char *name);

/* Seed from MOE_EP_TEST_SEED or the clock (printed, so a failure can be replayed). */
uint64_t test_seed(void);
uint64_t test_rand_u64(uint64_t *state);
double test_rand_uniform(uint64_t *state);          /* [0, 1) */
float test_rand_normal(uint64_t *state, float std); /* N(0, std^2) */

/* Fills n floats with N(0, std^2). */
void test_fill_normal(float *x, int64_t n, float std, uint64_t *state);
/* Fills n bf16 values (bit patterns) with N(0, std^2) rounded to bf16. */
void test_fill_bf16(uint16_t *x, int64_t n, float std, uint64_t *state);

#endif
