"""mxfp8.md through the public C API (ctypes on libqkern.so), cross-checked against
ml_dtypes (float8_e4m3fn, float8_e5m2, float8_e8m0fnu) for the element and scale formats, and
against a NumPy implementation of the FLOOR / RCEIL scale rules written here.

The library is found through the QK_LIB environment variable, else $QK_BUILD/libqkern.so
(the variable `make test` sets), else ../../build/libqkern.so relative to this file; the
module is skipped only when that file is missing. ml_dtypes' float -> float8 casts round to nearest even; its float8_e4m3fn cast turns
magnitudes past the rounding range into NaN instead of saturating, so element casts are
compared only in range and saturation is tested on its own.
"""
import ctypes
import os

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")

HERE = os.path.dirname(os.path.abspath(__file__))
LIB_PATH = os.environ.get("QK_LIB") or os.path.join(
    os.environ.get("QK_BUILD") or os.path.join(HERE, "..", "..", "build"), "libqkern.so")
if not os.path.exists(LIB_PATH):
    pytest.skip(f"library not found: {LIB_PATH} (build it, or set QK_LIB)", allow_module_level=True)

lib = ctypes.CDLL(LIB_PATH)

# ---- the ABI (api.md) ----
F32, F16, BF16, E4M3, E5M2, E8M0 = 1, 2, 3, 4, 5, 6
FLOOR, RCEIL = 0, 1
EVEN, AWAY = 0, 1


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("ndim", ctypes.c_int32),
                ("shape", ctypes.c_int64 * 4), ("stride", ctypes.c_int64 * 4)]


class Options(ctypes.Structure):
    _fields_ = [("elem", ctypes.c_int), ("scale_rule", ctypes.c_int), ("round", ctypes.c_int)]


for fn in ("qk_mx_quantize", "qk_mx_dequantize"):
    getattr(lib, fn).restype = ctypes.c_int
lib.qk_mx_quantize.argtypes = [ctypes.POINTER(Tensor), ctypes.POINTER(Options),
                               ctypes.POINTER(Tensor), ctypes.POINTER(Tensor)]
lib.qk_mx_dequantize.argtypes = [ctypes.POINTER(Tensor)] * 3
lib.qk_last_error.restype = ctypes.c_char_p

NP_OF = {F32: np.float32, F16: np.float16, BF16: ml_dtypes.bfloat16}
F8_OF = {E4M3: ml_dtypes.float8_e4m3fn, E5M2: ml_dtypes.float8_e5m2}
EMAX = {E4M3: 8, E5M2: 15}
MAXV = {E4M3: 448.0, E5M2: 57344.0}
MAXCODE = {E4M3: 0x7E, E5M2: 0x7B}


def tensor(arr, dtype):
    assert arr.flags["C_CONTIGUOUS"]
    t = Tensor()
    t.data = arr.ctypes.data
    t.dtype = dtype
    t.ndim = arr.ndim
    stride = 1
    for d in range(arr.ndim - 1, -1, -1):
        t.shape[d] = arr.shape[d]
        t.stride[d] = stride
        stride *= arr.shape[d]
    return t


def quantize(x, xdt, elem=E4M3, rule=FLOOR, rnd=EVEN):
    """x: float array [..., K] of dtype NP_OF[xdt] -> (q uint8 [..., K], scale uint8 [..., kb])"""
    x = np.ascontiguousarray(x.astype(NP_OF[xdt]))
    K = x.shape[-1]
    kb = -(-K // 32)
    q = np.full(x.shape, 0xAA, dtype=np.uint8)
    s = np.full(x.shape[:-1] + (kb,), 0xAA, dtype=np.uint8)
    tx, tq, ts = tensor(x, xdt), tensor(q, elem), tensor(s, E8M0)
    opt = Options(elem, rule, rnd)
    st = lib.qk_mx_quantize(ctypes.byref(tx), ctypes.byref(opt), ctypes.byref(tq), ctypes.byref(ts))
    assert st == 0, lib.qk_last_error().decode()
    return q, s


def dequantize(q, s, elem, odt=F32):
    out = np.zeros(q.shape, dtype=NP_OF[odt])
    tq, ts, to = tensor(q, elem), tensor(s, E8M0), tensor(out, odt)
    st = lib.qk_mx_dequantize(ctypes.byref(tq), ctypes.byref(ts), ctypes.byref(to))
    assert st == 0, lib.qk_last_error().decode()
    return out


# ---- the reference written here ----

def np_scale(amax, rule, elem):
    """Scale bytes of blocks with maxima `amax` (float32 array, >= 0 or non-finite)."""
    amax = np.asarray(amax, dtype=np.float32)
    out = np.zeros(amax.shape, dtype=np.int64)
    finite = np.isfinite(amax)
    pos = finite & (amax > 0)
    a = amax[pos].astype(np.float64)
    if rule == FLOOR:
        _, e = np.frexp(a)                      # a = m * 2^e, m in [0.5, 1): floor(log2 a) = e - 1
        b = np.clip(e - 1 - EMAX[elem], -127, 127) + 127
    else:
        inv = np.float32(1.0) / np.float32(MAXV[elem])
        d = (amax[pos] * inv).astype(np.float32)  # one float32 rounding
        m, e = np.frexp(d.astype(np.float64))
        ceil_log2 = np.where(m == 0.5, e - 1, e)
        b = np.where(d == 0, 0, np.clip(ceil_log2 + 127, 0, 254))
    out[pos] = b
    out[~finite] = 0xFF
    return out.astype(np.uint8)


def block_view(x, K):
    """[rows, K] -> [rows, kb, 32] float64 zero-padded"""
    rows = x.shape[0]
    kb = -(-K // 32)
    pad = np.zeros((rows, kb * 32), dtype=np.float64)
    pad[:, :K] = x.astype(np.float64)
    return pad.reshape(rows, kb, 32)


def f8_codes(v, elem):
    """float64 -> float8 codes via ml_dtypes (round to nearest even), through float32 (exact
    for the magnitudes that can round to non-zero here)"""
    return np.asarray(v, dtype=np.float64).astype(np.float32).astype(F8_OF[elem]).view(np.uint8)


def f8_values(elem):
    """value of every code 0..255 by ml_dtypes"""
    return np.arange(256, dtype=np.uint8).view(F8_OF[elem]).astype(np.float64)


def away_codes(v, elem):
    """Nearest code with ties away from zero, saturating: search over ml_dtypes' code values."""
    vals = f8_values(elem)
    pos = vals[:MAXCODE[elem] + 1]            # ascending finite magnitudes
    a = np.abs(v)
    i = np.clip(np.searchsorted(pos, a, side="right") - 1, 0, MAXCODE[elem])
    hi = np.minimum(i + 1, MAXCODE[elem])
    mid = (pos[i] + pos[hi]) / 2
    c = np.where((a >= mid) & (hi != i), hi, i)
    c = np.where(a >= pos[MAXCODE[elem]], MAXCODE[elem], c)
    return (c | np.where(np.signbit(v), 0x80, 0)).astype(np.uint8)


rng = np.random.default_rng(20240607)


def random_blocks(nblocks, elem, xdt, scale_exp=0):
    """Blocks whose FLOOR scale is 2^scale_exp (element 0 is 2^(emax+scale_exp)); the others
    spread log-uniformly over the element format's whole range, signs random, plus exact
    codes, midpoints between neighbours, and one input ulp either side of the midpoints."""
    vals = f8_values(elem)[:MAXCODE[elem] + 1]
    x = np.empty((nblocks, 32), dtype=np.float64)
    lo = np.log2(vals[1]) - 2
    x[:] = 2.0 ** rng.uniform(lo, np.log2(MAXV[elem]), size=x.shape)
    kinds = rng.integers(0, 4, size=x.shape)
    idx = rng.integers(0, MAXCODE[elem], size=x.shape)
    mids = (vals[idx] + vals[idx + 1]) / 2
    x = np.where(kinds == 1, vals[idx], x)
    x = np.where(kinds >= 2, mids, x)
    x *= np.where(rng.integers(0, 2, size=x.shape) == 1, -1.0, 1.0)
    x[:, 0] = 2.0 ** EMAX[elem]
    x *= 2.0 ** scale_exp
    xs = x.astype(NP_OF[xdt])
    # one input ulp above or below the midpoints (in magnitude: the bits +-1)
    ut = np.uint32 if xdt == F32 else np.uint16
    step = np.where(rng.integers(0, 2, size=x.shape) == 1, 1, -1).astype(np.int64)
    moved = (xs.view(ut).astype(np.int64) + step).astype(ut).view(NP_OF[xdt])
    xs = np.where(kinds == 3, moved, xs)
    xs[:, 0] = np.asarray(2.0 ** (EMAX[elem] + scale_exp)).astype(NP_OF[xdt])
    return xs


# ---- element casts ----

@pytest.mark.parametrize("elem", [E4M3, E5M2])
@pytest.mark.parametrize("xdt", [F32, BF16, F16])
def test_element_cast_matches_ml_dtypes_in_range(elem, xdt):
    scale_exp = 0 if xdt == F16 else 5
    x = random_blocks(400, elem, xdt, scale_exp)
    q, s = quantize(x, xdt, elem, FLOOR, EVEN)
    assert (s == 127 + scale_exp).all()
    v = x.astype(np.float64) / 2.0 ** scale_exp
    inrange = np.abs(v) <= MAXV[elem]
    want = f8_codes(v, elem)
    bad = inrange & (q != want)
    assert not bad.any(), (f"{bad.sum()} elements differ, e.g. x={x[bad][:4]} "
                           f"got {q[bad][:4]} want {want[bad][:4]}")
    # signed zero: negative values that round to zero give 0x80
    neg0 = inrange & (v < 0) & (np.abs(v) < f8_values(elem)[1] / 2)
    assert (q[neg0] == 0x80).all()


@pytest.mark.parametrize("elem", [E4M3, E5M2])
def test_every_code_roundtrips_like_ml_dtypes(elem):
    vals = f8_values(elem)
    codes = np.arange(256)
    finite = np.isfinite(vals) & (np.abs(vals) <= MAXV[elem])
    # one block per code, scale pinned to 2^0 by a block maximum of 2^emax
    x = np.zeros((256, 32), dtype=np.float32)
    x[:, 0] = 2.0 ** EMAX[elem]
    x[:, 1] = np.where(finite, vals, 0).astype(np.float32)
    for rnd in (EVEN, AWAY):
        q, s = quantize(x, F32, elem, FLOOR, rnd)
        assert (q[finite, 1] == codes[finite]).all()
        assert (q[finite, 1] == f8_codes(vals[finite], elem)).all()


@pytest.mark.parametrize("elem", [E4M3, E5M2])
@pytest.mark.parametrize("xdt", [F32, BF16, F16])
def test_round_away_against_search(elem, xdt):
    scale_exp = 0 if xdt == F16 else 3
    x = random_blocks(400, elem, xdt, scale_exp)
    q, s = quantize(x, xdt, elem, FLOOR, AWAY)
    assert (s == 127 + scale_exp).all()
    v = x.astype(np.float64) / 2.0 ** scale_exp
    want = away_codes(v, elem)
    assert (q == want).all(), f"{(q != want).sum()} differ"


@pytest.mark.parametrize("elem", [E4M3, E5M2])
def test_saturation_not_nan(elem):
    # FLOOR puts block maxima in [2^emax, 2^(emax+1)): those above max saturate to ±max
    top = 2.0 ** (EMAX[elem] + 1)
    mags = np.linspace(MAXV[elem], top, 64, endpoint=False)
    x = np.concatenate([mags, -mags]).reshape(4, 32).astype(np.float32)
    x[:, 0] = MAXV[elem]
    q, s = quantize(x, F32, elem, FLOOR, EVEN)
    assert (s == 127).all()
    assert ((q & 0x7F) == MAXCODE[elem]).all()
    assert ((q >> 7) == (x < 0)).all()
    # ml_dtypes, by contrast, gives NaN for E4M3 beyond the rounding range
    if elem == E4M3:
        assert np.isnan(np.float32(480.0).astype(ml_dtypes.float8_e4m3fn).astype(np.float32))


# ---- the scale rules ----

def boundary_maxima():
    e = np.arange(-149, 128)
    base = [np.ldexp(1.0, e), np.ldexp(448.0, e - 8), np.ldexp(512.0, e - 8), np.ldexp(57344.0, e - 15)]
    a = np.concatenate(base)
    a = a[(a > 0) & (a < 3.4e38)].astype(np.float32)
    ups = np.nextafter(a, np.float32(np.inf))
    downs = np.nextafter(a, np.float32(0))
    rand = (2.0 ** rng.uniform(-149, 127.9, size=3000)).astype(np.float32)
    out = np.concatenate([a, ups, downs, rand])
    return out[np.isfinite(out) & (out > 0)]


@pytest.mark.parametrize("elem", [E4M3, E5M2])
@pytest.mark.parametrize("rule", [FLOOR, RCEIL])
def test_scale_rule_against_numpy(elem, rule):
    amax = boundary_maxima()
    n = len(amax)
    x = (rng.uniform(-1, 1, size=(n, 32)) * amax[:, None]).astype(np.float32)
    at = rng.integers(0, 32, size=n)
    x[np.arange(n), at] = amax * np.where(rng.integers(0, 2, size=n) == 1, -1, 1)
    q, s = quantize(x.reshape(1, -1), F32, elem, rule, EVEN)
    want = np_scale(np.abs(x).max(axis=1), rule, elem)
    got = s.reshape(-1)
    bad = got != want
    assert not bad.any(), f"amax {amax[bad][:5]}: got {got[bad][:5]} want {want[bad][:5]}"


def test_rceil_reciprocal_is_fl32_of_1_over_448():
    inv = np.float32(1.0) / np.float32(448.0)
    assert inv.view(np.uint32) == 0x3B124925


@pytest.mark.parametrize("rule", [FLOOR, RCEIL])
@pytest.mark.parametrize("xdt", [BF16, F32])
def test_quantize_random_rows_against_numpy_and_ml_dtypes(rule, xdt):
    # partial last block: K = 4304 -> 135 blocks, block 134 holds 16 elements
    K = 4304
    x = (rng.standard_normal((6, K)) * 2.0 ** rng.integers(-30, 30, size=(6, 1))).astype(NP_OF[xdt])
    x[2, 100:140] = 0
    x[3, K - 16:] = np.asarray(1e-3).astype(NP_OF[xdt])
    q, s = quantize(x, xdt, E4M3, rule, EVEN)
    assert s.shape == (6, 135)
    blocks = block_view(x, K)
    want_s = np_scale(np.abs(blocks).max(axis=2).astype(np.float32), rule, E4M3)
    assert (s == want_s).all()
    v = blocks * 2.0 ** (127 - want_s.astype(np.float64))[:, :, None]
    v = v.reshape(6, -1)[:, :K]
    inrange = np.abs(v) <= 448
    want = f8_codes(v, E4M3)
    assert (q[inrange] == want[inrange]).all()
    assert ((q[~inrange] & 0x7F) == 0x7E).all()


def test_nan_and_inf_blocks():
    x = rng.standard_normal((3, 96)).astype(np.float32)
    x[0, 40] = np.nan
    x[1, 70] = np.inf
    x[2, 5] = -np.inf
    for elem in (E4M3, E5M2):
        q, s = quantize(x, F32, elem)
        assert s[0, 1] == 0xFF and s[1, 2] == 0xFF and s[2, 0] == 0xFF
        assert (q[0, 32:64] == 0x7F).all() and (q[1, 64:96] == 0x7F).all() and (q[2, :32] == 0x7F).all()
        assert np.isnan(np.uint8(0x7F).view(F8_OF[elem]).astype(np.float32))
        assert s[0, 0] != 0xFF and s[1, 0] != 0xFF


# ---- dequantize and E8M0 ----

@pytest.mark.parametrize("elem", [E4M3, E5M2])
def test_dequantize_every_code_against_ml_dtypes(elem):
    bs = np.array([0, 1, 2, 100, 119, 126, 127, 128, 135, 200, 253, 254, 255], dtype=np.uint8)
    q = np.tile(np.arange(256, dtype=np.uint8), (len(bs), 1))
    s = np.repeat(bs[:, None], 8, axis=1)
    out = dequantize(q, s, elem, F32)
    dec = q.view(F8_OF[elem]).astype(np.float64)
    sv = bs.view(ml_dtypes.float8_e8m0fnu).astype(np.float64)[:, None]
    with np.errstate(over="ignore", invalid="ignore"):
        want = (dec * sv).astype(np.float32)           # exact product, one f32 rounding
    nan = np.isnan(want)
    assert (np.isnan(out) == nan).all()
    assert (out[~nan] == want[~nan]).all()
    assert (np.signbit(out[~nan]) == np.signbit(want[~nan])).all()
    # the library's NaNs are canonical (bit-identical across providers)
    assert (out[nan].view(np.uint32) == 0x7FC00000).all()


def test_e8m0_values_match_ml_dtypes():
    b = np.arange(256, dtype=np.uint8)
    ml = b.view(ml_dtypes.float8_e8m0fnu).astype(np.float64)
    assert (ml[:255] == np.ldexp(1.0, b[:255].astype(np.int64) - 127)).all()
    assert np.isnan(ml[255])
    # through dequantize: code 1.0 (E4M3 0x38) under every scale byte
    q = np.full((256, 32), 0x38, dtype=np.uint8)
    out = dequantize(q, b[:, None].copy(), E4M3, F32)
    assert (out[:255, 0] == ml[:255].astype(np.float32)).all()
    assert np.isnan(out[255]).all()


@pytest.mark.parametrize("odt", [BF16, F16])
def test_dequantize_rounds_to_output_dtype(odt):
    q = np.tile(np.arange(256, dtype=np.uint8), (40, 1))
    s = np.repeat(np.arange(100, 140, dtype=np.uint8)[:, None], 8, axis=1)
    out = dequantize(q, s, E4M3, odt).astype(np.float64)
    f32 = dequantize(q, s, E4M3, F32)
    with np.errstate(over="ignore"):
        want = f32.astype(NP_OF[odt]).astype(np.float64)  # RNE f32 -> odt
    nan = np.isnan(want)
    assert (np.isnan(out) == nan).all()
    assert (out[~nan] == want[~nan]).all()
