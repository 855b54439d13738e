/* `moe_ep tune`: measures the kernel knobs of the EP8 slice and writes the
 * fastest to the knob cache (docs/knobs.md). */
#ifndef MOE_EP_TOOL_TUNE_H
#define MOE_EP_TOOL_TUNE_H

/* Returns the process exit code (2 without a GPU build or on bad options). */
int cmd_tune(int argc, char **argv);

#endif
