#!/usr/bin/env python3
"""qk bench norm --quick smoke test: the run succeeds and its --json and --plot outputs parse
(JSON, SVG/XML). Exits 77 (skipped) when the CPU lacks the build target's instructions and
qk refuses with qk_init's QK_ERR_CPU message."""
import json
import os
import subprocess
import sys
import xml.dom.minidom

# check_bench_smoke.py OUT_DIR [EMULATOR...] QK: a cross build runs qk under its emulator
out_dir, qk = sys.argv[1], sys.argv[2:]
js, svg = os.path.join(out_dir, "bench_smoke.json"), os.path.join(out_dir, "bench_smoke.svg")
for f in (js, svg):
    if os.path.exists(f):
        os.remove(f)
r = subprocess.run([*qk, "bench", "norm", "--quick", "--json", js, "--plot", svg],
                   capture_output=True, text=True)
sys.stdout.write(r.stdout)
sys.stderr.write(r.stderr)
if r.returncode != 0 and "but this CPU lacks" in r.stderr:
    print("SKIP qk bench norm smoke: this CPU cannot run the build's target")
    sys.exit(77)
if r.returncode != 0:
    sys.exit(f"qk bench norm exited {r.returncode}")
with open(js) as f:
    doc = json.load(f)
if not isinstance(doc, dict) or not doc:
    sys.exit(f"{js}: not a non-empty JSON object")
xml.dom.minidom.parse(svg)
print(f"ok: {js} ({len(doc)} keys) and {svg} parse")
