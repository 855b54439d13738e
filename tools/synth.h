/* Synthetic, reproducible layer data: each expert's weights and each rank's
 * tokens come from a seed, so any part can be regenerated on demand. */
#ifndef MOE_EP_TOOL_SYNTH_H
#define MOE_EP_TOOL_SYNTH_H

#include <stdint.h>

/* n bf16 values ~ N(0, std^2) (Irwin-Hall of 4 uniforms), from (seed, stream). */
void synth_bf16(uint16_t *out, int64_t n, float std, uint64_t seed, uint64_t stream);
/* Same on `threads` threads, splitting [0, n) into chunks of `chunk` values with
 * their own streams (stream + chunk index). */
void synth_bf16_parallel(uint16_t *out, int64_t n, int64_t chunk, float std, uint64_t seed,
                         uint64_t stream, int threads);
/* Expert weights in checkpoint layout, std 1/sqrt(H) for W13 and 1/sqrt(I) for W2. */
void synth_expert(uint16_t *w13, uint16_t *w2, int expert, int hidden, int intermediate,
                  uint64_t seed, int threads);
/* Uniform routing without repeated experts per token, weights ~ softmax-like in (0, 1). */
void synth_routing(int32_t *ids, float *weights, int tokens, int top_k, int num_experts,
                   uint64_t seed, uint64_t stream);
double wall_seconds(void);

#endif
