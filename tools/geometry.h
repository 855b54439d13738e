/* Model geometries for the demo and the benchmarks (shared/geometries.md). */
#ifndef MOE_EP_TOOL_GEOMETRY_H
#define MOE_EP_TOOL_GEOMETRY_H

typedef struct {
    const char *name;
    int hidden, intermediate, num_experts, top_k;
    float swiglu_limit;
} geometry_t;

/* NULL if the name is unknown. */
const geometry_t *geometry_find(const char *name);
void geometry_list(void);

#endif
