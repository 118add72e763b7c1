"""What every benchmark reports about where it ran, and how it saves its results."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

import torch

from xfl.files import write_text_atomic


def device_name(device: torch.device) -> str:
    """``"NVIDIA H100 80GB HBM3"`` on CUDA; ``"cpu (x86_64, 2 cores)"`` elsewhere."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{device.type} ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


def write_results(path: Path, results: dict) -> None:
    """Save ``results`` as indented JSON, atomically (a failed write keeps the old file)."""
    write_text_atomic(path, json.dumps(results, indent=2, ensure_ascii=False) + "\n")
