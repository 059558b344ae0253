/* The DLPack data structures (ABI of DLPack 1.x), as the binding reads and makes them.
 * Only what qkern needs: the CPU device, the dtype codes it maps, and the legacy and
 * versioned managed tensors. Field order and types are fixed by the DLPack ABI. */
#ifndef QKERN_PY_DLPACK_H
#define QKERN_PY_DLPACK_H

#include <stdint.h>

enum {
    QKPY_DL_CPU = 1,        /* kDLCPU */
    QKPY_DL_CUDA = 2,
    QKPY_DL_CUDA_HOST = 3,  /* pinned host memory: CPU-addressable */
};

enum {
    QKPY_DL_INT = 0, QKPY_DL_UINT = 1, QKPY_DL_FLOAT = 2, QKPY_DL_BFLOAT = 4,
    QKPY_DL_BOOL = 6,
    QKPY_DL_F8_E4M3FN = 10, QKPY_DL_F8_E5M2 = 12, QKPY_DL_F8_E8M0FNU = 14,
};

#define QKPY_DL_FLAG_READ_ONLY (1ull << 0)

typedef struct { int32_t device_type, device_id; } qkpy_dl_device;
typedef struct { uint8_t code, bits; uint16_t lanes; } qkpy_dl_dtype;

typedef struct {
    void          *data;
    qkpy_dl_device device;
    int32_t        ndim;
    qkpy_dl_dtype  dtype;
    int64_t       *shape;
    int64_t       *strides;   /* in elements; NULL = compact row-major */
    uint64_t       byte_offset;
} qkpy_dl_tensor;

typedef struct qkpy_dl_managed {
    qkpy_dl_tensor dl_tensor;
    void          *manager_ctx;
    void         (*deleter)(struct qkpy_dl_managed *self);
} qkpy_dl_managed;

typedef struct qkpy_dl_managed_v {
    struct { uint32_t major, minor; } version;
    void          *manager_ctx;
    void         (*deleter)(struct qkpy_dl_managed_v *self);
    uint64_t       flags;
    qkpy_dl_tensor dl_tensor;
} qkpy_dl_managed_v;

#endif
