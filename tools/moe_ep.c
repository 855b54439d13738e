/* moe_ep: the command-line program (run: the demo layer; accuracy: the error
 * table of docs/formats.md; bench: GPU timings against the roofline floor;
 * tune: kernel knobs into the knob cache). */
#include "bench.h"
#include "run.h"
#include "tune.h"

#include <stdio.h>
#include <string.h>

static void usage(void)
{
    printf("usage: moe_ep <command> [options]   (moe_ep <command> --help)\n"
           "  run       one layer on a model geometry; prints time and error vs float64\n"
           "  accuracy  relative L2 error of every path and wire vs float64\n"
           "  bench     GPU: EP8 slice timings vs copy/GEMM ceilings (needs a GPU build)\n"
           "  tune      GPU: time kernel knobs of the EP8 slice, write the fastest to the knob cache\n");
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        usage();
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "run") == 0) return cmd_run(argc - 2, argv + 2);
    if (strcmp(argv[1], "accuracy") == 0) return cmd_accuracy(argc - 2, argv + 2);
    if (strcmp(argv[1], "bench") == 0) return cmd_bench(argc - 2, argv + 2);
    if (strcmp(argv[1], "tune") == 0) return cmd_tune(argc - 2, argv + 2);
    fprintf(stderr, "moe_ep: unknown command %s\n", argv[1]);
    usage();
    return 2;
}
