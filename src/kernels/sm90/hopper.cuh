/* Hopper (sm_90a) building blocks as small inline PTX wrappers: mbarriers,
 * TMA bulk tensor copies, shared-memory matrix descriptors and wgmma. Used by
 * the grouped GEMMs and by the kernel lab (dev/wgmma_lab). */
#ifndef MOE_EP_HOPPER_CUH
#define MOE_EP_HOPPER_CUH

#include "kernels/split_kernels.h" /* the device error word's kinds */

#include <cuda.h>
#include <stdint.h>

__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* Four 8 x 8 b16 matrices into shared memory: lane l gives the address of row
 * l % 8 of matrix l / 8, and its fragment of each (row lane / 4, columns
 * 2 (lane % 4), + 1; the lower column in the lower half) in r0 .. r3. */
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3)
{
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
                 "r"(r2), "r"(r3)
                 : "memory");
}

/* As stmatrix_x4, each matrix transposed: row i of matrix m (at lane 8 m + i's
 * address) gets column i of the fragments. */
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3)
{
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0),
                 "r"(r1), "r"(r2), "r"(r3)
                 : "memory");
}

__device__ __forceinline__ uint4 ld_shared_v4(uint32_t addr)
{
    uint4 v;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr) : "memory");
    return v;
}

__device__ __forceinline__ void mbar_init(uint64_t *b, int count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(b)), "r"(count));
}

/* Before an mbarrier's memory is initialised again (a persistent kernel's next tile). */
__device__ __forceinline__ void mbar_inval(uint64_t *b)
{
    asm volatile("mbarrier.inval.shared::cta.b64 [%0];\n" ::"r"(smem_u32(b)) : "memory");
}

__device__ __forceinline__ void mbar_expect_tx(uint64_t *b, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(b)), "r"(bytes) : "memory");
}

/* The transaction bytes a phase also waits for, without an arrival (the arrival comes later, e.g. after
 * the thread's own stores for the same phase). */
__device__ __forceinline__ void mbar_expect_tx_only(uint64_t *b, uint32_t bytes)
{
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(b)), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t *b)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(b)) : "memory");
}

/* n arrivals at once (a producer that stands in for threads with nothing to copy). */
__device__ __forceinline__ void mbar_arrive_n(uint64_t *b, uint32_t n)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(b)), "r"(n) : "memory");
}

/* 16 bytes global -> shared through L2 only (cp.async.cg; both 16-byte aligned). */
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}

/* One arrival on b once this thread's earlier cp.async copies have landed
 * (.noinc: it counts towards the barrier's expected arrivals). */
__device__ __forceinline__ void cp_async_mbar_arrive(uint64_t *b)
{
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_u32(b)) : "memory");
}

/* Before wgmma (async proxy) reads shared memory that cp.async or stores
 * (generic proxy) wrote, by the reading threads once they saw it complete. */
__device__ __forceinline__ void fence_proxy_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

/* Waits for the phase of the given parity. Intra-CTA: the producer and the
 * consumers of one CTA are always resident together, and every phase is
 * completed by a finite number of TMA copies or arrivals. Unbounded: the
 * kernel lab's (dev/) only; the library's waits are mbar_wait_bounded. */
__device__ __forceinline__ void mbar_wait(uint64_t *b, int parity)
{
    asm volatile("{\n.reg .pred p;\nWAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra WAIT_%=;\n}\n" ::"r"(smem_u32(b)), "r"(parity) : "memory");
}

/* The GPU's global timer in ns (the bounded waits' clock). */
__device__ __forceinline__ long long global_ns()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
    return (long long)t;
}

/* The tiles' waits, bounded: a phase that never completes is a bug (a lost
 * arrival, or bytes expected that no copy brings: 9ad3294's first suite run
 * hung four test processes that way). bound ns after the first failed try
 * (moe_ep_tile_wait_ns: timeout_seconds, at most 4 s; a stage takes
 * microseconds) the wait sets the block's tile_wait_failed and returns; every
 * later failed wait of the block sees it and returns at once, so the kernel
 * ends, and the ring's teardown turns the flag into the device error word
 * (tile_wait_report), so the forward reports it (its outputs are wrong).
 * The flag is static shared memory (its address is a constant) and the
 * loop one asm block: with the error word's pointer in a C loop instead, the
 * mega kernel's FP8-BLOCK tile at 128 rows spilled 8 bytes, with the flag in
 * a C loop too; a trap 948 bytes, the loop as a noinline call 784-912. */
static __shared__ uint32_t tile_wait_failed;

/* Thread 0, once at the kernel's start (before the block's first barrier).
 * Not at every tile: armed from the device error word there (a global load
 * before the tile's first barrier), it cost FP8-BLOCK 1-3.6 % and MXFP8 up
 * to 1.7 % at T <= 64 (0d3a362, paired bench). After a failure the kernels
 * see the error word anyway (split's at entry, mega's at every item). */
__device__ __forceinline__ void tile_wait_arm() { tile_wait_failed = 0u; }

/* Thread 0, at a ring's teardown (after the block's barrier): a wait that
 * gave up becomes the device error word (the first error wins). */
__device__ __forceinline__ void tile_wait_report(const uint32_t *error)
{
    if (tile_wait_failed && *(volatile const uint32_t *)error == 0u)
        atomicCAS((uint32_t *)error, 0u, (MOE_EP_DEVERR_TIMEOUT << 24) | MOE_EP_WAIT_TILE);
}

__device__ __forceinline__ void mbar_wait_bounded(uint64_t *b, int parity, uint32_t bound)
{
    asm volatile("{\n.reg .pred p;\n.reg .u32 t0, t1;\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@p bra DONE_%=;\n"
                 "ld.volatile.shared.u32 t1, [%3];\n" /* an earlier wait gave up */
                 "setp.ne.u32 p, t1, 0;\n"
                 "@p bra DONE_%=;\n"
                 "mov.u32 t0, %%globaltimer_lo;\n"
                 "LOOP_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@p bra DONE_%=;\n"
                 "mov.u32 t1, %%globaltimer_lo;\n"
                 "sub.u32 t1, t1, t0;\n" /* 32-bit ns: wraps after 4.29 s, so bound <= MOE_EP_TILE_WAIT_MAX_NS */
                 "setp.le.u32 p, t1, %2;\n"
                 "@p bra LOOP_%=;\n"
                 "st.volatile.shared.u32 [%3], 1;\n"
                 "DONE_%=:\n}\n" ::"r"(smem_u32(b)), "r"(parity), "r"(bound), "r"(smem_u32(&tile_wait_failed))
                 : "memory");
}

__device__ __forceinline__ void tma_load_2d(void *dst, const CUtensorMap *map, uint64_t *bar, int x, int y)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 ::"r"(smem_u32(dst)), "l"((uint64_t)map), "r"(x), "r"(y), "r"(smem_u32(bar)) : "memory");
}

/* A bulk copy of `bytes` (a multiple of 16; both addresses 16-byte aligned)
 * from global to shared memory, completing bytes on mbarrier bar. */
__device__ __forceinline__ void bulk_load(void *dst, const void *src, uint32_t bytes, uint64_t *bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 ::"r"(smem_u32(dst)), "l"((uint64_t)src), "r"(bytes), "r"(smem_u32(bar)) : "memory");
}

/* A bulk copy of `bytes` (a multiple of 16; both addresses 16-byte aligned)
 * from shared to global memory, in this thread's current bulk group. */
__device__ __forceinline__ void bulk_store(void *dst, const void *src, uint32_t bytes)
{
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n"
                 ::"l"((uint64_t)dst), "r"(smem_u32(src)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
/* This thread's bulk groups have read their shared memory (READ) or completed their writes. */
template <bool READ>
__device__ __forceinline__ void bulk_wait_all()
{
    if constexpr (READ) asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
    else asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

/* Shared-memory matrix descriptor: K-major, 128-byte swizzle (8-row x 128-B
 * atoms, 1024 B between atoms along M/N; the leading offset is unused). */
__device__ __forceinline__ uint64_t smem_desc_u32(uint32_t shared_address)
{
    uint64_t a = shared_address;
    return ((a & 0x3FFFF) >> 4) | (1ull << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ uint64_t smem_desc(const void *p) { return smem_desc_u32(smem_u32(p)); }

/* A warpgroup's registers per thread from here on (all 128 threads call it;
 * multiples of 8). The pool is the launch's: a block of 384 threads at 168. */
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }

/* d[128] += A (64 x 16, descriptor da) . B^T (256 x 16, descriptor db); scale_d = 0 zeroes d first. */
__device__ __forceinline__ void wgmma_m64n256k16_bf16(float *d, uint64_t da, uint64_t db, int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, %128, %129, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                 : "l"(da), "l"(db), "r"(scale_d));
}

/* The operands of a 64-float wgmma accumulator d[0..63]: the register list
 * (PTX operands %0..%63) and the matching "+f" constraints. */
#define WGMMA_D64_REGS "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}"
#define WGMMA_D8(d, i) \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define WGMMA_D64(d) \
    WGMMA_D8(d, 0), WGMMA_D8(d, 8), WGMMA_D8(d, 16), WGMMA_D8(d, 24), WGMMA_D8(d, 32), WGMMA_D8(d, 40), \
        WGMMA_D8(d, 48), WGMMA_D8(d, 56)

/* d[64] (+)= A (64 x 32 e4m3, descriptor da) . B^T (128 x 32 e4m3, descriptor db), fp32
 * accumulation; scale_d = 0 zeroes d first (QGMMA). */
__device__ __forceinline__ void wgmma_m64n128k32_e4m3(float *d, uint64_t da, uint64_t db, int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " WGMMA_D64_REGS ", %64, %65, p, 1, 1;\n}\n"
                 : WGMMA_D64(d)
                 : "l"(da), "l"(db), "r"(scale_d));
}

/* d[64] (+)= A (64 x 16 f16, descriptor da) . B^T (128 x 16 f16, descriptor db), fp32
 * accumulation; scale_d = 0 zeroes d first (HGMMA). */
__device__ __forceinline__ void wgmma_m64n128k16_f16(float *d, uint64_t da, uint64_t db, int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " WGMMA_D64_REGS ", %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : WGMMA_D64(d)
                 : "l"(da), "l"(db), "r"(scale_d));
}

#endif
