/* The mega kernel's count and dispatch items (mega.cu only): each slot's
 * position in its expert's rows, then each token quantized once and
 * written to its rows, which count towards their expert's ready counter. */
#ifndef MOE_EP_MEGA_DISPATCH_CUH
#define MOE_EP_MEGA_DISPATCH_CUH

#include "kernels/mega_common.cuh"
#include "kernels/sm90/fold_rows.cuh"

/* Local rank of global token index tg (prefix over ranks, R <= 64). */
__device__ __forceinline__ int rank_of(const int32_t *prefix, int R, int tg)
{
    int r = 0;
    while (r + 1 < R && prefix[r + 1] <= tg) r++;
    return r;
}

/* T of every rank (checked) and their prefix, computed by every block alike. */
__device__ void read_tokens(const moe_ep_mega_args_t &a, mega_shared *sh)
{
    if (threadIdx.x == 0) {
        int sum = 0;
        for (int r = 0; r < a.d.R; r++) {
            int t = a.io.t_device ? __ldcg(&a.io.t_device[r]) : a.io.t_host[r];
            if (t < 0 || t > a.d.T_max) {
                moe_ep_dev_fail(a.b.error, MOE_EP_DEVERR_BAD_TOKENS, (uint32_t)r);
                t = 0;
            }
            sh->token_prefix[r] = sum;
            sum += t;
        }
        sh->token_prefix[a.d.R] = sum;
    }
    __syncthreads();
}

/* Count item: one slot per thread; its position in its expert's rows. */
__device__ void count_item(const moe_ep_mega_args_t &a, mega_shared *sh, int item)
{
    const mega_ctx c = ctx_of(a, sh);
    const moe_ep_split_dims_t &d = a.d;
    int64_t s = (int64_t)item * blockDim.x + threadIdx.x;
    if (s < (int64_t)c.n_tok * d.K) {
        int tg = (int)(s / d.K), k = (int)(s % d.K), r = rank_of(sh->token_prefix, d.R, tg);
        int64_t i = (int64_t)(tg - sh->token_prefix[r]) * d.K + k; /* t * K + k */
        int32_t id = __ldcg(&a.io.ids[r][i]), local = id - d.first_expert, pos = -1;
        if (id < -1 || id >= d.num_experts_global) /* every rank sees every id: all of them fail */
            moe_ep_dev_fail(a.b.error, MOE_EP_DEVERR_BAD_EXPERT, (uint32_t)((int64_t)r * d.T_max * d.K + i));
        else if (id >= 0 && local >= 0 && local < d.E) /* else another GPU's expert (links) */
            pos = atomicAdd(&a.b.expert_count[local], 1);
        a.b.slot_pos[(int64_t)r * d.T_max * d.K + i] = pos;
    }
    block_signal(&c.ctr[MOE_EP_MEGA_CTR_COUNTED]);
}

/* The slots of the group's tokens [first, first + count) into rows_s /
 * expert_s[j K + k] (count * K <= blockDim): thread j K + k takes slot k of
 * token j, -1 for unused slots. One pass: the loop over the tokens it
 * replaced (K threads each) waited a load round trip per token. */
__device__ void group_slots(const moe_ep_mega_args_t &a, const mega_ctx &c, const mega_shared *sh, int first, int count)
{
    const int K = a.d.K, j = threadIdx.x / K, k = threadIdx.x - j * K;
    if (j >= count) return;
    const int r = rank_of(sh->token_prefix, a.d.R, first + j), t = first + j - sh->token_prefix[r];
    int64_t s = ((int64_t)r * a.d.T_max + t) * K + k;
    int32_t pos = __ldcg(&a.b.slot_pos[s]), e = __ldcg(&a.io.ids[r][(int64_t)t * K + k]) - a.d.first_expert;
    c.rows_s[threadIdx.x] = pos < 0 ? -1 : c.off[e] + pos;
    c.expert_s[threadIdx.x] = pos < 0 ? -1 : e;
}

/* Where each row of the group's slots came from (a.row_slot: links' row
 * items send it back there, the gathering GEMM1 reads its x row there). */
__device__ __forceinline__ void record_row_sources(const moe_ep_mega_args_t &a, const mega_ctx &c,
                                                   const mega_shared *sh, int first, int count)
{
    const moe_ep_split_dims_t &d = a.d;
    if (threadIdx.x < count * d.K && c.rows_s[threadIdx.x] >= 0) {
        int j = threadIdx.x / d.K, r = rank_of(sh->token_prefix, d.R, first + j);
        int64_t t = first + j - sh->token_prefix[r];
        a.row_slot[c.rows_s[threadIdx.x]] = (int32_t)(((int64_t)r * d.T_max + t) * d.K + threadIdx.x % d.K);
    }
}

/* Whole block: the group's slots and their rows' sources (after the plan). */
__device__ __forceinline__ void dispatch_slots(const moe_ep_mega_args_t &a, const mega_ctx &c, const mega_shared *sh,
                                               int first, int count)
{
    group_slots(a, c, sh, first, count);
    __syncthreads();
    record_row_sources(a, c, sh, first, count);
}

/* A dispatch item's passes: whole (the block's plan made before it), or, at
 * decode, its rows encoded first (DISPATCH_ENCODE: beside the count items,
 * whose wait the plan is) and, once the item is claimed again and the plan
 * made, its slots read and its rows stored (DISPATCH_STORE). Two passes only
 * before the block's plan, for rows stored by bulk copies (OUT) and groups of
 * one staged batch (so that a plan that fails leaves no copy in flight); the
 * gathering bf16 GEMM1 has no rows to encode. */
enum { DISPATCH_WHOLE = 0, DISPATCH_ENCODE = 1, DISPATCH_STORE = 2 };
template <int MODE>
__device__ __forceinline__ int dispatch_pass(const mega_params &p, const mega_shared *sh)
{
    if (sh->encoded) return DISPATCH_STORE;
    const bool two = MEGA_BULK_STORES(MODE) && !(MODE == MODE_WGMMA && p.gather) && p.xs.bulk && p.xs.out_bytes > 0 &&
                     sh->dpi <= p.xs.per_stage;
    return sh->tiles < 0 && two ? DISPATCH_ENCODE : DISPATCH_WHOLE;
}

/* Whole block, after a dispatch item wrote its rows: each row counts once
 * towards its expert's ready counter (an absent rank's rows never do). */
__device__ __forceinline__ void dispatch_signal(const moe_ep_mega_args_t &a, const mega_ctx &c, const mega_shared *sh,
                                                int first, int count)
{
    __threadfence();
    __syncthreads();
    if (threadIdx.x < count * a.d.K && c.rows_s[threadIdx.x] >= 0 &&
        rank_of(sh->token_prefix, a.d.R, first + (int)threadIdx.x / a.d.K) != a.absent_rank)
        red_release_add(&c.ready[c.expert_s[threadIdx.x]], 1);
}

/* Thread 0: bf16 rows of the group's tokens [j0, j0 + n) (token first + j)
 * into stage dst, completing on bar; an absent rank's tokens are not copied. */
__device__ void stage_x_rows(const moe_ep_mega_args_t &a, const mega_shared *sh, uint8_t *dst, uint64_t *bar,
                             int first, int j0, int n)
{
    const uint32_t bytes = (uint32_t)pinned_int(2 * a.d.H);
    uint32_t total = 0;
    for (int j = j0; j < j0 + n; j++) total += rank_of(sh->token_prefix, a.d.R, first + j) != a.absent_rank ? bytes : 0u;
    mbar_expect_tx(bar, total);
    for (int j = j0; j < j0 + n; j++) {
        int r = rank_of(sh->token_prefix, a.d.R, first + j);
        if (r != a.absent_rank)
            bulk_load(dst + (size_t)(j - j0) * bytes, a.io.x[r] + (int64_t)(first + j - sh->token_prefix[r]) * a.d.H,
                      bytes, bar);
    }
}

/* The block: the same rows copied by every thread (x not 16-byte aligned),
 * read through L2 as rows other GPUs wrote must be. */
__device__ void copy_x_rows(const moe_ep_mega_args_t &a, const mega_shared *sh, uint16_t *dst, int first, int j0, int n)
{
    const int H = a.d.H;
    for (int i = threadIdx.x; i < n * H; i += blockDim.x) {
        int j = j0 + i / H, r = rank_of(sh->token_prefix, a.d.R, first + j);
        if (r != a.absent_rank) dst[i] = __ldcg(a.io.x[r] + (int64_t)(first + j - sh->token_prefix[r]) * H + i % H);
    }
}

/* Warp 0, after the batch's encoded rows (tokens j0 .. j0 + n - 1 of the
 * group, at od / os) are in shared memory: each row's K copies by bulk
 * stores, one bulk group a lane. */
__device__ void store_batch_rows(const moe_ep_mega_args_t &a, const mega_ctx &c, const mega_shared *sh,
                                 const mega_staging &st, const uint8_t *od, const uint8_t *os, int first, int j0, int n,
                                 bool fold)
{
    const int K = a.d.K, scale_bytes = st.out_bytes - st.out_data;
    /* the data rows: E4M3 into xq, or (fold) fp16 into act16 */
    uint8_t *dst = fold ? (uint8_t *)a.b.act16 : a.b.xq;
    const int row_bytes = fold ? st.fold_bytes : st.out_data, pitch = fold ? st.fold_pitch : st.out_data;
    for (int i = threadIdx.x; i < n * K; i += 32) {
        const int j = i / K, row = c.rows_s[j0 * K + i];
        if (row < 0 || (a.absent_rank >= 0 && rank_of(sh->token_prefix, a.d.R, first + j0 + j) == a.absent_rank)) continue;
        bulk_store(dst + (int64_t)row * pitch, od + (size_t)j * row_bytes, (uint32_t)row_bytes);
        bulk_store(a.b.xq_scales + (int64_t)row * scale_bytes, os + (size_t)j * scale_bytes, (uint32_t)scale_bytes);
    }
    bulk_commit();
}

/* Dispatch item: tokens [g * dpi, ...) quantized once, written to each of
 * their rows. The group's bf16 rows move into shared memory by stages of
 * the ring (bulk copies, issued ahead while earlier stages are encoded; the
 * register-fed loop this replaced had one 16-byte load per thread in flight
 * and ran at a third of the copy bandwidth). The (token, chunk) pairs of a
 * stage are spread over the block; a warp's 32 chunks straddle tokens only
 * at a multiple of 16 chunks (H % 128 == 0), so a format block's lanes share
 * one token. In two passes where dispatch_pass says (DISPATCH_ENCODE, then
 * DISPATCH_STORE: the item claimed again, the block's plan made between). */
template <int AF, bool OUT, bool FOLD>
__device__ void dispatch_group(const moe_ep_mega_args_t &a, const mega_staging &st, mega_shared *sh, int g, int pass)
{
    sh = pinned(sh);
    uint8_t *smem = (uint8_t *)sh - st.sh_offset; /* not the kernel's pointer: that one then stayed live across the tiles */
    const mega_ctx c = ctx_of(a, sh);
    const moe_ep_split_dims_t &d = a.d;
    const moe_ep_format_t f = (moe_ep_format_t)AF; /* compile-time: the encoder's branches fold (2.5x slower at run time, 528786f vs 49cc52a) */
    const int first = g * sh->dpi, count = min(c.n_tok, first + sh->dpi) - first, lane = threadIdx.x % 32;
    const int stages = pinned_int(st.stages), per_stage = pinned_int(st.per_stage), chunks = pinned_int(d.H / 8);
    const int batches = (count + per_stage - 1) / per_stage, stage_bytes = per_stage * st.token_bytes;
    const int out_bytes = OUT ? pinned_int(st.out_bytes) : 0; /* > 0: rows staged, stored by bulk copies */
    const int fold_bytes = FOLD && out_bytes ? pinned_int(st.fold_bytes) : 0; /* > 0: folded, stored to act16 */
    if (threadIdx.x == 0 && st.bulk && pass != DISPATCH_STORE) {
        stage_begin(a, sh, st);
        for (int b = 0; b < min(batches, stages); b++)
            stage_x_rows(a, sh, smem + (size_t)b * stage_bytes, &sh->stage_full[b], first, b * per_stage,
                         min(per_stage, count - b * per_stage));
    }
    if (pass == DISPATCH_WHOLE) dispatch_slots(a, c, sh, first, count);
    for (int b = 0, s = 0, phase = 0; b < batches; b++) {
        const int j0 = b * per_stage, n = min(per_stage, count - j0);
        int jj = threadIdx.x / chunks, ch = threadIdx.x - jj * chunks; /* token of the batch, 8-column chunk */
        uint16_t *x = (uint16_t *)(smem + (size_t)s * stage_bytes);
        uint8_t *od = smem + (size_t)stages * stage_bytes + (size_t)(b & 1) * per_stage * out_bytes; /* data rows */
        uint8_t *os = od + (size_t)per_stage * st.out_data;                                          /* scale rows */
        uint8_t *f16 = smem + (size_t)stages * stage_bytes + (size_t)(2 * per_stage) * out_bytes +
                       (size_t)(b & 1) * per_stage * fold_bytes;                                      /* fp16 rows */
        const uint32_t xs = smem_u32(x);
        if (pass != DISPATCH_STORE) { /* the batch's rows encoded (staged where out_bytes) */
            if (st.bulk) {
                MEGA_STAGE_WAIT(a, sh, &sh->stage_full[s], phase, 0);
            } else {
                copy_x_rows(a, sh, x, first, j0, n);
                __syncthreads();
            }
            /* lane's pair (jj, ch) = chunk i0 + lane of the batch, stepped by
             * blockDim.x chunks without a division; set again at each batch, not
             * carried over as in combine_staged: here the loop runs on the warp's
             * i0 and the shuffles need a warp's lanes on consecutive chunks. The
             * rank only where one is absent (tests). Per chunk a division, a
             * modulo and rank_of's loop were most of the dispatch's instructions
             * (it ran at ~1.3 TB/s) */
            for (int i0 = threadIdx.x - lane; i0 < n * chunks; i0 += blockDim.x) { /* warp-uniform: shuffles inside */
                const bool on = jj < n && (a.absent_rank < 0 || rank_of(sh->token_prefix, d.R, first + j0 + jj) != a.absent_rank);
                float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                if (on) load_bf16x8_shared(xs + 2u * (uint32_t)(jj * d.H + ch * 8), v);
                if (out_bytes) { /* once, into the batch's staged row jj */
                    const enc_chunk en = encode_chunk(f, v, d.fc1_scale);
                    if (on) store_chunk(f, en, d.H, ch * 8, od, os, jj);
                } else {
                    dispatch_chunk(f, v, d.H, ch * 8, d.fc1_scale, a.b.xq, a.b.xq_scales, c.rows_s + (j0 + (on ? jj : 0)) * d.K,
                                   d.K, on);
                }
                for (ch += blockDim.x; ch >= chunks; ch -= chunks) jj++;
            }
            if (out_bytes) {
                asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); /* the rows, for the bulk stores */
                if (threadIdx.x < 32) bulk_wait_all<true>(); /* the last batch's stores read: its buffer is the next one */
            }
            __syncthreads(); /* stage s read by every thread */
            if (fold_bytes) { /* fold the batch's rows, then store those */
                fold_staged_rows<fold_kind_of(AF)>(od, os, out_bytes - st.out_data, d.H, n, (uint16_t *)f16, d.H); /* fp16 rows of H */
                asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
                __syncthreads();
            }
        }
        if (pass == DISPATCH_ENCODE) { /* the only batch staged: the plan, then the second pass */
            if (threadIdx.x == 0) sh->next = sh->item, sh->encoded = 1;
            return;
        }
        if (pass == DISPATCH_STORE) dispatch_slots(a, c, sh, first, count);
        if (out_bytes && threadIdx.x < 32) store_batch_rows(a, c, sh, st, fold_bytes ? f16 : od, os, first, j0, n, fold_bytes != 0);
        if (threadIdx.x == 0 && st.bulk && b + stages < batches)
            stage_x_rows(a, sh, smem + (size_t)s * stage_bytes, &sh->stage_full[s], first, j0 + stages * per_stage,
                         min(per_stage, count - j0 - stages * per_stage));
        if (++s == stages) s = 0, phase ^= 1;
    }
    if (out_bytes && threadIdx.x < 32) { /* the rows written before their expert's counter counts them */
        bulk_wait_all<false>();
        asm volatile("fence.proxy.async.global;\n" ::: "memory");
    }
    if (st.bulk) stage_end(a, sh, st);
    dispatch_signal(a, c, sh, first, count);
    if (threadIdx.x == 0) sh->encoded = 0; /* read again after the next claim's barriers */
}

/* Dispatch item when GEMM1 gathers its A rows from x itself (mega_params.gather):
 * only where each row comes from, then the rows count as ready. */
__device__ void dispatch_sources(const moe_ep_mega_args_t &a, mega_shared *sh, int g)
{
    const mega_ctx c = ctx_of(a, sh);
    const int first = g * sh->dpi, count = min(c.n_tok, first + sh->dpi) - first;
    dispatch_slots(a, c, sh, first, count);
    dispatch_signal(a, c, sh, first, count);
}

#endif
