/* `qk bench gemma-shift`: the measurement that decides, per target, whether
 * gemma_rms_norm is a native (1 + w) kernel or rms_norm over an f32 shifted weight
 * (1 + w formed once, as the serving layer would keep it beside the raw weight). Both run
 * the target's staged provider over the norm protocol's 32 cells, timed interleaved. */
#include "bench_common.h"
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct shift_ctx {
    qk_tensor x, out, w_raw, w_shift;
    const qk_norm_impl *gemma, *plain;
    bool shifted;
} shift_ctx;

static void call_shift(void *p, int64_t iter)
{
    (void)iter;
    shift_ctx *c = (shift_ctx *)p;
    qk_status st = c->shifted
                       ? qk_norm_run(QK_NORM_RMS, c->plain, &c->x, &c->w_shift, NULL, 1e-6f, &c->out, NULL)
                       : qk_norm_run(QK_NORM_GEMMA, c->gemma, &c->x, &c->w_raw, NULL, 1e-6f, &c->out, NULL);
    if (st) {
        fprintf(stderr, "qk bench gemma-shift: %s: %s\n", qk_status_name(st), qk_last_error());
        exit(1);
    }
}

int qk_bench_gemma_shift(int argc, char **argv)
{
    qkb_options opt;
    if (!qkb_parse_options("qk bench gemma-shift", argc, argv, &opt)) return 2;
    static const int64_t rows_list[] = {1, 16, 128, 512}, hidden[] = {256, 2048, 4096, 5120};
    static const qk_dtype dts[] = {QK_DTYPE_F16, QK_DTYPE_BF16};
    const qk_ops *ops = &qk_target_table_built.ops;
    const int warm = opt.quick ? 5 : 50, reps = opt.quick ? 20 : 200;
    double t_native[32], t_shift[32];
    int n = 0;
    printf("qk bench gemma-shift: target %s, gemma_rms_norm provider %s; native (1 + w) kernel vs "
           "rms_norm over an f32 weight holding 1 + w (formed once, outside the timing)\n",
           qk_target(), ops->norm[QK_NORM_GEMMA].provider);
    printf("protocol: %d warm-ups + %d timed calls per variant, interleaved; BF16 weight in "
           "[-0.1, 0.1)\n\n", warm, reps);
    printf("dt   rows hidden     native   shifted  native speedup\n");
    qkb_rng rng = {0x5eed};
    for (int d = 0; d < 2; d++)
        for (int ri = 0; ri < 4; ri++)
            for (int hi = 0; hi < 4; hi++, n++) {
                int64_t R = rows_list[ri], H = hidden[hi], shape[2] = {R, H};
                uint16_t *x = qkb_alloc((size_t)(R * H) * 2), *out = qkb_alloc((size_t)(R * H) * 2);
                uint16_t *w = qkb_alloc((size_t)H * 2);
                float *ws = qkb_alloc((size_t)H * 4);
                for (int64_t i = 0; i < R * H; i++)
                    x[i] = dts[d] == QK_DTYPE_BF16 ? qk_f32_to_bf16(qkb_uniform(&rng, -2, 2))
                                                   : qk_f16_from_f32(qkb_uniform(&rng, -2, 2));
                for (int64_t k = 0; k < H; k++) {
                    w[k] = qk_f32_to_bf16(qkb_uniform(&rng, -0.1f, 0.1f));
                    ws[k] = 1.0f + qk_bf16_to_f32(w[k]);
                }
                shift_ctx a, b;
                memset(&a, 0, sizeof a);
                a.x = qk_tensor_make(x, dts[d], 2, shape);
                a.out = qk_tensor_make(out, dts[d], 2, shape);
                a.w_raw = qk_tensor_make(w, QK_DTYPE_BF16, 1, &H);
                a.w_shift = qk_tensor_make(ws, QK_DTYPE_F32, 1, &H);
                a.gemma = &ops->norm[QK_NORM_GEMMA];
                a.plain = &ops->norm[QK_NORM_RMS];
                b = a;
                b.shifted = true;
                qkb_variant v[2];
                memset(v, 0, sizeof v);
                v[0].fn = v[1].fn = call_shift;
                v[0].ctx = &a;
                v[1].ctx = &b;
                v[0].warmup = v[1].warmup = warm;
                v[0].reps = v[1].reps = reps;
                qkb_time_interleaved(v, 2, 10);
                t_native[n] = v[0].st.p50;
                t_shift[n] = v[1].st.p50;
                char s1[32], s2[32];
                printf("%-4s %4lld %6lld %10s %9s %8.2fx\n", qk_dtype_name(dts[d]), (long long)R,
                       (long long)H, qkb_fmt_time(s1, sizeof s1, t_native[n]),
                       qkb_fmt_time(s2, sizeof s2, t_shift[n]), t_shift[n] / t_native[n]);
                free(x); free(out); free(w); free(ws);
            }
    qkb_compare cmp = qkb_compare_times(t_native, t_shift, n);
    printf("\nnative (1 + w) vs shifted f32 weight: geometric-mean speedup %.2fx, worst %+.1f%% "
           "(cell %d); %s\n", cmp.geomean, 100.0 * cmp.worst, cmp.worst_cell,
           cmp.geomean >= 1.0 ? "keep the native kernel" : "prefer the shifted weight");
    if (opt.json) {
        qkb_json j;
        if (!qkb_json_open(&j, opt.json)) return 1;
        qkb_json_environment(&j, &opt);
        qkb_json_array(&j, "cells");
        for (int i = 0; i < n; i++) {
            qkb_json_object(&j, NULL);
            qkb_json_str(&j, "dtype", qk_dtype_name(dts[i / 16]));
            qkb_json_int(&j, "rows", rows_list[(i / 4) % 4]);
            qkb_json_int(&j, "hidden", hidden[i % 4]);
            qkb_json_num(&j, "native_p50_s", t_native[i]);
            qkb_json_num(&j, "shifted_p50_s", t_shift[i]);
            qkb_json_end(&j);
        }
        qkb_json_end(&j);
        qkb_json_num(&j, "native_speedup_geomean", cmp.geomean);
        if (!qkb_json_close(&j)) return 1;
    }
    return 0;
}
