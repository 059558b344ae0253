"""qkern: Gemma-style RMSNorm and MXFP8 W8A8 linear kernels for serving Qwen3.5 on CPUs.

Every op takes torch tensors, numpy arrays (ml_dtypes for bfloat16 / float8) or any other
DLPack or buffer-protocol tensor without copying, honours strided rows exactly as the C
API does (or raises its error), and returns outputs in the first tensor's framework unless
``out=`` is given. The signatures follow the serving engines' own kernels::

    import torch, qkern
    x = torch.randn(16, 5120, dtype=torch.bfloat16)
    w = torch.zeros(5120, dtype=torch.bfloat16)          # Gemma: zero-centred weight
    y = qkern.gemma_rms_norm(x, w, 1e-6)                 # FlashInfer's gemma_rmsnorm
    y, rstd = qkern.npu_gemma_rms_norm(x, w, 1e-6)       # sgl-kernel-npu's gemma_rms_norm

Errors are qkern.Error subclasses carrying the C library's message: ArgumentError,
ShapeError, DtypeError and LayoutError (all ValueError), FormatError (checkpoints),
UnsupportedError (NotImplementedError), CPUError, FileError (OSError), OutOfMemoryError.
``qkern.nn`` has torch.nn.Module layers (GemmaRMSNorm, RMSNorm, RMSNormGated, MXFP8Linear)
when torch is installed.
"""
from ._qkern import (  # noqa: F401
    ArgumentError,
    CPUError,
    DtypeError,
    Error,
    FileError,
    FormatError,
    LayoutError,
    MXFP8Layer,
    MXFP8Weight,
    OutOfMemoryError,
    ShapeError,
    UnsupportedError,
    abi_version,
    add_gemma_rms_norm,
    add_rms_norm,
    backends,
    force_backend,
    forced_backend,
    fused_add_rms_norm,
    gemma_fused_add_rms_norm,
    gemma_rms_norm,
    get_num_threads,
    info,
    init,
    load_modelslim,
    load_provider,
    mx_dequantize,
    mx_quantize,
    mxfp8_linear,
    npu_gemma_rms_norm,
    provider,
    rms_norm,
    rms_norm_gated,
    set_num_threads,
    target,
    unload_provider,
    version,
)

__version__ = version()

__all__ = [
    "ArgumentError", "CPUError", "DtypeError", "Error", "FileError", "FormatError",
    "LayoutError", "MXFP8Layer", "MXFP8Weight", "OutOfMemoryError", "ShapeError",
    "UnsupportedError", "abi_version", "add_gemma_rms_norm", "add_rms_norm", "backends",
    "force_backend", "forced_backend", "fused_add_rms_norm", "gemma_fused_add_rms_norm",
    "gemma_rms_norm", "get_num_threads", "info", "init", "load_modelslim", "load_provider",
    "mx_dequantize", "mx_quantize", "mxfp8_linear", "npu_gemma_rms_norm", "provider",
    "rms_norm", "rms_norm_gated", "set_num_threads", "target", "unload_provider", "version",
]


def __getattr__(name):
    if name == "nn":  # torch is imported only when qkern.nn is used
        import importlib
        return importlib.import_module(".nn", __name__)
    raise AttributeError(f"module 'qkern' has no attribute '{name}'")
