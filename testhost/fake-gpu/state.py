#!/usr/bin/env python3
"""Print the stand-in GPUs' state (JSON) for testhost/fake-gpu/nvidia-smi: 8 idle
GPUs like the CT200's (96 GB each), compute mode Default, MIG off, no processes.

Usage: testhost/fake-gpu/state.py --uvm-major N [--gpus 8]
"""

import argparse
import json
import sys


def state(uvm_major: int, gpus: int) -> dict:
    return {
        "driver_version": "580.95.05",
        "cuda_version": "13.0",
        "uvm_major": uvm_major,
        "gpus": [
            {
                "index": i,
                "uuid": f"GPU-5ad0c0de-0000-4000-8000-{i:012d}",
                "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition (stand-in)",
                "memory_total": 97887,
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
    args = parser.parse_args(argv)
    json.dump(state(args.uvm_major, args.gpus), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
