/* The mega kernel's fold items (mega.cu only; the A16 instances): an m
 * tile's MX, NVFP4 or FP8-BLOCK rows folded into fp16 once (fold_rows.cuh) for the 128- (or 144-)row
 * register tile's A16 form, which its N / 256 GEMM tiles then bring by TMA
 * instead of each widening the rows again. GEMM1's rows are folded by the
 * staged dispatch where it runs (mega_staging.fold_bytes: it holds each
 * token's encoded row in shared memory anyway), else here. Fold item mt of GEMM1 waits for
 * its expert's rows (the dispatch), GEMM2's for the m tile's GEMM1 tiles
 * (their output rows are GEMM2's input); the m tile's GEMM tiles wait for it.
 * GEMM1's and GEMM2's rows share act16 (rows max(H, I) apart): an m tile's
 * GEMM2 rows overwrite its GEMM1 rows only once its GEMM1 tiles are done, and
 * only its valid rows are written (the next expert's tiles still read theirs).
 *
 * The rows come into the shared memory the GEMM tiles leave free between
 * items by bulk copies, a ring of MEGA_STAGES stages of rps rows (E4M3 or
 * E2M1 rows, then their scale rows), so that many bytes are in flight without
 * registers; each warp folds a row of the stage from there and stores it. A
 * register-fed loop (four 16-byte loads a lane in flight) made ptxas spill
 * the kernel's long-lived values in the 128-row tile's producer. */
#ifndef MOE_EP_MEGA_FOLD_CUH
#define MOE_EP_MEGA_FOLD_CUH

#include "kernels/mega_common.cuh"
#include "kernels/mega_gemm.cuh"
#include "kernels/sm90/fold_rows.cuh"

/* Thread 0: rows [r, r + n) of the m tile (data rows of rb bytes, then scale rows) into stage `at`. */
__device__ __forceinline__ void fold_stage_load(uint8_t *at, uint64_t *bar, const uint8_t *a, const uint8_t *scales,
                                                int rb, int ss, int rps, int r, int n)
{
    mbar_expect_tx(bar, (uint32_t)(n * (rb + ss)));
    bulk_load(at, a + (int64_t)r * rb, (uint32_t)(n * rb), bar);
    bulk_load(at + rps * rb, scales + (int64_t)r * ss, (uint32_t)(n * ss), bar);
}

/* ON: the instance has fold items (its A16); else never called. KIND: what the fold does (fold_kind_of).
 * BM: the instance's m tile rows (128, or the 144-row NVFP4 / MX tiles'). */
template <int BM, bool FIRST, bool ON, int KIND>
__device__ bool fold_item(const mega_params &p, mega_shared *sh, int mt)
{
    if constexpr (!ON) return false;
    const moe_ep_mega_args_t &a = p.a;
    sh = pinned(sh); /* as the staged items: nothing derived from it hoisted across the tiles */
    {
        const mega_ctx c = ctx_of(a, sh);
        const int e = tile_expert(c.tile_off, a.d.E, mt);
        const bool ok = FIRST ? block_wait(&c.ready[e], c.off[e + 1] - c.off[e], a, MOE_EP_MEGA_WAIT_ROWS, (uint32_t)e)
                              : block_wait(&c.g1_done[mt], c.n1, a, MOE_EP_MEGA_WAIT_GEMM1, (uint32_t)mt);
        if (!ok) return false;
        MEGA_TRACE_MARK(sh);
    }
    const mega_ctx c = ctx_of(a, sh);
    const int e = tile_expert(c.tile_off, a.d.E, mt);
    int row0, rows_valid;
    mega_tile_rows<BM, false>(c, e, mt, row0, rows_valid);
    const gemm_args &g = FIRST ? p.g1 : p.g2;
    const int region = pinned_int(p.xs.sh_offset), K = pinned_int(g.K), ss = pinned_int(g.a_scale_stride);
    const int rb = FOLD_ROW_BYTES(KIND, K), pitch = pinned_int(g.a16_pitch), rps = min(BM, region / (MEGA_STAGES * (rb + ss)));
    const int batches = (rows_valid + rps - 1) / rps, stage_bytes = rps * (rb + ss);
    const uint8_t *src = pinned(g.a), *src_sc = pinned(g.a_scales);
    uint8_t *smem = (uint8_t *)sh - region;
    if (threadIdx.x == 0) {
        for (int i = 0; i < MEGA_STAGES; i++) mbar_init(&sh->stage_full[i], 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        asm volatile("fence.proxy.async.global;\n" ::: "memory"); /* rows other blocks wrote, read by the copies */
        for (int b = 0; b < min(batches, MEGA_STAGES); b++)
            fold_stage_load(smem + b * stage_bytes, &sh->stage_full[b], src, src_sc, rb, ss, rps, row0 + b * rps,
                            min(rps, rows_valid - b * rps));
    }
    __syncthreads();
    uint16_t *out = pinned((uint16_t *)g.a16);
    for (int b = 0, s = 0, phase = 0; b < batches; b++) {
        const int n = min(rps, rows_valid - b * rps);
        const uint8_t *data = smem + s * stage_bytes, *scales = data + rps * rb;
        MEGA_STAGE_WAIT(a, sh, &sh->stage_full[s], phase, 0);
        fold_staged_rows<KIND>(data, scales, ss, K, n, out + (int64_t)(row0 + b * rps) * pitch, pitch);
        __syncthreads(); /* stage s read by every warp */
        if (threadIdx.x == 0 && b + MEGA_STAGES < batches)
            fold_stage_load(smem + s * stage_bytes, &sh->stage_full[s], src, src_sc, rb, ss, rps,
                            row0 + (b + MEGA_STAGES) * rps, min(rps, rows_valid - (b + MEGA_STAGES) * rps));
        if (++s == MEGA_STAGES) s = 0, phase ^= 1;
    }
    if (threadIdx.x == 0) {
        tile_wait_report(a.b.error);
        for (int i = 0; i < MEGA_STAGES; i++) mbar_inval(&sh->stage_full[i]);
    }
    asm volatile("fence.proxy.async.global;\n" ::: "memory"); /* the rows, for the GEMM tiles' TMA */
    block_signal(mega_fold_done(a, c, FIRST, mt));
    return true;
}

#endif
