/* Library core: errors (thread-local last error), dtypes, tensor descriptors and their
 * geometry, version/target/provider queries, the once-only CPU check, thread count. */
#include "internal.h"
#include "api/ckd.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#ifndef QK_VERSION_STRING
#define QK_VERSION_STRING "0.0.0"
#endif

/* ---- errors ---- */
static _Thread_local char qk_err_buf[512];

qk_status qk_fail(qk_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(qk_err_buf, sizeof qk_err_buf, fmt, ap);
    va_end(ap);
    return st;
}

void qk_clear_error(void) { qk_err_buf[0] = 0; }

const char *qk_last_error(void) { return qk_err_buf; }

const char *qk_status_name(qk_status s)
{
    static const char *const names[] = {
        "QK_OK", "QK_ERR_INVALID_ARGUMENT", "QK_ERR_SHAPE", "QK_ERR_DTYPE", "QK_ERR_LAYOUT",
        "QK_ERR_UNSUPPORTED", "QK_ERR_CPU", "QK_ERR_NOMEM", "QK_ERR_IO", "QK_ERR_FORMAT",
    };
    if ((unsigned)s < sizeof names / sizeof names[0]) return names[s];
    return "QK_ERR_UNKNOWN";
}

/* ---- dtypes ---- */
size_t qk_dtype_size(qk_dtype d) { return qk_dtype_bytes(d); }

const char *qk_dtype_name(qk_dtype d)
{
    switch (d) {
    case QK_DTYPE_F32: return "F32";
    case QK_DTYPE_F16: return "F16";
    case QK_DTYPE_BF16: return "BF16";
    case QK_DTYPE_F8_E4M3: return "F8_E4M3";
    case QK_DTYPE_F8_E5M2: return "F8_E5M2";
    case QK_DTYPE_E8M0: return "F8_E8M0";
    case QK_DTYPE_U8: return "U8";
    case QK_DTYPE_I8: return "I8";
    case QK_DTYPE_I32: return "I32";
    case QK_DTYPE_I64: return "I64";
    default: return "INVALID";
    }
}

float qk_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu, u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (man << 13);
    } else if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do { man <<= 1; e++; } while (!(man & 0x400u));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else {
        u = sign | ((exp + 112) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t qk_f16_from_f32(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
    if (a < 0x38800000u) { /* below 2^-14: subnormal half (or zero) */
        if (a < 0x33000000u) return (uint16_t)sign; /* < 2^-25: rounds to 0 (tie at 2^-25 -> 0) */
        uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
        /* value = m * 2^(e-150); in units of 2^-24 that is m >> (126 - e), rounded RNE */
        uint32_t shift = 126 - e;
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), halfw = 1u << (shift - 1);
        if (rem > halfw || (rem == halfw && (q & 1u))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = a - 0x38000000u; /* rebias 127 -> 15 */
    r += 0xfffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
}

/* ---- tensor descriptors and geometry ---- */
qk_tensor qk_tensor_make(void *data, qk_dtype dtype, int32_t ndim, const int64_t *shape)
{
    qk_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dtype;
    t.ndim = ndim;
    if (ndim < 1 || ndim > QK_MAX_DIMS || !shape) return t;
    int64_t s = 1;
    for (int32_t d = ndim - 1; d >= 0; d--) {
        t.shape[d] = shape[d];
        t.stride[d] = s;
        /* a shape whose elements do not fit int64 saturates: the ops then refuse it */
        if (__builtin_mul_overflow(s, shape[d] > 0 ? shape[d] : 1, &s)) s = INT64_MAX;
    }
    return t;
}

const char *qk_shape_str(const qk_tensor *t, char *buf, size_t n)
{
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "[");
    for (int32_t d = 0; d < t->ndim && d < QK_MAX_DIMS && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, d ? ", %lld" : "%lld", (long long)t->shape[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

int64_t qk_tensor_rows(const qk_tensor *t)
{
    /* callers pass tensors qk_check_tensor accepted (the product fits int64); on any other it
       saturates instead of overflowing */
    int64_t r;
    return qk_ckd_numel(t->shape, t->ndim - 1, &r) ? r : INT64_MAX;
}

bool qk_tensor_same(const qk_tensor *a, const qk_tensor *b)
{
    if (a->data != b->data || a->ndim != b->ndim || a->dtype != b->dtype) return false;
    for (int32_t d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d] || (a->shape[d] > 1 && a->stride[d] != b->stride[d]))
            return false;
    return true;
}

bool qk_tensor_overlap(const qk_tensor *a, const qk_tensor *b)
{
    return qk_extents_overlap(qk_extent_of(a), qk_extent_of(b));
}

/* ---- library information ---- */
const char *qk_version(void) { return QK_VERSION_STRING; }
int qk_abi_version(void) { return QK_ABI_VERSION; }
const char *qk_target(void) { return qk_target_table_built.name; }

const char *const qk_op_names[] = {
    "rms_norm", "gemma_rms_norm", "add_rms_norm", "add_gemma_rms_norm", "rms_norm_gated",
    "mx_quantize", "mx_dequantize", "mx_pack_scale_pairs", "mxfp8_linear", NULL,
};

const char *qk_ops_provider(const qk_ops *ops, const char *op)
{
    if (!op) return NULL;
    for (int k = 0; k < QK_NORM_KINDS; k++)
        if (!strcmp(op, qk_op_names[k])) return ops->norm[k].fn ? ops->norm[k].provider : NULL;
    if (!strcmp(op, "mx_quantize")) return ops->mx_quantize.fn ? ops->mx_quantize.provider : NULL;
    if (!strcmp(op, "mx_dequantize"))
        return ops->mx_dequantize.fn ? ops->mx_dequantize.provider : NULL;
    if (!strcmp(op, "mx_pack_scale_pairs")) return ops->mx_pack_scale_pairs;
    if (!strcmp(op, "mxfp8_linear")) return ops->mxfp8_linear ? ops->mxfp8_linear->provider : NULL;
    return NULL;
}

const char *qk_provider(const char *op) { return qk_ops_provider(&qk_target_table_built.ops, op); }

/* ---- CPU features (src/cpu/<arch>.c) and the once-only check ---- */
static unsigned (*qk_cpu_query)(void) = qk_cpu_query_host;

unsigned qk_cpu_features(void) { return qk_cpu_query(); }

static pthread_mutex_t qk_init_lock = PTHREAD_MUTEX_INITIALIZER;
static int qk_init_state = -1; /* -1 not run, else the qk_status it gave */
static char qk_init_msg[512]; /* holds the target name, up to 160 of feature list and the advice */

qk_status qk_init(void)
{
    int st = __atomic_load_n(&qk_init_state, __ATOMIC_ACQUIRE);
    if (st == QK_OK) return QK_OK;
    pthread_mutex_lock(&qk_init_lock);
    if (qk_init_state < 0) {
        unsigned need = qk_target_table_built.cpu_features, have = qk_cpu_features();
        unsigned missing = need & ~have;
        if (missing) {
            char list[160] = "";
            for (unsigned bit = 1; bit && bit <= missing; bit <<= 1)
                if (missing & bit) {
                    if (list[0]) strncat(list, ", ", sizeof list - strlen(list) - 1);
                    strncat(list, qk_cpu_feature_name(bit), sizeof list - strlen(list) - 1);
                }
            const char *alt = qk_cpu_best_target(have);
            snprintf(qk_init_msg, sizeof qk_init_msg,
                     "qk_init: this library was built for target %s, but this CPU lacks %s; "
                     "rebuild with -DQK_TARGET=%s (or -DQK_TARGET=native)",
                     qk_target_table_built.name, list, alt);
            __atomic_store_n(&qk_init_state, QK_ERR_CPU, __ATOMIC_RELEASE);
        } else {
            __atomic_store_n(&qk_init_state, QK_OK, __ATOMIC_RELEASE);
        }
    }
    st = qk_init_state;
    pthread_mutex_unlock(&qk_init_lock);
    if (st != QK_OK) return qk_fail((qk_status)st, "%s", qk_init_msg);
    return QK_OK;
}

void qk_test_set_cpu_query(unsigned (*query)(void))
{
    qk_cpu_query = query ? query : qk_cpu_query_host;
}

void qk_test_reset_init(void)
{
    pthread_mutex_lock(&qk_init_lock);
    __atomic_store_n(&qk_init_state, -1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&qk_init_lock);
}

/* ---- threads ---- */
static int qk_num_threads_set; /* 0 = default */

/* QK_NUM_THREADS, else every core this process may run on; read once (a call must not
   pay for getenv and an affinity syscall). */
static int qk_default_threads(void)
{
    static int cached;
    int n = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (n > 0) return n;
    const char *e = getenv("QK_NUM_THREADS");
    if (e && *e) n = atoi(e);
#ifdef _OPENMP
    if (n <= 0) n = omp_get_num_procs();
#endif
    if (n <= 0) n = 1;
    __atomic_store_n(&cached, n, __ATOMIC_RELAXED);
    return n;
}

void qk_set_num_threads(int n)
{
    __atomic_store_n(&qk_num_threads_set, n > 0 ? n : 0, __ATOMIC_RELAXED);
}

int qk_threads(void)
{
    int n = __atomic_load_n(&qk_num_threads_set, __ATOMIC_RELAXED);
    return n > 0 ? n : qk_default_threads();
}

int qk_get_num_threads(void) { return qk_threads(); }

void qk_parallel_for(int64_t n, int64_t bytes_per_item, int64_t min_bytes, qk_range_fn fn,
                     const void *ctx)
{
    if (n <= 0) return;
    int nt = qk_threads();
    if (nt > n) nt = (int)n;
    if (nt <= 1 || n * bytes_per_item < min_bytes) {
        fn(ctx, 0, n);
        return;
    }
#ifdef _OPENMP
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), T = omp_get_num_threads();
        int64_t b = n * t / T, e = n * (t + 1) / T;
        if (b < e) fn(ctx, b, e);
    }
#else
    fn(ctx, 0, n);
#endif
}
