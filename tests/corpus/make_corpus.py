#!/usr/bin/env python3
"""Generates tests/corpus/safetensors/: hostile or broken safetensors files and ModelSlim
folders, each with the exact result it must produce, listed in EXPECTED.txt.

Files are written byte by byte (no safetensors library), so that every reject rule of
checkpoint.md can be broken on purpose. Run from anywhere:
    python3 tests/corpus/make_corpus.py
The output is deterministic; the generated files are committed.

EXPECTED.txt has one case per line, tab-separated:
    PATH  CHECK  EXPECT  SUBSTRING
PATH is relative to tests/corpus/safetensors/. CHECK is
    open                  qk_st_open(PATH)
    set                   qk_st_set_open(PATH, 0)
    set_ext               qk_st_set_open(PATH, QK_ST_SET_ALLOW_EXTERNAL_SHARDS)
    ms                    qk_ms_open(PATH, 0)
    ms_ext                qk_ms_open(PATH, QK_MS_ALLOW_EXTERNAL_SHARDS)
    load:PREFIX:K:N       qk_ms_open, then create_weights(PREFIX, K, N) and load of
                          .weight, .weight_scale (and .bias when the folder has one)
    post:PREFIX:K:N       the same, then the 0xFF check of process_weights_after_loading
                          (the step before qk_mx_weight_create)
    inspect               `qk inspect PATH`: EXPECT is the exit status
    inspect_ext           `qk inspect --allow-external-shards PATH`, the same way
EXPECT is a qk_status name (or an exit status for inspect), SUBSTRING a part of the
message (or of the tool's output) that must appear, "-" for none.
"""
import json
import os
import random
import shutil
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "safetensors")
CASES = []
RNG = random.Random(20240514)


def expect(path, check, status, substring):
    assert "\t" not in substring and "\n" not in substring
    CASES.append((path, check, str(status), substring or "-"))


def raw_file(name, data):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)


def header_file(name, header_bytes, buffer=b"", n=None):
    """8-byte length (n, default the header's length) + header + buffer."""
    if isinstance(header_bytes, str):
        header_bytes = header_bytes.encode("utf-8")
    length = len(header_bytes) if n is None else n
    raw_file(name, struct.pack("<Q", length) + header_bytes + buffer)


SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "I16": 2, "U16": 2, "I32": 4, "U32": 4, "I64": 8,
         "U64": 8, "F16": 2, "BF16": 2, "F32": 4, "F64": 8, "F8_E4M3": 1, "F8_E5M2": 1,
         "F8_E8M0": 1}


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def st_bytes(tensors, metadata=None):
    """A valid safetensors file: tensors is a list of (name, dtype, shape, bytes)."""
    hdr = {}
    if metadata is not None:
        hdr["__metadata__"] = metadata
    pos = 0
    buf = b""
    for name, dt, shape, data in tensors:
        assert len(data) == numel(shape) * SIZES[dt], name
        hdr[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [pos, pos + len(data)]}
        pos += len(data)
        buf += data
    text = json.dumps(hdr, separators=(",", ":")).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + buf


def e4m3_bytes(n):
    # finite E4M3 codes only (0x7F and 0xFF are NaN)
    return bytes(RNG.choice([c for c in range(256) if c & 0x7F != 0x7F]) for _ in range(n))


def scale_bytes(n):
    return bytes(RNG.randrange(110, 135) for _ in range(n))


def f32_bytes(vals):
    return struct.pack("<%df" % len(vals), *vals)


def bf16_bytes(n):
    out = b""
    for _ in range(n):
        out += struct.pack("<H", struct.unpack("<I", struct.pack("<f", RNG.uniform(-1, 1)))[0] >> 16)
    return out


# ---------------------------------------------------------------- single files ----
def single_files():
    E = "QK_ERR_FORMAT"
    # length and header rules
    raw_file("empty.safetensors", b"")
    expect("empty.safetensors", "open", E, "shorter than 8")
    raw_file("short7.safetensors", b"\x02\x00\x00\x00\x00\x00\x00")
    expect("short7.safetensors", "open", E, "is 7 bytes, shorter than 8")
    header_file("hdr_len_past_eof.safetensors", b"{}", n=1000)
    expect("hdr_len_past_eof.safetensors", "open", E, "header length 1000 is larger than the 2 bytes")
    header_file("hdr_len_over_100mb.safetensors", b"{}", n=100000001)
    expect("hdr_len_over_100mb.safetensors", "open", E, "header length 100000001 exceeds the 100 MB limit")
    header_file("hdr_len_u64_max.safetensors", b"{}", n=2**64 - 1)
    expect("hdr_len_u64_max.safetensors", "open", E, "exceeds the 100 MB limit")
    header_file("hdr_empty.safetensors", b"")
    expect("hdr_empty.safetensors", "open", E, "header is not valid JSON")
    header_file("hdr_not_utf8.safetensors",
                b'{"bad\xff":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"\x00")
    expect("hdr_not_utf8.safetensors", "open", E, "header is not valid UTF-8 (byte 5 of the header is 0xff)")
    header_file("hdr_overlong_utf8.safetensors",
                b'{"a\xc0\xaf":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"\x00")
    expect("hdr_overlong_utf8.safetensors", "open", E, "not valid UTF-8 (byte 3 of the header is 0xc0)")
    header_file("hdr_surrogate_utf8.safetensors",
                b'{"a\xed\xa0\x80":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"\x00")
    expect("hdr_surrogate_utf8.safetensors", "open", E, "not valid UTF-8 (byte 3 of the header is 0xed)")
    header_file("hdr_truncated_utf8.safetensors", b'{"a":"\xe2\x82', b"")
    expect("hdr_truncated_utf8.safetensors", "open", E, "not valid UTF-8")
    header_file("hdr_not_json.safetensors", b"{abc")
    expect("hdr_not_json.safetensors", "open", E, "header is not valid JSON")
    header_file("hdr_array.safetensors", b"[]")
    expect("hdr_array.safetensors", "open", E, "header is a JSON array, not an object")
    header_file("hdr_scalar.safetensors", b'"x"')
    expect("hdr_scalar.safetensors", "open", E, "header is a JSON scalar, not an object")
    header_file("hdr_two_objects.safetensors", b"{}{}")
    expect("hdr_two_objects.safetensors", "open", E, "header is not valid JSON: end of file expected")
    header_file("hdr_trailing_garbage.safetensors", b"{}  x")
    expect("hdr_trailing_garbage.safetensors", "open", E, "header is not valid JSON: end of file expected")
    header_file("hdr_nul_padding.safetensors", b"{}\x00\x00\x00\x00\x00\x00")
    expect("hdr_nul_padding.safetensors", "open", E, "header is not valid JSON")
    header_file("hdr_nul_in_name.safetensors",
                b'{"a\\u0000b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"\x00")
    expect("hdr_nul_in_name.safetensors", "open", E, "header is not valid JSON")
    header_file("hdr_int_too_big.safetensors",
                b'{"a":{"dtype":"U8","shape":[99999999999999999999],"data_offsets":[0,1]}}', b"\x00")
    expect("hdr_int_too_big.safetensors", "open", E, "too big integer")
    header_file("hdr_deep_nesting.safetensors", b'{"a":' + b"[" * 5000 + b"]" * 5000 + b"}")
    expect("hdr_deep_nesting.safetensors", "open", E, "header is not valid JSON")
    # duplicates
    header_file("dup_tensor.safetensors",
                b'{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                b'"w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', b"\x00\x00")
    expect("dup_tensor.safetensors", "open", E, 'duplicate key "w" in the header')
    header_file("dup_key_in_entry.safetensors",
                b'{"w":{"dtype":"U8","dtype":"I8","shape":[1],"data_offsets":[0,1]}}', b"\x00")
    expect("dup_key_in_entry.safetensors", "open", E, 'duplicate key "dtype" in the header')
    header_file("dup_metadata.safetensors",
                b'{"__metadata__":{},"__metadata__":{}}')
    expect("dup_metadata.safetensors", "open", E, 'duplicate key "__metadata__"')
    # entry structure
    header_file("entry_not_object.safetensors", b'{"w":5}')
    expect("entry_not_object.safetensors", "open", E, 'tensor "w": entry is not a JSON object')
    header_file("entry_missing_offsets.safetensors", b'{"w":{"dtype":"U8","shape":[1]}}', b"\x00")
    expect("entry_missing_offsets.safetensors", "open", E, 'tensor "w": missing "data_offsets"')
    header_file("entry_missing_dtype.safetensors", b'{"w":{"shape":[1],"data_offsets":[0,1]}}', b"\x00")
    expect("entry_missing_dtype.safetensors", "open", E, 'tensor "w": missing "dtype"')
    header_file("entry_extra_key.safetensors",
                b'{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"foo":1}}', b"\x00")
    expect("entry_extra_key.safetensors", "open", E, 'tensor "w": unexpected key "foo"')
    header_file("dtype_not_string.safetensors", b'{"w":{"dtype":4,"shape":[1],"data_offsets":[0,1]}}', b"\x00")
    expect("dtype_not_string.safetensors", "open", E, 'tensor "w": dtype is not a JSON string')
    header_file("dtype_unknown.safetensors", b'{"w":{"dtype":"F7","shape":[1],"data_offsets":[0,1]}}', b"\x00")
    expect("dtype_unknown.safetensors", "open", E, 'tensor "w": unknown dtype "F7"')
    header_file("dtype_lowercase.safetensors", b'{"w":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}}',
                b"\x00" * 4)
    expect("dtype_lowercase.safetensors", "open", E, 'tensor "w": unknown dtype "f32"')
    header_file("shape_not_array.safetensors", b'{"w":{"dtype":"U8","shape":1,"data_offsets":[0,1]}}', b"\x00")
    expect("shape_not_array.safetensors", "open", E, 'tensor "w": shape is not a JSON array')
    header_file("shape_null.safetensors", b'{"w":{"dtype":"U8","shape":null,"data_offsets":[0,1]}}', b"\x00")
    expect("shape_null.safetensors", "open", E, 'tensor "w": shape is not a JSON array')
    header_file("shape_negative.safetensors",
                b'{"w":{"dtype":"U8","shape":[2,-4],"data_offsets":[0,8]}}', b"\x00" * 8)
    expect("shape_negative.safetensors", "open", E, 'tensor "w": dim 1 of shape is -4')
    header_file("shape_float.safetensors", b'{"w":{"dtype":"U8","shape":[2.0],"data_offsets":[0,2]}}',
                b"\x00" * 2)
    expect("shape_float.safetensors", "open", E, 'tensor "w": dim 0 of shape is not an integer')
    header_file("shape_string.safetensors", b'{"w":{"dtype":"U8","shape":["2"],"data_offsets":[0,2]}}',
                b"\x00" * 2)
    expect("shape_string.safetensors", "open", E, 'tensor "w": dim 0 of shape is not an integer')
    header_file("shape_count_overflow.safetensors",
                b'{"w":{"dtype":"U8","shape":[4294967296,4294967296,2],"data_offsets":[0,0]}}')
    expect("shape_count_overflow.safetensors", "open", E, 'tensor "w": the element count of its shape overflows 64 bits')
    # found by the fuzzer: a zero-size tensor whose other dims overflow (its strides would)
    header_file("shape_zero_dim_overflow.safetensors",
                b'{"w":{"dtype":"U8","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}}')
    expect("shape_zero_dim_overflow.safetensors", "open", E,
           'tensor "w": the product of the non-zero dims of its shape overflows 64 bits')
    header_file("shape_zero_dim_overflow_i64.safetensors",
                b'{"w":{"dtype":"U8","shape":[0,4611686018427387904,2],"data_offsets":[0,0]}}')
    expect("shape_zero_dim_overflow_i64.safetensors", "open", E, "product of the non-zero dims of its shape overflows")
    header_file("shape_bytes_overflow.safetensors",
                b'{"w":{"dtype":"F64","shape":[2305843009213693952,2],"data_offsets":[0,0]}}')
    expect("shape_bytes_overflow.safetensors", "open", E, "x F64 size (8 bytes) overflows 64 bits")
    header_file("offsets_not_array.safetensors", b'{"w":{"dtype":"U8","shape":[1],"data_offsets":0}}', b"\x00")
    expect("offsets_not_array.safetensors", "open", E, 'tensor "w": data_offsets is not an array of two integers')
    header_file("offsets_three.safetensors",
                b'{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}', b"\x00")
    expect("offsets_three.safetensors", "open", E, 'tensor "w": data_offsets is not an array of two integers')
    header_file("offsets_negative.safetensors",
                b'{"w":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}}', b"\x00")
    expect("offsets_negative.safetensors", "open", E, 'tensor "w": data_offsets must be two non-negative integers')
    header_file("offsets_float.safetensors",
                b'{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1.0]}}', b"\x00")
    expect("offsets_float.safetensors", "open", E, 'tensor "w": data_offsets must be two non-negative integers')
    header_file("offsets_begin_gt_end.safetensors",
                b'{"w":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}}', b"\x00" * 4)
    expect("offsets_begin_gt_end.safetensors", "open", E, 'tensor "w": data_offsets [4, 0] has begin > end')
    header_file("offsets_wrong_size.safetensors",
                b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,12]}}', b"\x00" * 12)
    expect("offsets_wrong_size.safetensors", "open", E,
           'tensor "w": data_offsets [0, 12] span 12 bytes but F32 [2] needs 8')
    header_file("offsets_past_buffer.safetensors",
                b'{"w":{"dtype":"U8","shape":[16],"data_offsets":[0,16]}}', b"\x00" * 8)
    expect("offsets_past_buffer.safetensors", "open", E, 'tensor "w": data_offsets [0, 16] run past the end of the 8-byte data buffer')
    header_file("offsets_huge.safetensors",
                b'{"w":{"dtype":"U8","shape":[0],"data_offsets":[9223372036854775807,9223372036854775807]}}')
    expect("offsets_huge.safetensors", "open", E, "run past the end of the 0-byte data buffer")
    # tiling
    header_file("overlap.safetensors",
                b'{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},'
                b'"b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}}', b"\x00" * 12)
    expect("overlap.safetensors", "open", E, 'tensor "b" begins at 4, inside tensor "a" which ends at 8')
    header_file("same_offsets.safetensors",
                b'{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},'
                b'"b":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}}', b"\x00" * 8)
    expect("same_offsets.safetensors", "open", E, "(rule: tensors must not overlap)")
    header_file("hole.safetensors",
                b'{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},'
                b'"b":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}}', b"\x00" * 12)
    expect("hole.safetensors", "open", E, 'hole of 4 bytes in the data buffer before tensor "b"')
    header_file("not_from_zero.safetensors",
                b'{"a":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}}', b"\x00" * 12)
    expect("not_from_zero.safetensors", "open", E, 'hole of 8 bytes in the data buffer before tensor "a"')
    header_file("trailing_bytes.safetensors",
                b'{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}', b"\x00" * 9)
    expect("trailing_bytes.safetensors", "open", E, '5 bytes of the data buffer follow the last tensor "a"')
    header_file("no_tensor_with_data.safetensors", b"{}", b"\x00" * 3)
    expect("no_tensor_with_data.safetensors", "open", E, "the header names no tensor but the data buffer holds 3 bytes")
    # metadata
    header_file("meta_not_object.safetensors", b'{"__metadata__":[1]}')
    expect("meta_not_object.safetensors", "open", E, "__metadata__ is not a JSON object")
    header_file("meta_value_int.safetensors", b'{"__metadata__":{"format":"pt","k":1}}')
    expect("meta_value_int.safetensors", "open", E, 'metadata value for key "k" is not a string')
    header_file("meta_value_null.safetensors", b'{"__metadata__":{"k":null}}')
    expect("meta_value_null.safetensors", "open", E, 'metadata value for key "k" is not a string')
    header_file("meta_value_object.safetensors", b'{"__metadata__":{"k":{"x":"y"}}}')
    expect("meta_value_object.safetensors", "open", E, 'metadata value for key "k" is not a string')

    # valid edge cases (positive controls)
    header_file("ok_empty_header.safetensors", b"{}")
    expect("ok_empty_header.safetensors", "open", "QK_OK", "-")
    tensors = []
    for i, dt in enumerate(SIZES):
        shape = [2, 3] if i % 2 else [5]
        tensors.append(("t_" + dt.lower(), dt, shape, bytes(RNG.randrange(256) for _ in range(numel(shape) * SIZES[dt]))))
    raw_file("ok_all_dtypes.safetensors", st_bytes(tensors, {"format": "pt", "note": "all 16 dtypes"}))
    expect("ok_all_dtypes.safetensors", "open", "QK_OK", "-")
    header_file("ok_zero_size.safetensors",
                b'{"z0":{"dtype":"F32","shape":[0,4],"data_offsets":[0,0]},'
                b'"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},'
                b'"z1":{"dtype":"BF16","shape":[3,0],"data_offsets":[4,4]},'
                b'"s":{"dtype":"F32","shape":[],"data_offsets":[4,8]},'
                b'"z2":{"dtype":"I64","shape":[0],"data_offsets":[8,8]}}        ', b"\x01\x02\x03\x04\x00\x00\x80\x3f")
    expect("ok_zero_size.safetensors", "open", "QK_OK", "-")
    header_file("ok_unicode_names.safetensors",
                '{"__metadata__":{"clé":"valeur ✓"},"层.权重":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}'.encode(),
                b"\x07\x08")
    expect("ok_unicode_names.safetensors", "open", "QK_OK", "-")


# ---------------------------------------------------------------- ModelSlim folders ----
DESC_HEAD = {"model_quant_type": "W8A8_MXFP8", "version": "1.0.0", "group_size": 32,
             "metadata": {}, "optional": {}}


def ms_folder(name, tensors, desc=None, extra_desc=None, drop_desc=(), shards=None,
              index_override=None, desc_text=None):
    """tensors: list of (name, dtype, shape, bytes, qtype). shards: list of lists of tensor
    names per shard (None: one file)."""
    d = os.path.join(OUT, name)
    os.makedirs(d)
    if desc_text is not None:
        with open(os.path.join(d, "quant_model_description.json"), "w") as f:
            f.write(desc_text)
    elif desc is not False:
        dj = dict(DESC_HEAD)
        if desc:
            dj.update(desc)
        for t in tensors or []:
            if t[0] not in drop_desc:
                dj[t[0]] = t[4]
        if extra_desc:
            dj.update(extra_desc)
        with open(os.path.join(d, "quant_model_description.json"), "w") as f:
            json.dump(dj, f, indent=2)
    if shards is None:
        if tensors is not None:
            with open(os.path.join(d, "quant_model_weights.safetensors"), "wb") as f:
                f.write(st_bytes([t[:4] for t in tensors]))
        return
    by = {t[0]: t for t in tensors}
    wm = {}
    n = len(shards)
    for i, names in enumerate(shards):
        fn = "quant_model_weights-%05d-of-%05d.safetensors" % (i + 1, n)
        with open(os.path.join(d, fn), "wb") as f:
            f.write(st_bytes([by[x][:4] for x in names]))
        for x in names:
            wm[x] = fn
    if index_override:
        index_override(wm)
    with open(os.path.join(d, "quant_model_weights.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": wm}, f, indent=2)


def linear(prefix, N, K, scale_cols=None, scale_rows=None, scale_dt="U8", weight_dt="F8_E4M3",
           bias=True, ff_at=None, nan_at=None):
    kb = (K + 31) // 32
    sc = kb if scale_cols is None else scale_cols
    sr = N if scale_rows is None else scale_rows
    w = bytearray(e4m3_bytes(N * K)) if weight_dt == "F8_E4M3" else bf16_bytes(N * K)
    if nan_at is not None:
        w[nan_at[0] * K + nan_at[1]] = 0x7F
    s = bytearray(scale_bytes(sr * sc * SIZES[scale_dt]))
    if ff_at is not None:
        s[ff_at[0] * sc + ff_at[1]] = 0xFF
    out = [(prefix + ".weight", weight_dt, [N, K], bytes(w), "W8A8_MXFP8"),
           (prefix + ".weight_scale", scale_dt, [sr, sc], bytes(s), "W8A8_MXFP8")]
    if bias:
        out.append((prefix + ".bias", "F32", [N], f32_bytes([RNG.uniform(-1, 1) for _ in range(N)]), "FLOAT"))
    return out


def norm(name, H):
    return [(name, "BF16", [H], bf16_bytes(H), "FLOAT")]


def modelslim_folders():
    E = "QK_ERR_FORMAT"
    fc2 = "model.visual.blocks.0.mlp.linear_fc2"
    down = "model.layers.0.mlp.down_proj"
    # a valid folder: K = 80 (3 blocks, the last partial), and K = 4304 with 135 scales
    good = linear(down, 4, 80) + linear(fc2, 2, 4304, bias=False) + norm("model.norm.weight", 80)
    ms_folder("ms_ok", good)
    expect("ms_ok", "ms", "QK_OK", "-")
    expect("ms_ok", "set", "QK_OK", "-")
    expect("ms_ok", "load:%s:80:4" % down, "QK_OK", "-")
    expect("ms_ok", "post:%s:80:4" % down, "QK_OK", "-")
    expect("ms_ok", "load:%s:4304:2" % fc2, "QK_OK", "-")
    expect("ms_ok", "inspect", 0, "K=4304")
    # hostile sizes: a 0-byte F8 weight of shape [0, INT64_MAX] (its block count must not
    # overflow anywhere), and description keys msModelSlim reserves for KV-cache quantization
    kmax = (1 << 63) - 1
    ms_folder("ms_zero_rows_k_int64_max",
              [(down + ".weight", "F8_E4M3", [0, kmax], b"", "W8A8_MXFP8"),
               (down + ".weight_scale", "U8", [0, kmax // 32 + 1], b"", "W8A8_MXFP8")])
    expect("ms_zero_rows_k_int64_max", "ms", "QK_OK", "-")
    expect("ms_zero_rows_k_int64_max", "inspect", 0, "K=9223372036854775807")
    ms_folder("ms_reserved_kv_keys", good,
              extra_desc={"kv_cache_type": "C8", "kv_quant_type": "C8", "fa_quant_type": "FAKQuant"})
    expect("ms_reserved_kv_keys", "ms", "QK_OK", "-")
    expect("ms_reserved_kv_keys", "inspect", 0, "K=4304")
    # msModelSlim's alternative file names
    ms_folder("ms_alternative_names", good)
    alt = os.path.join(OUT, "ms_alternative_names")
    os.rename(os.path.join(alt, "quant_model_description.json"),
              os.path.join(alt, "quant_model_description_w8a8_mxfp8.json"))
    os.rename(os.path.join(alt, "quant_model_weights.safetensors"),
              os.path.join(alt, "quant_model_weight_w8a8_mxfp8.safetensors"))
    expect("ms_alternative_names", "ms", "QK_OK", "-")
    expect("ms_alternative_names", "load:%s:4304:2" % fc2, "QK_OK", "-")

    ms_folder("ms_desc_names_missing_tensor", linear(down, 4, 80, bias=False),
              extra_desc={down + ".bias": "FLOAT"})
    expect("ms_desc_names_missing_tensor", "ms", E,
           'quant_model_description.json names tensor "%s.bias" (FLOAT), which is not in the weights' % down)
    expect("ms_desc_names_missing_tensor", "inspect", 1, "which is not in the weights")

    ms_folder("ms_tensor_without_entry", linear(down, 4, 80), drop_desc=(down + ".weight_scale",))
    expect("ms_tensor_without_entry", "ms", E,
           'tensor "%s.weight_scale" (U8, in ' % down)
    expect("ms_tensor_without_entry", "ms", E, "has no entry in quant_model_description.json")
    expect("ms_tensor_without_entry", "inspect", 1, "has no entry in quant_model_description.json")

    ms_folder("ms_scale_wrong_cols", linear(down, 4, 80, scale_cols=10))
    expect("ms_scale_wrong_cols", "ms", "QK_OK", "-")
    expect("ms_scale_wrong_cols", "load:%s:80:4" % down, E,
           'load "%s.weight_scale": shape is [4, 10] but the W8A8_MXFP8 linear (N=4, K=80) needs [4, 3]' % down)
    expect("ms_scale_wrong_cols", "inspect", 1, "needs [4, 3]")

    ms_folder("ms_scale_wrong_rows", linear(down, 4, 80, scale_rows=5))
    expect("ms_scale_wrong_rows", "load:%s:80:4" % down, E, "shape is [5, 3] but the W8A8_MXFP8 linear (N=4, K=80) needs [4, 3]")

    ms_folder("ms_scale_floor_k4304", linear(fc2, 2, 4304, scale_cols=4304 // 32, bias=False))
    expect("ms_scale_floor_k4304", "ms", "QK_OK", "-")
    expect("ms_scale_floor_k4304", "load:%s:4304:2" % fc2, E,
           'load "%s.weight_scale": the scale has 134 columns (floor(4304/32)) but K = 4304 needs 135 (ceil(4304/32)): '
           'the exporter dropped the partial last block (16 of 32 elements), so the checkpoint must be re-exported' % fc2)
    expect("ms_scale_floor_k4304", "inspect", 1, "the exporter dropped the partial last block")

    ms_folder("ms_scale_floor_k80", linear(down, 4, 80, scale_cols=2))
    expect("ms_scale_floor_k80", "load:%s:80:4" % down, E, "the scale has 2 columns (floor(80/32)) but K = 80 needs 3")

    ms_folder("ms_scale_ff", linear(down, 4, 80, ff_at=(1, 2)))
    expect("ms_scale_ff", "ms", "QK_OK", "-")
    expect("ms_scale_ff", "load:%s:80:4" % down, "QK_OK", "-")
    expect("ms_scale_ff", "post:%s:80:4" % down, E,
           '"%s.weight_scale" holds 0xFF (a scale never loaded, or NaN) at row 1, block 2' % down)
    expect("ms_scale_ff", "inspect", 1, "0xFF")

    ms_folder("ms_scale_dtype_bf16", linear(down, 4, 80, scale_dt="BF16"))
    expect("ms_scale_dtype_bf16", "load:%s:80:4" % down, E,
           'load "%s.weight_scale": dtype is BF16 but the W8A8_MXFP8 linear\'s weight_scale must be U8' % down)
    expect("ms_scale_dtype_bf16", "inspect", 1, "dtype is BF16")

    ms_folder("ms_scale_dtype_i16_wrong_shape", linear(down, 4, 80, scale_dt="I16", scale_cols=10))
    expect("ms_scale_dtype_i16_wrong_shape", "load:%s:80:4" % down, E,
           "dtype is I16 but")  # dtype is checked before shape

    ms_folder("ms_weight_dtype_bf16", linear(down, 4, 80, weight_dt="BF16"))
    expect("ms_weight_dtype_bf16", "load:%s:80:4" % down, E,
           'load "%s.weight": dtype is BF16 but the W8A8_MXFP8 linear\'s weight must be F8_E4M3' % down)
    expect("ms_weight_dtype_bf16", "inspect", 1, "must be F8_E4M3")

    ms_folder("ms_weight_nan", linear(down, 4, 80, nan_at=(2, 5)))
    expect("ms_weight_nan", "load:%s:80:4" % down, "QK_OK", "-")
    expect("ms_weight_nan", "inspect", 1, "NaN")

    two = linear(down, 4, 80) + norm("model.norm.weight", 80)
    ms_folder("ms_shards_ok", two, shards=[[down + ".weight"], [down + ".weight_scale", down + ".bias", "model.norm.weight"]])
    expect("ms_shards_ok", "ms", "QK_OK", "-")
    expect("ms_shards_ok", "post:%s:80:4" % down, "QK_OK", "-")
    expect("ms_shards_ok", "inspect", 0, "-")

    def point_at_missing(wm):
        wm[down + ".bias"] = "quant_model_weights-00003-of-00003.safetensors"
    ms_folder("ms_shard_missing_file", two, shards=[[down + ".weight"], [down + ".weight_scale", "model.norm.weight"]],
              index_override=point_at_missing)
    expect("ms_shard_missing_file", "ms", E,
           'maps tensor "%s.bias" (and 0 more) to quant_model_weights-00003-of-00003.safetensors, which does not exist' % down)
    expect("ms_shard_missing_file", "set", E, "which does not exist")
    expect("ms_shard_missing_file", "inspect", 1, "which does not exist")

    def unmap(wm):
        del wm["model.norm.weight"]
    ms_folder("ms_shard_unmapped_tensor", two, shards=[[down + ".weight"], [down + ".weight_scale", down + ".bias", "model.norm.weight"]],
              index_override=unmap, drop_desc=())
    expect("ms_shard_unmapped_tensor", "ms", E, 'tensor "model.norm.weight" in ')
    expect("ms_shard_unmapped_tensor", "ms", E, "is not in the weight_map of")

    def misplace(wm):
        wm[down + ".bias"] = "quant_model_weights-00001-of-00002.safetensors"
    ms_folder("ms_shard_wrong_file", two, shards=[[down + ".weight"], [down + ".weight_scale", down + ".bias", "model.norm.weight"]],
              index_override=misplace)
    expect("ms_shard_wrong_file", "ms", E,
           'maps tensor "%s.bias" to quant_model_weights-00001-of-00002.safetensors, but it is in quant_model_weights-00002-of-00002.safetensors' % down)

    def traverse(wm):
        wm[down + ".bias"] = "../ms_ok/quant_model_weights.safetensors"
    ms_folder("ms_shard_path_traversal", two, shards=[[down + ".weight"], [down + ".weight_scale", down + ".bias", "model.norm.weight"]],
              index_override=traverse)
    expect("ms_shard_path_traversal", "ms", E, "which is not a plain file name")

    ms_folder("ms_shard_same_tensor_twice", two,
              shards=[[down + ".weight", "model.norm.weight"], [down + ".weight_scale", down + ".bias", "model.norm.weight"]])
    expect("ms_shard_same_tensor_twice", "ms", E, 'tensor "model.norm.weight" is in both')

    ms_folder("ms_no_weights", linear(down, 4, 80), shards=None)
    os.remove(os.path.join(OUT, "ms_no_weights", "quant_model_weights.safetensors"))
    expect("ms_no_weights", "ms", E, "has neither quant_model_weights.safetensors nor quant_model_weights.safetensors.index.json")

    ms_folder("ms_no_description", linear(down, 4, 80), desc=False)
    expect("ms_no_description", "ms", E, "has no quant_model_description.json")

    ms_folder("ms_desc_bad_json", linear(down, 4, 80), desc_text='{"model_quant_type": "W8A8_MXFP8",')
    expect("ms_desc_bad_json", "ms", E, "quant_model_description.json: not valid JSON")

    ms_folder("ms_desc_duplicate_entry", linear(down, 4, 80),
              desc_text='{"model_quant_type":"W8A8_MXFP8","version":"1.0.0","group_size":32,"metadata":{},"optional":{},'
                        '"%s.weight":"W8A8_MXFP8","%s.weight":"FLOAT","%s.weight_scale":"W8A8_MXFP8","%s.bias":"FLOAT"}'
                        % (down, down, down, down))
    expect("ms_desc_duplicate_entry", "ms", E, "duplicate object key")

    ms_folder("ms_desc_value_not_string", linear(down, 4, 80), extra_desc={down + ".bias": 3})
    expect("ms_desc_value_not_string", "ms", E, 'entry "%s.bias" is not a non-empty string' % down)

    ms_folder("ms_desc_group_size_16", linear(down, 4, 80), desc={"group_size": 16})
    expect("ms_desc_group_size_16", "ms", E, "group_size is 16 but W8A8_MXFP8 uses blocks of 32")

    ms_folder("ms_desc_no_quant_type", linear(down, 4, 80),
              desc_text=json.dumps({"version": "1.0.0", down + ".weight": "W8A8_MXFP8"}))
    expect("ms_desc_no_quant_type", "ms", E, '"model_quant_type" is missing')

    ms_folder("ms_desc_array", linear(down, 4, 80), desc_text="[]")
    expect("ms_desc_array", "ms", E, "the description is not a JSON object")

    ms_folder("ms_corrupt_weights", None, desc=None)
    raw_file(os.path.join("ms_corrupt_weights", "quant_model_weights.safetensors"),
             struct.pack("<Q", 4) + b"{}  " + b"\x00")
    expect("ms_corrupt_weights", "ms", E, "the header names no tensor but the data buffer holds 1 bytes")


# ---------------------------------------------------------------- shard paths ----
def link(target, *where):
    """A relative symlink OUT/where -> target (committed as a link)."""
    os.symlink(target, os.path.join(OUT, *where))


def shard_path_cases():
    """Shard names that escape the folder lexically (always refused) or through a symlink
    (refused unless the caller opts in, as for a Hugging Face cache snapshot whose files link
    into ../../blobs). The targets outside the folders lie in OUT/outside."""
    E = "QK_ERR_FORMAT"
    down = "model.layers.0.mlp.down_proj"
    two = linear(down, 4, 80) + norm("model.norm.weight", 80)
    split = [[down + ".weight"], [down + ".weight_scale", down + ".bias", "model.norm.weight"]]
    s2 = "quant_model_weights-00002-of-00002.safetensors"
    optin = "--allow-external-shards in qk, or QK_ST_SET_ALLOW_EXTERNAL_SHARDS / QK_MS_ALLOW_EXTERNAL_SHARDS, follows such links"
    os.makedirs(os.path.join(OUT, "outside"))

    # lexical escapes in the index: never followed, flag or not
    for case, target in (("ms_shard_absolute_path", "/etc/passwd"),
                         ("ms_shard_subdir_path", "sub/" + s2),
                         ("ms_shard_dotdot", ".."),
                         ("ms_shard_backslash", "..\\" + s2),
                         ("ms_shard_empty_name", "")):
        def point(wm, target=target):
            wm[down + ".bias"] = target
        ms_folder(case, two, shards=split, index_override=point)
        want = 'weight_map entry "%s.bias" names "%s", which is not a plain file name' % (down, target)
        expect(case, "ms", E, want)
        expect(case, "ms_ext", E, want)
        expect(case, "set_ext", E, want)
    expect("ms_shard_absolute_path", "inspect_ext", 1, "which is not a plain file name")

    # a shard that is a symlink out of the folder: its bytes moved to outside/
    def escaping(case, real_name):
        ms_folder(case, two, shards=split)
        os.rename(os.path.join(OUT, case, s2), os.path.join(OUT, "outside", real_name))
        link("../outside/" + real_name, case, s2)
    escaping("ms_shard_symlink_escape", "ms_shard_symlink_escape-2.safetensors")
    expect("ms_shard_symlink_escape", "ms", E, "ms_shard_symlink_escape/%s resolves outside the model folder" % s2)
    expect("ms_shard_symlink_escape", "ms", E,
           "../../blobs): to /")
    expect("ms_shard_symlink_escape", "ms", E, "/outside/ms_shard_symlink_escape-2.safetensors")
    expect("ms_shard_symlink_escape", "ms", E, "qk_st_set_open: shard ")
    expect("ms_shard_symlink_escape", "ms", E, optin)
    expect("ms_shard_symlink_escape", "set", E, "outside the model folder")
    expect("ms_shard_symlink_escape", "ms_ext", "QK_OK", "-")
    expect("ms_shard_symlink_escape", "set_ext", "QK_OK", "-")
    expect("ms_shard_symlink_escape", "post_ext:%s:80:4" % down, "QK_OK", "-")
    expect("ms_shard_symlink_escape", "inspect", 1, "outside the model folder")
    expect("ms_shard_symlink_escape", "inspect", 1, "--allow-external-shards")
    expect("ms_shard_symlink_escape", "inspect_ext", 0, "-")

    # a symlink between files of the folder is fine
    ms_folder("ms_shard_symlink_inside", two, shards=split)
    os.rename(os.path.join(OUT, "ms_shard_symlink_inside", s2),
              os.path.join(OUT, "ms_shard_symlink_inside", ".shard-2.data"))
    link(".shard-2.data", "ms_shard_symlink_inside", s2)
    expect("ms_shard_symlink_inside", "ms", "QK_OK", "-")
    expect("ms_shard_symlink_inside", "post:%s:80:4" % down, "QK_OK", "-")
    expect("ms_shard_symlink_inside", "inspect", 0, "-")
    # so is a model folder reached through a symlink
    link("ms_shards_ok", "ms_folder_is_symlink")
    expect("ms_folder_is_symlink", "ms", "QK_OK", "-")
    expect("ms_folder_is_symlink", "inspect", 0, "-")

    # the single weights file and the description of a ModelSlim folder, linked out of it
    ms_folder("ms_weights_symlink_escape", two)
    os.rename(os.path.join(OUT, "ms_weights_symlink_escape", "quant_model_weights.safetensors"),
              os.path.join(OUT, "outside", "ms_weights_symlink_escape.safetensors"))
    link("../outside/ms_weights_symlink_escape.safetensors", "ms_weights_symlink_escape",
         "quant_model_weights.safetensors")
    expect("ms_weights_symlink_escape", "ms", E,
           "qk_ms_open: weights file corpus/safetensors/ms_weights_symlink_escape/quant_model_weights.safetensors resolves outside the model folder")
    expect("ms_weights_symlink_escape", "ms", E, optin)
    expect("ms_weights_symlink_escape", "ms_ext", "QK_OK", "-")
    ms_folder("ms_desc_symlink_escape", two)
    os.rename(os.path.join(OUT, "ms_desc_symlink_escape", "quant_model_description.json"),
              os.path.join(OUT, "outside", "ms_desc_symlink_escape.json"))
    link("../outside/ms_desc_symlink_escape.json", "ms_desc_symlink_escape", "quant_model_description.json")
    expect("ms_desc_symlink_escape", "ms", E,
           "qk_ms_open: description corpus/safetensors/ms_desc_symlink_escape/quant_model_description.json resolves outside the model folder")
    expect("ms_desc_symlink_escape", "ms_ext", "QK_OK", "-")
    expect("ms_desc_symlink_escape", "inspect", 1, "outside the model folder")
    expect("ms_desc_symlink_escape", "inspect_ext", 0, "-")

    # links that lead nowhere, or around in a circle, or to a folder
    ms_folder("ms_shard_dangling_symlink", two, shards=split)
    os.remove(os.path.join(OUT, "ms_shard_dangling_symlink", s2))
    link("../outside/no-such-file.safetensors", "ms_shard_dangling_symlink", s2)
    expect("ms_shard_dangling_symlink", "ms", E, "to %s, which does not exist in" % s2)
    expect("ms_shard_dangling_symlink", "ms_ext", E, "to %s, which does not exist in" % s2)
    ms_folder("ms_shard_symlink_loop", two, shards=split)
    os.remove(os.path.join(OUT, "ms_shard_symlink_loop", s2))
    link(s2, "ms_shard_symlink_loop", s2)
    expect("ms_shard_symlink_loop", "ms", "QK_ERR_IO",
           "cannot resolve shard corpus/safetensors/ms_shard_symlink_loop/%s: Too many levels of symbolic links" % s2)
    expect("ms_shard_symlink_loop", "ms_ext", "QK_ERR_IO",
           "cannot open corpus/safetensors/ms_shard_symlink_loop/%s: Too many levels of symbolic links" % s2)
    ms_folder("ms_shard_is_folder", two, shards=split)
    os.remove(os.path.join(OUT, "ms_shard_is_folder", s2))
    os.makedirs(os.path.join(OUT, "ms_shard_is_folder", s2))
    with open(os.path.join(OUT, "ms_shard_is_folder", s2, "keep"), "w") as f:
        f.write("a folder where a shard should be\n")
    expect("ms_shard_is_folder", "ms", "QK_ERR_IO",
           "ms_shard_is_folder/%s is a folder; a checkpoint file must be a regular file" % s2)

    # a Hugging Face cache snapshot: every file is a link into ../../blobs
    snap = os.path.join("hf_cache", "models--org--tiny", "snapshots", "0123abcd")
    blobs = os.path.join(OUT, "hf_cache", "models--org--tiny", "blobs")
    os.makedirs(os.path.join(OUT, snap))
    os.makedirs(blobs)
    hf = [("model.layers.0.mlp.down_proj.weight", "BF16", [4, 64], bf16_bytes(256)),
          ("model.norm.weight", "BF16", [64], bf16_bytes(64))]
    wm = {}
    for i, t in enumerate(hf):
        fn = "model-%05d-of-00002.safetensors" % (i + 1)
        blob = "%040x" % (0xb10b0 + i)
        with open(os.path.join(blobs, blob), "wb") as f:
            f.write(st_bytes([t]))
        link("../../blobs/" + blob, snap, fn)
        wm[t[0]] = fn
    with open(os.path.join(blobs, "%040x" % 0x1de0), "w") as f:
        json.dump({"metadata": {"total_size": 640}, "weight_map": wm}, f, indent=2)
    link("../../blobs/%040x" % 0x1de0, snap, "model.safetensors.index.json")
    expect(snap, "set", E, "qk_st_set_open: index corpus/safetensors/%s/model.safetensors.index.json "
           "resolves outside the model folder" % snap)
    expect(snap, "set", E, optin)
    expect(snap, "set", E, "as a Hugging Face cache snapshot's into ../../blobs): to /")
    expect(snap, "set_ext", "QK_OK", "-")
    expect(snap + "/model.safetensors.index.json", "set", E,
           "qk_st_set_open: shard corpus/safetensors/%s/model-00001-of-00002.safetensors resolves outside the model folder" % snap)
    expect(snap + "/model.safetensors.index.json", "set_ext", "QK_OK", "-")
    expect(snap, "inspect", 1, "--allow-external-shards")
    expect(snap, "inspect_ext", 0, "model.layers.0.mlp.down_proj.weight")
    # a plain folder whose one .safetensors file links out of it
    os.makedirs(os.path.join(OUT, "st_folder_symlink_escape"))
    with open(os.path.join(OUT, "outside", "st_folder_symlink_escape.safetensors"), "wb") as f:
        f.write(st_bytes([hf[1]]))
    link("../outside/st_folder_symlink_escape.safetensors", "st_folder_symlink_escape", "model.safetensors")
    expect("st_folder_symlink_escape", "set", E,
           "qk_st_set_open: file corpus/safetensors/st_folder_symlink_escape/model.safetensors resolves outside the model folder")
    expect("st_folder_symlink_escape", "set_ext", "QK_OK", "-")
    # the file itself, named by the caller: no folder to escape
    expect("st_folder_symlink_escape/model.safetensors", "set", "QK_OK", "-")


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    single_files()
    modelslim_folders()
    shard_path_cases()
    with open(os.path.join(OUT, "EXPECTED.txt"), "w") as f:
        f.write("# Generated by tests/corpus/make_corpus.py: PATH<TAB>CHECK<TAB>EXPECT<TAB>SUBSTRING\n"
                "# (see that script for the meaning of each column)\n")
        for c in CASES:
            f.write("\t".join(c) + "\n")
    files = sum(len(fs) for _, _, fs in os.walk(OUT)) - 1
    print("wrote %d cases over %d files under %s" % (len(CASES), files, OUT), file=sys.stderr)


if __name__ == "__main__":
    main()
