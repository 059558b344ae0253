/* The Qwen3.5 MLP activations: silu(gate) * up (text MLP) and the tanh approximation of
 * gelu (vision MLP). Not registry ops: plain C, the same bits for every backend, so that a
 * target-vs-reference comparison of a block sees only the registry ops' differences.
 * f32 arithmetic on exactly converted inputs, one RNE rounding to the output dtype. */
#include "serve/serve_internal.h"
#include "api/check.h"
#include "api/ckd.h"

#include <math.h>

typedef struct act_job {
    bool gelu;
    int64_t I;                       /* output row length */
    qk_dtype dt;
    const char *in; qk_rows ir;
    char *out; qk_rows orr;
} act_job;

static void act_range(const void *ctx, int64_t begin, int64_t end)
{
    const act_job *j = ctx;
    for (int64_t r = begin; r < end; r++) {
        const char *in = j->in + qk_rows_offset(&j->ir, r);
        char *out = j->out + qk_rows_offset(&j->orr, r);
        if (j->gelu) {
            for (int64_t i = 0; i < j->I; i++) {
                const float x = qk_load_f32(in, j->dt, i);
                const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
                qk_store_f32(out, j->dt, i, 0.5f * x * (1.0f + tanhf(u)));
            }
        } else {
            for (int64_t i = 0; i < j->I; i++) {
                const float g = qk_load_f32(in, j->dt, i), u = qk_load_f32(in, j->dt, j->I + i);
                qk_store_f32(out, j->dt, i, g / (1.0f + expf(-g)) * u);
            }
        }
    }
}

static qk_status check_arg(const char *fn, const char *name, const qk_tensor *t)
{
    /* NULL, ndim, negative dims, and (api.md's limits) dims and strides whose element count
       or byte span would not fit int64: the row count and overlap checks below use them */
    qk_status st = qk_check_tensor(fn, name, t);
    if (st != QK_OK) return st;
    if (!qk_is_float_dtype(t->dtype))
        return qk_fail(QK_ERR_DTYPE, "%s: %s has dtype %s; expected F32, F16 or BF16", fn, name,
                       qk_dtype_name(t->dtype));
    if (t->shape[t->ndim - 1] > 1 && t->stride[t->ndim - 1] != 1)
        return qk_fail(QK_ERR_LAYOUT, "%s: %s's last dim must be contiguous", fn, name);
    if (qk_tensor_rows(t) > 0 && t->shape[t->ndim - 1] > 0 && !t->data)
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "%s: %s->data is NULL", fn, name);
    return QK_OK;
}

static qk_status run(const char *fn, bool gelu, const qk_tensor *in, qk_tensor *out)
{
    char a[96], b[96];
    qk_status st;
    if ((st = check_arg(fn, gelu ? "x" : "gate_up", in))) return st;
    if ((st = check_arg(fn, "out", out))) return st;
    const int64_t L = in->shape[in->ndim - 1];
    if (L == 0 || (!gelu && L % 2))
        return qk_fail(QK_ERR_SHAPE, "%s: %s has shape %s; its last dim must be %s", fn,
                       gelu ? "x" : "gate_up", qk_shape_str(in, a, sizeof a),
                       gelu ? ">= 1" : "even (gate then up)");
    const int64_t I = gelu ? L : L / 2;
    bool same = out->ndim == in->ndim && out->shape[out->ndim - 1] == I;
    for (int32_t d = 0; same && d + 1 < in->ndim; d++) same = out->shape[d] == in->shape[d];
    if (!same)
        return qk_fail(QK_ERR_SHAPE, "%s: out has shape %s; expected the input's %s with last dim "
                       "%lld", fn, qk_shape_str(out, a, sizeof a), qk_shape_str(in, b, sizeof b),
                       (long long)I);
    if (out->dtype != in->dtype)
        return qk_fail(QK_ERR_DTYPE, "%s: out has dtype %s but the input has %s; they must match",
                       fn, qk_dtype_name(out->dtype), qk_dtype_name(in->dtype));
    if (qk_tensor_overlap(out, in) && !(gelu && qk_tensor_same(out, in)))
        return qk_fail(QK_ERR_LAYOUT, "%s: out overlaps the input%s", fn,
                       gelu ? " (only exactly in place is allowed)" : "");
    const int64_t rows = qk_tensor_rows(in);
    if (rows == 0) return QK_OK;
    act_job j = {.gelu = gelu, .I = I, .dt = in->dtype, .in = in->data, .out = out->data};
    qk_rows_set(&j.ir, in);
    qk_rows_set(&j.orr, out);
    qk_parallel_for(rows, qk_sat_mul_i64(L, (int64_t)qk_dtype_size(in->dtype) * 8), 1 << 16, act_range, &j);
    return QK_OK;
}

qk_status qk_serve_silu_and_mul(const qk_tensor *gate_up, qk_tensor *out)
{
    return run("qk_serve_silu_and_mul", false, gate_up, out);
}

qk_status qk_serve_gelu_tanh(const qk_tensor *x, qk_tensor *out)
{
    return run("qk_serve_gelu_tanh", true, x, out);
}
