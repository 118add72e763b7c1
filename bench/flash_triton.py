"""FlashAttention-2 in Triton (``xfl.triton_attention``, chapter 11) against PyTorch's kernels on
a GPU: forward, and forward + backward, at 1k to 16k tokens, with the achieved TFLOP/s against
the card's peak.

    python -m bench.flash_triton --out bench/results/flash_triton.json     # on a CUDA GPU
    python -m bench.flash_triton --smoke --out /tmp/flash_triton.json      # the same code, tiny, on the CPU

Kernels: ``triton`` (xfl's, with the block sizes that a short sweep at 4k tokens found fastest,
per pass), SDPA forced to its ``flash`` and its memory-``efficient`` kernel
(``torch.nn.attention.sdpa_kernel``), and ``tiles`` (``xfl.tiled_attention``: the same algorithm
as PyTorch operations launched from a Python loop; forward + backward through
``tiled_attention_recomputing``). The batch holds 16k tokens at every length (batch 16k / L), 16
heads of 128, bfloat16, as FlashAttention-2's paper measures. Before timing, each kernel's
output and gradients are compared with a float32 reference at the first length: the errors are
stored, and the Triton kernel's must stay within twice the flash kernel's. TFLOP/s count the
matmuls (``xfl.triton_attention.attention_flops``: 4 L² d per head forward, 2.5x that more for
the backward, halved when causal), whatever a kernel really does (the tiles' causal path visits
the diagonal tiles in full). Without a CUDA GPU the script refuses, unless ``--smoke`` (tiny sizes,
float32, Triton's interpreter: a check of the code path, not a measurement).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from xfl.atomic_files import write_text_atomic
from xfl.tiled_attention import tiled_attention, tiled_attention_recomputing
from xfl.timing import time_call
from xfl.triton_attention import attention_flops, triton_attention, triton_attention_forward

PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0, "L4": 121.0, "T4": 65.0}  # dense bf16 (T4: fp16), datasheets
FULL = dict(lengths=(1024, 2048, 4096, 8192, 16384), tokens=16384, heads=16, head_dim=128, dtype=torch.bfloat16,
            sweep=((64, 64), (128, 64), (64, 128), (128, 128)), tile=1024, repeats=5, warmup=2)
SMOKE = dict(lengths=(32,), tokens=32, heads=1, head_dim=16, dtype=torch.float32, sweep=((16, 16),),
             tile=16, repeats=1, warmup=0)
SDPA_BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION}


def peak_tflops(name: str) -> float | None:
    """The card's dense 16-bit peak from its name (None for an unknown card or a CPU)."""
    return next((peak for key, peak in PEAK_TFLOPS.items() if key in name), None)


def attend(kernel: str, blocks: tuple[int, int], tile: int):
    """``f(q, k, v, is_causal) -> out`` for one kernel; differentiable."""
    if kernel == "triton":
        return lambda q, k, v, c: triton_attention(q, k, v, is_causal=c, block_q=blocks[0], block_k=blocks[1])
    if kernel == "tiles":
        return lambda q, k, v, c: tiled_attention_recomputing(q, k, v, is_causal=c, block_q=tile, block_k=tile)

    def sdpa(q, k, v, c):
        with sdpa_kernel(SDPA_BACKENDS[kernel]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=c)
    return sdpa


def forward_only(kernel: str, blocks: tuple[int, int], tile: int):
    """The forward alone, without autograd's bookkeeping."""
    if kernel == "triton":
        return lambda q, k, v, c: triton_attention_forward(q, k, v, is_causal=c, block_q=blocks[0],
                                                           block_k=blocks[1]).out
    if kernel == "tiles":
        return lambda q, k, v, c: tiled_attention(q, k, v, is_causal=c, block_q=tile, block_k=tile)
    return attend(kernel, blocks, tile)


def inputs(cfg: dict, length: int, device: torch.device, grad: bool = False):
    """q, k, v (B, H, L, d) for a batch of ``tokens`` tokens, and a gradient for the output."""
    batch = max(1, cfg["tokens"] // length)
    g = torch.Generator(device=device).manual_seed(length)
    q, k, v, grad_out = (torch.randn(batch, cfg["heads"], length, cfg["head_dim"], generator=g, device=device,
                                     dtype=cfg["dtype"]) for _ in range(4))
    return [x.requires_grad_(grad) for x in (q, k, v)], grad_out


def errors(cfg: dict, device: torch.device, blocks: dict, kernels: list[str]) -> dict:
    """Mean |error| of each kernel's output and gradients against float32 math, first length, causal."""
    (q, k, v), grad_out = inputs(cfg, cfg["lengths"][0], device, grad=True)
    q32, k32, v32 = (x.detach().float().requires_grad_() for x in (q, k, v))
    with sdpa_kernel(SDPBackend.MATH):
        ref = F.scaled_dot_product_attention(q32, k32, v32, is_causal=True)
    ref_grads = torch.autograd.grad(ref, (q32, k32, v32), grad_out.float())
    found = {}
    for kernel in kernels:
        out = attend(kernel, blocks["fwd+bwd"], cfg["tile"])(q, k, v, True)
        grads = torch.autograd.grad(out, (q, k, v), grad_out)
        found[kernel] = {name: (got.float() - want).abs().mean().item()
                         for name, got, want in zip(("out", "dq", "dk", "dv"), (out, *grads), (ref, *ref_grads))}
    return found


def timed(fn, cfg: dict, device: torch.device) -> float:
    return time_call(fn, repeats=cfg["repeats"], warmup=cfg["warmup"], device=device).median_s


def step(kernel_fn, cfg, length, device, causal: bool, backward: bool):
    """A call running one forward (and its backward) of ``kernel_fn`` at ``length``."""
    (q, k, v), grad_out = inputs(cfg, length, device, grad=backward)
    if not backward:
        return lambda: kernel_fn(q, k, v, causal)
    return lambda: torch.autograd.grad(kernel_fn(q, k, v, causal), (q, k, v), grad_out)


def sweep(cfg: dict, device: torch.device) -> dict:
    """Per pass, the Triton block sizes (block_q, block_k) fastest at the middle length, causal."""
    length, best = cfg["lengths"][len(cfg["lengths"]) // 2], {}
    for name, backward in (("fwd", False), ("fwd+bwd", True)):
        times = {}
        for blocks in cfg["sweep"]:
            make = attend if backward else forward_only
            try:
                times[blocks] = timed(step(make("triton", blocks, cfg["tile"]), cfg, length, device, True, backward),
                                      cfg, device)
            except Exception as error:  # a configuration the card cannot hold (shared memory): skipped
                print(f"[sweep] {name} blocks {blocks}: {type(error).__name__}: {str(error)[:120]}")
        best[name] = min(times, key=times.get)
        print(f"[sweep] {name} at L={length}: " + ", ".join(f"{b}: {1e3 * t:.2f} ms" for b, t in times.items()))
    return best


def run(cfg: dict, device: torch.device) -> dict:
    """Every (pass, causal, length, kernel) timed; the result file's content."""
    kernels = ["triton", "tiles"] + ([*SDPA_BACKENDS] if device.type == "cuda" else [])
    blocks = sweep(cfg, device)
    errs = errors(cfg, device, blocks, kernels)
    print("mean |error| against float32 (causal, L={}): ".format(cfg["lengths"][0])
          + "; ".join(f"{k} " + ", ".join(f"{n} {e:.1e}" for n, e in v.items()) for k, v in errs.items()))
    if device.type == "cuda":
        worst = max(errs["triton"][n] / errs["flash"][n] for n in ("out", "dq", "dk", "dv"))
        assert worst <= 2.0, f"the Triton kernel's error is {worst:.2f}x the flash kernel's (expected <= 2)"
    rows, peak = [], peak_tflops(torch.cuda.get_device_name() if device.type == "cuda" else "cpu")
    for backward, pass_name in ((False, "fwd"), (True, "fwd+bwd")):
        for causal in (False, True):
            for length in cfg["lengths"]:
                for kernel in kernels:
                    make = attend if backward else forward_only
                    fn = step(make(kernel, blocks[pass_name], cfg["tile"]), cfg, length, device, causal, backward)
                    seconds = timed(fn, cfg, device)
                    batch = max(1, cfg["tokens"] // length)
                    flops = attention_flops(batch * cfg["heads"], length, length, cfg["head_dim"], cfg["head_dim"],
                                            causal, with_backward=backward)
                    rows.append({"pass": pass_name, "causal": causal, "length": length, "kernel": kernel,
                                 "ms": 1e3 * seconds, "tflops": flops / seconds / 1e12})
                    print(f"{pass_name:>8} causal={causal!s:>5} L={length:>6} {kernel:>9}: {1e3 * seconds:9.3f} ms "
                          f"{rows[-1]['tflops']:8.2f} TFLOP/s" + (f" ({rows[-1]['tflops'] / peak:.0%} of peak)"
                                                                  if peak else ""), flush=True)
                    torch.cuda.empty_cache() if device.type == "cuda" else None
    return {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu (Triton's interpreter)",
            "torch": torch.__version__, "triton": __import__("triton").__version__,
            "dtype": str(cfg["dtype"]).removeprefix("torch."), "tokens": cfg["tokens"], "batch": "tokens / length",
            "heads": cfg["heads"], "head_dim": cfg["head_dim"], "peak_tflops": peak,
            "triton_blocks": {k: list(v) for k, v in blocks.items()}, "errors": errs, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("bench/results/flash_triton.json"))
    parser.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU under Triton's interpreter")
    args = parser.parse_args(argv)
    if not args.smoke and not torch.cuda.is_available():
        print("bench/flash_triton.py times compiled Triton kernels against SDPA's CUDA kernels: it needs a CUDA "
              "GPU, and torch.cuda.is_available() is False here. Run it on the GPU machine (tools/env/gpu_plan.py "
              "queues it as step flash_triton), or pass --smoke to check the code path on the CPU.", file=sys.stderr)
        return 2
    device = torch.device("cpu" if args.smoke else "cuda")
    result = run(SMOKE if args.smoke else FULL, device)
    result["smoke"] = args.smoke
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out, json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
