"""Output allocation for tensors of frameworks the C extension has no fast path for.

The extension makes torch outputs (its own DLPack capsule, handed to torch) and numpy
outputs itself. For any other DLPack producer, the output is a numpy array, handed to the
producer's framework through its ``from_dlpack`` when its top-level module has one (jax,
cupy's host arrays, ...), else returned as numpy.
"""
import importlib
import sys

import numpy as np

_NP = {
    "float32": np.float32, "float16": np.float16, "uint8": np.uint8, "int8": np.int8,
    "int32": np.int32, "int64": np.int64,
}
_ML = ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu")
_from_dlpack = {}


def _numpy_dtype(name):
    if name in _NP:
        return np.dtype(_NP[name])
    import ml_dtypes
    return np.dtype(getattr(ml_dtypes, name))


def other(like, shape, dtype_name):
    """A new C-contiguous array of `shape` and `dtype_name` in like's framework."""
    arr = np.empty(shape, _numpy_dtype(dtype_name))
    root = type(like).__module__.split(".")[0]
    conv = _from_dlpack.get(root, False)
    if conv is False:
        conv = None
        mod = sys.modules.get(root)
        if mod is not None and dtype_name not in _ML:
            conv = getattr(mod, "from_dlpack", None)
            if conv is None and root == "jax":
                conv = getattr(importlib.import_module("jax.numpy"), "from_dlpack", None)
        _from_dlpack[root] = conv
    return conv(arr) if conv is not None else arr
