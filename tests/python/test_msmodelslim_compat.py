"""`qk quantize` against msModelSlim, byte for byte (issue: qk quantize writes what msModelSlim
writes, as a servable folder).

The reference is a small, independent re-implementation of msModelSlim 26.x's W8A8_MXFP8
weight export, written here with numpy and ml_dtypes from mxfp8.md's description of it:
per 32-block of K (the last block zero-padded), amax in the weight's dtype, shared exponent
floor(log2(amax)) evaluated in the weight's own dtype (BF16: fl32 log2 rounded to BF16)
minus 8, clamped to [-127, 127]; elements x / 2^e rounded half away from zero at E4M3's
precision (sign(a) * floor(|a| + 0.5) on the element grid) and clamped at +-448. It writes a
real msModelSlim-format folder (its alternative file names, KV-cache keys in the
description), which qkern must load, and `qk quantize` of the same BF16 folder must give the
same weight and scale bytes, K % 32 = 0 and K = 4304 included.
"""
import json
import os
import subprocess

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")
torch = pytest.importorskip("torch")
st_torch = pytest.importorskip("safetensors.torch")
if os.environ.get("QK_REQUIRE_PACKAGE"):
    import qkern
else:
    qkern = pytest.importorskip("qkern")

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("QK_BUILD") or os.path.join(HERE, "..", "..", "build")
QK = os.path.join(BUILD, "qk")
if not os.path.exists(QK):
    pytest.skip(f"qk not built at {QK}", allow_module_level=True)

E4M3 = ml_dtypes.float8_e4m3fn
# Qwen3.5 layer names at small sizes: text hidden 64, intermediate 96 (K = 64 and 96);
# vision hidden 32, intermediate 4304 (linear_fc2: K = 4304, 135 blocks, the last partial)
H, I, VH, VI = 64, 96, 32, 4304


def ms_quantize(w):
    """msModelSlim's W8A8_MXFP8 weight export of a BF16 [N, K] tensor -> (codes, scale bytes)."""
    a = w.float().numpy().astype(np.float64)  # BF16 values, exact
    n, k = a.shape
    kb = -(-k // 32)
    pad = np.zeros((n, kb * 32))
    pad[:, :k] = a
    blk = pad.reshape(n, kb, 32)
    amax = np.abs(blk).max(-1)
    with np.errstate(divide="ignore"):
        log2_bf16 = np.log2(amax).astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)
    e = np.where(amax > 0, np.floor(log2_bf16) - 8, -127)
    e = np.clip(e, -127, 127)
    v = blk * np.exp2(-e)[..., None]
    mag = np.abs(v)
    # E4M3's grid: 2^-9 below 2^-6, else 3 fraction bits; ties away from zero
    _, ex = np.frexp(np.where(mag > 0, mag, 1.0))
    quantum = np.exp2(np.maximum(ex - 1, -6) - 3)
    r = np.minimum(np.floor(mag / quantum + 0.5) * quantum, 448.0)
    codes = (np.sign(v) * r + np.where(np.signbit(v), -0.0, 0.0)).astype(E4M3).view(np.uint8)
    scale = (e + 127).astype(np.uint8)
    return codes.reshape(n, kb * 32)[:, :k].copy(), scale


def bf16(shape, seed, scale=0.05):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * scale).to(torch.bfloat16)


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("hf")
    t = {
        "model.embed_tokens.weight": bf16((100, H), 1),
        "model.layers.0.post_attention_layernorm.weight": bf16((H,), 2, 0.1),
        "model.layers.0.mlp.gate_proj.weight": bf16((I, H), 3),
        "model.layers.0.mlp.up_proj.weight": bf16((I, H), 4),
        "model.layers.0.mlp.down_proj.weight": bf16((H, I), 5),
        "model.visual.blocks.0.mlp.linear_fc1.weight": bf16((VI, VH), 6),
        "model.visual.blocks.0.mlp.linear_fc1.bias": bf16((VI,), 7),
        "model.visual.blocks.0.mlp.linear_fc2.weight": bf16((VH, VI), 8, 0.02),
        "model.visual.blocks.0.mlp.linear_fc2.bias": bf16((VH,), 9),
        "lm_head.weight": bf16((100, H), 10),
    }
    # blocks whose amax sits just below a power of two (where MODELSLIM is FLOOR + 1)
    t["model.layers.0.mlp.down_proj.weight"][0, :32] = torch.tensor(
        [0.99609375, -0.5] + [0.25] * 30).to(torch.bfloat16)
    st_torch.save_file(t, str(d / "model.safetensors"), metadata={"format": "pt"})
    cfg = {"architectures": ["Qwen3_5ForConditionalGeneration"], "hidden_size": H,
           "quantization_config": {"quant_method": "fp8"}, "torch_dtype": "bfloat16"}
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "generation_config.json").write_text('{"do_sample": true}')
    (d / "tokenizer.json").write_text('{"model": {"type": "BPE"}}')
    (d / "tokenizer_config.json").write_text('{"model_max_length": 262144}')
    (d / "merges.txt").write_text("a b\n")
    (d / "chat_template.jinja").write_text("{{ messages }}")
    (d / "configuration_qwen.py").write_text("# remote code\n")
    (d / "README.md").write_text("not copied\n")
    return d, t


def quantized_names(t):
    return [n for n in t if n.endswith(".weight") and t[n].dim() == 2
            and "embed" not in n and "norm" not in n and not n.startswith("lm_head")]


def read_folder(d):
    out = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            out.update(st_torch.load_file(os.path.join(d, f)))
    return out


def run_qk(*args):
    return subprocess.run([QK, *map(str, args)], capture_output=True, text=True)


def test_reference_rule_is_modelslim():
    """The re-implementation's scales are qkern's MODELSLIM rule and not FLOOR (so the
    comparison below can tell the two apart)."""
    w = bf16((64, 4304), 11)
    codes, scale = ms_quantize(w)
    q, s = qkern.mx_quantize(w, scale_rule="modelslim", round="away")
    assert np.array_equal(s.view(torch.uint8).numpy(), scale)
    assert np.array_equal(q.view(torch.uint8).numpy(), codes)
    _, sf = qkern.mx_quantize(w, round="away")
    assert (sf.view(torch.uint8).numpy() != scale).any()


@pytest.mark.parametrize("shard", [None, "20KB"])
def test_qk_quantize_is_byte_identical_to_msmodelslim(hf_folder, tmp_path, shard):
    src, t = hf_folder
    out = tmp_path / "w8a8"
    r = run_qk("quantize", src, out, "--quiet", *(["--shard-size", shard] if shard else []))
    assert r.returncode == 0, r.stderr
    got = read_folder(out)
    compared = 0
    for name in quantized_names(t):
        codes, scale = ms_quantize(t[name])
        q = got[name].view(torch.uint8).numpy()
        s = got[name + "_scale"].numpy()
        assert got[name].dtype == torch.float8_e4m3fn and got[name + "_scale"].dtype == torch.uint8
        assert s.shape == (t[name].shape[0], -(-t[name].shape[1] // 32))
        assert np.array_equal(s, scale), f"{name}: {int((s != scale).sum())} scale bytes differ"
        assert np.array_equal(q, codes), f"{name}: {int((q != codes).sum())} weight bytes differ"
        compared += q.size + s.size
    assert compared == 2 * I * H + 2 * I * 2 + H * I + H * 3 + VI * VH + VI + VH * VI + VH * 135
    print(f"\nqk quantize vs msModelSlim reference: {compared} weight + scale bytes, all identical")
    for name in ("model.embed_tokens.weight", "lm_head.weight",
                 "model.layers.0.post_attention_layernorm.weight"):
        assert torch.equal(got[name], t[name])  # FLOAT, unchanged
    assert got["model.visual.blocks.0.mlp.linear_fc2.bias"].dtype == torch.float32
    desc = json.loads((out / "quant_model_description.json").read_text())
    assert desc["model_quant_type"] == "W8A8_MXFP8" and desc["group_size"] == 32
    assert desc["model.layers.0.mlp.down_proj.weight_scale"] == "W8A8_MXFP8"
    assert desc["lm_head.weight"] == "FLOAT"
    if shard:
        files = sorted(f for f in os.listdir(out) if f.endswith(".safetensors"))
        assert len(files) > 1 and files[0] == f"quant_model_weights-00001-of-{len(files):05d}.safetensors"
        index = json.loads((out / "quant_model_weights.safetensors.index.json").read_text())
        for f in files:  # at most 20 KB of tensors, unless one tensor (with its scale) is larger
            held = {n for n, v in index["weight_map"].items() if v == f}
            data = sum(got[n].numel() * got[n].element_size() for n in held)
            assert data <= 20000 or len({n.removesuffix("_scale") for n in held}) == 1, (f, held)
        assert set(index) == {"metadata", "weight_map"}
        assert index["metadata"]["total_size"] == sum(v.numel() * v.element_size() for v in got.values())
        assert set(index["weight_map"]) == set(got) and set(index["weight_map"].values()) == set(files)
    else:
        assert [f for f in os.listdir(out) if f.endswith(".safetensors")] == ["quant_model_weights.safetensors"]
    # servable: the configs, tokenizer, templates and remote code came along
    cfg = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in cfg and cfg["hidden_size"] == H
    for f in ("generation_config.json", "tokenizer.json", "tokenizer_config.json", "merges.txt",
              "chat_template.jinja", "configuration_qwen.py"):
        assert (out / f).read_bytes() == (src / f).read_bytes(), f
    assert not (out / "README.md").exists()
    # qk inspect, qk demo --model and the Python loader accept it
    r = run_qk("inspect", out)
    assert r.returncode == 0, r.stdout + r.stderr
    r = run_qk("demo", "--model", out, "--tokens", "4")
    assert r.returncode == 0 and "all checks passed" in r.stdout, r.stdout + r.stderr
    layers = qkern.load_modelslim(str(out))
    assert layers["model.visual.blocks.0.mlp.linear_fc2"].in_features == VI


def test_msmodelslim_folder_loads(hf_folder, tmp_path):
    """A folder as msModelSlim writes it (its alternative file names, KV-cache keys in the
    description) loads, and serves the same bits as qk quantize's."""
    src, t = hf_folder
    ms = tmp_path / "msmodelslim"
    ms.mkdir()
    tensors, desc = {}, {"model_quant_type": "W8A8_MXFP8", "version": "1.0.0", "group_size": 32,
                         "kv_cache_type": "FLOAT", "kv_quant_type": "FLOAT", "fa_quant_type": "FLOAT",
                         "metadata": {}, "optional": {}}
    qn = set(quantized_names(t))
    for name, v in t.items():
        if name in qn:
            codes, scale = ms_quantize(v)
            tensors[name] = torch.from_numpy(codes).view(torch.float8_e4m3fn)
            tensors[name + "_scale"] = torch.from_numpy(scale)
            desc[name] = desc[name + "_scale"] = "W8A8_MXFP8"
        else:
            tensors[name] = v.float() if name.endswith(".bias") else v
            desc[name] = "FLOAT"
    st_torch.save_file(tensors, str(ms / "quant_model_weight_w8a8_mxfp8.safetensors"))
    (ms / "quant_model_description_w8a8_mxfp8.json").write_text(json.dumps(desc))
    layers = qkern.load_modelslim(str(ms))
    assert set(layers) == {n[: -len(".weight")] for n in qn}
    r = run_qk("inspect", ms)
    assert r.returncode == 0, r.stdout + r.stderr
    out = tmp_path / "qk"
    assert run_qk("quantize", src, out, "--quiet").returncode == 0
    mine = qkern.load_modelslim(str(out))
    x = bf16((5, VI), 12, 1.0)
    fc2 = "model.visual.blocks.0.mlp.linear_fc2"
    assert torch.equal(layers[fc2](x), mine[fc2](x))
