#include "geometry.h"

#include <stdio.h>
#include <string.h>

static const geometry_t geometries[] = {
    {"ds-v4-flash", 4096, 2048, 256, 6, 10.0f},
    {"ds-v4-pro", 7168, 3072, 384, 6, 10.0f},
    {"ds-v3", 7168, 2048, 256, 8, 0.0f},
    {"kimi-k2", 7168, 2048, 384, 8, 0.0f},
    {"qwen3-235b", 4096, 1536, 128, 8, 0.0f},
    {"qwen3-30b", 2048, 768, 128, 8, 0.0f},
    {"mixtral-8x7b", 4096, 14336, 8, 2, 0.0f},
    {"tiny", 256, 128, 16, 4, 10.0f},
};

const geometry_t *geometry_find(const char *name)
{
    for (size_t i = 0; i < sizeof geometries / sizeof geometries[0]; i++)
        if (strcmp(geometries[i].name, name) == 0) return &geometries[i];
    return NULL;
}

void geometry_list(void)
{
    for (size_t i = 0; i < sizeof geometries / sizeof geometries[0]; i++) {
        const geometry_t *g = &geometries[i];
        printf("  %-13s H %5d  I %5d  E %3d  top-%d%s\n", g->name, g->hidden, g->intermediate,
               g->num_experts, g->top_k, g->swiglu_limit > 0 ? "  swiglu_limit 10" : "");
    }
}
