"""Interoperability of qkern's safetensors reader/writer with the reference `safetensors`
Python package (checkpoint.md: "Writing produces files that the reference safetensors
Python package reads back unchanged").

- files written by the Python package (every dtype, scalars, zero-size tensors, metadata)
  are read by qkern (ctypes on libqkern.so) with identical names, dtypes, shapes, bytes;
- files written by qkern's writer are read by the Python package unchanged;
- the hostile corpus: every file qkern rejects, the reference package rejects too (except
  the rules where checkpoint.md is stricter), and every file it accepts reads the same;
- `qk inspect --json` lists what the Python package sees;
- `qk quantize` output is read by the Python package and matches an independent numpy
  MXFP8 reference bit for bit (skipped while qk_mx_quantize is unavailable in the build).

The build folder is $QK_BUILD (default <repo>/build). ctypes needs a library built without
sanitizers (an ASan library cannot be loaded into a plain Python); the `qk` tests work
with any build.
"""
import ctypes
import glob
import json
import os
import pathlib
import struct
import subprocess

import numpy as np
import pytest

safetensors = pytest.importorskip("safetensors")
from safetensors import TensorSpec, deserialize, safe_open, serialize_file  # noqa: E402
from safetensors.numpy import load_file, save_file  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("QK_BUILD", REPO / "build"))
CORPUS = REPO / "tests" / "corpus" / "safetensors"
QK = BUILD / "qk"

DTYPES = {  # safetensors name -> (element size, TensorSpec dtype, numpy dtype or None)
    "BOOL": (1, "bool", np.bool_), "U8": (1, "uint8", np.uint8), "I8": (1, "int8", np.int8),
    "I16": (2, "int16", np.int16), "U16": (2, "uint16", np.uint16), "I32": (4, "int32", np.int32),
    "U32": (4, "uint32", np.uint32), "I64": (8, "int64", np.int64), "U64": (8, "uint64", np.uint64),
    "F16": (2, "float16", np.float16), "BF16": (2, "bfloat16", None), "F32": (4, "float32", np.float32),
    "F64": (8, "float64", np.float64), "F8_E4M3": (1, "float8_e4m3fn", None),
    "F8_E5M2": (1, "float8_e5m2", None), "F8_E8M0": (1, "float8_e8m0fnu", None),
}

# files qkern rejects on rules checkpoint.md states more strictly than the reference package
STRICTER = {
    "entry_extra_key.safetensors",   # "an entry without exactly dtype/shape/data_offsets"
    "hdr_nul_in_name.safetensors",   # a NUL inside a name: jansson refuses it
    # a zero-size tensor whose non-zero dims multiply past 2^63: its row-major strides
    # cannot be represented (the reference checks only the running product, 0 here)
    "shape_zero_dim_overflow_i64.safetensors",
}


class StInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype_name", ctypes.c_char_p), ("dtype", ctypes.c_int),
                ("elem_size", ctypes.c_size_t), ("ndim", ctypes.c_int32),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("numel", ctypes.c_uint64),
                ("nbytes", ctypes.c_uint64), ("file_offset", ctypes.c_uint64), ("data", ctypes.c_void_p),
                ("file", ctypes.c_void_p)]


def _load_lib():
    path = BUILD / "libqkern.so"
    if not path.exists():
        pytest.skip(f"{path} not built (set QK_BUILD)")
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as e:
        pytest.skip(f"cannot load {path} (a sanitizer build?): {e}")
    vp, cp, i64p = ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int64)
    sig = {
        "qk_st_open": ([cp, ctypes.POINTER(vp)], ctypes.c_int),
        "qk_st_close": ([vp], None),
        "qk_st_count": ([vp], ctypes.c_size_t),
        "qk_st_info_at": ([vp, ctypes.c_size_t, ctypes.POINTER(StInfo)], ctypes.c_int),
        "qk_st_metadata_count": ([vp], ctypes.c_size_t),
        "qk_st_metadata_at": ([vp, ctypes.c_size_t, ctypes.POINTER(cp), ctypes.POINTER(cp)], ctypes.c_int),
        "qk_st_writer_create": ([cp, ctypes.c_uint, ctypes.POINTER(vp)], ctypes.c_int),
        "qk_st_writer_set_metadata": ([vp, cp, cp], ctypes.c_int),
        "qk_st_writer_declare": ([vp, cp, cp, ctypes.c_int32, i64p, vp], ctypes.c_int),
        "qk_st_writer_write": ([vp, cp, vp, ctypes.c_size_t], ctypes.c_int),
        "qk_st_writer_commit": ([vp], ctypes.c_int),
        "qk_st_writer_destroy": ([vp], None),
        "qk_last_error": ([], cp),
    }
    for name, (args, res) in sig.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, res
    return lib


@pytest.fixture(scope="module")
def lib():
    return _load_lib()


def qk_read(lib, path):
    """(status, message, {name: (dtype, shape, bytes)}, {key: value}) via qk_st_open."""
    f = ctypes.c_void_p()
    st = lib.qk_st_open(str(path).encode(), ctypes.byref(f))
    if st:
        return st, lib.qk_last_error().decode(), None, None
    tensors, meta = {}, {}
    try:
        for i in range(lib.qk_st_count(f)):
            info = StInfo()
            assert lib.qk_st_info_at(f, i, ctypes.byref(info)) == 0
            shape = [info.shape[d] for d in range(info.ndim)]
            data = ctypes.string_at(info.data, info.nbytes) if info.nbytes else b""
            assert info.elem_size == DTYPES[info.dtype_name.decode()][0]
            tensors[info.name.decode()] = (info.dtype_name.decode(), shape, data)
        for i in range(lib.qk_st_metadata_count(f)):
            k, v = ctypes.c_char_p(), ctypes.c_char_p()
            assert lib.qk_st_metadata_at(f, i, ctypes.byref(k), ctypes.byref(v)) == 0
            meta[k.value.decode()] = v.value.decode()
    finally:
        lib.qk_st_close(f)
    return 0, "", tensors, meta


def qk_write(lib, path, tensors, metadata, stream=()):
    """Writes with qkern's writer; tensors: {name: (dtype, shape, bytes)}. Names in
    `stream` are declared without data and written in two pieces."""
    w = ctypes.c_void_p()
    assert lib.qk_st_writer_create(str(path).encode(), 0, ctypes.byref(w)) == 0, lib.qk_last_error()
    keep = []
    try:
        for k, v in metadata.items():
            assert lib.qk_st_writer_set_metadata(w, k.encode(), v.encode()) == 0
        for name, (dt, shape, data) in tensors.items():
            arr = (ctypes.c_int64 * max(len(shape), 1))(*shape)
            buf = ctypes.create_string_buffer(data, max(len(data), 1))
            keep += [arr, buf]
            src = None if name in stream else ctypes.cast(buf, ctypes.c_void_p)
            assert lib.qk_st_writer_declare(w, name.encode(), dt.encode(), len(shape), arr, src) == 0, \
                lib.qk_last_error()
        for name in stream:
            data = tensors[name][2]
            half = len(data) // 2
            for piece in (data[:half], data[half:]):
                b = ctypes.create_string_buffer(piece, max(len(piece), 1))
                assert lib.qk_st_writer_write(w, name.encode(), b, len(piece)) == 0, lib.qk_last_error()
        assert lib.qk_st_writer_commit(w) == 0, lib.qk_last_error()
    finally:
        lib.qk_st_writer_destroy(w)


def sample_tensors(seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for i, (dt, (size, _, _)) in enumerate(DTYPES.items()):
        shape = [[3, 5], [7], [2, 3, 4], []][i % 4]
        n = int(np.prod(shape)) if shape else 1
        raw = rng.integers(0, 256, n * size, dtype=np.uint8).tobytes()
        if dt == "BOOL":
            raw = bytes(b & 1 for b in raw)
        out[f"model.layers.{i}.{dt.lower()}"] = (dt, shape, raw)
    out["empty.f32"] = ("F32", [0, 4], b"")
    out["empty.u8"] = ("U8", [5, 0, 2], b"")
    return out


def py_write(path, tensors, metadata):
    bufs, specs = [], {}
    for name, (dt, shape, data) in tensors.items():
        b = ctypes.create_string_buffer(data, max(len(data), 1))
        bufs.append(b)
        specs[name] = TensorSpec(dtype=DTYPES[dt][1], shape=shape, data_ptr=ctypes.addressof(b),
                                 data_len=len(data))
    serialize_file(specs, str(path), metadata=metadata)


def py_read(path):
    raw = pathlib.Path(path).read_bytes()
    tensors = {n: (d["dtype"], list(d["shape"]), bytes(d["data"])) for n, d in deserialize(raw)}
    n = struct.unpack("<Q", raw[:8])[0]
    meta = json.loads(raw[8:8 + n]).get("__metadata__", {})
    return tensors, meta


# ---- reading what the reference package wrote ----
def test_python_written_files_read_by_qkern(lib, tmp_path):
    tensors = sample_tensors(1)
    meta = {"format": "pt", "note": "written by safetensors", "ünï": "cödé ✓"}
    path = tmp_path / "py.safetensors"
    py_write(path, tensors, meta)
    st, msg, got, got_meta = qk_read(lib, path)
    assert st == 0, msg
    assert got == tensors
    assert got_meta == meta


def test_numpy_save_file_read_by_qkern(lib, tmp_path):
    rng = np.random.default_rng(2)
    arrays = {"w": rng.standard_normal((17, 33)).astype(np.float32),
              "h": rng.standard_normal((8,)).astype(np.float16),
              "i": np.arange(10, dtype=np.int64).reshape(2, 5), "s": np.array(3.5, dtype=np.float64)}
    path = tmp_path / "np.safetensors"
    save_file(arrays, str(path), metadata={"format": "np"})
    st, msg, got, meta = qk_read(lib, path)
    assert st == 0, msg
    assert meta == {"format": "np"}
    for k, a in arrays.items():
        dt, shape, data = got[k]
        assert shape == list(a.shape) and data == a.tobytes(), k


# ---- the reference package reading what qkern wrote ----
def test_qkern_written_files_read_by_python(lib, tmp_path):
    tensors = sample_tensors(3)
    meta = {"format": "pt", "producer": "qkern", "ünï": "cödé ✓"}
    path = tmp_path / "qk.safetensors"
    stream = [n for i, n in enumerate(tensors) if i % 3 == 0]
    qk_write(lib, path, tensors, meta, stream=stream)
    got, got_meta = py_read(path)
    assert got == tensors
    assert got_meta == meta
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    assert (8 + n) % 8 == 0 and raw[8:8 + n].rstrip(b" ").endswith(b"}")
    with safe_open(str(path), framework="numpy") as f:
        assert f.metadata() == meta
        for name in f.keys():
            dt, shape, data = tensors[name]
            if DTYPES[dt][2] is not None:
                assert f.get_tensor(name).tobytes() == data, name
    arrays = {"a": np.linspace(-1, 1, 40, dtype=np.float32).reshape(5, 8), "b": np.arange(6, dtype=np.int16)}
    qk_write(lib, tmp_path / "np.safetensors",
             {k: ({np.float32: "F32", np.int16: "I16"}[a.dtype.type], list(a.shape), a.tobytes())
              for k, a in arrays.items()}, {})
    back = load_file(str(tmp_path / "np.safetensors"))
    for k, a in arrays.items():
        assert np.array_equal(back[k], a)


def test_round_trip_through_both(lib, tmp_path):
    tensors = sample_tensors(4)
    py_write(tmp_path / "a.safetensors", tensors, {"k": "v"})
    st, msg, got, meta = qk_read(lib, tmp_path / "a.safetensors")
    assert st == 0, msg
    qk_write(lib, tmp_path / "b.safetensors", got, meta)
    back, back_meta = py_read(tmp_path / "b.safetensors")
    assert back == tensors and back_meta == {"k": "v"}


# ---- the hostile corpus against the reference package ----
def corpus_files():
    return sorted(glob.glob(str(CORPUS / "*.safetensors")))


def test_corpus_agrees_with_reference_package(lib):
    files = corpus_files()
    assert len(files) >= 30
    for f in files:
        name = os.path.basename(f)
        st, msg, got, _ = qk_read(lib, f)
        try:
            ref = {n: (d["dtype"], list(d["shape"]), bytes(d["data"]))
                   for n, d in deserialize(pathlib.Path(f).read_bytes())}
        except Exception:
            ref = None
        if st == 0:
            assert ref is not None, f"{name}: qkern accepts what the reference rejects"
            assert got == ref, name
        elif name not in STRICTER:
            assert ref is None, f"{name}: the reference accepts what qkern rejects ({msg})"
        else:
            assert ref is not None, f"{name} is listed as stricter but the reference rejects it too"


# ---- the qk tool ----
def run_qk(*args):
    if not QK.exists():
        pytest.skip(f"{QK} not built (set QK_BUILD)")
    return subprocess.run([str(QK), *map(str, args)], capture_output=True, text=True)


def test_inspect_json_lists_what_python_sees(tmp_path):
    tensors = sample_tensors(5)
    path = tmp_path / "x.safetensors"
    py_write(path, tensors, {"format": "pt"})
    r = run_qk("inspect", "--json", path)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["ok"] is True and doc["problems"] == []
    seen = {t["name"]: (t["dtype"], t["shape"], t["bytes"]) for t in doc["tensors"]}
    assert seen == {n: (d, s, len(b)) for n, (d, s, b) in tensors.items()}
    assert doc["files"][0]["metadata"] == {"format": "pt"}


def test_inspect_json_reports_problems():
    r = run_qk("inspect", "--json", CORPUS / "ms_scale_floor_k4304")
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    assert doc["ok"] is False and doc["kind"] == "modelslim"
    assert any("dropped the partial last block" in p for p in doc["problems"])
    lin = {l["prefix"]: l for l in doc["linears"]}["model.visual.blocks.0.mlp.linear_fc2"]
    assert lin["K"] == 4304 and lin["kb"] == 135 and lin["partial_last_block"] is True
    assert lin["last_block_elements"] == 16 and lin["scale_shape"] == [2, 134]


# an independent numpy MXFP8 reference (mxfp8.md): FLOOR or RCEIL scales, RNE or away
def e4m3_table():
    vals = []
    for c in range(0x7F):
        e, m = c >> 3, c & 7
        vals.append(m * 2.0 ** -9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
    return np.array(vals)


def np_quantize(x, rule="floor", away=True):
    x = x.astype(np.float64)
    N, K = x.shape
    kb = -(-K // 32)
    table = e4m3_table()
    q = np.zeros((N, K), np.uint8)
    s = np.zeros((N, kb), np.uint8)
    for j in range(kb):
        blk = x[:, 32 * j:32 * j + 32]
        amax = np.abs(blk).max(axis=1)
        if rule == "floor":
            _, ex = np.frexp(np.where(amax > 0, amax, 1.0))
            e = np.clip(ex - 1 - 8, -127, 127)
        else:
            descale = amax.astype(np.float32) * np.float32(1 / 448)   # fl32(amax x fl32(1/448))
            m, ex = np.frexp(descale.astype(np.float64))
            e = np.clip(np.where(m == 0.5, ex - 1, ex), -127, 127)  # smallest 2^e >= descale
        e = np.where(amax > 0, e, -127)
        s[:, j] = (e + 127).astype(np.uint8)
        v = blk / (2.0 ** e)[:, None]
        a = np.abs(v)
        hi = np.clip(np.searchsorted(table, a, side="left"), 0, 126)
        lo = np.clip(hi - 1, 0, 126)
        exact = table[hi] == a
        dl, dh = a - table[lo], table[hi] - a
        pick_hi = (dh < dl) | ((dh == dl) & (away | (lo % 2 == 1)))
        code = np.where(exact, hi, np.where(pick_hi, hi, lo))
        code = np.where(a >= 448, 0x7E, code)
        code = code | np.where(np.signbit(v), 0x80, 0)
        q[:, 32 * j:32 * j + 32] = code
    return q, s


def test_quantize_output_read_by_python(tmp_path):
    rng = np.random.default_rng(6)
    K = 4304 // 4 + 16   # a partial last block
    w = (rng.standard_normal((12, K)) * np.exp(rng.uniform(-6, 6, (12, 1)))).astype(np.float32)
    w[0, :5] = [1.0, 1.0625 / 256, -1.1875 / 256, 5 * 2.0 ** -10 / 256, -0.0]
    w[1, 0] = 500.0
    bias = rng.standard_normal(12).astype(np.float16)
    save_file({"m.layers.0.mlp.gate_proj.weight": w, "m.layers.0.mlp.gate_proj.bias": bias,
               "m.norm.weight": np.ones(K, np.float32)}, str(tmp_path / "in.safetensors"))
    for opts, rule, away in [([], "floor", True), (["--round", "even"], "floor", False),
                             (["--scale-rule", "rceil"], "rceil", True)]:
        out = tmp_path / ("out_" + rule + ("_away" if away else "_even"))
        r = run_qk("quantize", tmp_path / "in.safetensors", out, "--quiet", *opts)
        if r.returncode != 0 and "QK_ERR_UNSUPPORTED" in r.stderr:
            pytest.skip("qk_mx_quantize is not available in this build")
        assert r.returncode == 0, r.stderr
        desc = json.loads((out / "quant_model_description.json").read_text())
        assert desc["model_quant_type"] == "W8A8_MXFP8" and desc["group_size"] == 32
        assert desc["m.layers.0.mlp.gate_proj.weight"] == "W8A8_MXFP8"
        assert desc["m.norm.weight"] == "FLOAT"
        got, _ = py_read(out / "quant_model_weights.safetensors")
        qdt, qshape, qbytes = got["m.layers.0.mlp.gate_proj.weight"]
        sdt, sshape, sbytes = got["m.layers.0.mlp.gate_proj.weight_scale"]
        assert (qdt, qshape, sdt, sshape) == ("F8_E4M3", [12, K], "U8", [12, -(-K // 32)])
        q_ref, s_ref = np_quantize(w, rule, away)
        q = np.frombuffer(qbytes, np.uint8).reshape(12, K)
        s = np.frombuffer(sbytes, np.uint8).reshape(12, -1)
        assert np.array_equal(s, s_ref), np.argwhere(s != s_ref)[:5]
        assert np.array_equal(q, q_ref), np.argwhere(q != q_ref)[:5]
        bdt, _, bbytes = got["m.layers.0.mlp.gate_proj.bias"]
        assert bdt == "F32" and np.array_equal(np.frombuffer(bbytes, np.float32), bias.astype(np.float32))
