#define _POSIX_C_SOURCE 200809L
#include "synth.h"

#include <math.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

void synth_bf16(uint16_t *out, int64_t n, float std, uint64_t seed, uint64_t stream)
{
    /* Sum of 4 uniforms in [0, 1): mean 2, variance 1/3. */
    const float k = std * 1.7320508f / 65536.0f;
    uint64_t state = mix64(seed ^ mix64(stream + 0x9E3779B97F4A7C15ull));
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = mix64(state += 0x9E3779B97F4A7C15ull);
        float s = (float)((r & 0xFFFF) + ((r >> 16) & 0xFFFF) + ((r >> 32) & 0xFFFF) + (r >> 48));
        out[i] = f32_to_bf16((s - 131070.0f) * k);
    }
}

typedef struct {
    uint16_t *out;
    int64_t n, chunk;
    float std;
    uint64_t seed, stream;
    int thread, threads;
} synth_job_t;

static void *synth_worker(void *arg)
{
    synth_job_t *j = arg;
    for (int64_t c = j->thread; c * j->chunk < j->n; c += j->threads) {
        int64_t len = j->n - c * j->chunk < j->chunk ? j->n - c * j->chunk : j->chunk;
        synth_bf16(j->out + c * j->chunk, len, j->std, j->seed, j->stream + (uint64_t)c);
    }
    return NULL;
}

void synth_bf16_parallel(uint16_t *out, int64_t n, int64_t chunk, float std, uint64_t seed,
                         uint64_t stream, int threads)
{
    enum { MAX_THREADS = 64 };
    if (threads < 1) threads = 1;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    synth_job_t jobs[MAX_THREADS];
    pthread_t tids[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    for (int t = 0; t < threads; t++) {
        jobs[t] = (synth_job_t){out, n, chunk, std, seed, stream, t, threads};
        if (t > 0) started[t] = pthread_create(&tids[t], NULL, synth_worker, &jobs[t]) == 0;
    }
    synth_worker(&jobs[0]);
    for (int t = 1; t < threads; t++) {
        if (started[t]) pthread_join(tids[t], NULL);
        else synth_worker(&jobs[t]);
    }
}

void synth_expert(uint16_t *w13, uint16_t *w2, int expert, int hidden, int intermediate,
                  uint64_t seed, int threads)
{
    int64_t n13 = 2 * (int64_t)intermediate * hidden, n2 = (int64_t)hidden * intermediate;
    uint64_t stream = (uint64_t)expert << 32;
    synth_bf16_parallel(w13, n13, 1 << 20, 1.0f / sqrtf((float)hidden), seed, stream, threads);
    synth_bf16_parallel(w2, n2, 1 << 20, 1.0f / sqrtf((float)intermediate), seed,
                        stream | (1ull << 31), threads);
}

void synth_routing(int32_t *ids, float *weights, int tokens, int top_k, int num_experts,
                   uint64_t seed, uint64_t stream)
{
    uint64_t state = mix64(seed ^ mix64(stream));
    for (int t = 0; t < tokens; t++) {
        float sum = 0.0f;
        for (int k = 0; k < top_k; k++) {
            int32_t e;
            int dup;
            do {
                e = (int32_t)(mix64(state += 0x9E3779B97F4A7C15ull) % (uint64_t)num_experts);
                dup = 0;
                for (int j = 0; j < k; j++) dup |= ids[t * top_k + j] == e;
            } while (dup);
            ids[t * top_k + k] = e;
            float w = 0.05f + (float)(mix64(state += 0x9E3779B97F4A7C15ull) >> 40) / 16777216.0f;
            weights[t * top_k + k] = w;
            sum += w;
        }
        for (int k = 0; k < top_k; k++) weights[t * top_k + k] /= sum;
    }
}

double wall_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
