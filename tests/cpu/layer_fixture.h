/* A small layer with random weights and routing, shared by the layer tests. */
#ifndef MOE_EP_LAYER_FIXTURE_H
#define MOE_EP_LAYER_FIXTURE_H

#include "moe_ep.h"

#include <stdint.h>

typedef struct {
    int E, K, H, I;
    float swiglu_limit;
    uint16_t *w13, *w2; /* bf16 checkpoint [E][2I][H], [E][H][I] */
    int total_tokens;   /* all ranks together */
    uint16_t *x;        /* [total_tokens][H] */
    int32_t *ids;       /* [total_tokens][K] */
    float *weights;     /* [total_tokens][K] */
} fixture_t;

typedef enum { ROUTE_UNIFORM, ROUTE_ONE_EXPERT, ROUTE_ONE_RANK, ROUTE_SPARSE } route_t;

/* Random weights (std 0.05 for W13, 0.05 for W2), x ~ N(0, 1), routing. */
void fixture_init(fixture_t *f, int E, int K, int H, int I, int total_tokens, route_t route,
                  uint64_t *rng);
void fixture_free(fixture_t *f);

#define FIXTURE_MAX_RANKS 64

/* Per-rank pointers of one forward (the arrays moe_ep_forward_args_t points at). */
typedef struct {
    const uint16_t *x[FIXTURE_MAX_RANKS];
    const int32_t *ids[FIXTURE_MAX_RANKS];
    const float *wt[FIXTURE_MAX_RANKS];
    uint16_t *out[FIXTURE_MAX_RANKS];
} fixture_ptrs_t;

/* Forward arguments of R ranks over base arrays laid out like the fixture
 * (host or device memory): rank r's nt[r] tokens start at fixture token
 * first[r]. out may be NULL (calibration). */
moe_ep_forward_args_t fixture_args(fixture_ptrs_t *p, const fixture_t *f, int R, const int *first,
                                   const int32_t *nt, const uint16_t *x, const int32_t *ids, const float *wt,
                                   uint16_t *out);

/* Creates a reference layer on an emulated CPU group of R ranks, loads the bf16
 * checkpoint, and runs forward with the tokens split evenly over the ranks.
 * out: [total_tokens][H]. Returns the status of the first failing call. */
moe_ep_status_t fixture_run(const fixture_t *f, int R, moe_ep_path_t path, moe_ep_wire_t wire,
                            uint16_t *out);

#endif
