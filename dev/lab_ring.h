/* Kernel lab (forty-fourth session): the register tile's fragment ring at 16 rows (LAB_RING) and, with
 * LAB_AHEAD16, all weight words of a block loaded at its start; build a variant with -include dev/lab_ring.h
 * -DLAB_RING=4 [-DLAB_AHEAD16] in CMAKE_CUDA_FLAGS. Measured: within 1 % of the library at T = 8 / 64. */
#define FR_RING_OF(FMT, BMA) ((BMA) <= 16 ? LAB_RING : (FMT) == RS_FP8_BLOCK && (BMA) == 64 ? 4 : 2)
#ifdef LAB_AHEAD16
#define FR_AHEAD(FMT, BMA, CT) ((BMA) <= 16 || ((BMA) <= 64 && (CT) == 1) || FR_NV(FMT) ? FR_WORDS(FMT) : FR_MX(FMT) ? 0 : 1)
#endif
