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


def test_sockets_and_devices_are_refused(tmp_path):
    """Not only FIFOs: a socket cannot even be opened (ENXIO), a device would stream forever."""
    import socket
    d = tmp_path / "s"
    d.mkdir()
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(d / "model.safetensors"))
        for args in (("inspect", d), ("inspect", d / "model.safetensors"), ("quantize", d, tmp_path / "out")):
            r = qk(*args, timeout=20)
            assert r.returncode == 1, (args, r.stdout, r.stderr)
            assert f"{d / 'model.safetensors'} is a socket; a checkpoint file must be a regular file" in \
                r.stdout + r.stderr, (args, r.stdout, r.stderr)
    finally:
        sock.close()
    for dev, kind in (("/dev/zero", "a character device"), ("/dev/null", "a character device")):
        r = qk("inspect", dev, timeout=20)
        assert r.returncode == 1 and f"{dev} is {kind}; a checkpoint file must be a regular file" in r.stdout, r.stdout
        r = qk("quantize", dev, tmp_path / "out", "--quiet", timeout=20)
        assert r.returncode == 1 and f"{dev} is {kind}" in r.stderr, r.stderr
    assert not (tmp_path / "out").exists() and no_stage_left(tmp_path)


def test_infinite_weights_are_refused_like_nan(tmp_path):
    t = small()
    t["model.layers.0.mlp.down_proj.weight"][1, 3] = float("-inf")
    src = bf16_folder(tmp_path / "bf16", t)
    r = qk("quantize", src, tmp_path / "out", "--quiet")
    assert r.returncode == 1 and "model.layers.0.mlp.down_proj.weight has a NaN or Inf at [1, 3]" in r.stderr, r.stderr
    assert not (tmp_path / "out").exists() and no_stage_left(tmp_path)


def hf_snapshot(root, tensors_per_shard):
    """A Hugging Face cache layout: snapshots/<rev>/ holds only links into ../../blobs."""
    blobs, snap = root / "blobs", root / "snapshots" / "0123abcd"
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    wm, n = {}, len(tensors_per_shard)
    for i, ts in enumerate(tensors_per_shard):
        name = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
        st_torch.save_file(ts, str(blobs / f"blob{i}"))
        os.symlink(f"../../blobs/blob{i}", snap / name)
        wm.update({k: name for k in ts})
    (blobs / "index").write_text(json.dumps({"metadata": {}, "weight_map": wm}))
    os.symlink("../../blobs/index", snap / "model.safetensors.index.json")
    return snap


def test_shards_resolving_outside_the_folder_need_the_opt_in(tmp_path):
    t = small()
    snap = hf_snapshot(tmp_path / "models--org--m", [{k: v} for k, v in t.items()])
    real_index = os.path.realpath(snap / "model.safetensors.index.json")
    for args in (("inspect", snap), ("quantize", snap, tmp_path / "out", "--quiet")):
        r = qk(*args)
        text = r.stdout + r.stderr
        assert r.returncode == 1, (args, text)
        assert f"qk_st_set_open: index {snap}/model.safetensors.index.json resolves outside the model folder" in text
        assert "--allow-external-shards in qk" in text and f"): to {real_index}" in text, text
    assert not (tmp_path / "out").exists() and no_stage_left(tmp_path)
    # the index named directly: its first shard is the link that escapes
    r = qk("inspect", snap / "model.safetensors.index.json")
    assert r.returncode == 1 and f"shard {snap}/model-00001-of-00002.safetensors resolves outside" in r.stdout
    assert f"): to {os.path.realpath(snap / 'model-00001-of-00002.safetensors')}" in r.stdout, r.stdout
    r = qk("inspect", "--allow-external-shards", snap)
    assert r.returncode == 0 and "model.layers.0.mlp.down_proj.weight" in r.stdout, r.stdout + r.stderr
    # a ModelSlim folder with one shard linked out of it: refused by qk demo --model too
    assert qk("quantize", bf16_folder(tmp_path / "bf16", small(64, 96)), tmp_path / "q", "--quiet",
              "--shard-size", "4KB").returncode == 0
    q = tmp_path / "q"
    shard = sorted(f for f in os.listdir(q) if f.endswith(".safetensors"))[-1]
    os.rename(q / shard, tmp_path / "elsewhere.safetensors")
    os.symlink("../elsewhere.safetensors", q / shard)
    r = qk("demo", "--model", q, timeout=60)
    assert r.returncode == 1 and f"shard {q}/{shard} resolves outside the model folder" in r.stderr, r.stderr
    assert f"): to {tmp_path}/elsewhere.safetensors" in r.stderr, r.stderr
    assert qk("inspect", q).returncode == 1 and qk("inspect", "--allow-external-shards", q).returncode == 0


def test_lexical_escapes_in_the_index_are_always_refused(tmp_path):
    src = bf16_folder(tmp_path / "bf16", small())
    os.rename(src / "model.safetensors", src / "model-00001-of-00001.safetensors")
    for target in ("../bf16/model-00001-of-00001.safetensors", str(src / "model-00001-of-00001.safetensors")):
        wm = {k: "model-00001-of-00001.safetensors" for k in small()}
        wm["model.layers.0.mlp.down_proj.weight"] = target
        (src / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wm}))
        want = f'weight_map entry "model.layers.0.mlp.down_proj.weight" names "{target}", which is not a plain file name'
        for args in (("inspect", src), ("inspect", "--allow-external-shards", src),
                     ("quantize", src, tmp_path / "out", "--quiet")):
            r = qk(*args)
            assert r.returncode == 1 and want in r.stdout + r.stderr, (args, r.stdout, r.stderr)
    assert not (tmp_path / "out").exists() and no_stage_left(tmp_path)


def fsize_limited(limit):
    import resource
    import signal

    def pre():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # write() fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return pre


def test_a_failed_write_leaves_nothing_that_inspect_accepts(tmp_path):
    """The file-size limit makes a write fail: in the weights (limit below their size), or after
    them, copying a config.json larger than the limit."""
    src = bf16_folder(tmp_path / "bf16", small(256, 1024))
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "notes.txt").write_text("mine")
    for limit, extra in ((100_000, None), (400_000, "x" * 500_000)):
        if extra:
            (src / "config.json").write_text(json.dumps({"architectures": ["X"], "pad": extra}))
        for out, more in ((tmp_path / "out", ()), (keep, ("--force",))):
            r = subprocess.run([QK, "quantize", str(src), str(out), "--quiet", *more], capture_output=True,
                               text=True, timeout=60, preexec_fn=fsize_limited(limit))
            what = "config.json" if extra else "quant_model_weights.safetensors"
            assert r.returncode == 1 and f"/{what} failed: File too large" in r.stderr, (limit, r.stderr)
            assert sorted(os.listdir(keep)) == ["notes.txt"] and no_stage_left(tmp_path) and no_stage_left(keep)
            assert not (tmp_path / "out").exists()
    assert qk("inspect", keep).returncode == 1


def test_permission_denied_is_said(tmp_path):
    """A folder or shard that cannot be read: "permission denied", not "missing". As root the
    tool runs as nobody (root reads mode-000 files)."""
    import tempfile
    base = tempfile.mkdtemp(prefix="qk_perm_", dir="/tmp")   # outside pytest's 0700 tmp
    try:
        os.chmod(base, 0o755)
        ms = os.path.join(base, "ms")
        assert qk("quantize", bf16_folder(tmp_path / "bf16", small()), ms, "--quiet").returncode == 0
        for root, dirs, files in os.walk(base):
            for x in dirs:
                os.chmod(os.path.join(root, x), 0o755)
            for x in files:
                os.chmod(os.path.join(root, x), 0o644)
        pre = None
        if os.geteuid() == 0:
            def pre():
                os.setgid(65534)
                os.setuid(65534)

        def run(*args):
            return subprocess.run([QK, *map(str, args)], capture_output=True, text=True, timeout=60, preexec_fn=pre)
        weights = os.path.join(ms, "quant_model_weights.safetensors")
        os.chmod(weights, 0)
        r = run("inspect", ms)
        assert r.returncode == 1 and f"cannot open {weights}: permission denied" in r.stdout, r.stdout + r.stderr
        os.chmod(weights, 0o644)
        os.chmod(ms, 0)
        r = run("demo", "--model", ms)
        assert r.returncode == 1 and f"cannot look into {ms}: permission denied" in r.stderr, r.stderr
        assert "has no quant_model_description.json" not in r.stderr
    finally:
        for root, dirs, _ in os.walk(base):
            for x in dirs:
                os.chmod(os.path.join(root, x), 0o755)
        os.chmod(os.path.join(base, "ms"), 0o755) if os.path.exists(os.path.join(base, "ms")) else None
        import shutil
        shutil.rmtree(base, ignore_errors=True)


def test_quantize_companion_files_fifo_and_links_out(tmp_path):
    """The files copied beside the weights (tokenizer, configs) meet the weights' rules: a
    FIFO among them is refused (the output would lack it), a link out of the folder is refused
    unless --allow-external-shards; either way before anything is written."""
    src = bf16_folder(tmp_path / "bf16", small())
    os.mkfifo(src / "tokenizer.json")
    r = qk("quantize", src, tmp_path / "out", "--quiet", timeout=20)
    assert r.returncode == 1, r.stderr
    assert f"{src}/tokenizer.json: not a regular file (a FIFO)" in r.stderr, r.stderr
    assert not (tmp_path / "out").exists() and no_stage_left(tmp_path)
    os.unlink(src / "tokenizer.json")
    secret = tmp_path / "secret.txt"
    secret.write_text("not the model's")
    os.symlink(secret, src / "notes.txt")
    r = qk("quantize", src, tmp_path / "out", "--quiet")
    assert r.returncode == 1 and "notes.txt resolves outside the model folder" in r.stderr, r.stderr
    assert not (tmp_path / "out").exists() and no_stage_left(tmp_path)
    r = qk("quantize", src, tmp_path / "out", "--quiet", "--allow-external-shards")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out" / "notes.txt").read_text() == "not the model's"


def test_quantize_output_folder_gets_the_umask_mode(tmp_path):
    """The output folder is staged and renamed into place; it gets the mode any folder the user
    makes gets (0777 & ~umask), not a temporary folder's 0700."""
    src = bf16_folder(tmp_path / "bf16", small())
    old = os.umask(0o022)
    try:
        r = qk("quantize", src, tmp_path / "out", "--quiet")
    finally:
        os.umask(old)
    assert r.returncode == 0, r.stderr
    assert (os.stat(tmp_path / "out").st_mode & 0o777) == 0o755
