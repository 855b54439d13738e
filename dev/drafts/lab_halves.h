/* Kernel lab (forty-fourth session): raw weight stages in row halves (FR_HALVES_OF, after applying dev/drafts/rs_tile_raw_halves.patch) for FP8-BLOCK's paired 16-row instances; -include dev/drafts/lab_halves.h in CMAKE_CUDA_FLAGS. */
#define FR_HALVES_OF(FMT, BMA, CT) ((FMT) == RS_FP8_BLOCK && (CT) == 2 && (BMA) <= 16)
