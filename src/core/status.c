/* Status strings, the thread-local last error, names, and format facts. */
#include "core/internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_error[1024];

void moe_ep_clear_error(void) { last_error[0] = '\0'; }

moe_ep_status_t moe_ep_fail_at(moe_ep_status_t status, const char *file, int line,
                               const char *fmt, ...)
{
    const char *base = strrchr(file, '/');
    int n = snprintf(last_error, sizeof last_error, "%s: ", moe_ep_status_string(status));
    if (n < 0 || (size_t)n >= sizeof last_error) return status;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(last_error + n, sizeof last_error - (size_t)n, fmt, ap);
    va_end(ap);
    if (m >= 0 && (size_t)(n + m) < sizeof last_error)
        snprintf(last_error + n + m, sizeof last_error - (size_t)(n + m), " (%s:%d)",
                 base ? base + 1 : file, line);
    return status;
}

const char *moe_ep_last_error(void) { return last_error; }

const char *moe_ep_status_string(moe_ep_status_t status)
{
    switch (status) {
    case MOE_EP_SUCCESS: return "success";
    case MOE_EP_ERROR_INVALID_ARGUMENT: return "invalid argument";
    case MOE_EP_ERROR_OUT_OF_MEMORY: return "out of memory";
    case MOE_EP_ERROR_UNSUPPORTED: return "unsupported";
    case MOE_EP_ERROR_CUDA: return "CUDA error";
    case MOE_EP_ERROR_NCCL: return "NCCL error";
    case MOE_EP_ERROR_TIMEOUT: return "timeout";
    case MOE_EP_ERROR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

void moe_ep_version(int *major, int *minor, int *patch)
{
    if (major) *major = MOE_EP_VERSION_MAJOR;
    if (minor) *minor = MOE_EP_VERSION_MINOR;
    if (patch) *patch = MOE_EP_VERSION_PATCH;
}

const char *moe_ep_path_name(moe_ep_path_t path)
{
    static const char *names[] = {"bf16", "mxfp8", "nvfp4", "w4a8", "fp8_block"};
    return (unsigned)path < MOE_EP_PATH_COUNT_ ? names[path] : "unknown";
}

const char *moe_ep_wire_name(moe_ep_wire_t wire)
{
    static const char *names[] = {"bf16", "mxfp8", "fp4"};
    return (unsigned)wire < MOE_EP_WIRE_COUNT_ ? names[wire] : "unknown";
}

const char *moe_ep_backend_name(moe_ep_backend_t backend)
{
    static const char *names[] = {"reference", "split", "mega"};
    return (unsigned)backend < MOE_EP_BACKEND_COUNT_ ? names[backend] : "unknown";
}

const char *moe_ep_format_name(moe_ep_format_t format)
{
    static const char *names[] = {"bf16", "mxfp8", "nvfp4", "mxfp4", "fp8_block", "fp4_wire"};
    return (unsigned)format < MOE_EP_FORMAT_COUNT_ ? names[format] : "unknown";
}
