/* The kernel lab's deeper fp16 rings for the A16 tiles (rs_tile.cu with -DFR_LAB_ACT16, where every
 * 128-row MX / NVFP4 / FP8-BLOCK instance runs the A16 form and reads no raw activation stage):
 *   nvcc ... -DFR_LAB_ACT16 --pre-include lab_deep_rings.h rs_tile.cu       [-DLAB_DEEP144]
 * The raw activation stages shrink to 1024 bytes (as the 144-row tiles' are) and their shared memory
 * holds one more fp16 stage: 128-row NVFP4, W4A8 and FP8-BLOCK 4 (3 before; W4A8 2), MXFP8 3 (2);
 * NVFP4 then keeps 3 weight stages (4 before: 4 + 4 do not fit). LAB_DEEP144: the 144-row NVFP4 and
 * W4A8 tiles 4 fp16 stages too, beside 2 weight stages (4 / 3 before).
 * Seventieth session: the MX 128-row part won (-6.5-8 % a tile at 96 rows an expert) and is the library's
 * since (fr_smem's A16 layout, FR_A16_DEEP_OF); the NVFP4 128-row part was flat, the 144-row one -2.5 % in
 * the lab but flat in mega's paired A / B (not taken). */
#ifndef LAB_DEEP144
#define LAB_DEEP144 0
#else
#undef LAB_DEEP144
#define LAB_DEEP144 1
#endif
#define FR_RA_STAGE_BYTES(FMT, BMA) 1024
#define FR_CVT_OF(FMT, BMA) \
    (FR_QG(FMT) ? 4 : (FMT) == RS_MXFP8 ? 3 : (BMA) == 128 || LAB_DEEP144 && (BMA) == 144 ? 4 : 3)
#define FR_RAW_OF(FMT, BMA)                                                                                   \
    (FR_QG(FMT) ? 4                                                                                           \
     : FR_NV(FMT) ? ((BMA) == 128 ? 3 : LAB_DEEP144 && (BMA) == 144 ? 2 : 4)                                  \
     : (FMT) == RS_W4A8 && (BMA) == 144 && LAB_DEEP144 ? 2                                                     \
     : (BMA) <= 64 ? (FR_E2M1(FMT) ? 4 : 3) : FR_E2M1(FMT) || FR_ARAW_OF(FMT, BMA) ? 3 : 2)
