"""Inside the lab VM (make image-sizes): what each lab's starter run needs of the VM.

    .venv/bin/python scripts/image/sizes.py OUT_DIR [LAB ...]

For each lab (default: every lab whose guide runs a fabric), runs the guide's
``run-starter`` block as a student types it, in /testbed, with each ``testbed run`` line
measured by scripts/sizing.py (memory in use at the peak above what was in use before,
busy cores, wall time, the results folder's size). Writes OUT_DIR/labNN.json per lab and
OUT_DIR/sizes.json with the VM's own figures (CPUs, memory, the disk in use, the
architecture, the datapath), and prints one line a lab.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from testbed.reports import grading  # noqa: E402

LABS = ["1", "3", "4", "5", "6", "7", "8", "9", "10"]  # lab 2 is arithmetic: no run


def measure(lab: str, out: Path) -> dict:
    lines = grading.find(lab).commands()["run-starter"]
    record: dict = {"lab": lab, "commands": lines, "runs": []}
    for line in lines:
        words = line.split()
        if words[:2] == [".venv/bin/testbed", "run"] and "--out" in words:
            results = words[words.index("--out") + 1]
            sizing = out / f"lab{int(lab):02d}-{len(record['runs'])}.json"
            argv = [sys.executable, "scripts/sizing.py", "--out", results,
                    "--json", str(sizing), "--", *words]
            subprocess.run(argv, cwd=REPO, check=False)
            if sizing.exists():
                record["runs"].append(json.loads(sizing.read_text()))
        else:
            subprocess.run(["bash", "-c", line], cwd=REPO, check=False)
    (out / f"lab{int(lab):02d}.json").write_text(json.dumps(record, indent=1))
    return record


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    usage = shutil.disk_usage("/")
    vm = {"cpus": os.cpu_count(), "architecture": platform.machine(),
          "memory_mb": int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text())
                           .group(1)) // 1024,
          "disk_used_mb_before": (usage.total - usage.free) >> 20,
          "datapath": "kernel" if Path("/sys/module/openvswitch").exists() else "userspace"}
    labs = {}
    for lab in [a for a in argv[1:] if a != "all"] or LABS:
        labs[lab] = measure(lab, out)
        for run in labs[lab]["runs"]:
            print(f"lab {lab}: {json.dumps(run)}", flush=True)
    usage = shutil.disk_usage("/")
    vm["disk_used_mb_after"] = (usage.total - usage.free) >> 20
    (out / "sizes.json").write_text(json.dumps({"vm": vm, "labs": labs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
