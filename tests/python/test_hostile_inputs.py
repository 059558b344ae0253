"""Hostile and careless input to `qk` and the Python loader: a clear error, nothing written,
no hang. Each case runs the real tool in a subprocess with a timeout (a hang fails the test
instead of stalling the suite)."""
import json
import os
import struct
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
st_torch = pytest.importorskip("safetensors.torch")

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("QK_BUILD") or os.path.join(HERE, "..", "..", "build")
QK = os.path.join(BUILD, "qk")
if not os.path.exists(QK):
    pytest.skip(f"qk not built at {QK}", allow_module_level=True)


def qk(*args, timeout=60):
    return subprocess.run([QK, *map(str, args)], capture_output=True, text=True, timeout=timeout)


def bf16_folder(d, tensors):
    d.mkdir(parents=True, exist_ok=True)
    st_torch.save_file(tensors, str(d / "model.safetensors"))
    return d


def small(n=8, k=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"model.layers.0.mlp.down_proj.weight": (torch.randn(n, k, generator=g) * 0.1).to(torch.bfloat16),
            "model.layers.0.post_attention_layernorm.weight": torch.zeros(k, dtype=torch.bfloat16)}


def no_stage_left(d):
    return not [f for f in os.listdir(d) if f.startswith(".qk-quantize.")]


def test_fifos_are_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "model.safetensors"
    os.mkfifo(fifo)
    for args in (("inspect", fifo), ("quantize", fifo, tmp_path / "out")):
        r = qk(*args, timeout=20)
        assert r.returncode != 0 and "FIFO" in r.stderr + r.stdout, (args, r.stderr)
    assert not (tmp_path / "out").exists() and no_stage_left(tmp_path)
    ms = tmp_path / "ms"
    ms.mkdir()
    os.mkfifo(ms / "quant_model_description.json")
    r = qk("demo", "--model", ms, timeout=20)
    assert r.returncode != 0 and "FIFO" in r.stderr, r.stderr
    code = f"import qkern\ntry:\n qkern.load_modelslim({str(ms)!r})\nexcept qkern.FileError as e:\n print(e)\n"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20)
    assert "FIFO" in r.stdout, r.stdout + r.stderr


def test_already_quantized_input_is_refused(tmp_path):
    src = bf16_folder(tmp_path / "bf16", small())
    assert qk("quantize", src, tmp_path / "q", "--quiet").returncode == 0
    r = qk("quantize", tmp_path / "q", tmp_path / "qq", "--quiet")
    assert r.returncode == 1 and "already quantized" in r.stderr
    assert "model.layers.0.mlp.down_proj.weight is F8_E4M3" in r.stderr
    assert not (tmp_path / "qq").exists() and no_stage_left(tmp_path)


def test_nonfinite_weights_are_refused_and_nothing_is_written(tmp_path):
    t = small()
    t["model.layers.0.mlp.down_proj.weight"][2, 5] = float("nan")
    src = bf16_folder(tmp_path / "bf16", t)
    r = qk("quantize", src, tmp_path / "out", "--quiet")
    assert r.returncode == 1 and "model.layers.0.mlp.down_proj.weight has a NaN or Inf at [2, 5]" in r.stderr
    assert "--allow-nonfinite" in r.stderr
    assert not (tmp_path / "out").exists() and no_stage_left(tmp_path)
    # into an existing folder: what was there stays as it was
    keep = tmp_path / "existing"
    keep.mkdir()
    (keep / "notes.txt").write_text("mine")
    r = qk("quantize", src, keep, "--quiet", "--force")
    assert r.returncode == 1 and sorted(os.listdir(keep)) == ["notes.txt"]
    r = qk("quantize", src, tmp_path / "out", "--quiet", "--allow-nonfinite")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out" / "quant_model_description.json").exists()


def test_long_names_are_not_truncated(tmp_path):
    name = "model.layers.0." + "x" * 3000 + ".mlp.down_proj.weight"
    t = {name: small()["model.layers.0.mlp.down_proj.weight"]}
    src = bf16_folder(tmp_path / "bf16", t)
    r = qk("quantize", src, tmp_path / "out", "--quiet")
    assert r.returncode == 0, r.stderr
    got = st_torch.load_file(str(tmp_path / "out" / "quant_model_weights.safetensors"))
    assert set(got) == {name, name + "_scale"}
    desc = json.loads((tmp_path / "out" / "quant_model_description.json").read_text())
    assert desc[name + "_scale"] == "W8A8_MXFP8"


def test_empty_inputs_are_refused(tmp_path):
    (tmp_path / "e").mkdir()
    header = b"{}"
    (tmp_path / "e" / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    r = qk("quantize", tmp_path / "e", tmp_path / "out", "--quiet")
    assert r.returncode == 1 and "holds no tensors" in r.stderr, r.stderr
    (tmp_path / "i").mkdir()
    (tmp_path / "i" / "model.safetensors.index.json").write_text('{"metadata": {}, "weight_map": {}}')
    r = qk("quantize", tmp_path / "i", tmp_path / "out", "--quiet")
    assert r.returncode == 1 and "no tensors" in r.stderr + r.stdout, r.stderr
    assert not (tmp_path / "out").exists()


def test_stale_staging_folders_are_removed_and_reruns_do_not_mix(tmp_path):
    src = bf16_folder(tmp_path / "bf16", small(64, 1024))
    dead = 4194303  # above the default pid_max: never a live process
    with pytest.raises(ProcessLookupError):
        os.kill(dead, 0)
    stale = tmp_path / f".qk-quantize.{dead}.abcdef"
    stale.mkdir()
    (stale / "quant_model_weights.safetensors").write_bytes(b"partial")
    out = tmp_path / "out"
    r = qk("quantize", src, out, "--quiet", "--shard-size", "40KB")
    assert r.returncode == 0, r.stderr
    assert not stale.exists() and no_stage_left(tmp_path)
    shards = sorted(f for f in os.listdir(out) if f.endswith(".safetensors"))
    assert len(shards) == 2 and (out / "quant_model_weights.safetensors.index.json").exists()
    r = qk("quantize", src, out, "--quiet", "--force")  # one file now: the old shards go
    assert r.returncode == 0, r.stderr
    assert sorted(f for f in os.listdir(out) if f.startswith("quant_model_weights")) == \
        ["quant_model_weights.safetensors"]
    assert qk("inspect", out).returncode == 0


def raw_safetensors(path, header):
    h = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h)


def test_demo_model_checks_tensors_before_allocating(tmp_path):
    """A 285-byte folder whose down_proj claims [1, 2^62, 0] (0 bytes) must not size any
    placeholder from that claim."""
    ms = tmp_path / "ms"
    ms.mkdir()
    w = "model.layers.0.mlp.down_proj.weight"
    raw_safetensors(ms / "quant_model_weights.safetensors",
                    {w: {"dtype": "F8_E4M3", "shape": [1, 1 << 62, 0], "data_offsets": [0, 0]}})
    (ms / "quant_model_description.json").write_text(json.dumps(
        {"model_quant_type": "W8A8_MXFP8", "version": "1.0.0", "group_size": 32, "metadata": {},
         "optional": {}, w: "W8A8_MXFP8"}))
    r = qk("demo", "--model", ms, timeout=30)
    assert r.returncode == 1 and "must be in 1.." in r.stderr, r.stderr
    # shapes that agree with each other but a tensor that is missing
    t = small(64, 96)
    t["model.layers.0.post_attention_layernorm.weight"] = torch.zeros(64, dtype=torch.bfloat16)
    src = bf16_folder(tmp_path / "bf16", t)
    assert qk("quantize", src, tmp_path / "q", "--quiet").returncode == 0
    r = qk("demo", "--model", tmp_path / "q", timeout=30)
    assert r.returncode == 1 and "has no model.layers.0.mlp.up_proj.weight" in r.stderr, r.stderr
