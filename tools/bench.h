/* `moe_ep bench`: the EP8 slice of a model on one GPU against its roofline floor. */
#ifndef MOE_EP_TOOL_BENCH_H
#define MOE_EP_TOOL_BENCH_H

/* Returns the process exit code (2 without a GPU build or on bad options). */
int cmd_bench(int argc, char **argv);

#endif
