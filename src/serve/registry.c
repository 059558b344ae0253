/* The kernel backend registry (serving.md): which backends implement each op the layers
 * call, how one is selected (explicit = strict; a global forced backend where it
 * implements the op, with one stderr line per op where it does not; otherwise provider
 * library, then target, then reference), the environment switches, and `qk info`'s
 * listing. Process-wide state: the forced backend and the loaded library (set at
 * start-up), the once-only environment read, and the once-per-op warnings. */
#define _GNU_SOURCE
#include "serve/serve_internal.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const op_names[QK_OP_COUNT] = {
    "gemma_rms_norm", "add_gemma_rms_norm", "rms_norm", "add_rms_norm", "rms_norm_gated",
    "mxfp8_quantize", "mxfp8_linear",
};
static const char *const api_op_names[QK_OP_COUNT] = {
    "gemma_rms_norm", "add_gemma_rms_norm", "rms_norm", "add_rms_norm", "rms_norm_gated",
    "mx_quantize", "mxfp8_linear",
};
static const qk_norm_kind norm_kinds[QK_OP_COUNT] = {
    QK_NORM_GEMMA, QK_NORM_ADD_GEMMA, QK_NORM_RMS, QK_NORM_ADD_RMS, QK_NORM_GATED,
    QK_NORM_KINDS, QK_NORM_KINDS,
};
static const char *const backend_names[QK_BACKEND_COUNT] = {
    "default", "target", "reference", "library",
};

static bool op_valid(qk_serve_op op) { return (unsigned)op < QK_OP_COUNT; }
static bool backend_valid(qk_backend b)
{
    return b == QK_BACKEND_TARGET || b == QK_BACKEND_REFERENCE || b == QK_BACKEND_LIBRARY;
}

const char *qk_serve_op_name(qk_serve_op op) { return op_valid(op) ? op_names[op] : NULL; }
const char *qk_serve_api_op_name(qk_serve_op op) { return op_valid(op) ? api_op_names[op] : NULL; }
qk_norm_kind qk_serve_norm_kind(qk_serve_op op) { return op_valid(op) ? norm_kinds[op] : QK_NORM_KINDS; }

qk_status qk_serve_op_parse(const char *name, qk_serve_op *op)
{
    if (!name || !op) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_serve_op_parse: NULL argument");
    for (int i = 0; i < QK_OP_COUNT; i++)
        if (!strcmp(name, op_names[i])) {
            *op = (qk_serve_op)i;
            return QK_OK;
        }
    return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_serve_op_parse: unknown op \"%.64s\"; the ops are "
                   "gemma_rms_norm, add_gemma_rms_norm, rms_norm, add_rms_norm, rms_norm_gated, "
                   "mxfp8_quantize, mxfp8_linear", name);
}

const char *qk_backend_name(qk_backend b)
{
    return (unsigned)b < QK_BACKEND_COUNT ? backend_names[b] : NULL;
}

qk_status qk_backend_parse(const char *name, qk_backend *b)
{
    if (!name || !b) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_backend_parse: NULL argument");
    for (int i = 0; i < QK_BACKEND_COUNT; i++)
        if (!strcmp(name, backend_names[i])) {
            *b = (qk_backend)i;
            return QK_OK;
        }
    return qk_fail(QK_ERR_INVALID_ARGUMENT, "unknown backend \"%.64s\"; the backends are target, "
                   "reference and library (or default)", name);
}

/* ---- process-wide state ---- */
static int forced_backend;                       /* qk_backend, atomic */
static int warned[QK_OP_COUNT];                  /* atomic flags */
static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static qk_status env_status;
static char env_message[768];


static void read_environment(void)
{
    const char *f = getenv("QK_FORCE_BACKEND");
    if (f && *f) {
        qk_backend b;
        if (qk_backend_parse(f, &b) != QK_OK || b == QK_BACKEND_DEFAULT) {
            env_status = QK_ERR_INVALID_ARGUMENT;
            snprintf(env_message, sizeof env_message, "QK_FORCE_BACKEND=%.64s is not a backend; "
                     "use target, reference or library (ignored)", f);
        } else {
            __atomic_store_n(&forced_backend, (int)b, __ATOMIC_RELEASE);
        }
    }
    const char *lib = getenv("QK_PROVIDER_LIB");
    if (lib && *lib && env_status == QK_OK) {
        qk_status st = qk_serve_provider_load_path(lib);
        if (st != QK_OK) {
            env_status = st;
            snprintf(env_message, sizeof env_message, "QK_PROVIDER_LIB: %s", qk_last_error());
        }
    }
    qk_clear_error();
}

static int env_reported;   /* atomic: the environment's error was printed or returned */

qk_status qk_serve_init(void)
{
    pthread_once(&env_once, read_environment);
    __atomic_store_n(&env_reported, 1, __ATOMIC_RELEASE);
    if (env_status != QK_OK) return qk_fail(env_status, "%s", env_message);
    return QK_OK;
}

void qk_serve_init_implicit(void)
{
    pthread_once(&env_once, read_environment);
    if (env_status != QK_OK && !__atomic_exchange_n(&env_reported, 1, __ATOMIC_ACQ_REL))
        fprintf(stderr, "qkern: %s\n", env_message);
}

static void init_quiet(void) { qk_serve_init_implicit(); }

/* ---- what each backend implements ---- */
static bool ops_implement(const qk_ops *ops, qk_serve_op op)
{
    qk_norm_kind k = norm_kinds[op];
    if (k != QK_NORM_KINDS) return ops->norm[k].fn != NULL;
    if (op == QK_OP_MXFP8_QUANTIZE) return ops->mx_quantize.fn != NULL;
    const qk_linear_impl *li = ops->mxfp8_linear;
    return li && li->prepare && li->run;
}

static bool lib_implements(const qk_provider_info *lib, qk_serve_op op)
{
    const qk_provider_ops *o = &lib->ops;
    switch (op) {
    case QK_OP_GEMMA_RMS_NORM: return o->gemma_rms_norm != NULL;
    case QK_OP_ADD_GEMMA_RMS_NORM: return o->add_gemma_rms_norm != NULL;
    case QK_OP_RMS_NORM: return o->rms_norm != NULL;
    case QK_OP_ADD_RMS_NORM: return o->add_rms_norm != NULL;
    case QK_OP_RMS_NORM_GATED: return o->rms_norm_gated != NULL;
    case QK_OP_MXFP8_QUANTIZE: return o->mx_quantize != NULL;
    case QK_OP_MXFP8_LINEAR:
        return o->mx_weight_create && o->mx_weight_destroy && o->mxfp8_linear;
    default: return false;
    }
}

bool qk_backend_implements(qk_backend b, qk_serve_op op)
{
    init_quiet();
    if (!op_valid(op)) return false;
    switch (b) {
    case QK_BACKEND_TARGET: return ops_implement(&qk_target_table_built.ops, op);
    case QK_BACKEND_REFERENCE: return ops_implement(&qk_provider_ref.ops, op);
    case QK_BACKEND_LIBRARY: {
        const qk_provider_info *lib = qk_serve_lib();
        return lib && lib_implements(lib, op);
    }
    default: return false;
    }
}

const qk_linear_impl *qk_serve_linear_impl(qk_backend b)
{
    if (b == QK_BACKEND_TARGET) return qk_target_table_built.ops.mxfp8_linear;
    if (b == QK_BACKEND_REFERENCE) return qk_provider_ref.ops.mxfp8_linear;
    return NULL;
}

bool qk_serve_prefers_shifted(qk_backend b, qk_serve_op op)
{
    /* the build target says, from its measurement (src/targets/<target>.c); the reference
       backend runs the definition as written, and a provider library is not known to */
    if (op != QK_OP_GEMMA_RMS_NORM && op != QK_OP_ADD_GEMMA_RMS_NORM) return false;
    return b == QK_BACKEND_TARGET && qk_target_table_built.gemma_shifted_weight;
}

unsigned qk_serve_linear_backends(void)
{
    unsigned m = 0;
    for (int b = QK_BACKEND_TARGET; b < QK_BACKEND_COUNT; b++)
        if (qk_backend_implements((qk_backend)b, QK_OP_MXFP8_LINEAR)) m |= QK_BACKEND_BIT(b);
    return m;
}

static const qk_backend priority[] = {QK_BACKEND_LIBRARY, QK_BACKEND_TARGET, QK_BACKEND_REFERENCE};

size_t qk_serve_backends(qk_serve_op op, qk_backend *out, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < sizeof priority / sizeof priority[0]; i++)
        if (qk_backend_implements(priority[i], op)) {
            if (out && n < cap) out[n] = priority[i];
            n++;
        }
    return n;
}

static const char *base_name(const char *path)
{
    const char *s = path ? strrchr(path, '/') : NULL;
    return s ? s + 1 : path ? path : "";
}

const char *qk_backend_describe(qk_backend b, qk_serve_op op, char *buf, size_t n)
{
    if (!buf || !n) return "";
    snprintf(buf, n, "-");
    if (!qk_backend_implements(b, op)) return buf;
    if (b == QK_BACKEND_TARGET) {
        snprintf(buf, n, "%s/%s", qk_target(), qk_provider(api_op_names[op]));
    } else if (b == QK_BACKEND_REFERENCE) {
        snprintf(buf, n, "%s", qk_provider_ref.name);
    } else {
        const qk_provider_info *lib = qk_serve_lib();
        const char *p = lib->provider ? lib->provider(api_op_names[op]) : NULL;
        snprintf(buf, n, "%s/%s in %s", lib->target ? lib->target : "?", p ? p : "?",
                 base_name(qk_serve_provider_path()));
    }
    return buf;
}

/* Why backend b lacks op, for the strict error. */
static void lacks_text(qk_backend b, qk_serve_op op, char *buf, size_t n)
{
    if (b == QK_BACKEND_TARGET) {
        snprintf(buf, n, "target %s stages no provider for %s", qk_target(), api_op_names[op]);
    } else if (b == QK_BACKEND_REFERENCE) {
        snprintf(buf, n, "the reference provider has no %s", api_op_names[op]);
    } else if (!qk_serve_lib()) {
        snprintf(buf, n, "no provider library is loaded (load one by path: QK_PROVIDER_LIB="
                 "/path/libqkern-provider-<target>.so or qk_serve_provider_load())");
    } else {
        snprintf(buf, n, "the provider library %s (target %s) does not implement it",
                 base_name(qk_serve_provider_path()), qk_serve_lib()->target);
    }
}

static void providers_text(qk_serve_op op, char *buf, size_t n)
{
    qk_backend v[QK_BACKEND_COUNT];
    size_t k = qk_serve_backends(op, v, QK_BACKEND_COUNT), used = 0;
    buf[0] = 0;
    for (size_t i = 0; i < k && used < n; i++) {
        char d[256];
        qk_backend_describe(v[i], op, d, sizeof d);
        used += (size_t)snprintf(buf + used, n - used, "%s%s (%s)", i ? ", " : "",
                                 backend_names[v[i]], d);
    }
    if (!k) snprintf(buf, n, "none in this build");
}

static qk_backend priority_choice(qk_serve_op op)
{
    for (size_t i = 0; i < sizeof priority / sizeof priority[0]; i++)
        if (qk_backend_implements(priority[i], op)) return priority[i];
    return QK_BACKEND_REFERENCE;
}

static qk_status select_impl(qk_serve_op op, qk_backend requested, qk_backend *chosen, bool warn)
{
    init_quiet();
    if (!chosen) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_serve_select: chosen is NULL");
    if (!op_valid(op)) return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_serve_select: unknown op %d", (int)op);
    if (requested != QK_BACKEND_DEFAULT) {
        if (!backend_valid(requested))
            return qk_fail(QK_ERR_INVALID_ARGUMENT, "op %s: unknown backend %d (target, reference "
                           "or library)", op_names[op], (int)requested);
        if (!qk_backend_implements(requested, op)) {
            char why[256], who[640];
            lacks_text(requested, op, why, sizeof why);
            providers_text(op, who, sizeof who);
            return qk_fail(QK_ERR_UNSUPPORTED, "op %s: backend '%s' was chosen explicitly but does "
                           "not implement it (%s); it is provided by: %s", op_names[op],
                           backend_names[requested], why, who);
        }
        *chosen = requested;
        return QK_OK;
    }
    qk_backend f = (qk_backend)__atomic_load_n(&forced_backend, __ATOMIC_ACQUIRE);
    if (f != QK_BACKEND_DEFAULT) {
        if (qk_backend_implements(f, op)) {
            *chosen = f;
            return QK_OK;
        }
        if (warn && !__atomic_exchange_n(&warned[op], 1, __ATOMIC_ACQ_REL)) {
            char why[256], d[256];
            qk_backend c = priority_choice(op);
            lacks_text(f, op, why, sizeof why);
            fprintf(stderr, "qkern: forced backend '%s' does not implement %s (%s); %s runs on "
                    "'%s' (%s)\n", backend_names[f], op_names[op], why, op_names[op],
                    backend_names[c], qk_backend_describe(c, op, d, sizeof d));
        }
    }
    *chosen = priority_choice(op);
    return QK_OK;
}

qk_status qk_serve_select(qk_serve_op op, qk_backend requested, qk_backend *chosen)
{
    return select_impl(op, requested, chosen, true);
}

qk_status qk_serve_force_backend(qk_backend b)
{
    init_quiet();
    if (b != QK_BACKEND_DEFAULT && !backend_valid(b))
        return qk_fail(QK_ERR_INVALID_ARGUMENT, "qk_serve_force_backend: unknown backend %d", (int)b);
    __atomic_store_n(&forced_backend, (int)b, __ATOMIC_RELEASE);
    for (int i = 0; i < QK_OP_COUNT; i++) __atomic_store_n(&warned[i], 0, __ATOMIC_RELEASE);
    return QK_OK;
}

qk_backend qk_serve_forced_backend(void)
{
    init_quiet();
    return (qk_backend)__atomic_load_n(&forced_backend, __ATOMIC_ACQUIRE);
}

void qk_serve_print_registry(FILE *f)
{
    if (!f) return;
    init_quiet();
    qk_backend forced = qk_serve_forced_backend();
    const char *lib = qk_serve_provider_path();
    fprintf(f, "serving backends (forced: %s; provider library: %s)\n",
            forced == QK_BACKEND_DEFAULT ? "none" : backend_names[forced], lib ? lib : "none");
    if (env_status != QK_OK) fprintf(f, "  environment: %s\n", env_message);
    fprintf(f, "%-20s %-10s %s\n", "op", "selected", "backends (priority order: backend = provider)");
    for (int i = 0; i < QK_OP_COUNT; i++) {
        qk_serve_op op = (qk_serve_op)i;
        qk_backend chosen = QK_BACKEND_REFERENCE;
        select_impl(op, QK_BACKEND_DEFAULT, &chosen, false);
        fprintf(f, "%-20s %-10s", op_names[i], backend_names[chosen]);
        qk_backend v[QK_BACKEND_COUNT];
        size_t k = qk_serve_backends(op, v, QK_BACKEND_COUNT);
        for (size_t j = 0; j < k; j++) {
            char d[256];
            fprintf(f, "%s %s = %s", j ? "," : "", backend_names[v[j]],
                    qk_backend_describe(v[j], op, d, sizeof d));
        }
        if (forced != QK_BACKEND_DEFAULT && forced != chosen)
            fprintf(f, "  [forced '%s' lacks it]", backend_names[forced]);
        fputc('\n', f);
    }
    qk_clear_error();
}

/* ---- helpers shared by the layer files ---- */
char *qk_serve_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

char *qk_serve_join(const char *prefix, const char *suffix)
{
    size_t a = strlen(prefix), b = strlen(suffix);
    char *d = malloc(a + b + 1);
    if (!d) return NULL;
    memcpy(d, prefix, a);
    memcpy(d + a, suffix, b + 1);
    return d;
}

void qk_serve_ok(void) { qk_clear_error(); }
