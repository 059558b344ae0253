"""torch.nn.Module layers over qkern's kernels, with SGLang's forward signatures.

Requires torch. Weights are Parameters as in SGLang (``weight_loader`` friendly); forward
runs under no_grad semantics (the kernels have no backward).

- ``GemmaRMSNorm(hidden_size, eps=1e-6)``: weight zeros (multiplier 1 + weight).
  ``forward(x)`` -> out; ``forward(x, residual)`` -> (x, residual), computed in place as
  SGLang's fused path does: residual <- x + residual, x <- norm(residual).
- ``RMSNorm(hidden_size, eps=1e-6)``: weight ones; the same forward.
- ``RMSNormGated(hidden_size, eps=1e-6)``: ``forward(x, z)`` -> norm(x) * weight * silu(z).
- ``MXFP8Linear(input_size, output_size, bias=True)``: the ModelSlim W8A8_MXFP8 scheme:
  ``weight`` float8_e4m3fn [N, K], ``weight_scale`` uint8 [N, ceil(K/32)], ``bias``
  float32 [N]; ``process_weights_after_loading()`` prepares the kernel's weight;
  ``forward(x)`` -> [..., N]. ``MXFP8Linear.from_layer(l)`` wraps what
  ``qkern.load_modelslim`` returns, and ``load_modelslim(folder)`` here returns
  ``{prefix: MXFP8Linear}``.
"""
import torch

from . import _qkern

__all__ = ["GemmaRMSNorm", "RMSNorm", "RMSNormGated", "MXFP8Linear", "load_modelslim"]


class _NormBase(torch.nn.Module):
    _fill = 0.0

    def __init__(self, hidden_size: int, eps: float = 1e-6, dtype=torch.bfloat16):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.full((hidden_size,), self._fill, dtype=dtype),
                                         requires_grad=False)
        self.variance_epsilon = eps
        self.hidden_size = hidden_size

    def extra_repr(self) -> str:
        return f"{self.hidden_size}, eps={self.variance_epsilon}"


class GemmaRMSNorm(_NormBase):
    """Gemma RMSNorm: out = x / rms(x) * (1 + weight), weight stored zero-centred."""
    _fill = 0.0
    _plain = staticmethod(_qkern.gemma_rms_norm)
    _fused = staticmethod(_qkern.gemma_fused_add_rms_norm)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        w = self.weight.detach()
        if residual is None:
            return self._plain(x, w, self.variance_epsilon)
        self._fused(x, residual, w, self.variance_epsilon)
        return x, residual


class RMSNorm(GemmaRMSNorm):
    """RMSNorm: out = x / rms(x) * weight."""
    _fill = 1.0
    _plain = staticmethod(_qkern.rms_norm)
    _fused = staticmethod(_qkern.fused_add_rms_norm)


class RMSNormGated(_NormBase):
    """Gated RMSNorm (Qwen3.5 Gated DeltaNet): out = x / rms(x) * weight * silu(z)."""
    _fill = 1.0

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return _qkern.rms_norm_gated(x, self.weight.detach(), z, self.variance_epsilon)


class MXFP8Linear(torch.nn.Module):
    """The ModelSlim W8A8_MXFP8 linear: E4M3 weights with one E8M0 scale per 32 along K."""

    def __init__(self, input_size: int, output_size: int, bias: bool = True):
        super().__init__()
        self.input_size, self.output_size = input_size, output_size
        kb = (input_size + 31) // 32
        self.weight = torch.nn.Parameter(
            torch.zeros(output_size, input_size, dtype=torch.float8_e4m3fn), requires_grad=False)
        self.weight_scale = torch.nn.Parameter(
            torch.full((output_size, kb), 0xFF, dtype=torch.uint8), requires_grad=False)
        self.bias = (torch.nn.Parameter(torch.zeros(output_size, dtype=torch.float32),
                                        requires_grad=False) if bias else None)
        self._layer = None   # a qkern.MXFP8Layer (from load_modelslim)
        self._weight = None  # a qkern.MXFP8Weight (process_weights_after_loading)

    @classmethod
    def from_layer(cls, layer: "_qkern.MXFP8Layer") -> "MXFP8Linear":
        """Wraps a loaded, processed qkern.MXFP8Layer (its weights stay in qkern's layout)."""
        m = cls.__new__(cls)
        torch.nn.Module.__init__(m)
        m.input_size, m.output_size = layer.in_features, layer.out_features
        m.weight = m.weight_scale = m.bias = None
        m._layer, m._weight = layer, None
        return m

    def process_weights_after_loading(self) -> None:
        """Checks the loaded weight and scale (0xFF = never loaded, NaN codes: FormatError)
        and prepares them for the kernels."""
        self._weight = _qkern.MXFP8Weight(self.weight.detach(), self.weight_scale.detach())
        if self.bias is not None:
            self._bias = self.bias.detach().to(torch.float32).contiguous()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._layer is not None:
            return self._layer(x)
        if self._weight is None:
            raise _qkern.ArgumentError(
                "qkern.nn.MXFP8Linear.forward: call process_weights_after_loading() after "
                "loading weight and weight_scale")
        return _qkern.mxfp8_linear(x, self._weight, self._bias if self.bias is not None else None)

    def extra_repr(self) -> str:
        return f"in_features={self.input_size}, out_features={self.output_size}"


def load_modelslim(folder, *, all_backends: bool = False, allow_external_shards: bool = False) -> dict:
    """{prefix: MXFP8Linear} for every W8A8_MXFP8 linear of a ModelSlim folder.
    allow_external_shards: follow files that link out of the folder (a Hugging Face cache
    snapshot's links into ../../blobs), refused by default."""
    return {p: MXFP8Linear.from_layer(l)
            for p, l in _qkern.load_modelslim(folder, all_backends=all_backends,
                                              allow_external_shards=allow_external_shards).items()}
