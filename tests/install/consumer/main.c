/* Links against an installed moe_ep and checks two calls that need no device. */
#include <moe_ep.h>

#include <stdio.h>
#include <string.h>

int main(void)
{
    int major = -1, minor = -1, patch = -1;
    moe_ep_version(&major, &minor, &patch);
    if (major != MOE_EP_VERSION_MAJOR || minor != MOE_EP_VERSION_MINOR ||
        patch != MOE_EP_VERSION_PATCH) {
        fprintf(stderr, "version mismatch: library %d.%d.%d, header %d.%d.%d\n", major, minor,
                patch, MOE_EP_VERSION_MAJOR, MOE_EP_VERSION_MINOR, MOE_EP_VERSION_PATCH);
        return 1;
    }
    const char *s = moe_ep_status_string(MOE_EP_SUCCESS);
    if (!s || strcmp(s, "success") != 0) {
        fprintf(stderr, "moe_ep_status_string(MOE_EP_SUCCESS) = \"%s\"\n", s ? s : "(null)");
        return 1;
    }
    printf("moe_ep %d.%d.%d: %s\n", major, minor, patch, s);
    return 0;
}
