#include "test_util.h"

#include "formats/codec.h"

#include <math.h>
#include <stdlib.h>
#include <time.h>

int test_passed, test_failed;

int test_summary(const char *name)
{
    printf("%s: %d passed, %d failed\n", name, test_passed, test_failed);
    return test_failed == 0 ? 0 : 1;
}

uint64_t test_seed(void)
{
    const char *s = getenv("MOE_EP_TEST_SEED");
    uint64_t seed = s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL) ^ (uint64_t)clock();
    printf("seed %llu (MOE_EP_TEST_SEED to replay)\n", (unsigned long long)seed);
    return seed;
}

uint64_t test_rand_u64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double test_rand_uniform(uint64_t *state) { return (double)(test_rand_u64(state) >> 11) * 0x1p-53; }

float test_rand_normal(uint64_t *state, float std)
{
    double u1 = test_rand_uniform(state), u2 = test_rand_uniform(state);
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2)) * std;
}

void test_fill_normal(float *x, int64_t n, float std, uint64_t *state)
{
    for (int64_t i = 0; i < n; i++) x[i] = test_rand_normal(state, std);
}

void test_fill_bf16(uint16_t *x, int64_t n, float std, uint64_t *state)
{
    for (int64_t i = 0; i < n; i++) x[i] = moe_ep_bf16_from_f32(test_rand_normal(state, std));
}
