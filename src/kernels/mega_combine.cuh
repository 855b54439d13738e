/* The mega kernel's local combine items (mega.cu only): a token group's
 * rows summed once their GEMM2 tiles are done. */
#ifndef MOE_EP_MEGA_COMBINE_CUH
#define MOE_EP_MEGA_COMBINE_CUH

#include "kernels/mega_dispatch.cuh"
#include "kernels/mega_gemm.cuh"

/* Thread 0: the wire rows (data, then scales) of the group's tokens [j0,
 * j0 + n) into stage dst, completing on bar: token j's K data rows, then its
 * K scale rows (slots without a row are not copied). */
__device__ void stage_y_rows(const moe_ep_mega_args_t &a, const mega_ctx &c, uint8_t *dst, uint64_t *bar, int j0,
                             int n, int db, int sb)
{
    const int K = a.d.K;
    uint32_t total = 0;
    for (int s = j0 * K; s < (j0 + n) * K; s++) total += c.rows_s[s] >= 0 ? (uint32_t)(db + sb) : 0u;
    mbar_expect_tx(bar, total);
    for (int s = j0 * K; s < (j0 + n) * K; s++) {
        int64_t row = c.rows_s[s];
        if (row < 0) continue;
        uint8_t *tok = dst + (size_t)(s / K - j0) * K * (db + sb);
        bulk_load(tok + (s % K) * db, a.b.y + row * db, (uint32_t)db, bar);
        if (sb) bulk_load(tok + K * db + (s % K) * sb, a.b.y_scales + row * sb, (uint32_t)sb, bar);
    }
}

/* The group's tokens [first, first + count) summed from their rows staged
 * by stages of the ring (combine_chunk_staged: the same bits as combine_chunk),
 * slot weights from slot_w[j K + k] (shared memory). WIRE at compile time:
 * the decode's per-slot branches fold. Warp 0 refills the ring (thread 0:
 * a stage once every summing thread has arrived on its empty barrier), the
 * other warps sum (every warp when no stage is refilled: short groups,
 * decode): with one block-wide barrier per stage instead, the
 * refill's issue and the sums ran one after the other (lab traces,
 * docs/benchmarks.md: the copies alone ran at ~3.7 TB/s, with the sums and
 * stores a token took their times added). Each summing thread steps its
 * (token jj, chunk ch) pair by the summing threads' count without a
 * division, carried over from batch to batch; index math in 32 bits. */
template <int WIRE>
__device__ void combine_staged(const moe_ep_mega_args_t &a, const mega_staging &st, mega_shared *sh,
                               const float *slot_w, int first, int count)
{
    sh = pinned(sh);
    uint8_t *smem = (uint8_t *)sh - st.sh_offset;
    const mega_ctx c = ctx_of(a, sh);
    const moe_ep_split_dims_t &d = a.d;
    const moe_ep_format_t yf = moe_ep_wire_format(d.wire);
    const int db = pinned_int((int)moe_ep_row_data_bytes(yf, d.H)), sb = pinned_int((int)moe_ep_row_scale_bytes(yf, d.H));
    const int stages = pinned_int(st.stages), per_stage = pinned_int(st.per_stage), chunks = pinned_int(d.H / 8);
    const int batches = (count + per_stage - 1) / per_stage, stage_bytes = per_stage * st.token_bytes;
    const int refill = batches > stages ? 32 : 0; /* warp 0 refills; with no refill every thread sums */
    const int summers = blockDim.x - refill;        /* threads refill .. blockDim.x - 1 */
    if (threadIdx.x == 0) {
        stage_begin(a, sh, st);
        for (int i = 0; i < stages; i++) mbar_init(&sh->stage_empty[i], summers);
        for (int b = 0; b < min(batches, stages); b++)
            stage_y_rows(a, c, smem + (size_t)b * stage_bytes, &sh->stage_full[b], b * per_stage,
                         min(per_stage, count - b * per_stage), db, sb);
    }
    __syncthreads(); /* the barriers exist before anyone waits; slot_w written */
    if (threadIdx.x < refill) {
        for (int b = stages; threadIdx.x == 0 && b < batches; b++) { /* batch b into stage b % stages once read */
            const int s = b % stages;
            mbar_wait_bounded(&sh->stage_empty[s], (b / stages - 1) & 1, d.tile_wait_ns);
            stage_y_rows(a, c, smem + (size_t)s * stage_bytes, &sh->stage_full[s], b * per_stage,
                         min(per_stage, count - b * per_stage), db, sb);
        }
    } else {
        const int tid = threadIdx.x - refill;
        int jj = tid / chunks, ch = tid - jj * chunks; /* token of the batch, 8-column chunk */
        for (int b = 0, s = 0, phase = 0; b < batches; b++) {
            const int j0 = b * per_stage, n = min(per_stage, count - j0);
            MEGA_STAGE_WAIT(a, sh, &sh->stage_full[s], phase, refill);
            const uint8_t *stage = smem + s * stage_bytes;
            while (jj < n) {
                const int j = j0 + jj, r = rank_of(sh->token_prefix, d.R, first + j), t = first + j - sh->token_prefix[r];
                const uint8_t *tok = stage + jj * st.token_bytes;
                combine_chunk_staged((moe_ep_wire_t)WIRE, tok, tok + d.K * db, db, sb, d.K, c.rows_s + j * d.K,
                                     slot_w + j * d.K, a.io.out[r] + (int64_t)t * d.H, ch * 8);
                for (ch += summers; ch >= chunks; ch -= chunks) jj++;
            }
            jj -= per_stage; /* into the next batch (only the last batch holds fewer) */
            if (refill) mbar_arrive(&sh->stage_empty[s]); /* stage s read by this thread */
            if (++s == stages) s = 0, phase ^= 1;
        }
    }
    stage_end(a, sh, st);
    if (threadIdx.x == 0)
        for (int i = 0; i < stages; i++) mbar_inval(&sh->stage_empty[i]);
}

/* Combine item: tokens [g * cpi, ...) once the GEMM2 tiles of their rows are
 * done; staged (st.stages > 0) or register-fed. */
template <int BM, bool SPREAD>
__device__ bool combine_group(const moe_ep_mega_args_t &a, const mega_staging &st, mega_shared *sh, int g)
{
    const mega_ctx c = ctx_of(a, sh);
    const moe_ep_split_dims_t &d = a.d;
    int first = g * sh->cpi, count = min(c.n_tok, first + sh->cpi) - first;
    bool ok = true;
    group_slots(a, c, sh, first, count);
    __syncthreads();
    if (threadIdx.x < count * d.K && c.rows_s[threadIdx.x] >= 0) {
        int e = c.expert_s[threadIdx.x], mt = c.tile_off[e] + mega_row_tile<BM, SPREAD>(c, e, c.rows_s[threadIdx.x] - c.off[e]);
        ok = spin_until(&c.g2_done[mt], c.n2, a, MOE_EP_MEGA_WAIT_GEMM2, (uint32_t)mt);
    }
    if (!__syncthreads_and(ok)) return false;
    MEGA_TRACE_MARK(sh);
    if (st.stages) {
        /* each slot's weight, once, over its expert (read by its own thread
         * only, above); combine_staged's first barrier orders it */
        float *slot_w = (float *)c.expert_s;
        if (threadIdx.x < count * d.K) {
            const int j = threadIdx.x / d.K, r = rank_of(sh->token_prefix, d.R, first + j);
            const int t = first + j - sh->token_prefix[r];
            slot_w[threadIdx.x] = c.rows_s[threadIdx.x] >= 0 ? __ldg(a.io.weights[r] + (int64_t)t * d.K + threadIdx.x % d.K) : 0.0f;
        }
        if (d.wire == MOE_EP_WIRE_BF16) combine_staged<MOE_EP_WIRE_BF16>(a, st, sh, slot_w, first, count);
        else if (d.wire == MOE_EP_WIRE_MXFP8) combine_staged<MOE_EP_WIRE_MXFP8>(a, st, sh, slot_w, first, count);
        else combine_staged<MOE_EP_WIRE_FP4>(a, st, sh, slot_w, first, count);
        return true;
    }
    /* the group's (token, chunk) pairs spread over the block */
    const int64_t chunks = d.H / 8;
    for (int64_t i = threadIdx.x; i < count * chunks; i += blockDim.x) {
        int j = (int)(i / chunks), r = rank_of(sh->token_prefix, d.R, first + j), t = first + j - sh->token_prefix[r];
        combine_chunk(d.wire, a.b.y, a.b.y_scales, d.H, d.K, c.rows_s + j * d.K, a.io.weights[r] + (int64_t)t * d.K,
                      a.io.out[r] + (int64_t)t * d.H, (i % chunks) * 8);
    }
    __syncthreads();
    return true;
}

#endif
