#!/usr/bin/env python3
"""Print the stand-in GPUs' state (JSON) for testhost/fake-gpu/nvidia-smi: 8 idle
GPUs, compute mode Default, MIG off, no processes; by profile like the CT200's
(RTX PRO 6000 Blackwell Server Edition, 96 GB, compute capability 12.0, PCIe: no
fabric) or the B300's (B300 SXM6, 288 GB, compute capability 10.3, NVSwitch fabric
registered: State Completed, Status Success).

Usage: testhost/fake-gpu/state.py --uvm-major N [--gpus 8] [--profile rtx-pro-6000|b300]
"""

import argparse
import json
import sys

PROFILES = {
    "rtx-pro-6000": {"name": "NVIDIA RTX PRO 6000 Blackwell Server Edition (stand-in)", "memory_total": 97887,
                     "compute_cap": "12.0", "fabric": {"state": "N/A", "status": "N/A"}},
    "b300": {"name": "NVIDIA B300 SXM6 AC (stand-in)", "memory_total": 275040, "compute_cap": "10.3",
             "fabric": {"state": "Completed", "status": "Success"}},
}


def state(uvm_major: int, gpus: int, profile: str = "rtx-pro-6000") -> dict:
    return {
        "driver_version": "580.95.05",
        "cuda_version": "13.0",
        "uvm_major": uvm_major,
        "profile": profile,
        "gpus": [
            {
                "index": i,
                "uuid": f"GPU-5ad0c0de-0000-4000-8000-{i:012d}",
                **PROFILES[profile],
                "memory_used": 0,
                "compute_mode": "Default",
                "mig_current": "Disabled",
                "mig_pending": "Disabled",
            }
            for i in range(gpus)
        ],
        "processes": [],
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uvm-major", type=int, required=True)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--profile", choices=sorted(PROFILES), default="rtx-pro-6000")
    args = parser.parse_args(argv)
    json.dump(state(args.uvm_major, args.gpus, args.profile), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
