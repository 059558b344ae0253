"""python -m qkern bench: what one Python call costs above the C call it makes.

For each case the C call (the serving layer's qk_serve_* the binding calls, timed in a C
loop on the same tensors) and the Python call are timed in the same process; the
difference is the binding's cost: argument parsing, DLPack / buffer views of each tensor,
and for calls without out= the new output in the caller's framework. Peers in the same
run: torch's F.rms_norm and SGLang's native Gemma composite, and vLLM's / sgl-kernel's
CPU ops when they are importable. Each figure is the best of `repeat` runs of `number`
calls (ns per call).
"""
import argparse
import importlib
import timeit

from . import _qkern


def _best(fn, number, repeat):
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e9


def _optional(path, attr):
    try:
        return getattr(importlib.import_module(path), attr)
    except Exception:  # not installed: the peer is left out
        return None


def run(number=20000, repeat=7, shapes=((1, 1024), (16, 5120))):
    import numpy as np
    import ml_dtypes
    import torch
    rows = []
    for m, h in shapes:
        x = torch.randn(m, h).to(torch.bfloat16)
        w = (torch.randn(h) * 0.1).to(torch.bfloat16)
        out = torch.empty_like(x)
        xn, wn = x.view(torch.int16).numpy().view(ml_dtypes.bfloat16), w.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        xf, wf = x.float().numpy(), w.float().numpy()
        outf = np.empty_like(xf)
        c_bf16 = min(_qkern._time_c_call("gemma_rms_norm", number, x, w, out) for _ in range(repeat))
        c_f32 = min(_qkern._time_c_call("gemma_rms_norm", number, xf, wf, outf) for _ in range(repeat))
        g = _qkern.gemma_rms_norm
        cases = [
            ("C call (qk_serve_gemma_rms_norm), bf16", c_bf16, None),
            ("qkern.gemma_rms_norm(x, w, eps, out) torch bf16", _best(lambda: g(x, w, 1e-6, out), number, repeat), c_bf16),
            ("qkern.gemma_rms_norm(x, w) torch bf16 (new out)", _best(lambda: g(x, w), number, repeat), c_bf16),
            ("qkern.gemma_rms_norm numpy bf16 (new out)", _best(lambda: g(xn, wn), number, repeat), c_bf16),
            ("C call (qk_serve_gemma_rms_norm), f32", c_f32, None),
            ("qkern.gemma_rms_norm(x, w, eps, out) numpy f32", _best(lambda: g(xf, wf, 1e-6, outf), number, repeat), c_f32),
        ]
        w1 = (1.0 + w.float()).to(torch.bfloat16)
        sum_out = torch.empty_like(x)
        cases.append(("peer: torch.add(x, w, out=) (a native op's dispatch)", _best(
            lambda: torch.add(x, w, out=sum_out), number, repeat), None))
        cases.append(("peer: torch F.rms_norm(x, (h,), 1 + w)", _best(
            lambda: torch.nn.functional.rms_norm(x, (h,), w1, 1e-6), number // 4, repeat), None))

        def composite():
            v = x.float()
            v = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + 1e-6)
            return (v * (1.0 + w.float())).to(x.dtype)
        cases.append(("peer: SGLang GemmaRMSNorm.forward_native", _best(composite, number // 4, repeat), None))
        vllm_rms = _optional("vllm._custom_ops", "rms_norm")
        if vllm_rms is not None:
            cases.append(("peer: vllm._custom_ops.rms_norm(out, x, 1 + w, eps)", _best(
                lambda: vllm_rms(out, x, w1, 1e-6), number, repeat), None))
        sgl = _optional("sgl_kernel", "gemma_rmsnorm")
        if sgl is not None:
            cases.append(("peer: sgl_kernel.gemma_rmsnorm(x, w, eps, out)", _best(
                lambda: sgl(x, w, 1e-6, out), number, repeat), None))
        for name, ns, base in cases:
            rows.append((f"[{m}, {h}]", name, ns, None if base is None else ns - base))
    # the MXFP8 linear at M = 1 (the decode GEMV), where the call is shortest
    n, k = 1024, 1024
    qw = torch.randint(0, 0x7E, (n, k), dtype=torch.uint8)
    wt = _qkern.MXFP8Weight(qw, torch.full((n, k // 32), 120, dtype=torch.uint8))
    x = torch.randn(1, k).to(torch.bfloat16)
    out = torch.empty(1, n, dtype=torch.bfloat16)
    c = min(_qkern._time_c_call("mxfp8_linear", number // 10, x, wt, out) for _ in range(repeat))
    py = _best(lambda: _qkern.mxfp8_linear(x, wt, None, out), number // 10, repeat)
    rows.append((f"M=1 [{n}, {k}]", "C call (qk_serve_mxfp8_linear)", c, None))
    rows.append((f"M=1 [{n}, {k}]", "qkern.mxfp8_linear(x, w, None, out) torch bf16", py, py - c))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m qkern bench")
    ap.add_argument("--number", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args(argv)
    print(f"qkern {_qkern.version()} target {_qkern.target()}, threads {_qkern.get_num_threads()}; "
          f"ns per call, best of {a.repeat} x {a.number}")
    print(f"{'shape':16} {'call':56} {'ns':>9} {'above C':>9}")
    for shape, name, ns, over in run(a.number, a.repeat):
        print(f"{shape:16} {name:56} {ns:9.0f} {'' if over is None else f'{over:9.0f}':>9}")
    return 0
