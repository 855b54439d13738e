/* Internal helpers shared by every host source file: error recording with
 * context, argument checks, and the group and layer objects. */
#ifndef MOE_EP_INTERNAL_H
#define MOE_EP_INTERNAL_H

#include "formats/facts.h"
#include "moe_ep.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Records a failure (printf-style detail, prefixed with file:line) in the
 * thread-local last-error buffer and returns status, so a caller can write
 * `return MOE_EP_FAIL(MOE_EP_ERROR_INVALID_ARGUMENT, "T=%d > max", t);`. */
moe_ep_status_t moe_ep_fail_at(moe_ep_status_t status, const char *file, int line,
                               const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
#define MOE_EP_FAIL(status, ...) moe_ep_fail_at((status), __FILE__, __LINE__, __VA_ARGS__)

/* Argument check: fails with INVALID_ARGUMENT and the condition's text. */
#define MOE_EP_REQUIRE(cond, ...)                                                   \
    do {                                                                            \
        if (!(cond)) return MOE_EP_FAIL(MOE_EP_ERROR_INVALID_ARGUMENT, __VA_ARGS__); \
    } while (0)

/* Propagates a failing status (its message is already recorded). */
#define MOE_EP_CHECK(call)                      \
    do {                                        \
        moe_ep_status_t st_ = (call);           \
        if (st_ != MOE_EP_SUCCESS) return st_;  \
    } while (0)

/* Clears the last error at the start of a public call. */
void moe_ep_clear_error(void);

#ifdef __cplusplus
}
#endif
#endif
