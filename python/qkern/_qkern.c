/* qkern._qkern — the CPython binding of qkern (limited API 3.11, abi3; C only).
 *
 * Tensors cross the boundary without copies: torch tensors through DLPack (torch's own C
 * exporter), numpy arrays through the buffer protocol (their __array_interface__ for the
 * ml_dtypes types a buffer cannot describe), anything else through __dlpack__ or the
 * buffer protocol. Strides pass through unchanged, so the C API accepts or rejects a
 * strided view with exactly its own rule and message. Outputs that the caller does not
 * give are made in the framework of the first tensor argument (torch in -> torch out,
 * numpy in -> numpy out). Every call goes through the serving layer's registry, so
 * force_backend() and a per-call backend= apply; the GIL is released while a kernel runs.
 * Every C error becomes a qkern exception carrying the C message (qk_last_error). */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "_dlpack.h"
#include "qk_tool.h"
#include "qkern.h"
#include "qkern_io.h"
#include "qkern_serve.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================================================
 * Exceptions: one class per qk_status, each carrying `status` (its QK_ERR_* name)
 * ====================================================================================== */

static PyObject *exc_base;                 /* qkern.Error */
static PyObject *exc_of[QK_ERR_FORMAT + 1]; /* by status */

static PyObject *raise_status(qk_status st)
{
    const char *msg = qk_last_error();
    PyObject *type = (st > QK_OK && st <= QK_ERR_FORMAT) ? exc_of[st] : exc_base;
    PyErr_SetString(type, msg && *msg ? msg : qk_status_name(st));
    return NULL;
}

/* A binding-side argument error, with the function and argument named like the C API's. */
static PyObject *raise_arg(qk_status st, const char *fn, const char *fmt, ...)
{
    char buf[512];
    int n = snprintf(buf, sizeof buf, "qkern.%s: ", fn);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
    va_end(ap);
    PyErr_SetString(exc_of[st], buf);
    return NULL;
}

/* ======================================================================================
 * Argument parsing for METH_FASTCALL | METH_KEYWORDS
 * ====================================================================================== */

/* names: the parameters in order; npos: how many may be positional; nreq: how many are
 * required. vals[i] = the argument or NULL. Raises TypeError like CPython's own parser. */
static int parse_args(const char *fn, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                      const char *const *names, int nnames, int npos, int nreq, PyObject **vals)
{
    for (int i = 0; i < nnames; i++) vals[i] = NULL;
    if (nargs > npos) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %d positional arguments (%zd given)", fn,
                     npos, nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) vals[i] = args[i];
    if (kwnames) {
        Py_ssize_t nk = PyTuple_Size(kwnames);
        for (Py_ssize_t j = 0; j < nk; j++) {
            PyObject *key = PyTuple_GetItem(kwnames, j);
            int found = -1;
            for (int i = 0; i < nnames; i++)
                if (PyUnicode_CompareWithASCIIString(key, names[i]) == 0) {
                    found = i;
                    break;
                }
            if (found < 0) {
                PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", fn, key);
                return -1;
            }
            if (vals[found]) {
                PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", fn,
                             names[found]);
                return -1;
            }
            vals[found] = args[nargs + j];
        }
    }
    for (int i = 0; i < nreq; i++)
        if (!vals[i]) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s' (pos %d)", fn,
                         names[i], i + 1);
            return -1;
        }
    return 0;
}

static int is_none(PyObject *o) { return !o || o == Py_None; }

static int parse_eps(const char *fn, PyObject *o, float *eps)
{
    if (is_none(o)) {
        *eps = 1e-6f;
        return 0;
    }
    double d = PyFloat_AsDouble(o);
    if (d == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s(): eps must be a real number", fn);
        return -1;
    }
    *eps = (float)d;
    return 0;
}

static int parse_backend(const char *fn, PyObject *o, qk_backend *b)
{
    *b = QK_BACKEND_DEFAULT;
    if (is_none(o)) return 0;
    Py_ssize_t n;
    const char *s = PyUnicode_Check(o) ? PyUnicode_AsUTF8AndSize(o, &n) : NULL;
    if (!s) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s(): backend must be a str (target, reference, library) "
                     "or None", fn);
        return -1;
    }
    qk_status st = qk_backend_parse(s, b);
    return st == QK_OK ? 0 : (raise_status(st), -1);
}

/* ======================================================================================
 * Frameworks: which one a type belongs to (cached per type)
 * ====================================================================================== */

enum { FW_OTHER = 0, FW_NUMPY = 1, FW_TORCH = 2 };

static PyObject *kind_cache;        /* {type: int} */
static PyObject *s_dtype, *s_name, *s_view; /* interned attribute names */
static PyObject *torch_to_dlpack;   /* torch._C._to_dlpack */
static PyObject *torch_from_dlpack; /* torch._C._from_dlpack */

static PyObject *loaded_module_attr(const char *mod, const char *attr)
{
    PyObject *mods = PySys_GetObject("modules"); /* borrowed */
    PyObject *m = mods ? PyDict_GetItemString(mods, mod) : NULL;
    if (!m) return NULL;
    PyObject *a = PyObject_GetAttrString(m, attr);
    if (!a) PyErr_Clear();
    return a;
}

static int type_kind(PyTypeObject *tp)
{
    PyObject *k = PyDict_GetItemWithError(kind_cache, (PyObject *)tp);
    if (k) return (int)PyLong_AsLong(k);
    if (PyErr_Occurred()) return -1;
    int kind = FW_OTHER;
    PyObject *tensor = loaded_module_attr("torch", "Tensor");
    if (tensor) {
        int sub = PyObject_IsSubclass((PyObject *)tp, tensor);
        Py_DECREF(tensor);
        if (sub < 0) return -1;
        if (sub) {
            if (!torch_to_dlpack) {
                PyObject *c = loaded_module_attr("torch", "_C");
                if (c) {
                    torch_to_dlpack = PyObject_GetAttrString(c, "_to_dlpack");
                    torch_from_dlpack = PyObject_GetAttrString(c, "_from_dlpack");
                    Py_DECREF(c);
                }
                if (!torch_to_dlpack || !torch_from_dlpack) {
                    Py_CLEAR(torch_to_dlpack);
                    Py_CLEAR(torch_from_dlpack);
                    PyErr_Clear();
                }
            }
            if (torch_to_dlpack) kind = FW_TORCH;
        }
    }
    if (kind == FW_OTHER) {
        PyObject *nd = loaded_module_attr("numpy", "ndarray");
        if (nd) {
            int sub = PyObject_IsSubclass((PyObject *)tp, nd);
            Py_DECREF(nd);
            if (sub < 0) return -1;
            if (sub) kind = FW_NUMPY;
        }
    }
    PyObject *v = PyLong_FromLong(kind);
    if (!v || PyDict_SetItem(kind_cache, (PyObject *)tp, v) < 0) {
        Py_XDECREF(v);
        return -1;
    }
    Py_DECREF(v);
    return kind;
}

/* ======================================================================================
 * Tensors in: a qk_tensor view of a Python object, and what keeps it alive
 * ====================================================================================== */

typedef struct arg_tensor {
    qk_tensor  t;
    PyObject  *obj;      /* borrowed: the argument */
    PyObject  *keep;     /* owned: a DLPack capsule (its deleter runs when it is freed) */
    Py_buffer  view;
    int        has_view;
    int        kind;     /* FW_* of obj's type */
} arg_tensor;

static void arg_release(arg_tensor *a)
{
    if (a->has_view) PyBuffer_Release(&a->view);
    a->has_view = 0;
    Py_CLEAR(a->keep);
}

static void args_release(arg_tensor *a, int n)
{
    for (int i = 0; i < n; i++) arg_release(&a[i]);
}

static const char *dl_dtype_text(qkpy_dl_dtype d, char *buf, size_t n)
{
    const char *k = d.code == QKPY_DL_INT ? "int" : d.code == QKPY_DL_UINT ? "uint"
                  : d.code == QKPY_DL_FLOAT ? "float" : d.code == QKPY_DL_BFLOAT ? "bfloat"
                  : d.code == QKPY_DL_BOOL ? "bool" : NULL;
    if (k) snprintf(buf, n, "%s%d%s", k, d.bits, d.lanes > 1 ? "xN" : "");
    else snprintf(buf, n, "DLPack type code %d (%d bits)", d.code, d.bits);
    return buf;
}

static qk_dtype dl_dtype_map(qkpy_dl_dtype d)
{
    if (d.lanes != 1) return QK_DTYPE_INVALID;
    switch (d.code) {
    case QKPY_DL_FLOAT: return d.bits == 32 ? QK_DTYPE_F32 : d.bits == 16 ? QK_DTYPE_F16 : QK_DTYPE_INVALID;
    case QKPY_DL_BFLOAT: return d.bits == 16 ? QK_DTYPE_BF16 : QK_DTYPE_INVALID;
    case QKPY_DL_F8_E4M3FN: return d.bits == 8 ? QK_DTYPE_F8_E4M3 : QK_DTYPE_INVALID;
    case QKPY_DL_F8_E5M2: return d.bits == 8 ? QK_DTYPE_F8_E5M2 : QK_DTYPE_INVALID;
    case QKPY_DL_F8_E8M0FNU: return d.bits == 8 ? QK_DTYPE_E8M0 : QK_DTYPE_INVALID;
    case QKPY_DL_UINT: return d.bits == 8 ? QK_DTYPE_U8 : QK_DTYPE_INVALID;
    case QKPY_DL_INT:
        return d.bits == 8 ? QK_DTYPE_I8 : d.bits == 32 ? QK_DTYPE_I32 : d.bits == 64 ? QK_DTYPE_I64
                                                                       : QK_DTYPE_INVALID;
    default: return QK_DTYPE_INVALID;
    }
}

static qkpy_dl_dtype dl_dtype_of(qk_dtype t)
{
    qkpy_dl_dtype d = {QKPY_DL_FLOAT, 32, 1};
    switch (t) {
    case QK_DTYPE_F32: break;
    case QK_DTYPE_F16: d.bits = 16; break;
    case QK_DTYPE_BF16: d.code = QKPY_DL_BFLOAT; d.bits = 16; break;
    case QK_DTYPE_F8_E4M3: d.code = QKPY_DL_F8_E4M3FN; d.bits = 8; break;
    case QK_DTYPE_F8_E5M2: d.code = QKPY_DL_F8_E5M2; d.bits = 8; break;
    case QK_DTYPE_E8M0: d.code = QKPY_DL_F8_E8M0FNU; d.bits = 8; break;
    case QK_DTYPE_U8: d.code = QKPY_DL_UINT; d.bits = 8; break;
    case QK_DTYPE_I8: d.code = QKPY_DL_INT; d.bits = 8; break;
    case QK_DTYPE_I32: d.code = QKPY_DL_INT; d.bits = 32; break;
    default: d.code = QKPY_DL_INT; d.bits = 64; break;
    }
    return d;
}

static const char *const supported_dtypes =
    "float32, float16, bfloat16, float8_e4m3fn, float8_e5m2, float8_e8m0fnu, uint8, int8, "
    "int32 or int64";

static int fill_from_dlpack(const char *fn, const char *name, int writable, arg_tensor *a,
                            PyObject *cap)
{
    qkpy_dl_tensor *dl;
    uint64_t flags = 0;
    if (PyCapsule_IsValid(cap, "dltensor")) {
        dl = &((qkpy_dl_managed *)PyCapsule_GetPointer(cap, "dltensor"))->dl_tensor;
    } else if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
        qkpy_dl_managed_v *v = PyCapsule_GetPointer(cap, "dltensor_versioned");
        if (v->version.major != 1) {
            raise_arg(QK_ERR_INVALID_ARGUMENT, fn, "%s: DLPack version %u.%u; qkern reads 1.x",
                      name, v->version.major, v->version.minor);
            return -1;
        }
        dl = &v->dl_tensor;
        flags = v->flags;
    } else {
        raise_arg(QK_ERR_INVALID_ARGUMENT, fn, "%s: __dlpack__() did not return a DLPack capsule",
                  name);
        return -1;
    }
    if (dl->device.device_type != QKPY_DL_CPU && dl->device.device_type != QKPY_DL_CUDA_HOST) {
        raise_arg(QK_ERR_INVALID_ARGUMENT, fn, "%s is on DLPack device type %d%s; qkern runs on "
                  "CPU memory (move it to the CPU first, e.g. .cpu())", name,
                  dl->device.device_type, dl->device.device_type == QKPY_DL_CUDA ? " (CUDA)" : "");
        return -1;
    }
    if (writable && (flags & QKPY_DL_FLAG_READ_ONLY)) {
        raise_arg(QK_ERR_INVALID_ARGUMENT, fn, "%s is read-only; an output must be writable", name);
        return -1;
    }
    a->t.dtype = dl_dtype_map(dl->dtype);
    if (a->t.dtype == QK_DTYPE_INVALID) {
        char b[64];
        raise_arg(QK_ERR_DTYPE, fn, "%s has dtype %s; qkern takes %s", name,
                  dl_dtype_text(dl->dtype, b, sizeof b), supported_dtypes);
        return -1;
    }
    if (dl->ndim > QK_MAX_DIMS || dl->ndim < 0) {
        raise_arg(QK_ERR_SHAPE, fn, "%s has %d dims; qkern tensors have 1..%d", name, dl->ndim,
                  QK_MAX_DIMS);
        return -1;
    }
    a->t.ndim = dl->ndim;
    int64_t s = 1;
    for (int d = dl->ndim - 1; d >= 0; d--) {
        a->t.shape[d] = dl->shape[d];
        a->t.stride[d] = dl->strides ? dl->strides[d] : s;
        s *= dl->shape[d];
    }
    a->t.data = (char *)dl->data + dl->byte_offset;
    a->keep = cap;
    return 0;
}

/* numpy arrays of the ml_dtypes types: the buffer protocol cannot describe them */
static int fill_from_array_interface(const char *fn, const char *name, int writable, arg_tensor *a)
{
    PyObject *ai = PyObject_GetAttrString(a->obj, "__array_interface__");
    if (!ai || !PyDict_Check(ai)) {
        Py_XDECREF(ai);
        return -2; /* not available: the caller reports */
    }
    int rc = -1;
    PyObject *data = PyDict_GetItemString(ai, "data");
    PyObject *shape = PyDict_GetItemString(ai, "shape");
    PyObject *strides = PyDict_GetItemString(ai, "strides");
    PyObject *dt = PyObject_GetAttrString(a->obj, "dtype");
    PyObject *dtname = dt ? PyObject_GetAttrString(dt, "name") : NULL;
    PyObject *isz = dt ? PyObject_GetAttrString(dt, "itemsize") : NULL;
    Py_ssize_t n = 0;
    const char *nm = dtname ? PyUnicode_AsUTF8AndSize(dtname, &n) : NULL;
    if (!data || !PyTuple_Check(data) || PyTuple_Size(data) != 2 || !shape || !PyTuple_Check(shape)
        || !nm || !isz) {
        PyErr_Clear();
        raise_arg(QK_ERR_INVALID_ARGUMENT, fn, "%s: unreadable __array_interface__", name);
        goto done;
    }
    static const struct { const char *name; qk_dtype dt; } names[] = {
        {"float32", QK_DTYPE_F32}, {"float16", QK_DTYPE_F16}, {"bfloat16", QK_DTYPE_BF16},
        {"float8_e4m3fn", QK_DTYPE_F8_E4M3}, {"float8_e5m2", QK_DTYPE_F8_E5M2},
        {"float8_e8m0fnu", QK_DTYPE_E8M0}, {"uint8", QK_DTYPE_U8}, {"int8", QK_DTYPE_I8},
        {"int32", QK_DTYPE_I32}, {"int64", QK_DTYPE_I64},
    };
    a->t.dtype = QK_DTYPE_INVALID;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(nm, names[i].name)) a->t.dtype = names[i].dt;
    if (a->t.dtype == QK_DTYPE_INVALID) {
        raise_arg(QK_ERR_DTYPE, fn, "%s has dtype %s; qkern takes %s", name, nm, supported_dtypes);
        goto done;
    }
    if (writable && PyObject_IsTrue(PyTuple_GetItem(data, 1))) {
        raise_arg(QK_ERR_INVALID_ARGUMENT, fn, "%s is read-only; an output must be writable", name);
        goto done;
    }
    Py_ssize_t nd = PyTuple_Size(shape);
    if (nd > QK_MAX_DIMS) {
        raise_arg(QK_ERR_SHAPE, fn, "%s has %zd dims; qkern tensors have 1..%d", name, nd,
                  QK_MAX_DIMS);
        goto done;
    }
    const long long esz = PyLong_AsLongLong(isz);
    a->t.ndim = (int32_t)nd;
    int64_t s = 1;
    for (Py_ssize_t d = nd - 1; d >= 0; d--) {
        a->t.shape[d] = PyLong_AsLongLong(PyTuple_GetItem(shape, d));
        if (!is_none(strides) && PyTuple_Check(strides)) {
            long long bs = PyLong_AsLongLong(PyTuple_GetItem(strides, d));
            if (esz <= 0 || bs % esz) {
                raise_arg(QK_ERR_LAYOUT, fn, "%s's dim %zd has a byte stride of %lld, not a "
                          "multiple of its element size %lld", name, d, bs, esz);
                goto done;
            }
            a->t.stride[d] = bs / esz;
        } else {
            a->t.stride[d] = s;
        }
        s *= a->t.shape[d];
    }
    a->t.data = PyLong_AsVoidPtr(PyTuple_GetItem(data, 0));
    rc = PyErr_Occurred() ? -1 : 0;
done:
    Py_XDECREF(isz);
    Py_XDECREF(dtname);
    Py_XDECREF(dt);
    Py_DECREF(ai);
    return rc;
}

static int buffer_dtype(const Py_buffer *v, qk_dtype *dt)
{
    const char *f = v->format ? v->format : "B";
    if (*f == '@' || *f == '=' || *f == '<') f++;
    if (*f == '>' || *f == '!') return -1;
    if (f[0] == 0 || f[1] != 0) return -1;
    switch (f[0]) {
    case 'f': *dt = QK_DTYPE_F32; return v->itemsize == 4 ? 0 : -1;
    case 'e': *dt = QK_DTYPE_F16; return v->itemsize == 2 ? 0 : -1;
    case 'B': *dt = QK_DTYPE_U8; return v->itemsize == 1 ? 0 : -1;
    case 'b': *dt = QK_DTYPE_I8; return v->itemsize == 1 ? 0 : -1;
    case 'i': case 'l': case 'q':
        *dt = v->itemsize == 4 ? QK_DTYPE_I32 : QK_DTYPE_I64;
        return v->itemsize == 4 || v->itemsize == 8 ? 0 : -1;
    default: return -1;
    }
}

/* force: the dtype the bytes are (a view of an ml_dtypes array), else QK_DTYPE_INVALID */
static int fill_from_buffer(const char *fn, const char *name, int writable, arg_tensor *a,
                            qk_dtype force)
{
    Py_buffer *v = &a->view;
    if (PyObject_GetBuffer(a->obj, v, PyBUF_RECORDS_RO | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -2;
    a->has_view = 1;
    a->t.dtype = force;
    if (force == QK_DTYPE_INVALID && buffer_dtype(v, &a->t.dtype) < 0) {
        raise_arg(QK_ERR_DTYPE, fn, "%s has buffer format '%s' (%zd bytes); qkern takes %s", name,
                  v->format ? v->format : "B", v->itemsize, supported_dtypes);
        return -1;
    }
    if (v->ndim > QK_MAX_DIMS) {
        raise_arg(QK_ERR_SHAPE, fn, "%s has %d dims; qkern tensors have 1..%d", name, v->ndim,
                  QK_MAX_DIMS);
        return -1;
    }
    a->t.ndim = v->ndim;
    int64_t s = 1;
    for (int d = v->ndim - 1; d >= 0; d--) {
        a->t.shape[d] = v->shape[d];
        if (v->strides) {
            if (v->strides[d] % v->itemsize) {
                raise_arg(QK_ERR_LAYOUT, fn, "%s's dim %d has a byte stride of %zd, not a "
                          "multiple of its element size %zd", name, d, v->strides[d], v->itemsize);
                return -1;
            }
            a->t.stride[d] = v->strides[d] / v->itemsize;
        } else {
            a->t.stride[d] = s;
        }
        s *= v->shape[d];
    }
    a->t.data = v->buf;
    return 0;
}

/* The qk dtype of a numpy array of an ml_dtypes type, else QK_DTYPE_INVALID (cached per
 * numpy dtype object, so that standard arrays go straight to the buffer protocol). */
static PyObject *ml_cache; /* {numpy dtype: int} */

static qk_dtype numpy_ml_dtype(PyObject *obj)
{
    PyObject *dt = PyObject_GetAttr(obj, s_dtype);
    if (!dt) {
        PyErr_Clear();
        return QK_DTYPE_INVALID;
    }
    /* numpy's dtype objects of the usual types are singletons: compare pointers first */
    static struct { PyObject *dt; qk_dtype q; } seen[16];
    static int nseen;
    for (int i = 0; i < nseen; i++)
        if (seen[i].dt == dt) {
            Py_DECREF(dt);
            return seen[i].q;
        }
    PyObject *hit = PyDict_GetItemWithError(ml_cache, dt);
    if (hit) {
        Py_DECREF(dt);
        return (qk_dtype)PyLong_AsLong(hit);
    }
    PyErr_Clear();
    PyObject *nm = PyObject_GetAttr(dt, s_name);
    qk_dtype r = QK_DTYPE_INVALID;
    if (nm && PyUnicode_Check(nm)) {
        r = PyUnicode_CompareWithASCIIString(nm, "bfloat16") == 0 ? QK_DTYPE_BF16
          : PyUnicode_CompareWithASCIIString(nm, "float8_e4m3fn") == 0 ? QK_DTYPE_F8_E4M3
          : PyUnicode_CompareWithASCIIString(nm, "float8_e5m2") == 0 ? QK_DTYPE_F8_E5M2
          : PyUnicode_CompareWithASCIIString(nm, "float8_e8m0fnu") == 0 ? QK_DTYPE_E8M0
          : QK_DTYPE_INVALID;
    }
    Py_XDECREF(nm);
    PyObject *v = PyLong_FromLong(r);
    if (!v || PyDict_SetItem(ml_cache, dt, v) < 0) PyErr_Clear();
    Py_XDECREF(v);
    if (nseen < 16) {
        seen[nseen].dt = dt; /* keeps the reference: the pointer stays this dtype's */
        seen[nseen++].q = r;
    } else {
        Py_DECREF(dt);
    }
    PyErr_Clear();
    return r;
}

/* numpy.dtype("uint16") / ("uint8"), cached (borrowed) */
static PyObject *numpy_storage_dtype(int bytes)
{
    static PyObject *u[3];
    if (!u[bytes]) {
        PyObject *np = PyImport_ImportModule("numpy");
        PyObject *f = np ? PyObject_GetAttrString(np, "dtype") : NULL;
        u[bytes] = f ? PyObject_CallFunction(f, "s", bytes == 2 ? "uint16" : "uint8") : NULL;
        Py_XDECREF(f);
        Py_XDECREF(np);
    }
    return u[bytes];
}

/* obj -> a->t. writable: the tensor is an output. */
static int to_tensor(const char *fn, const char *name, PyObject *obj, int writable, arg_tensor *a)
{
    memset(a, 0, sizeof *a);
    a->obj = obj;
    a->kind = type_kind(Py_TYPE(obj));
    if (a->kind < 0) return -1;
    if (a->kind == FW_TORCH) {
        PyObject *cap = PyObject_CallFunctionObjArgs(torch_to_dlpack, obj, NULL);
        if (!cap) return -1;
        if (fill_from_dlpack(fn, name, writable, a, cap) < 0) {
            if (!a->keep) Py_DECREF(cap);
            return -1;
        }
        return 0;
    }
    if (a->kind == FW_NUMPY) {
        /* an ml_dtypes array (bfloat16, float8_*): its bytes through a same-size view */
        qk_dtype mdt = numpy_ml_dtype(obj);
        if (mdt != QK_DTYPE_INVALID) {
            PyObject *store = numpy_storage_dtype(mdt == QK_DTYPE_BF16 ? 2 : 1);
            PyObject *bytes = store ? PyObject_CallMethodObjArgs(obj, s_view, store, NULL) : NULL;
            if (!bytes) return -1;
            a->obj = bytes;
            int rc = fill_from_buffer(fn, name, writable, a, mdt);
            a->obj = obj;
            a->keep = bytes;
            if (rc != -2) return rc;
            PyErr_Clear();
        } else {
            int rc = fill_from_buffer(fn, name, writable, a, QK_DTYPE_INVALID);
            if (rc != -2) return rc;
        }
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        int rc = fill_from_array_interface(fn, name, writable, a);
        if (rc == -2) {
            PyErr_Restore(et, ev, tb);
            return -1;
        }
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(tb);
        return rc;
    }
    if (PyObject_HasAttrString(obj, "__dlpack__")) {
        PyObject *cap = PyObject_CallMethod(obj, "__dlpack__", NULL);
        if (!cap) return -1;
        if (fill_from_dlpack(fn, name, writable, a, cap) < 0) {
            if (!a->keep) Py_DECREF(cap);
            return -1;
        }
        return 0;
    }
    if (PyObject_CheckBuffer(obj)) {
        int rc = fill_from_buffer(fn, name, writable, a, QK_DTYPE_INVALID);
        if (rc == -2) {
            if (writable && PyErr_ExceptionMatches(PyExc_BufferError)) {
                PyErr_Clear();
                raise_arg(QK_ERR_INVALID_ARGUMENT, fn, "%s is read-only; an output must be "
                          "writable", name);
            }
            return -1;
        }
        return rc;
    }
    PyObject *tn = PyType_GetName(Py_TYPE(obj));
    PyErr_Format(PyExc_TypeError, "qkern.%s: %s must be a tensor (an object with __dlpack__ or "
                 "the buffer protocol: torch, numpy, ...), not %S", fn, name, tn);
    Py_XDECREF(tn);
    return -1;
}

/* An 8-bit code argument given as uint8 means those bytes (checkpoints store E8M0 as U8). */
static void bytes_as(arg_tensor *a, qk_dtype dt)
{
    if (a->t.dtype == QK_DTYPE_U8) a->t.dtype = dt;
}

/* ======================================================================================
 * Tensors out: allocated in the framework of `like`
 * ====================================================================================== */

typedef struct {
    qkpy_dl_managed m;
    int64_t shape[QK_MAX_DIMS], strides[QK_MAX_DIMS];
} owned_dl;

static void owned_dl_delete(qkpy_dl_managed *m)
{
    free(m->dl_tensor.data);
    free(m);
}

static void owned_capsule_destructor(PyObject *cap)
{
    /* still named "dltensor": nobody consumed it, so we free it */
    if (PyCapsule_IsValid(cap, "dltensor")) {
        qkpy_dl_managed *m = PyCapsule_GetPointer(cap, "dltensor");
        if (m && m->deleter) m->deleter(m);
    }
}

static const char *const dtype_pyname[] = {
    [QK_DTYPE_F32] = "float32", [QK_DTYPE_F16] = "float16", [QK_DTYPE_BF16] = "bfloat16",
    [QK_DTYPE_F8_E4M3] = "float8_e4m3fn", [QK_DTYPE_F8_E5M2] = "float8_e5m2",
    [QK_DTYPE_E8M0] = "float8_e8m0fnu", [QK_DTYPE_U8] = "uint8", [QK_DTYPE_I8] = "int8",
    [QK_DTYPE_I32] = "int32", [QK_DTYPE_I64] = "int64",
};

static int64_t contiguous_strides(int ndim, const int64_t *shape, int64_t *stride, const char *fn)
{
    int64_t n = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        stride[d] = n;
        if (shape[d] < 0 || (shape[d] && n > INT64_MAX / 64 / shape[d])) {
            raise_arg(QK_ERR_SHAPE, fn, "an output of this shape would not fit in memory");
            return -1;
        }
        n *= shape[d];
    }
    return n;
}

static PyObject *np_empty;             /* numpy.empty */
static PyObject *np_dtype[QK_DTYPE_I64 + 1]; /* the numpy dtype to allocate with */
static PyObject *np_view[QK_DTYPE_I64 + 1];  /* the ml_dtypes dtype to view it as, or NULL */
static PyObject *alloc_other;          /* qkern._alloc.other(like, shape, dtype_name) */

static int numpy_ready(qk_dtype dt)
{
    if (np_dtype[dt]) return 0;
    if (!np_empty) {
        PyObject *np = PyImport_ImportModule("numpy");
        if (!np) return -1;
        np_empty = PyObject_GetAttrString(np, "empty");
        Py_DECREF(np);
        if (!np_empty) return -1;
    }
    /* the ml_dtypes types are allocated as bytes (which a buffer describes) and viewed */
    const char *storage = dtype_pyname[dt];
    if (dt == QK_DTYPE_BF16 || dt == QK_DTYPE_F8_E4M3 || dt == QK_DTYPE_F8_E5M2 || dt == QK_DTYPE_E8M0)
        storage = "uint8";
    if (storage != dtype_pyname[dt]) {
        PyObject *ml = PyImport_ImportModule("ml_dtypes");
        if (!ml) return -1;
        np_view[dt] = PyObject_GetAttrString(ml, dtype_pyname[dt]);
        Py_DECREF(ml);
        if (!np_view[dt]) return -1;
    }
    np_dtype[dt] = PyUnicode_FromString(storage);
    return np_dtype[dt] ? 0 : -1;
}

static PyObject *shape_tuple(int ndim, const int64_t *shape)
{
    PyObject *t = PyTuple_New(ndim);
    if (!t) return NULL;
    for (int d = 0; d < ndim; d++) {
        PyObject *v = PyLong_FromLongLong(shape[d]);
        if (!v) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SetItem(t, d, v);
    }
    return t;
}

/* Makes a new contiguous tensor in like's framework; *res gets the new reference. */
static int alloc_out(const char *fn, const char *name, const arg_tensor *like, qk_dtype dt,
                     int ndim, const int64_t *shape, arg_tensor *a, PyObject **res)
{
    memset(a, 0, sizeof *a);
    *res = NULL;
    int64_t stride[QK_MAX_DIMS];
    const int64_t numel = contiguous_strides(ndim, shape, stride, fn);
    if (numel < 0) return -1;
    if (like->kind == FW_TORCH) {
        owned_dl *o = calloc(1, sizeof *o);
        size_t bytes = ((size_t)numel * qk_dtype_size(dt) + 63) & ~(size_t)63;
        void *data = o ? aligned_alloc(64, bytes ? bytes : 64) : NULL;
        if (!data) {
            free(o);
            PyErr_NoMemory();
            return -1;
        }
        for (int d = 0; d < ndim; d++) {
            o->shape[d] = shape[d];
            o->strides[d] = stride[d];
        }
        o->m.dl_tensor = (qkpy_dl_tensor){data, {QKPY_DL_CPU, 0}, ndim, dl_dtype_of(dt), o->shape,
                                          o->strides, 0};
        o->m.deleter = owned_dl_delete;
        PyObject *cap = PyCapsule_New(&o->m, "dltensor", owned_capsule_destructor);
        if (!cap) {
            owned_dl_delete(&o->m);
            return -1;
        }
        *res = PyObject_CallFunctionObjArgs(torch_from_dlpack, cap, NULL);
        Py_DECREF(cap);
        if (!*res) return -1;
        a->obj = *res;
        a->kind = FW_TORCH;
        a->t = (qk_tensor){data, dt, ndim, {0}, {0}};
        for (int d = 0; d < ndim; d++) {
            a->t.shape[d] = shape[d];
            a->t.stride[d] = stride[d];
        }
        return 0;
    }
    if (like->kind == FW_NUMPY && ndim >= 1) {
        if (numpy_ready(dt) < 0) return -1;
        int64_t bshape[QK_MAX_DIMS];
        for (int d = 0; d < ndim; d++) bshape[d] = shape[d];
        if (np_view[dt]) bshape[ndim - 1] *= (int64_t)qk_dtype_size(dt);
        PyObject *shp = shape_tuple(ndim, bshape);
        if (!shp) return -1;
        PyObject *arr = PyObject_CallFunctionObjArgs(np_empty, shp, np_dtype[dt], NULL);
        Py_DECREF(shp);
        if (!arr) return -1;
        if (to_tensor(fn, name, arr, 1, a) < 0) {
            Py_DECREF(arr);
            return -1;
        }
        a->t.dtype = dt;
        a->t.shape[ndim - 1] = shape[ndim - 1];
        for (int d = 0; d < ndim; d++) a->t.stride[d] = stride[d];
        if (np_view[dt]) {
            PyObject *v = PyObject_CallMethodObjArgs(arr, s_view, np_view[dt], NULL);
            Py_DECREF(arr);
            if (!v) {
                arg_release(a);
                return -1;
            }
            arr = v;
        }
        a->obj = *res = arr;
        return 0;
    }
    PyObject *shp = shape_tuple(ndim, shape);
    if (!shp) return -1;
    if (!alloc_other) {
        PyObject *m = PyImport_ImportModule("qkern._alloc");
        alloc_other = m ? PyObject_GetAttrString(m, "other") : NULL;
        Py_XDECREF(m);
        if (!alloc_other) {
            Py_DECREF(shp);
            return -1;
        }
    }
    PyObject *dn = PyUnicode_FromString(dtype_pyname[dt]);
    PyObject *arr = dn ? PyObject_CallFunctionObjArgs(alloc_other, like->obj, shp, dn, NULL) : NULL;
    Py_XDECREF(dn);
    Py_DECREF(shp);
    if (!arr) return -1;
    if (to_tensor(fn, name, arr, 1, a) < 0) {
        Py_DECREF(arr);
        return -1;
    }
    *res = arr;
    return 0;
}

/* The output argument `given` (or a new one of `shape` and `dt` in like's framework). */
static int out_tensor(const char *fn, const char *name, PyObject *given, const arg_tensor *like,
                      qk_dtype dt, int ndim, const int64_t *shape, arg_tensor *a, PyObject **res)
{
    if (!is_none(given)) {
        if (to_tensor(fn, name, given, 1, a) < 0) return -1;
        Py_INCREF(given);
        *res = given;
        return 0;
    }
    return alloc_out(fn, name, like, dt, ndim, shape, a, res);
}

/* ======================================================================================
 * The RMSNorm family
 * ====================================================================================== */

/* The GIL is released around a kernel that moves at least this many bytes of x; below it
 * the release and re-acquire (~100 ns) would cost more than other threads gain. */
#define QKPY_GIL_BYTES ((int64_t)64 << 10)

static int big_call(const qk_tensor *x)
{
    int64_t n = (int64_t)qk_dtype_size(x->dtype);
    for (int d = 0; d < x->ndim && d < QK_MAX_DIMS; d++) {
        if (x->shape[d] <= 0) return 0;
        if (n > QKPY_GIL_BYTES) return 1;
        n *= x->shape[d];
    }
    return n >= QKPY_GIL_BYTES;
}

/* stmt with the GIL released when `release` holds */
#define QKPY_CALL(release, stmt)                                                                \
    do {                                                                                        \
        if (release) {                                                                          \
            Py_BEGIN_ALLOW_THREADS                                                              \
            stmt;                                                                               \
            Py_END_ALLOW_THREADS                                                                \
        } else {                                                                                \
            stmt;                                                                               \
        }                                                                                       \
    } while (0)

enum { NK_RMS, NK_GEMMA };

static PyObject *norm_call(const char *fn, int kind, int with_rstd, int npu_rstd,
                           PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"x", "weight", "eps", "out", "backend"};
    static const char *const names_npu[] = {"x", "weight", "eps", "backend"};
    PyObject *v[5];
    if (npu_rstd) {
        if (parse_args(fn, args, nargs, kwnames, names_npu, 4, 3, 2, v) < 0) return NULL;
        v[4] = v[3];
        v[3] = NULL;
    } else if (parse_args(fn, args, nargs, kwnames, names, 5, 4, 2, v) < 0) {
        return NULL;
    }
    float eps;
    qk_backend be;
    if (parse_eps(fn, v[2], &eps) < 0 || parse_backend(fn, v[4], &be) < 0) return NULL;
    arg_tensor a[4];
    memset(a, 0, sizeof a);
    PyObject *out = NULL, *rstd = NULL, *ret = NULL;
    if (to_tensor(fn, "x", v[0], 0, &a[0]) < 0 || to_tensor(fn, "weight", v[1], 0, &a[1]) < 0)
        goto done;
    if (out_tensor(fn, "out", v[3], &a[0], a[0].t.dtype, a[0].t.ndim, a[0].t.shape, &a[2], &out) < 0)
        goto done;
    qk_tensor rt;
    if (with_rstd) {
        /* rstd: x's leading dims ([1] for 1-D x); the NPU form adds a trailing 1 */
        int64_t shp[QK_MAX_DIMS + 1];
        int nd = a[0].t.ndim > 1 ? a[0].t.ndim - 1 : 1;
        for (int d = 0; d < nd; d++) shp[d] = a[0].t.ndim > 1 ? a[0].t.shape[d] : 1;
        int ndo = nd;
        if (npu_rstd && a[0].t.ndim > 1 && nd < QK_MAX_DIMS) shp[ndo++] = 1;
        if (alloc_out(fn, "rstd", &a[0], QK_DTYPE_F32, ndo, shp, &a[3], &rstd) < 0) goto done;
        rt = a[3].t;
        rt.ndim = nd;
    }
    qk_status st;
    QKPY_CALL(big_call(&a[0].t),
              st = (kind == NK_GEMMA ? qk_serve_gemma_rms_norm : qk_serve_rms_norm)(
                  be, &a[0].t, &a[1].t, eps, &a[2].t, with_rstd ? &rt : NULL));
    if (st != QK_OK) {
        raise_status(st);
        goto done;
    }
    if (with_rstd) {
        ret = PyTuple_Pack(2, out, rstd);
    } else {
        ret = out;
        out = NULL;
    }
done:
    args_release(a, 4);
    Py_XDECREF(out);
    Py_XDECREF(rstd);
    return ret;
}

#define NORM_FN(pyname, kind, rstd, npu)                                                        \
    static PyObject *py_##pyname(PyObject *self, PyObject *const *args, Py_ssize_t nargs,      \
                                 PyObject *kwnames)                                             \
    {                                                                                           \
        (void)self;                                                                             \
        return norm_call(#pyname, kind, rstd, npu, args, nargs, kwnames);                       \
    }
NORM_FN(rms_norm, NK_RMS, 0, 0)
NORM_FN(gemma_rms_norm, NK_GEMMA, 0, 0)
NORM_FN(npu_gemma_rms_norm, NK_GEMMA, 1, 1)

/* x + residual, then the norm. inplace: vLLM / FlashInfer's fused_add forms (x <- out,
 * residual <- x + residual; returns None). Otherwise (out, residual_out), new unless given. */
static PyObject *add_norm_call(const char *fn, int kind, int inplace, PyObject *const *args,
                               Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"x", "residual", "weight", "eps", "out", "residual_out",
                                        "backend"};
    static const char *const names_ip[] = {"input", "residual", "weight", "eps", "backend"};
    PyObject *v[7];
    if (inplace) {
        if (parse_args(fn, args, nargs, kwnames, names_ip, 5, 4, 3, v) < 0) return NULL;
        v[6] = v[4];
        v[4] = v[5] = NULL;
    } else if (parse_args(fn, args, nargs, kwnames, names, 7, 6, 3, v) < 0) {
        return NULL;
    }
    float eps;
    qk_backend be;
    if (parse_eps(fn, v[3], &eps) < 0 || parse_backend(fn, v[6], &be) < 0) return NULL;
    arg_tensor a[5];
    memset(a, 0, sizeof a);
    PyObject *out = NULL, *rout = NULL, *ret = NULL;
    const char *xn = inplace ? "input" : "x";
    if (to_tensor(fn, xn, v[0], inplace, &a[0]) < 0
        || to_tensor(fn, "residual", v[1], inplace, &a[1]) < 0
        || to_tensor(fn, "weight", v[2], 0, &a[2]) < 0)
        goto done;
    qk_tensor *ot = &a[0].t, *rt = &a[1].t;
    if (!inplace) {
        if (out_tensor(fn, "out", v[4], &a[0], a[0].t.dtype, a[0].t.ndim, a[0].t.shape, &a[3],
                       &out) < 0
            || out_tensor(fn, "residual_out", v[5], &a[0], a[0].t.dtype, a[0].t.ndim, a[0].t.shape,
                          &a[4], &rout) < 0)
            goto done;
        ot = &a[3].t;
        rt = &a[4].t;
    }
    qk_status st;
    QKPY_CALL(big_call(&a[0].t),
              st = (kind == NK_GEMMA ? qk_serve_add_gemma_rms_norm : qk_serve_add_rms_norm)(
                  be, &a[0].t, &a[2].t, &a[1].t, eps, ot, rt));
    if (st != QK_OK) {
        raise_status(st);
        goto done;
    }
    if (inplace) {
        ret = Py_None;
        Py_INCREF(ret);
    } else {
        ret = PyTuple_Pack(2, out, rout);
    }
done:
    args_release(a, 5);
    Py_XDECREF(out);
    Py_XDECREF(rout);
    return ret;
}

#define ADD_NORM_FN(pyname, kind, inplace)                                                      \
    static PyObject *py_##pyname(PyObject *self, PyObject *const *args, Py_ssize_t nargs,      \
                                 PyObject *kwnames)                                             \
    {                                                                                           \
        (void)self;                                                                             \
        return add_norm_call(#pyname, kind, inplace, args, nargs, kwnames);                     \
    }
ADD_NORM_FN(add_rms_norm, NK_RMS, 0)
ADD_NORM_FN(add_gemma_rms_norm, NK_GEMMA, 0)
ADD_NORM_FN(fused_add_rms_norm, NK_RMS, 1)
ADD_NORM_FN(gemma_fused_add_rms_norm, NK_GEMMA, 1)

static PyObject *py_rms_norm_gated(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames)
{
    (void)self;
    static const char fn[] = "rms_norm_gated";
    static const char *const names[] = {"x", "weight", "gate", "eps", "out", "backend"};
    PyObject *v[6];
    if (parse_args(fn, args, nargs, kwnames, names, 6, 5, 3, v) < 0) return NULL;
    float eps;
    qk_backend be;
    if (parse_eps(fn, v[3], &eps) < 0 || parse_backend(fn, v[5], &be) < 0) return NULL;
    arg_tensor a[4];
    memset(a, 0, sizeof a);
    PyObject *out = NULL;
    if (to_tensor(fn, "x", v[0], 0, &a[0]) < 0 || to_tensor(fn, "weight", v[1], 0, &a[1]) < 0
        || to_tensor(fn, "gate", v[2], 0, &a[2]) < 0
        || out_tensor(fn, "out", v[4], &a[0], a[0].t.dtype, a[0].t.ndim, a[0].t.shape, &a[3], &out) < 0)
        goto fail;
    qk_status st;
    QKPY_CALL(big_call(&a[0].t),
              st = qk_serve_rms_norm_gated(be, &a[0].t, &a[1].t, &a[2].t, eps, &a[3].t));
    if (st != QK_OK) {
        raise_status(st);
        goto fail;
    }
    args_release(a, 4);
    return out;
fail:
    args_release(a, 4);
    Py_XDECREF(out);
    return NULL;
}

/* ======================================================================================
 * MX codecs
 * ====================================================================================== */

static int parse_choice(const char *fn, const char *what, PyObject *o, const char *const *names,
                        const int *values, int n, int *res)
{
    if (is_none(o)) return 0; /* keep the default in *res */
    Py_ssize_t len;
    const char *s = PyUnicode_Check(o) ? PyUnicode_AsUTF8AndSize(o, &len) : NULL;
    if (s)
        for (int i = 0; i < n; i++)
            if (!strcmp(s, names[i])) {
                *res = values[i];
                return 0;
            }
    PyErr_Clear();
    char all[160] = "";
    for (int i = 0; i < n; i++) {
        strncat(all, i ? ", " : "", sizeof all - strlen(all) - 1);
        strncat(all, names[i], sizeof all - strlen(all) - 1);
    }
    raise_arg(QK_ERR_INVALID_ARGUMENT, fn, "%s must be one of %s", what, all);
    return -1;
}

static int parse_mx_options(const char *fn, PyObject *elem, PyObject *rule, PyObject *rnd,
                            qk_mx_options *o)
{
    static const char *const en[] = {"e4m3", "float8_e4m3fn", "e5m2", "float8_e5m2"};
    static const int ev[] = {QK_DTYPE_F8_E4M3, QK_DTYPE_F8_E4M3, QK_DTYPE_F8_E5M2, QK_DTYPE_F8_E5M2};
    static const char *const rn[] = {"floor", "rceil", "modelslim"};
    static const int rv[] = {QK_MX_SCALE_FLOOR, QK_MX_SCALE_RCEIL, QK_MX_SCALE_MODELSLIM};
    static const char *const on[] = {"even", "away"};
    static const int ov[] = {QK_ROUND_NEAREST_EVEN, QK_ROUND_NEAREST_AWAY};
    *o = qk_mx_options_default();
    int e = (int)o->elem, r = (int)o->scale_rule, d = (int)o->round;
    if (parse_choice(fn, "elem", elem, en, ev, 4, &e) < 0
        || parse_choice(fn, "scale_rule", rule, rn, rv, 3, &r) < 0
        || parse_choice(fn, "round", rnd, on, ov, 2, &d) < 0)
        return -1;
    o->elem = (qk_dtype)e;
    o->scale_rule = (qk_mx_scale_rule)r;
    o->round = (qk_round)d;
    return 0;
}

static PyObject *py_mx_quantize(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames)
{
    (void)self;
    static const char fn[] = "mx_quantize";
    static const char *const names[] = {"x", "elem", "scale_rule", "round", "q", "scale",
                                        "backend"};
    PyObject *v[7];
    if (parse_args(fn, args, nargs, kwnames, names, 7, 1, 1, v) < 0) return NULL;
    qk_mx_options o;
    qk_backend be;
    if (parse_mx_options(fn, v[1], v[2], v[3], &o) < 0 || parse_backend(fn, v[6], &be) < 0)
        return NULL;
    arg_tensor a[3];
    memset(a, 0, sizeof a);
    PyObject *q = NULL, *s = NULL, *ret = NULL;
    if (to_tensor(fn, "x", v[0], 0, &a[0]) < 0) goto done;
    const int nd = a[0].t.ndim;
    int64_t sshape[QK_MAX_DIMS];
    for (int d = 0; d < nd; d++) sshape[d] = a[0].t.shape[d];
    if (nd >= 1) sshape[nd - 1] = (a[0].t.shape[nd - 1] + QK_MX_BLOCK - 1) / QK_MX_BLOCK;
    if (out_tensor(fn, "q", v[4], &a[0], o.elem, nd, a[0].t.shape, &a[1], &q) < 0
        || out_tensor(fn, "scale", v[5], &a[0], QK_DTYPE_E8M0, nd, sshape, &a[2], &s) < 0)
        goto done;
    bytes_as(&a[1], o.elem);
    bytes_as(&a[2], QK_DTYPE_E8M0);
    qk_status st;
    QKPY_CALL(big_call(&a[0].t), st = qk_serve_mxfp8_quantize(be, &a[0].t, &o, &a[1].t, &a[2].t));
    if (st != QK_OK) {
        raise_status(st);
        goto done;
    }
    ret = PyTuple_Pack(2, q, s);
done:
    args_release(a, 3);
    Py_XDECREF(q);
    Py_XDECREF(s);
    return ret;
}

/* A dtype argument: "bfloat16", torch.bfloat16, numpy.float32, ml_dtypes.bfloat16, ... */
static int parse_float_dtype(const char *fn, PyObject *o, qk_dtype *dt)
{
    /* a str; a numpy dtype (.name); a scalar type such as numpy.float32 or ml_dtypes.bfloat16
       (.__name__); a torch dtype (str: "torch.bfloat16") */
    PyObject *s = NULL;
    if (PyUnicode_Check(o)) {
        Py_INCREF(o);
        s = o;
    }
    static const char *const attrs[] = {"name", "__name__"};
    for (int i = 0; !s && i < 2; i++) {
        s = PyObject_GetAttrString(o, attrs[i]);
        if (s && !PyUnicode_Check(s)) Py_CLEAR(s);
        if (!s) PyErr_Clear();
    }
    if (!s && !(s = PyObject_Str(o))) return -1;
    Py_ssize_t n;
    const char *txt = PyUnicode_AsUTF8AndSize(s, &n);
    if (!txt) {
        Py_DECREF(s);
        return -1;
    }
    if (!strncmp(txt, "torch.", 6)) txt += 6;
    *dt = !strcmp(txt, "float32") ? QK_DTYPE_F32 : !strcmp(txt, "float16") ? QK_DTYPE_F16
        : !strcmp(txt, "bfloat16") ? QK_DTYPE_BF16 : QK_DTYPE_INVALID;
    if (*dt == QK_DTYPE_INVALID)
        raise_arg(QK_ERR_DTYPE, fn, "dtype %s is not one of float32, float16, bfloat16", txt);
    Py_DECREF(s);
    return *dt == QK_DTYPE_INVALID ? -1 : 0;
}

static PyObject *py_mx_dequantize(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames)
{
    (void)self;
    static const char fn[] = "mx_dequantize";
    static const char *const names[] = {"q", "scale", "dtype", "out"};
    PyObject *v[4];
    if (parse_args(fn, args, nargs, kwnames, names, 4, 3, 2, v) < 0) return NULL;
    qk_dtype dt = QK_DTYPE_F32;
    if (!is_none(v[2]) && parse_float_dtype(fn, v[2], &dt) < 0) return NULL;
    arg_tensor a[3];
    memset(a, 0, sizeof a);
    PyObject *out = NULL;
    if (to_tensor(fn, "q", v[0], 0, &a[0]) < 0 || to_tensor(fn, "scale", v[1], 0, &a[1]) < 0)
        goto fail;
    bytes_as(&a[0], QK_DTYPE_F8_E4M3);
    bytes_as(&a[1], QK_DTYPE_E8M0);
    if (out_tensor(fn, "out", v[3], &a[0], dt, a[0].t.ndim, a[0].t.shape, &a[2], &out) < 0) goto fail;
    qk_status st;
    QKPY_CALL(big_call(&a[0].t), st = qk_mx_dequantize(&a[0].t, &a[1].t, &a[2].t));
    if (st != QK_OK) {
        raise_status(st);
        goto fail;
    }
    args_release(a, 3);
    return out;
fail:
    args_release(a, 3);
    Py_XDECREF(out);
    return NULL;
}

/* ======================================================================================
 * MXFP8Weight: a prepared weight (qk_serve_weight)
 * ====================================================================================== */

typedef struct {
    PyObject_HEAD
    qk_serve_weight *w;
    int64_t n, k;
} weight_obj;

static PyObject *weight_type;

static int parse_backend_mask(const char *fn, PyObject *o, unsigned *mask)
{
    *mask = 0;
    if (is_none(o)) return 0;
    if (PyUnicode_Check(o) && PyUnicode_CompareWithASCIIString(o, "all") == 0) {
        for (int b = QK_BACKEND_TARGET; b < QK_BACKEND_COUNT; b++)
            if (qk_backend_implements((qk_backend)b, QK_OP_MXFP8_LINEAR)) *mask |= 1u << b;
        return 0;
    }
    PyObject *it = PyObject_GetIter(o);
    if (!it || PyUnicode_Check(o)) {
        Py_XDECREF(it);
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s(): backends must be None, \"all\" or a list of backend "
                     "names", fn);
        return -1;
    }
    PyObject *item;
    while ((item = PyIter_Next(it))) {
        qk_backend b;
        int rc = parse_backend(fn, item, &b);
        Py_DECREF(item);
        if (rc < 0) {
            Py_DECREF(it);
            return -1;
        }
        *mask |= 1u << b;
    }
    Py_DECREF(it);
    return PyErr_Occurred() ? -1 : 0;
}

static PyObject *weight_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    static char *names[] = {"q", "scale", "backends", NULL};
    PyObject *qo, *so, *bo = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|$O:MXFP8Weight", names, &qo, &so, &bo))
        return NULL;
    unsigned mask;
    if (parse_backend_mask("MXFP8Weight", bo, &mask) < 0) return NULL;
    arg_tensor a[2];
    memset(a, 0, sizeof a);
    PyObject *ret = NULL;
    if (to_tensor("MXFP8Weight", "q", qo, 0, &a[0]) < 0
        || to_tensor("MXFP8Weight", "scale", so, 0, &a[1]) < 0)
        goto done;
    bytes_as(&a[0], QK_DTYPE_F8_E4M3);
    bytes_as(&a[1], QK_DTYPE_E8M0);
    qk_serve_weight *w = NULL;
    qk_status st;
    Py_BEGIN_ALLOW_THREADS
    st = qk_serve_weight_create(&a[0].t, &a[1].t, mask, &w);
    Py_END_ALLOW_THREADS
    if (st != QK_OK) {
        raise_status(st);
        goto done;
    }
    allocfunc alloc = (allocfunc)PyType_GetSlot(tp, Py_tp_alloc);
    weight_obj *self = (weight_obj *)alloc(tp, 0);
    if (!self) {
        qk_serve_weight_destroy(w);
        goto done;
    }
    self->w = w;
    self->n = a[0].t.shape[0];
    self->k = a[0].t.shape[1];
    ret = (PyObject *)self;
done:
    args_release(a, 2);
    return ret;
}

static void weight_dealloc(PyObject *o)
{
    weight_obj *self = (weight_obj *)o;
    qk_serve_weight_destroy(self->w);
    PyTypeObject *tp = Py_TYPE(o);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(o);
    Py_DECREF(tp);
}

static PyObject *mask_names(unsigned mask)
{
    PyObject *l = PyList_New(0);
    for (int b = QK_BACKEND_TARGET; l && b < QK_BACKEND_COUNT; b++)
        if (mask & (1u << b)) {
            PyObject *s = PyUnicode_FromString(qk_backend_name((qk_backend)b));
            if (!s || PyList_Append(l, s) < 0) Py_CLEAR(l);
            Py_XDECREF(s);
        }
    return l;
}

static PyObject *weight_get_backends(PyObject *o, void *c)
{
    (void)c;
    return mask_names(qk_serve_weight_backends(((weight_obj *)o)->w));
}

static PyObject *weight_repr(PyObject *o)
{
    weight_obj *w = (weight_obj *)o;
    return PyUnicode_FromFormat("qkern.MXFP8Weight(n=%lld, k=%lld)", (long long)w->n,
                                (long long)w->k);
}

static PyMemberDef weight_members[] = {
    {"n", T_LONGLONG, offsetof(weight_obj, n), READONLY, "output features N (rows of the weight)"},
    {"k", T_LONGLONG, offsetof(weight_obj, k), READONLY, "input features K"},
    {"out_features", T_LONGLONG, offsetof(weight_obj, n), READONLY, "N"},
    {"in_features", T_LONGLONG, offsetof(weight_obj, k), READONLY, "K"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef weight_getset[] = {
    {"backends", weight_get_backends, NULL, "the backends the weight is prepared for", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot weight_slots[] = {
    {Py_tp_new, weight_new},
    {Py_tp_dealloc, weight_dealloc},
    {Py_tp_getset, weight_getset},
    {Py_tp_members, weight_members},
    {Py_tp_repr, weight_repr},
    {Py_tp_doc, "MXFP8Weight(q, scale, *, backends=None)\n\n"
                "An MXFP8 (E4M3 + E8M0 per 32 along K) weight prepared once for the linear: q "
                "[N, K] float8_e4m3fn (or uint8 codes), scale [N, ceil(K/32)] float8_e8m0fnu "
                "(or uint8, as ModelSlim stores it). The library copies both into its own "
                "layout; the arrays may be freed afterwards. backends: None (the one the "
                "registry selects now), \"all\", or a list of backend names."},
    {0, NULL},
};

static PyType_Spec weight_spec = {"qkern.MXFP8Weight", sizeof(weight_obj), 0,
                                  Py_TPFLAGS_DEFAULT, weight_slots};

/* ======================================================================================
 * mxfp8_linear and the MXFP8 layers of a ModelSlim folder
 * ====================================================================================== */

typedef struct {
    PyObject_HEAD
    qk_mxfp8_linear_layer *l;
    int64_t n, k;
    char has_bias;
} layer_obj;

static PyObject *layer_type;

static PyObject *linear_call(const char *fn, const qk_serve_weight *w,
                             const qk_mxfp8_linear_layer *layer, int64_t n, PyObject *xo,
                             PyObject *bo, PyObject *oo, PyObject *beo)
{
    qk_backend be;
    if (parse_backend(fn, beo, &be) < 0) return NULL;
    arg_tensor a[3];
    memset(a, 0, sizeof a);
    PyObject *out = NULL;
    if (to_tensor(fn, "x", xo, 0, &a[0]) < 0) goto fail;
    if (!is_none(bo) && to_tensor(fn, "bias", bo, 0, &a[1]) < 0) goto fail;
    int64_t shp[QK_MAX_DIMS];
    const int nd = a[0].t.ndim;
    for (int d = 0; d < nd; d++) shp[d] = a[0].t.shape[d];
    if (nd >= 1) shp[nd - 1] = n;
    if (out_tensor(fn, "out", oo, &a[0], a[0].t.dtype, nd, shp, &a[2], &out) < 0) goto fail;
    qk_status st;
    Py_BEGIN_ALLOW_THREADS
    if (layer)
        st = qk_mxfp8_linear_layer_forward(layer, be, &a[0].t, &a[2].t);
    else
        st = qk_serve_mxfp8_linear(be, &a[0].t, w, is_none(bo) ? NULL : &a[1].t, &a[2].t);
    Py_END_ALLOW_THREADS
    if (st != QK_OK) {
        raise_status(st);
        goto fail;
    }
    args_release(a, 3);
    return out;
fail:
    args_release(a, 3);
    Py_XDECREF(out);
    return NULL;
}

static PyObject *py_mxfp8_linear(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    (void)self;
    static const char fn[] = "mxfp8_linear";
    static const char *const names[] = {"x", "weight", "bias", "out", "backend"};
    PyObject *v[5];
    if (parse_args(fn, args, nargs, kwnames, names, 5, 4, 2, v) < 0) return NULL;
    int isw = PyObject_IsInstance(v[1], weight_type);
    if (isw < 0) return NULL;
    if (!isw) {
        PyObject *tn = PyType_GetName(Py_TYPE(v[1]));
        PyErr_Format(PyExc_TypeError, "qkern.mxfp8_linear: weight must be a qkern.MXFP8Weight "
                     "(made once from the checkpoint's weight and weight_scale), not %S", tn);
        Py_XDECREF(tn);
        return NULL;
    }
    qk_serve_weight *w = ((weight_obj *)v[1])->w;
    return linear_call(fn, w, NULL, ((weight_obj *)v[1])->n, v[0], v[2], v[3], v[4]);
}

static void layer_dealloc(PyObject *o)
{
    qk_mxfp8_linear_layer_destroy(((layer_obj *)o)->l);
    PyTypeObject *tp = Py_TYPE(o);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(o);
    Py_DECREF(tp);
}

static PyObject *layer_forward(PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames)
{
    static const char fn[] = "MXFP8Layer.forward";
    static const char *const names[] = {"x", "out", "backend"};
    PyObject *v[3];
    if (parse_args(fn, args, nargs, kwnames, names, 3, 2, 1, v) < 0) return NULL;
    layer_obj *l = (layer_obj *)o;
    return linear_call(fn, NULL, l->l, l->n, v[0], NULL, v[1], v[2]);
}

static PyObject *layer_call(PyObject *o, PyObject *args, PyObject *kw)
{
    static char *names[] = {"x", "out", "backend", NULL};
    PyObject *x, *out = NULL, *be = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O$O:MXFP8Layer", names, &x, &out, &be))
        return NULL;
    layer_obj *l = (layer_obj *)o;
    return linear_call("MXFP8Layer", NULL, l->l, l->n, x, NULL, out, be);
}

static PyObject *layer_get_prefix(PyObject *o, void *c)
{
    (void)c;
    return PyUnicode_FromString(qk_mxfp8_linear_layer_prefix(((layer_obj *)o)->l));
}
static PyObject *layer_get_backends(PyObject *o, void *c)
{
    (void)c;
    return mask_names(qk_serve_weight_backends(qk_mxfp8_linear_layer_weight(((layer_obj *)o)->l)));
}

static PyObject *layer_repr(PyObject *o)
{
    layer_obj *l = (layer_obj *)o;
    return PyUnicode_FromFormat("qkern.MXFP8Layer('%s', in_features=%lld, out_features=%lld, "
                                "bias=%s)", qk_mxfp8_linear_layer_prefix(l->l), (long long)l->k,
                                (long long)l->n, l->has_bias ? "True" : "False");
}

static PyMethodDef layer_methods[] = {
    {"forward", (PyCFunction)(void (*)(void))layer_forward, METH_FASTCALL | METH_KEYWORDS,
     "forward(x, out=None, backend=None) -> out [..., out_features] (x's dtype): the W8A8 "
     "MXFP8 linear, plus the bias when the checkpoint has one."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef layer_getset[] = {
    {"prefix", layer_get_prefix, NULL, "the checkpoint prefix (e.g. model.layers.0.mlp.down_proj)", NULL},
    {"backends", layer_get_backends, NULL, "the backends the weight is prepared for", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef layer_members[] = {
    {"in_features", T_LONGLONG, offsetof(layer_obj, k), READONLY, "K"},
    {"out_features", T_LONGLONG, offsetof(layer_obj, n), READONLY, "N"},
    {"has_bias", T_BOOL, offsetof(layer_obj, has_bias), READONLY,
     "whether the checkpoint has <prefix>.bias"},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot layer_slots[] = {
    {Py_tp_members, layer_members},
    {Py_tp_dealloc, layer_dealloc},
    {Py_tp_methods, layer_methods},
    {Py_tp_getset, layer_getset},
    {Py_tp_repr, layer_repr},
    {Py_tp_call, layer_call},
    {Py_tp_doc, "An MXFP8Linear layer of a ModelSlim W8A8_MXFP8 checkpoint, loaded and "
                "processed (qkern.load_modelslim makes them). Call it, or its forward, on x "
                "[..., in_features]."},
    {0, NULL},
};

static PyType_Spec layer_spec = {"qkern.MXFP8Layer", sizeof(layer_obj), 0,
                                 Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
                                 layer_slots};

/* The W8A8_MXFP8 linears of one ModelSlim folder, each created, loaded and processed as the
 * serving layer's life cycle says (checkpoint.md); any failure fails the whole load. */
static PyObject *py_load_modelslim(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *names[] = {"folder", "all_backends", "allow_external_shards", NULL};
    PyObject *path;
    int all = 0, external = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|$pp:load_modelslim", names,
                                     PyUnicode_FSConverter, &path, &all, &external))
        return NULL;
    Py_ssize_t plen;
    char *p;
    if (PyBytes_AsStringAndSize(path, &p, &plen) < 0) {
        Py_DECREF(path);
        return NULL;
    }
    qk_ms_model *m = NULL;
    qk_status st;
    Py_BEGIN_ALLOW_THREADS
    st = qk_ms_open(p, external ? QK_MS_ALLOW_EXTERNAL_SHARDS : 0, &m);
    Py_END_ALLOW_THREADS
    Py_DECREF(path);
    if (st != QK_OK) return raise_status(st);
    PyObject *res = PyDict_New();
    const qk_ms_desc *d = qk_ms_description(m);
    const qk_st_set *set = qk_ms_tensors(m);
    qk_layer_options opt = qk_layer_options_default();
    if (all) opt.flags |= QK_LAYER_ALL_BACKENDS;
    const size_t n = qk_ms_desc_count(d);
    for (size_t i = 0; res && i < n; i++) {
        const char *name, *qtype;
        if (qk_ms_desc_entry(d, i, &name, &qtype) != QK_OK || strcmp(qtype, "W8A8_MXFP8")) continue;
        size_t len = strlen(name);
        if (len <= 7 || strcmp(name + len - 7, ".weight")) continue;
        char *prefix = malloc(len - 6), *bias = malloc(len + 1);
        if (!prefix || !bias) {
            free(prefix);
            free(bias);
            Py_CLEAR(res);
            PyErr_NoMemory();
            break;
        }
        memcpy(prefix, name, len - 7);
        prefix[len - 7] = 0;
        snprintf(bias, len + 1, "%s.bias", prefix);
        qk_st_info wi, bi;
        st = qk_st_set_find(set, name, &wi);
        const bool has_bias = st == QK_OK && qk_st_set_find(set, bias, &bi) == QK_OK;
        free(bias);
        qk_mxfp8_linear_layer *l = NULL;
        if (st == QK_OK && wi.ndim != 2) {
            free(prefix);
            Py_CLEAR(res);
            raise_arg(QK_ERR_FORMAT, "load_modelslim", "%s has %d dims; an MXFP8 weight is [N, K]",
                      name, (int)wi.ndim);
            break;
        }
        if (st == QK_OK) {
            Py_BEGIN_ALLOW_THREADS
            st = qk_mxfp8_linear_layer_create(prefix, wi.shape[1], wi.shape[0], has_bias, 1, 0,
                                              QK_TP_NONE, &opt, &l);
            if (st == QK_OK) st = qk_mxfp8_linear_layer_load_from(l, set);
            if (st == QK_OK) st = qk_mxfp8_linear_layer_process_weights_after_loading(l);
            Py_END_ALLOW_THREADS
        }
        if (st != QK_OK) {
            qk_mxfp8_linear_layer_destroy(l);
            free(prefix);
            Py_CLEAR(res);
            raise_status(st);
            break;
        }
        allocfunc alloc = (allocfunc)PyType_GetSlot((PyTypeObject *)layer_type, Py_tp_alloc);
        layer_obj *o = (layer_obj *)alloc((PyTypeObject *)layer_type, 0);
        if (!o) {
            qk_mxfp8_linear_layer_destroy(l);
            free(prefix);
            Py_CLEAR(res);
            break;
        }
        o->l = l;
        o->n = wi.shape[0];
        o->k = wi.shape[1];
        o->has_bias = has_bias;
        if (PyDict_SetItemString(res, prefix, (PyObject *)o) < 0) Py_CLEAR(res);
        Py_DECREF(o);
        free(prefix);
    }
    qk_ms_close(m);
    return res;
}

/* ======================================================================================
 * Library information, threads, the backend registry
 * ====================================================================================== */

static PyObject *py_info(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return PyErr_NoMemory();
    qk_info_print(f);
    fclose(f);
    PyObject *s = PyUnicode_DecodeUTF8(buf, (Py_ssize_t)len, "replace");
    free(buf);
    return s;
}

static PyObject *py_version(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyUnicode_FromString(qk_version());
}

static PyObject *py_target(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyUnicode_FromString(qk_target());
}

static PyObject *py_abi_version(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyLong_FromLong(qk_abi_version());
}

static PyObject *py_init(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    qk_status st = qk_init();
    if (st != QK_OK) return raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *py_provider(PyObject *self, PyObject *arg)
{
    (void)self;
    Py_ssize_t n;
    const char *op = PyUnicode_Check(arg) ? PyUnicode_AsUTF8AndSize(arg, &n) : NULL;
    if (!op) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "provider(op): op must be a str, e.g. \"gemma_rms_norm\"");
        return NULL;
    }
    const char *p = qk_provider(op);
    if (!p) return raise_arg(QK_ERR_INVALID_ARGUMENT, "provider", "unknown op \"%s\"", op);
    return PyUnicode_FromString(p);
}

static PyObject *py_set_num_threads(PyObject *self, PyObject *arg)
{
    (void)self;
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred()) return NULL;
    if (n < 0 || n > 1 << 16)
        return raise_arg(QK_ERR_INVALID_ARGUMENT, "set_num_threads", "n is %ld; expected 0 (the "
                         "default) or a thread count", n);
    qk_set_num_threads((int)n);
    Py_RETURN_NONE;
}

static PyObject *py_get_num_threads(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyLong_FromLong(qk_get_num_threads());
}

static PyObject *py_backends(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    PyObject *res = PyDict_New();
    for (int i = 0; res && i < QK_OP_COUNT; i++) {
        qk_serve_op op = (qk_serve_op)i;
        qk_backend v[QK_BACKEND_COUNT], chosen = QK_BACKEND_DEFAULT;
        size_t k = qk_serve_backends(op, v, QK_BACKEND_COUNT);
        PyObject *names = PyList_New(0), *runs = PyDict_New();
        for (size_t j = 0; names && runs && j < k; j++) {
            char d[256];
            PyObject *s = PyUnicode_FromString(qk_backend_name(v[j]));
            PyObject *r = PyUnicode_FromString(qk_backend_describe(v[j], op, d, sizeof d));
            if (!s || !r || PyList_Append(names, s) < 0 || PyDict_SetItem(runs, s, r) < 0)
                Py_CLEAR(names);
            Py_XDECREF(s);
            Py_XDECREF(r);
        }
        const char *sel = qk_serve_select(op, QK_BACKEND_DEFAULT, &chosen) == QK_OK
                              ? qk_backend_name(chosen) : NULL;
        PyObject *e = names && runs ? Py_BuildValue("{s:O,s:z,s:O}", "backends", names, "selected",
                                                    sel, "runs", runs)
                                    : NULL;
        if (!e || PyDict_SetItemString(res, qk_serve_op_name(op), e) < 0) Py_CLEAR(res);
        Py_XDECREF(e);
        Py_XDECREF(names);
        Py_XDECREF(runs);
    }
    return res;
}

static PyObject *py_force_backend(PyObject *self, PyObject *arg)
{
    (void)self;
    qk_backend b;
    if (parse_backend("force_backend", arg, &b) < 0) return NULL;
    qk_status st = qk_serve_force_backend(b);
    if (st != QK_OK) return raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *py_forced_backend(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    qk_backend b = qk_serve_forced_backend();
    if (b == QK_BACKEND_DEFAULT) Py_RETURN_NONE;
    return PyUnicode_FromString(qk_backend_name(b));
}

static PyObject *py_load_provider(PyObject *self, PyObject *arg)
{
    (void)self;
    PyObject *path;
    if (!PyUnicode_FSConverter(arg, &path)) return NULL;
    char *p;
    Py_ssize_t n;
    qk_status st = QK_ERR_INVALID_ARGUMENT;
    if (PyBytes_AsStringAndSize(path, &p, &n) == 0) st = qk_serve_provider_load(p);
    Py_DECREF(path);
    if (PyErr_Occurred()) return NULL;
    if (st != QK_OK) return raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *py_unload_provider(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    qk_status st = qk_serve_provider_unload();
    if (st != QK_OK) return raise_status(st);
    Py_RETURN_NONE;
}

/* ======================================================================================
 * Bench support: the C call alone, timed in C on the same tensors (python -m qkern bench
 * subtracts it from the Python call to report the binding's own cost)
 * ====================================================================================== */

#include <time.h>

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* _time_c_call(op, n, x, weight_or_MXFP8Weight, out) -> ns per call of the serving layer's
 * call that the Python op makes (op: "gemma_rms_norm" or "mxfp8_linear"). */
static PyObject *py_time_c_call(PyObject *self, PyObject *args)
{
    (void)self;
    const char *op;
    long long n;
    PyObject *xo, *wo, *oo;
    if (!PyArg_ParseTuple(args, "sLOOO:_time_c_call", &op, &n, &xo, &wo, &oo)) return NULL;
    const int lin = !strcmp(op, "mxfp8_linear");
    if (!lin && strcmp(op, "gemma_rms_norm"))
        return raise_arg(QK_ERR_INVALID_ARGUMENT, "_time_c_call", "op must be gemma_rms_norm or "
                         "mxfp8_linear");
    if (lin && PyObject_IsInstance(wo, weight_type) != 1) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "_time_c_call: mxfp8_linear needs an MXFP8Weight");
        return NULL;
    }
    arg_tensor a[3];
    memset(a, 0, sizeof a);
    if (to_tensor("_time_c_call", "x", xo, 0, &a[0]) < 0
        || (!lin && to_tensor("_time_c_call", "weight", wo, 0, &a[1]) < 0)
        || to_tensor("_time_c_call", "out", oo, 1, &a[2]) < 0) {
        args_release(a, 3);
        return NULL;
    }
    const qk_serve_weight *w = lin ? ((weight_obj *)wo)->w : NULL;
    qk_status st = QK_OK;
    double t0 = 0, t1 = 0;
    Py_BEGIN_ALLOW_THREADS
    t0 = now_ns();
    for (long long i = 0; i < n && st == QK_OK; i++)
        st = lin ? qk_serve_mxfp8_linear(QK_BACKEND_DEFAULT, &a[0].t, w, NULL, &a[2].t)
                 : qk_serve_gemma_rms_norm(QK_BACKEND_DEFAULT, &a[0].t, &a[1].t, 1e-6f, &a[2].t,
                                           NULL);
    t1 = now_ns();
    Py_END_ALLOW_THREADS
    args_release(a, 3);
    if (st != QK_OK) return raise_status(st);
    return PyFloat_FromDouble(n > 0 ? (t1 - t0) / (double)n : 0.0);
}

/* ======================================================================================
 * The module
 * ====================================================================================== */

#define FAST(name, doc) {#name, (PyCFunction)(void (*)(void))py_##name, METH_FASTCALL | METH_KEYWORDS, doc}

static PyMethodDef methods[] = {
    FAST(rms_norm, "rms_norm(x, weight, eps=1e-6, out=None, *, backend=None) -> out\n\n"
                   "out = x / sqrt(mean(x^2) + eps) * weight, per row of the last dim."),
    FAST(gemma_rms_norm, "gemma_rms_norm(x, weight, eps=1e-6, out=None, *, backend=None) -> out\n\n"
                         "Gemma RMSNorm: the multiplier is (1 + weight), weight stored zero-centred "
                         "(FlashInfer's gemma_rmsnorm)."),
    FAST(npu_gemma_rms_norm, "npu_gemma_rms_norm(x, weight, eps=1e-6, *, backend=None) -> (out, rstd)\n\n"
                             "sgl-kernel-npu's gemma_rms_norm: rstd is float32 of shape "
                             "x.shape[:-1] + (1,)."),
    FAST(add_rms_norm, "add_rms_norm(x, residual, weight, eps=1e-6, out=None, residual_out=None, "
                       "*, backend=None) -> (out, residual_out)\n\nresidual_out = x + residual "
                       "(rounded to x's dtype); out = rms_norm(residual_out)."),
    FAST(add_gemma_rms_norm, "add_gemma_rms_norm(x, residual, weight, eps=1e-6, out=None, "
                             "residual_out=None, *, backend=None) -> (out, residual_sum)\n\n"
                             "sgl-kernel-npu's add_gemma_rms_norm: the residual add, then the "
                             "Gemma norm."),
    FAST(fused_add_rms_norm, "fused_add_rms_norm(input, residual, weight, eps=1e-6, *, "
                             "backend=None) -> None\n\nIn place (vLLM, FlashInfer): residual <- "
                             "input + residual, input <- rms_norm(residual)."),
    FAST(gemma_fused_add_rms_norm, "gemma_fused_add_rms_norm(input, residual, weight, eps=1e-6, *, "
                                   "backend=None) -> None\n\nIn place (FlashInfer's "
                                   "gemma_fused_add_rmsnorm)."),
    FAST(rms_norm_gated, "rms_norm_gated(x, weight, gate, eps=1e-6, out=None, *, backend=None) -> out\n\n"
                         "out = rms_norm(x) * weight * silu(gate) (Qwen3.5's Gated DeltaNet output "
                         "norm: normalise, then gate)."),
    FAST(mx_quantize, "mx_quantize(x, *, elem='e4m3', scale_rule='floor' (or 'rceil', 'modelslim'), "
                      "round='even', q=None, "
                      "scale=None, backend=None) -> (q, scale)\n\nMXFP8 block quantization along the "
                      "last dim: q has x's shape (float8_e4m3fn or float8_e5m2), scale [..., "
                      "ceil(K/32)] float8_e8m0fnu (a given uint8 scale is filled with the same bytes)."),
    FAST(mx_dequantize, "mx_dequantize(q, scale, dtype='float32', out=None) -> out\n\n"
                        "q * 2^(scale - 127) per 32-element block; q may be uint8 E4M3 codes and "
                        "scale uint8 E8M0 bytes."),
    FAST(mxfp8_linear, "mxfp8_linear(x, weight, bias=None, out=None, *, backend=None) -> out\n\n"
                       "The W8A8 MXFP8 linear: x [..., K] (quantized per row per 32-block on the "
                       "fly), weight a qkern.MXFP8Weight [N, K], bias float32 [N]; out [..., N] in "
                       "x's dtype (or the given out's: x's dtype or float32)."),
    {"load_modelslim", (PyCFunction)(void (*)(void))py_load_modelslim, METH_VARARGS | METH_KEYWORDS,
     "load_modelslim(folder, *, all_backends=False, allow_external_shards=False) -> {prefix: MXFP8Layer}\n\nEvery W8A8_MXFP8 "
     "linear of a ModelSlim folder, loaded, checked and processed, ready to run."},
    {"info", py_info, METH_NOARGS, "info() -> str: what `qk info` prints."},
    {"version", py_version, METH_NOARGS, "version() -> the C library's version"},
    {"target", py_target, METH_NOARGS, "target() -> the build target, e.g. 'x86-64-v4'"},
    {"abi_version", py_abi_version, METH_NOARGS, "abi_version() -> int"},
    {"init", py_init, METH_NOARGS, "init(): checks this CPU against the build target (CPUError)."},
    {"provider", py_provider, METH_O, "provider(op) -> the provider staged for op, e.g. 'avx512'"},
    {"set_num_threads", py_set_num_threads, METH_O, "set_num_threads(n): bound the threads (0 = default)"},
    {"get_num_threads", py_get_num_threads, METH_NOARGS, "get_num_threads() -> the bound in force"},
    {"backends", py_backends, METH_NOARGS,
     "backends() -> {op: {'backends': [...], 'selected': name, 'runs': {backend: what it runs}}}"},
    {"force_backend", py_force_backend, METH_O,
     "force_backend(name or None): the global debugging switch (QK_FORCE_BACKEND); None clears it."},
    {"forced_backend", py_forced_backend, METH_NOARGS, "forced_backend() -> name or None"},
    {"load_provider", py_load_provider, METH_O,
     "load_provider(path): load a qkern provider library by explicit path."},
    {"unload_provider", py_unload_provider, METH_NOARGS, "unload_provider()"},
    {"_time_c_call", py_time_c_call, METH_VARARGS,
     "_time_c_call(op, n, x, weight, out) -> ns per C call (python -m qkern bench)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "qkern._qkern",
    "qkern's C extension: the ops, the prepared MXFP8 weight, the ModelSlim loader and the "
    "backend registry. Import qkern, not this module.",
    -1, methods, NULL, NULL, NULL, NULL,
};

static int add_exception(PyObject *m, const char *name, qk_status st, PyObject *bases)
{
    char full[64];
    snprintf(full, sizeof full, "qkern.%s", name);
    PyObject *dict = Py_BuildValue("{s:s}", "status", st ? qk_status_name(st) : "");
    PyObject *e = dict ? PyErr_NewException(full, bases, dict) : NULL;
    Py_XDECREF(dict);
    Py_DECREF(bases);
    if (!e) return -1;
    if (st) exc_of[st] = e;
    else exc_base = e;
    return PyModule_AddObjectRef(m, name, e);
}

PyMODINIT_FUNC PyInit__qkern(void)
{
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    kind_cache = PyDict_New();
    ml_cache = PyDict_New();
    s_dtype = PyUnicode_InternFromString("dtype");
    s_name = PyUnicode_InternFromString("name");
    s_view = PyUnicode_InternFromString("view");
    if (!s_dtype || !s_name || !s_view) goto fail;
    weight_type = PyType_FromSpec(&weight_spec);
    layer_type = PyType_FromSpec(&layer_spec);
    if (!kind_cache || !ml_cache || !weight_type || !layer_type
        || PyModule_AddObjectRef(m, "MXFP8Weight", weight_type) < 0
        || PyModule_AddObjectRef(m, "MXFP8Layer", layer_type) < 0)
        goto fail;
    if (add_exception(m, "Error", QK_OK, PyTuple_Pack(1, PyExc_Exception)) < 0) goto fail;
    if (add_exception(m, "ArgumentError", QK_ERR_INVALID_ARGUMENT,
                      PyTuple_Pack(2, exc_base, PyExc_ValueError)) < 0)
        goto fail;
    PyObject *arg = exc_of[QK_ERR_INVALID_ARGUMENT];
    if (add_exception(m, "ShapeError", QK_ERR_SHAPE, PyTuple_Pack(1, arg)) < 0
        || add_exception(m, "DtypeError", QK_ERR_DTYPE, PyTuple_Pack(1, arg)) < 0
        || add_exception(m, "LayoutError", QK_ERR_LAYOUT, PyTuple_Pack(1, arg)) < 0
        || add_exception(m, "UnsupportedError", QK_ERR_UNSUPPORTED,
                         PyTuple_Pack(2, exc_base, PyExc_NotImplementedError)) < 0
        || add_exception(m, "CPUError", QK_ERR_CPU, PyTuple_Pack(2, exc_base, PyExc_RuntimeError)) < 0
        || add_exception(m, "OutOfMemoryError", QK_ERR_NOMEM,
                         PyTuple_Pack(2, exc_base, PyExc_MemoryError)) < 0
        || add_exception(m, "FileError", QK_ERR_IO, PyTuple_Pack(2, exc_base, PyExc_OSError)) < 0
        || add_exception(m, "FormatError", QK_ERR_FORMAT,
                         PyTuple_Pack(2, exc_base, PyExc_ValueError)) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
