/* Kernel lab: weight stages prefetched to L2 ahead of their TMA in the paired instances (LAB_L2 x the ring's raw stages). */
#define FR_L2_AHEAD_OF(FMT, BMA, CT) ((CT) == 2 ? LAB_L2 * fr_smem<FMT, BMA, CT>::RAW : 0)
