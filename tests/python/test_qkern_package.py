"""The qkern Python package (python/qkern, `pip install .`), tested as an engine uses it.

References are independent of the library: norms against the same formula in double
(norm.md's bound: 1 ulp for BF16/F16, 2^-19 relative for F32) and against torch's own
composite (SGLang's native GemmaRMSNorm forward); MX codecs against a NumPy quantizer
written here with ml_dtypes' element casts; the linear against the exact sum in double
with mxfp8.md's bound; the ModelSlim loader on a folder written by `qk quantize`.

`make test` installs the package into build/pyvenv and sets QK_REQUIRE_PACKAGE=1, so a
missing package fails instead of skipping.
"""
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")
if os.environ.get("QK_REQUIRE_PACKAGE"):
    import qkern
else:
    qkern = pytest.importorskip("qkern")
torch = pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("QK_BUILD") or os.path.join(HERE, "..", "..", "build")
BF16 = ml_dtypes.bfloat16
E4M3 = ml_dtypes.float8_e4m3fn
TORCH_DTYPES = [torch.bfloat16, torch.float16, torch.float32]


# ---------------------------------------------------------------- references (independent)

def ordered(t):
    """Integers ordered like the float values (so that ulp distance is a difference)."""
    bits = {torch.bfloat16: torch.int16, torch.float16: torch.int16,
            torch.float32: torch.int32}[t.dtype]
    i = t.contiguous().view(bits).to(torch.int64)
    top = 1 << (8 * t.element_size() - 1)
    return torch.where(i < 0, -(i + top), i)


def assert_norm_bound(out, ref64):
    """norm.md: BF16/F16 within 1 ulp of the correctly rounded double reference; F32 within
    2^-19 relative (2^-140 absolute below 2^-126)."""
    assert out.dtype in TORCH_DTYPES and out.shape == ref64.shape
    if out.dtype == torch.float32:
        err = (out.double() - ref64).abs()
        lim = torch.maximum(ref64.abs() * 2.0 ** -19, torch.full_like(ref64, 2.0 ** -140))
        bad = ~(err <= lim)
    else:
        bad = (ordered(out) - ordered(ref64.to(out.dtype))).abs() > 1
    assert not bad.any(), f"{int(bad.sum())} elements outside norm.md's bound"


def norm_ref64(x, w, eps, gemma, gate=None):
    x64 = x.double()
    r = 1.0 / torch.sqrt((x64 * x64).mean(-1, keepdim=True) + eps)
    m = (1.0 + w.float()).double() if gemma else w.double()
    out = x64 * r * m
    if gate is not None:
        g = gate.double()
        out = out * (g / (1.0 + torch.exp(-g)))
    return out, r


def sglang_gemma_native(x, w, eps, residual=None):
    """SGLang's GemmaRMSNorm.forward_native, the composite engines fall back to."""
    orig = x.dtype
    if residual is not None:
        x = x + residual
        residual = x
    x = x.float()
    variance = x.pow(2).mean(dim=-1, keepdim=True)
    x = x * torch.rsqrt(variance + eps)
    x = x * (1.0 + w.float())
    x = x.to(orig)
    return x if residual is None else (x, residual)


def np_mx_quantize(x):
    """FLOOR scale, nearest-even E4M3 elements with saturation (mxfp8.md), per 32-block of
    the last dim of a 2-D float array. Returns (codes uint8 [M, K], scale uint8 [M, kb])."""
    x = np.asarray(x, np.float64)
    M, K = x.shape
    kb = -(-K // 32)
    xp = np.zeros((M, kb * 32))
    xp[:, :K] = x
    blk = xp.reshape(M, kb, 32)
    with np.errstate(invalid="ignore"):
        amax = np.abs(blk).max(-1)
    fin = np.isfinite(amax)
    _, ex = np.frexp(np.where(fin & (amax > 0), amax, 1.0))
    e = np.clip(ex - 1 - 8, -127, 127)
    e = np.where(amax > 0, e, -127)
    scale = np.where(fin, e + 127, 0xFF).astype(np.uint8)
    v = np.clip(blk * np.exp2(-e.astype(np.float64))[..., None], -448.0, 448.0)
    codes = v.astype(E4M3).view(np.uint8)
    codes = np.where(fin[..., None], codes, 0x7F).astype(np.uint8)
    return codes.reshape(M, kb * 32)[:, :K], scale


def np_mx_dequantize(codes, scale):
    K = codes.shape[-1]
    vals = codes.view(E4M3).astype(np.float64)
    s = np.exp2(scale.astype(np.float64) - 127.0)
    return vals * np.repeat(s, 32, axis=-1)[..., :K]


def ulp(v, dtype):
    mant = {torch.float32: 23, torch.bfloat16: 7, torch.float16: 10}[dtype]
    emin = {torch.float32: -126, torch.bfloat16: -126, torch.float16: -14}[dtype]
    _, ex = np.frexp(np.where(v == 0, 1.0, np.abs(v)))
    return np.exp2(np.maximum(ex - 1, emin) - mant)


def assert_linear_bound(out, x32, qw, sw, bias=None):
    """mxfp8.md: |out - exact| <= 2^-16 * sum|scaled terms| + 1 ulp of out's dtype at exact."""
    qx, sx = np_mx_quantize(x32)
    xa, wa = np_mx_dequantize(qx, sx), np_mx_dequantize(qw, sw)
    exact = xa @ wa.T
    mag = np.abs(xa) @ np.abs(wa).T
    if bias is not None:
        exact = exact + bias
        mag = mag + np.abs(bias)
    got = out.double().numpy() if isinstance(out, torch.Tensor) else out.astype(np.float64)
    dt = out.dtype if isinstance(out, torch.Tensor) else torch.float32
    lim = 2.0 ** -16 * mag + ulp(exact, dt)
    bad = ~(np.abs(got - exact) <= lim)
    assert not bad.any(), f"{int(bad.sum())} outputs outside mxfp8.md's bound"


def rows(m, h, dtype, seed, mean=0.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(m, h, generator=g) * 2.0 + mean).to(dtype)


SHAPES = [(1, 1), (3, 7), (5, 33), (4, 1000), (2, 4304), (17, 5120)]


# ---------------------------------------------------------------- the norms, on torch

@pytest.mark.parametrize("dtype", TORCH_DTYPES)
@pytest.mark.parametrize("m,h", SHAPES)
def test_gemma_norm_against_double_and_sglang(dtype, m, h):
    x = rows(m, h, dtype, m * 31 + h, mean=0.5)
    w = (torch.randn(h, generator=torch.Generator().manual_seed(h)) * 0.1).to(dtype)
    out = qkern.gemma_rms_norm(x, w, 1e-6)
    assert isinstance(out, torch.Tensor) and out.dtype == dtype and out.shape == x.shape
    ref, r = norm_ref64(x, w, 1e-6, gemma=True)
    assert_norm_bound(out, ref)
    if dtype != torch.float32:  # both within ~1 ulp of exact
        assert (ordered(out) - ordered(sglang_gemma_native(x, w, 1e-6))).abs().max() <= 2
    y, rstd = qkern.npu_gemma_rms_norm(x, w, 1e-6)
    assert torch.equal(y, out)
    assert rstd.dtype == torch.float32 and rstd.shape == (m, 1)
    assert torch.allclose(rstd.double(), r, rtol=2.0 ** -20, atol=0)


@pytest.mark.parametrize("dtype", TORCH_DTYPES)
@pytest.mark.parametrize("m,h", SHAPES[:5])
def test_plain_and_gated_norms(dtype, m, h):
    x = rows(m, h, dtype, 7 + h)
    w = (1.0 + torch.randn(h, generator=torch.Generator().manual_seed(1)) * 0.1).to(dtype)
    gate = rows(m, h, torch.float32, 99)
    assert_norm_bound(qkern.rms_norm(x, w, 1e-5), norm_ref64(x, w, 1e-5, gemma=False)[0])
    assert_norm_bound(qkern.rms_norm_gated(x, w, gate, 1e-6),
                      norm_ref64(x, w, 1e-6, gemma=False, gate=gate)[0])


@pytest.mark.parametrize("gemma", [True, False])
@pytest.mark.parametrize("dtype", TORCH_DTYPES)
def test_residual_forms_out_of_place_and_in_place(gemma, dtype):
    x, res = rows(9, 1000, dtype, 1), rows(9, 1000, dtype, 2)
    w = (torch.randn(1000, generator=torch.Generator().manual_seed(3)) * 0.1).to(dtype)
    s = (x.double() + res.double()).to(dtype)  # rnd(x + residual), one rounding
    add = qkern.add_gemma_rms_norm if gemma else qkern.add_rms_norm
    plain = qkern.gemma_rms_norm if gemma else qkern.rms_norm
    out, rsum = add(x, res, w, 1e-6)
    assert torch.equal(rsum, s)
    assert torch.equal(out, plain(s, w, 1e-6))  # fused == unfused, bit for bit
    assert_norm_bound(out, norm_ref64(s, w, 1e-6, gemma)[0])
    # vLLM / FlashInfer convention: in place, returns None, same bits
    xi, ri = x.clone(), res.clone()
    px, pr = xi.data_ptr(), ri.data_ptr()
    fused = qkern.gemma_fused_add_rms_norm if gemma else qkern.fused_add_rms_norm
    assert fused(xi, ri, w, 1e-6) is None
    assert xi.data_ptr() == px and ri.data_ptr() == pr
    assert torch.equal(xi, out) and torch.equal(ri, s)


def test_weight_dtype_independent_of_x():
    x = rows(4, 256, torch.bfloat16, 5)
    w = torch.randn(256, generator=torch.Generator().manual_seed(6)) * 0.1
    assert_norm_bound(qkern.gemma_rms_norm(x, w), norm_ref64(x, w, 1e-6, True)[0])


def test_edge_rows():
    x = torch.zeros(2, 64, dtype=torch.bfloat16)
    x[1, 3] = float("nan")
    out, rstd = qkern.npu_gemma_rms_norm(x, torch.zeros(64, dtype=torch.bfloat16), 1e-6)
    assert torch.equal(out[0], torch.zeros(64, dtype=torch.bfloat16))
    assert rstd[0, 0].item() == pytest.approx(1e3, rel=1e-6)
    assert torch.isnan(out[1]).all()
    empty = torch.zeros(0, 64, dtype=torch.bfloat16)
    assert qkern.gemma_rms_norm(empty, torch.zeros(64)).shape == (0, 64)


# ---------------------------------------------------------------- zero copy, strides, aliasing

def test_outputs_are_the_given_tensors_and_inputs_are_not_copied():
    x = rows(8, 512, torch.bfloat16, 11)
    w = torch.zeros(512, dtype=torch.bfloat16)
    out = torch.empty_like(x)
    ptr = out.data_ptr()
    got = qkern.gemma_rms_norm(x, w, 1e-6, out)
    assert got is out and out.data_ptr() == ptr
    # in place: out = x
    y = x.clone()
    assert qkern.gemma_rms_norm(y, w, out=y) is y
    assert torch.equal(y, out)
    # a new output shares no memory with the inputs, and torch sees it without a copy
    z = qkern.gemma_rms_norm(x, w)
    assert z.data_ptr() not in (x.data_ptr(), w.data_ptr())
    assert torch.from_dlpack(z).data_ptr() == z.data_ptr()
    q, s = torch.empty(8, 512, dtype=torch.float8_e4m3fn), torch.empty(8, 16, dtype=torch.uint8)
    qq, ss = qkern.mx_quantize(x, q=q, scale=s)
    assert qq is q and ss is s and q.data_ptr() == qq.data_ptr()


def test_strided_rows_are_honoured():
    base = rows(12, 700, torch.float16, 12)
    w = (torch.randn(640, generator=torch.Generator().manual_seed(13)) * 0.1).half()
    view = base[::3, 30:670]  # row stride 2100, offset into the buffer
    assert not view.is_contiguous()
    assert torch.equal(qkern.gemma_rms_norm(view, w), qkern.gemma_rms_norm(view.contiguous(), w))
    out_base = torch.full((4, 1000), 7.0, dtype=torch.float16)
    out_view = out_base[:, 100:740]
    qkern.gemma_rms_norm(view, w, out=out_view)
    assert torch.equal(out_view, qkern.gemma_rms_norm(view.contiguous(), w))
    assert (out_base[:, :100] == 7.0).all() and (out_base[:, 740:] == 7.0).all()
    x3 = rows(6, 64, torch.bfloat16, 14).reshape(2, 3, 64).transpose(0, 1)  # leading dims permuted
    assert torch.equal(qkern.rms_norm(x3, torch.ones(64)), qkern.rms_norm(x3.contiguous(), torch.ones(64)))


def test_layout_errors_are_the_c_apis():
    x = rows(4, 64, torch.bfloat16, 15)
    w = torch.zeros(64, dtype=torch.bfloat16)
    with pytest.raises(qkern.LayoutError, match="last dim has stride 2"):
        qkern.gemma_rms_norm(torch.zeros(4, 128, dtype=torch.bfloat16)[:, ::2], w)
    buf = torch.zeros(5 * 64, dtype=torch.bfloat16)
    xin = buf[:256].view(4, 64)
    xin.copy_(x)
    with pytest.raises(qkern.LayoutError, match="overlaps"):
        qkern.gemma_rms_norm(xin, w, out=buf[32:288].view(4, 64))  # partial overlap
    assert torch.equal(xin, x)


def test_numpy_in_numpy_out_and_bf16_views():
    g = np.random.default_rng(0)
    x = g.standard_normal((5, 96)).astype(np.float32)
    w = (g.standard_normal(96) * 0.1).astype(np.float32)
    out = qkern.gemma_rms_norm(x, w)
    assert type(out) is np.ndarray and out.dtype == np.float32
    assert_norm_bound(torch.from_numpy(out), norm_ref64(torch.from_numpy(x), torch.from_numpy(w), 1e-6, True)[0])
    xb, wb = x.astype(BF16), w.astype(BF16)
    ob = qkern.gemma_rms_norm(xb, wb)
    assert ob.dtype == BF16 and ob.shape == x.shape
    tb = qkern.gemma_rms_norm(torch.from_numpy(xb.view(np.int16)).view(torch.bfloat16),
                              torch.from_numpy(w.astype(BF16).view(np.int16)).view(torch.bfloat16))
    assert np.array_equal(ob.view(np.int16), tb.view(torch.int16).numpy())
    given = np.empty_like(xb)
    assert qkern.gemma_rms_norm(xb, wb, out=given) is given
    assert np.array_equal(given.view(np.int16), ob.view(np.int16))
    strided = xb[::2]
    assert np.array_equal(qkern.gemma_rms_norm(strided, wb).view(np.int16),
                          ob[::2].view(np.int16))


class DLPackOnly:
    """A dependency-free DLPack producer (what jax or another framework looks like to us)."""

    def __init__(self, arr):
        self._arr = arr

    def __dlpack__(self, stream=None):
        return self._arr.__dlpack__()

    def __dlpack_device__(self):
        return self._arr.__dlpack_device__()


def test_generic_dlpack_producer():
    g = np.random.default_rng(1)
    x = g.standard_normal((3, 40)).astype(np.float32)
    w = np.ones(40, np.float32)
    got = qkern.rms_norm(DLPackOnly(x), DLPackOnly(w))
    assert isinstance(got, np.ndarray)
    assert np.array_equal(got, qkern.rms_norm(x, w))
    dst = np.zeros_like(x)
    qkern.rms_norm(x, w, out=DLPackOnly(dst))  # written through the producer, no copy
    assert np.array_equal(dst, got)
    assert np.array_equal(qkern.rms_norm(memoryview(x), memoryview(w)), got)


# ---------------------------------------------------------------- bad input: clear error, nothing written

def test_bad_inputs_raise_and_write_nothing():
    x = rows(4, 64, torch.bfloat16, 16)
    w = torch.zeros(64, dtype=torch.bfloat16)
    out = torch.full_like(x, 3.0)
    cases = [
        (qkern.ShapeError, "weight has shape \\[63\\]", (x, torch.zeros(63)), {}),
        (qkern.ArgumentError, "eps", (x, w, -1.0), {}),
        (qkern.ArgumentError, "eps", (x, w, float("nan")), {}),
        (qkern.DtypeError, "out has dtype F16", (x, w), {"out": torch.empty(4, 64, dtype=torch.float16)}),
        (qkern.DtypeError, "float64", (x.double(), w), {}),
        (qkern.ShapeError, "5 dims", (torch.zeros(1, 1, 1, 1, 64), w), {}),
        (qkern.ArgumentError, "backend", (x, w), {"backend": "gpu"}),
    ]
    for exc, msg, args, kw in cases:
        with pytest.raises(exc, match=msg):
            qkern.gemma_rms_norm(*args, **({"out": out} | kw))
        assert (out == 3.0).all(), f"{exc.__name__}: out was written"
    with pytest.raises(TypeError, match="must be a tensor"):
        qkern.gemma_rms_norm([1.0, 2.0], w)
    with pytest.raises(TypeError):
        qkern.gemma_rms_norm(x)
    with pytest.raises(TypeError, match="unexpected keyword"):
        qkern.gemma_rms_norm(x, w, epsilon=1e-6)
    ro = np.zeros((4, 64), np.float32)
    ro.flags.writeable = False
    with pytest.raises(qkern.ArgumentError, match="read-only"):
        qkern.rms_norm(np.ones((4, 64), np.float32), np.ones(64, np.float32), out=ro)
    assert issubclass(qkern.ShapeError, ValueError) and issubclass(qkern.FormatError, ValueError)
    assert qkern.ShapeError.status == "QK_ERR_SHAPE"


def test_mx_and_linear_errors():
    with pytest.raises(qkern.FormatError, match="0xFF"):
        qkern.MXFP8Weight(torch.zeros(4, 32, dtype=torch.float8_e4m3fn),
                          torch.full((4, 1), 0xFF, dtype=torch.uint8))
    with pytest.raises(qkern.ShapeError):
        qkern.MXFP8Weight(torch.zeros(4, 40, dtype=torch.float8_e4m3fn),
                          torch.full((4, 1), 127, dtype=torch.uint8))
    wt = qkern.MXFP8Weight(torch.zeros(4, 64, dtype=torch.float8_e4m3fn),
                           torch.full((4, 2), 127, dtype=torch.uint8))
    with pytest.raises(qkern.ShapeError):
        qkern.mxfp8_linear(torch.zeros(2, 63), wt)
    with pytest.raises(TypeError, match="MXFP8Weight"):
        qkern.mxfp8_linear(torch.zeros(2, 64), torch.zeros(4, 64))
    with pytest.raises(qkern.ArgumentError, match="scale_rule"):
        qkern.mx_quantize(torch.zeros(2, 64), scale_rule="nearest")


# ---------------------------------------------------------------- MX codecs against NumPy + ml_dtypes

@pytest.mark.parametrize("k", [1, 31, 32, 33, 80, 4304])
def test_mx_quantize_matches_numpy(k):
    g = np.random.default_rng(k)
    x = (g.standard_normal((6, k)) * np.exp2(g.integers(-20, 20, (6, 1)))).astype(np.float32)
    x[0, : min(k, 5)] = [0.0, -0.0, 1e-40, -3e-39, 447.9][: min(k, 5)]
    codes, scale = np_mx_quantize(x)
    q, s = qkern.mx_quantize(x)
    assert q.dtype == E4M3 and s.dtype == ml_dtypes.float8_e8m0fnu and s.shape == (6, -(-k // 32))
    assert np.array_equal(q.view(np.uint8), codes) and np.array_equal(s.view(np.uint8), scale)
    qt, st = qkern.mx_quantize(torch.from_numpy(x).to(torch.bfloat16))
    ct, sct = np_mx_quantize(torch.from_numpy(x).to(torch.bfloat16).float().numpy())
    assert np.array_equal(qt.view(torch.uint8).numpy(), ct)
    assert np.array_equal(st.view(torch.uint8).numpy(), sct)
    d = qkern.mx_dequantize(q, s)
    assert d.dtype == np.float32
    assert np.array_equal(d, np_mx_dequantize(codes, scale).astype(np.float32))
    assert np.array_equal(qkern.mx_dequantize(codes, scale, dtype="float32"), d)  # uint8 bytes
    db = qkern.mx_dequantize(qt, st, dtype=torch.bfloat16)
    assert db.dtype == torch.bfloat16


def test_mx_nan_block_and_options():
    x = np.ones((1, 64), np.float32)
    x[0, 40] = np.inf
    q, s = qkern.mx_quantize(x)
    assert s.view(np.uint8).tolist() == [[127 - 8, 0xFF]]
    assert (q.view(np.uint8)[0, 32:] == 0x7F).all()
    # E5M2: amax 3 -> e = floor(log2 3) - 15 = -14, elements 3 * 2^14
    q5, s5 = qkern.mx_quantize(np.full((1, 32), 3.0, np.float32), elem="e5m2")
    assert q5.dtype == ml_dtypes.float8_e5m2 and s5.view(np.uint8).tolist() == [[127 - 14]]
    want = np.full(32, 3.0 * 2 ** 14, np.float32).astype(ml_dtypes.float8_e5m2).view(np.uint8)
    assert np.array_equal(q5.view(np.uint8)[0], want)
    # RCEIL: the smallest scale with 2^e >= amax / 448; ties away
    _, sr = qkern.mx_quantize(np.full((1, 32), 448.0 * 3, np.float32), scale_rule="rceil")
    assert sr.view(np.uint8).tolist() == [[127 + 2]]
    qa, _ = qkern.mx_quantize(np.array([[1.0625] + [1.0] * 31], np.float32), round="away")
    qe, _ = qkern.mx_quantize(np.array([[1.0625] + [1.0] * 31], np.float32), round="even")
    assert qa.view(np.uint8)[0, 0] == qe.view(np.uint8)[0, 0] + 1  # a tie at 1 + 2^-4


# ---------------------------------------------------------------- the MXFP8 linear

def make_weight(n, k, seed):
    g = np.random.default_rng(seed)
    wf = (g.standard_normal((n, k)) * 0.05).astype(np.float32)
    return np_mx_quantize(wf)


@pytest.mark.parametrize("m", [1, 2, 5, 16, 33])
@pytest.mark.parametrize("n,k", [(64, 4304), (96, 80), (40, 1152)])
def test_mxfp8_linear_against_exact(m, n, k):
    qw, sw = make_weight(n, k, n + k)
    weight = qkern.MXFP8Weight(qw.view(E4M3), sw)
    assert (weight.n, weight.k) == (n, k)
    g = np.random.default_rng(m)
    x = g.standard_normal((m, k)).astype(np.float32)
    bias = g.standard_normal(n).astype(np.float32)
    out = qkern.mxfp8_linear(x, weight, bias)
    assert out.shape == (m, n) and out.dtype == np.float32
    assert_linear_bound(out, x, qw, sw, bias)
    xt = torch.from_numpy(x).to(torch.bfloat16)
    ot = qkern.mxfp8_linear(xt, weight)
    assert ot.dtype == torch.bfloat16 and ot.shape == (m, n)
    assert_linear_bound(ot, xt.float().numpy(), qw, sw)
    o32 = torch.empty(m, n)
    assert qkern.mxfp8_linear(xt, weight, out=o32) is o32
    assert_linear_bound(o32, xt.float().numpy(), qw, sw)
    # rows are independent of the batch, and the reference backend gives the same bits
    assert torch.equal(qkern.mxfp8_linear(xt[:1], weight), ot[:1])
    wref = qkern.MXFP8Weight(torch.from_numpy(qw).view(torch.float8_e4m3fn),
                             torch.from_numpy(sw), backends="all")
    assert torch.equal(qkern.mxfp8_linear(xt, wref, backend="reference"), ot)


# ---------------------------------------------------------------- registry

def test_backends_and_force_backend():
    b = qkern.backends()
    assert set(b) >= {"gemma_rms_norm", "add_gemma_rms_norm", "mxfp8_linear", "mxfp8_quantize"}
    assert b["gemma_rms_norm"]["selected"] == "target"
    assert b["gemma_rms_norm"]["runs"]["reference"] == "ref"
    x = rows(3, 300, torch.bfloat16, 21)
    w = torch.zeros(300, dtype=torch.bfloat16)
    target_out = qkern.gemma_rms_norm(x, w)
    qkern.force_backend("reference")
    try:
        assert qkern.forced_backend() == "reference"
        assert qkern.backends()["gemma_rms_norm"]["selected"] == "reference"
        assert_norm_bound(qkern.gemma_rms_norm(x, w), norm_ref64(x, w, 1e-6, True)[0])
    finally:
        qkern.force_backend(None)
    assert qkern.forced_backend() is None
    assert torch.equal(qkern.gemma_rms_norm(x, w, backend="target"), target_out)
    assert qkern.provider("gemma_rms_norm")
    with pytest.raises(qkern.ArgumentError, match="unknown op"):
        qkern.provider("layer_norm")


def test_info_prints_what_qk_info_prints():
    py = subprocess.run([sys.executable, "-m", "qkern", "info"], capture_output=True, text=True,
                        check=True).stdout
    assert "target " in py and "gemma_rms_norm" in py and qkern.target() in py
    qk = os.path.join(BUILD, "qk")
    if os.path.exists(qk):
        assert py == subprocess.run([qk, "info"], capture_output=True, text=True, check=True).stdout


def test_threads_release_the_gil_and_keep_errors_apart():
    x = rows(64, 2048, torch.bfloat16, 31)
    w = torch.zeros(2048, dtype=torch.bfloat16)
    want = qkern.gemma_rms_norm(x, w)
    errors, results = [], []

    def work(i):
        try:
            for _ in range(20):
                if i % 2:
                    results.append(torch.equal(qkern.gemma_rms_norm(x, w), want))
                else:
                    try:
                        qkern.gemma_rms_norm(x, torch.zeros(7))
                    except qkern.ShapeError as e:
                        results.append("[7]" in str(e))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors and len(results) == 80 and all(results)


# ---------------------------------------------------------------- torch.nn layers

def test_nn_gemma_norm_forward_matches_sglang():
    from qkern.nn import GemmaRMSNorm, RMSNorm, RMSNormGated
    layer = GemmaRMSNorm(256, eps=1e-6)
    assert (layer.weight == 0).all()
    with torch.no_grad():
        layer.weight.copy_(torch.randn(256) * 0.1)
    x, res = rows(5, 256, torch.bfloat16, 41), rows(5, 256, torch.bfloat16, 42)
    out = layer(x)
    assert (ordered(out) - ordered(sglang_gemma_native(x, layer.weight, 1e-6))).abs().max() <= 2
    want_out, want_res = qkern.add_gemma_rms_norm(x, res, layer.weight.detach())
    xi, ri = x.clone(), res.clone()
    got_out, got_res = layer(xi, ri)
    assert got_out is xi and got_res is ri  # in place, as SGLang's fused path
    assert torch.equal(got_out, want_out) and torch.equal(got_res, want_res)
    plain = RMSNorm(256)
    assert torch.equal(plain(x), qkern.rms_norm(x, torch.ones(256, dtype=torch.bfloat16)))
    gated = RMSNormGated(256)
    z = rows(5, 256, torch.bfloat16, 43)
    assert torch.equal(gated(x, z), qkern.rms_norm_gated(x, torch.ones(256, dtype=torch.bfloat16), z))


def test_nn_mxfp8_linear_life_cycle():
    from qkern.nn import MXFP8Linear
    qw, sw = make_weight(48, 4304, 51)
    layer = MXFP8Linear(4304, 48, bias=True)
    with pytest.raises(qkern.FormatError, match="0xFF"):  # scales never loaded
        layer.process_weights_after_loading()
    with torch.no_grad():
        layer.weight.copy_(torch.from_numpy(qw).view(torch.float8_e4m3fn))
        layer.weight_scale.copy_(torch.from_numpy(sw))
        layer.bias.copy_(torch.arange(48, dtype=torch.float32))
    layer.process_weights_after_loading()
    x = rows(7, 4304, torch.bfloat16, 52)
    out = layer(x)
    assert out.shape == (7, 48) and out.dtype == torch.bfloat16
    assert_linear_bound(out, x.float().numpy(), qw, sw, np.arange(48, dtype=np.float64))


# ---------------------------------------------------------------- a ModelSlim folder from qk quantize

@pytest.fixture(scope="module")
def modelslim_folder(tmp_path_factory):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    qk = os.path.join(BUILD, "qk")
    if not os.path.exists(qk):
        pytest.skip(f"qk not built at {qk}")
    src = tmp_path_factory.mktemp("bf16")
    g = np.random.default_rng(61)
    tensors = {
        "model.layers.0.mlp.down_proj.weight": (g.standard_normal((64, 96)) * 0.05),
        "model.visual.blocks.0.mlp.linear_fc2.weight": (g.standard_normal((40, 4304)) * 0.05),
        "model.visual.blocks.0.mlp.linear_fc2.bias": g.standard_normal(40),
        "model.layers.0.post_attention_layernorm.weight": g.standard_normal(96) * 0.1,
    }
    tensors = {k: v.astype(np.float32).astype(BF16) if k.endswith("weight") else v.astype(np.float32)
               for k, v in tensors.items()}
    safetensors_numpy.save_file(tensors, str(src / "model.safetensors"))
    out = tmp_path_factory.mktemp("w8a8") / "ms"
    subprocess.run([qk, "quantize", str(src), str(out)], check=True, capture_output=True)
    return out, tensors


def test_load_modelslim_and_run(modelslim_folder):
    from safetensors.torch import load_file
    folder, tensors = modelslim_folder
    layers = qkern.load_modelslim(str(folder))
    assert set(layers) == {"model.layers.0.mlp.down_proj", "model.visual.blocks.0.mlp.linear_fc2"}
    fc2 = layers["model.visual.blocks.0.mlp.linear_fc2"]
    assert (fc2.in_features, fc2.out_features, fc2.has_bias) == (4304, 40, True)
    files = [f for f in os.listdir(folder) if f.endswith(".safetensors")]
    saved = {}
    for f in files:
        saved.update({k: v.view(torch.uint8).numpy() if v.element_size() == 1 else v.float().numpy()
                      for k, v in load_file(os.path.join(folder, f)).items()})
    for prefix, layer in layers.items():
        qw, sw = saved[prefix + ".weight"], saved[prefix + ".weight_scale"]
        assert sw.shape == (layer.out_features, -(-layer.in_features // 32))  # 135 for K = 4304
        bias = saved.get(prefix + ".bias")
        x = rows(6, layer.in_features, torch.bfloat16, 62)
        out = layer(x)
        assert isinstance(out, torch.Tensor) and out.shape == (6, layer.out_features)
        assert_linear_bound(out, x.float().numpy(), qw, sw,
                            None if bias is None else bias.astype(np.float64))
        # the same weights through MXFP8Weight give the same bits
        w = qkern.MXFP8Weight(qw, sw)
        bt = None if bias is None else torch.from_numpy(bias.astype(np.float32))
        assert torch.equal(qkern.mxfp8_linear(x, w, bt), out)
    from qkern.nn import load_modelslim
    mods = load_modelslim(str(folder))
    x = rows(3, 4304, torch.bfloat16, 63)
    assert torch.equal(mods["model.visual.blocks.0.mlp.linear_fc2"](x), fc2(x))


def test_load_modelslim_errors(tmp_path, modelslim_folder):
    folder, _ = modelslim_folder
    with pytest.raises(qkern.Error) as e:
        qkern.load_modelslim(str(tmp_path))
    assert "quant_model_description" in str(e.value)
    broken = tmp_path / "broken"
    broken.mkdir()
    for f in os.listdir(folder):
        data = (folder / f).read_bytes()
        if f.endswith(".safetensors"):
            data = data[:-10]  # truncated data buffer
        (broken / f).write_bytes(data)
    with pytest.raises(qkern.FormatError):
        qkern.load_modelslim(str(broken))


# ---------------------------------------------------------------- the MODELSLIM scale rule

def np_modelslim_scale(amax, xdt):
    """mxfp8.md's MODELSLIM: floor(rnd_xdt(fl32(log2(amax)))) - 8 (E4M3), clamped; numpy's
    own log2 and casts, independent of the library."""
    l = np.log2(amax.astype(np.float64)).astype(np.float32)
    lr = l.astype(xdt).astype(np.float64)
    return (np.clip(np.floor(lr) - 8, -127, 127) + 127).astype(np.uint8)


def np_floor_scale(amax):
    _, ex = np.frexp(amax.astype(np.float64))
    return (np.clip(ex - 1 - 8, -127, 127) + 127).astype(np.uint8)


@pytest.mark.parametrize("xdt,bits", [(BF16, np.arange(1, 0x7F80, dtype=np.uint16)),
                                      (np.float16, np.arange(1, 0x7C00, dtype=np.uint16))])
def test_modelslim_scale_every_positive_amax(xdt, bits):
    amax = bits.view(xdt)
    n = len(amax)
    g = np.random.default_rng(71)
    x = np.zeros((n, 64), np.float32)
    x[:, 0] = amax.astype(np.float32)
    x[:, 1:32] = amax.astype(np.float32)[:, None] * g.uniform(-1, 1, (n, 31))  # |.| <= amax
    x[:, 32:] = -x[:, :32]  # the second block: the same amax, negative
    x = x.astype(xdt)
    want = np_modelslim_scale(amax, xdt)
    for src in (x, torch.from_numpy(x.view(np.int16)).view(torch.bfloat16) if xdt is BF16
                else torch.from_numpy(x)):
        q, s = qkern.mx_quantize(src, scale_rule="modelslim")
        s = s.view(torch.uint8).numpy() if isinstance(s, torch.Tensor) else s.view(np.uint8)
        assert np.array_equal(s[:, 0], want) and np.array_equal(s[:, 1], want), \
            np.argwhere(s[:, 0] != want)[:5]
    bumped = int((want != np_floor_scale(amax)).sum())
    if xdt is BF16:
        assert bumped == 6524  # checkpoint.md / mxfp8.md: FLOOR + 1 for 6,524 of 32,639 values
    assert bumped > 0 and np.all((want.astype(int) - np_floor_scale(amax)) >= 0)
    # the elements are those of the bumped scale: RNE of x / 2^(b-127), saturating at 448
    q, s = qkern.mx_quantize(x, scale_rule="modelslim")
    v = x.astype(np.float64) * np.exp2(127.0 - np.repeat(s.view(np.uint8), 32, axis=1))
    codes = np.clip(v, -448, 448).astype(E4M3).view(np.uint8)
    assert np.array_equal(q.view(np.uint8), codes)


def test_modelslim_f32_is_floor_and_nan_blocks():
    g = np.random.default_rng(72)
    x = (g.standard_normal((4, 96)) * 3).astype(np.float32)
    q, s = qkern.mx_quantize(x, scale_rule="modelslim")
    qf, sf = qkern.mx_quantize(x)
    assert np.array_equal(q.view(np.uint8), qf.view(np.uint8)) and np.array_equal(s.view(np.uint8), sf.view(np.uint8))
    x[1, 40] = np.nan
    x[2, 70] = -np.inf
    for arr in (x, x.astype(BF16), x.astype(np.float16)):
        q, s = qkern.mx_quantize(arr, scale_rule="modelslim")
        s, q = s.view(np.uint8), q.view(np.uint8)
        assert s[1, 1] == 0x00 and (q[1, 32:64] == 0xFF).all()
        assert s[2, 2] == 0x00 and (q[2, 64:96] == 0xFF).all()
        assert s[1, 0] != 0 and (q[1, :32] != 0xFF).all()  # other blocks unaffected
