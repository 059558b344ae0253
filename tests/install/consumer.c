/* A user program built against an installed qkern (pkg-config and find_package). */
#include <qkern.h>
#include <stdio.h>

int main(void)
{
    int64_t h = 4;
    float x[4] = {1, 2, 3, 4}, w[4] = {0, 0, 0, 0}, out[4];
    qk_tensor xt = qk_tensor_make(x, QK_DTYPE_F32, 1, &h), wt = qk_tensor_make(w, QK_DTYPE_F32, 1, &h);
    qk_tensor ot = qk_tensor_make(out, QK_DTYPE_F32, 1, &h);
    qk_status st = qk_gemma_rms_norm(&xt, &wt, 1e-6f, &ot, NULL);
    printf("qkern %s (ABI %d, target %s): %s, out[3] = %.6f\n", qk_version(), qk_abi_version(),
           qk_target(), qk_status_name(st), (double)out[3]);
    return st == QK_OK && qk_abi_version() == QK_ABI_VERSION && out[3] > 1.46f && out[3] < 1.47f ? 0 : 1;
}
