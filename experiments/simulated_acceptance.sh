#!/usr/bin/env bash
# The simulated-acceptance study (configs/sweeps/simulated-acceptance.ini) on
# one GPU: writes the prompt ids (a synthetic target has no tokenizer), runs
# the sweep into OUT_DIR/sim.h5 (rerun the same command to resume after a
# time limit), and prints one line per run from the progress log: the
# simulated rates, the per-level α measured, tokens/s and the speedup over ar.
#   bash experiments/simulated_acceptance.sh OUT_DIR [extra sweep options]
# e.g. a smaller grid: ... OUT_DIR --simulate-acceptance '0.2|0.5|0.8/0.8|0.9137|0.98' --max-new-tokens 128
set -eu
out=${1:?usage: simulated_acceptance.sh OUT_DIR [sweep options]}; shift
bin=${TRIFORCE_BIN:-build/triforce}
cd "$(dirname "$0")/.."
mkdir -p "$out"
ids=$out/ids.npy
if [[ ! -f $ids ]]; then  # 131072 int32 ids below Llama-2's 32000, as a .npy (no numpy needed)
  python3 - "$ids" <<'PY'
import struct, sys
n = 131072
hdr = "{'descr': '<i4', 'fortran_order': False, 'shape': (%d,), }" % n
hdr += " " * (63 - (10 + len(hdr)) % 64) + "\n"
with open(sys.argv[1], "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode())
    f.write(struct.pack("<%di" % n, *[(i * 7919 + 13) % 32000 for i in range(n)]))
PY
fi
export NCCL_NVLS_ENABLE=0
"$bin" sweep --config configs/sweeps/simulated-acceptance.ini --prompt-tokens "$ids" --out "$out/sim.h5" "$@" \
  2> >(tee -a "$out/progress.log" >&2)
# One line per run of the log: "[i/n] triforce ... SIMULATED acceptance A1/A2: X tok/s, Y.YYx ar, alpha a/b, ..."
python3 - "$out/progress.log" <<'PY'
import re, sys
print(f"{'method':10} {'simulated A1/A2':16} {'tok/s':>8} {'x ar':>6}  alpha per level: accepted/drafted (per decision)")
for line in open(sys.argv[1]):
    head = re.match(r"^\[\s*\d+/\d+\] (\S+) ", line)
    speed = re.search(r": ([\d.]+) tok/s, ([\d.]+)x ar(?:, alpha ([\d./]+(?: \(per decision [\d./]+\))?))?", line)
    if not head or not speed:
        continue
    sim = re.search(r"SIMULATED acceptance ([\d./]+):", line)
    print(f"{head.group(1):10} {sim.group(1) if sim else 'real':16} {speed.group(1):>8} {speed.group(2):>6}  "
          f"{speed.group(3) or '-'}")
PY
