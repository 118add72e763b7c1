"""Greedy generation: xfl against Hugging Face ``transformers`` on the same GPT-2 weights, one CPU thread.

    python -m bench.generate_hf            # GPT-2 layout, vocab 8000, d=256, 8 heads, 6 layers, context 512
    python -m bench.decode --hf            # the same (bench/decode.py hands it over)
    python -m bench.generate_hf --smoke    # a tiny model, 12 new tokens (seconds; the test suite runs it)

A randomly initialised ``xfl.model.GPT`` built as GPT-2 (Pre-LN LayerNorm, learned positions,
tanh-GELU, tied head; no dropout) is copied into ``transformers.GPT2LMHeadModel``
(``xfl.hf_bridge.to_gpt2``); the two must give the same logits. Then, at batch 1 and 8, a
16-token prompt is continued by 200 greedy tokens by ``xfl.decode.sample(model, prompt, 200,
top_k=1)`` and by ``GPT2LMHeadModel.generate(do_sample=False, use_cache=True)``, interleaved
(``xfl.timing.compare``: one untimed round, then five timed ones, the order rotating; one torch
thread, timed by the thread's CPU clock, so time the process spends descheduled on a shared
machine does not count). The tokens must be identical, and equal to xfl's uncached decoder's.

Writes ``bench/results/generate_hf.json`` (or ``--out``): per batch the median seconds of each,
the ratio xfl / HF (median of the per-round ratios, its interquartile range and the verdict),
tokens per second, whether the tokens are identical (to HF's, and to xfl's uncached decoder's
at batch 1: at batch 8 it would take minutes); the sizes, versions, the machine and its
load average. Without ``transformers`` (a development-only dependency: ``requirements-dev.txt``)
it prints one line saying so and writes nothing.

Before issue 70 xfl took 1.09x HF's time at batch 1 and 1.11x at batch 8
(``bench/results/generate_hf_before.json``: this script on the xfl of commit 8d8342f). cProfile
and torch.profiler at batch 1 then showed, besides the matmuls: ``torch.broadcast_shapes`` in the
mask checks (three a layer a step; about a fifth of the Python time), ``torch.cat`` of the keys,
values, keep-mask and tokens every step (about 15% of the operators' time), a NaN check (sum +
isfinite) on every layer's input, the mask built and made safe each step, and top-k + softmax +
multinomial for a choice that is an argmax. Greedy ``sample`` now skips all of these (argmax;
buffers that double; no mask without padding; the loop under ``trusted_inputs`` and
``torch.inference_mode``), and the linear layers are most of what is left.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from bench.report import write_results
from xfl.decode import sample
from xfl.model import GPT, GPTConfig, count_parameters
from xfl.runtime import device_name
from xfl.timing import compare

RESULTS = Path(__file__).resolve().parent / "results" / "generate_hf.json"
SKIP_LINE = ("transformers is not installed: skipping the xfl vs Hugging Face generation benchmark "
             "(it is a development dependency: pip install -r requirements-dev.txt)")

GPT2_LAYOUT = dict(norm="layer", positions="learned", activation="gelu_tanh", scale_embedding=False,
                   norm_first=True, tie_output=True, dropout=0.0)
FULL = dict(model=dict(vocab_size=8000, d_model=256, num_heads=8, num_layers=6, max_len=512),
            prompt=16, new_tokens=200, batches=(1, 8), uncached_batches=(1,), pairs=5, warmup=1)
SMOKE = dict(model=dict(vocab_size=64, d_model=32, num_heads=2, num_layers=2, max_len=64),
             prompt=4, new_tokens=12, batches=(1, 3), uncached_batches=(1, 3), pairs=3, warmup=1)


def gpt2_like(sizes: dict, seed: int = 0) -> GPT:
    """A randomly initialised xfl GPT with GPT-2's block and ``sizes``, in eval mode."""
    torch.manual_seed(seed)
    return GPT(GPTConfig(**sizes, **GPT2_LAYOUT)).eval()


def prompts(vocab: int, batch: int, length: int, pad: int, seed: int = 1) -> torch.Tensor:
    """``(batch, length)`` random token ids without padding (xfl masks the pad id; HF would not)."""
    ids = torch.randint(0, vocab - 1, (batch, length), generator=torch.Generator().manual_seed(seed))
    return ids + (ids >= pad).long()  # every id but pad


def hf_generate(hf, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """Hugging Face's greedy generation with its cache, exactly ``new_tokens`` more: ``(B, L + n)``."""
    return hf.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False, use_cache=True,
                       max_new_tokens=new_tokens, min_new_tokens=new_tokens)


def compare_at(model: GPT, hf, prompt: torch.Tensor, recipe: dict) -> dict:
    """xfl's and HF's greedy generation of the same prompt, interleaved on one thread."""
    n, out = recipe["new_tokens"], {}
    candidates = {"xfl": lambda: out.update(xfl=sample(model, prompt, n, top_k=1)),
                  "hf": lambda: out.update(hf=hf_generate(hf, prompt, n))}
    timing = compare(candidates, pairs=recipe["pairs"], warmup=recipe["warmup"], threads=1)
    B, summary = prompt.shape[0], timing.summary("xfl", "hf")
    uncached = sample(model, prompt, n, top_k=1, use_cache=False) if B in recipe["uncached_batches"] else None
    return {"batch": B, "xfl_seconds": summary["xfl_s"], "hf_seconds": summary["hf_s"],
            "ratio_xfl_over_hf": summary["ratio"], "ratio_interquartile": summary["ratio_interquartile"],
            "verdict": summary["verdict"], "pairs": summary["pairs"], "clock": summary["clock"],
            "xfl_times": list(timing.times["xfl"]), "hf_times": list(timing.times["hf"]),
            "xfl_tokens_per_second": B * n / summary["xfl_s"], "hf_tokens_per_second": B * n / summary["hf_s"],
            "identical_tokens": torch.equal(out["xfl"], out["hf"]),
            "identical_to_uncached": None if uncached is None else torch.equal(out["xfl"], uncached),
            "new_tokens": out["xfl"].shape[1] - prompt.shape[1]}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="a tiny model, 12 new tokens (for the tests)")
    parser.add_argument("--out", type=Path, default=None, help=f"JSON file (default {RESULTS})")
    args = parser.parse_args(argv)
    try:
        import transformers
        from xfl.hf_bridge import to_gpt2
    except ImportError:
        print(SKIP_LINE)
        return {"skipped": SKIP_LINE}
    transformers.logging.set_verbosity_error()  # no generation-config notices in the output
    recipe = SMOKE if args.smoke else FULL
    wall, load = time.perf_counter(), os.getloadavg()
    model = gpt2_like(recipe["model"])
    hf = to_gpt2(model)
    prompt = prompts(model.config.vocab_size, max(recipe["batches"]), recipe["prompt"], model.config.pad_id)
    with torch.no_grad():
        logit_gap = (model(prompt) - hf(prompt).logits).abs().max().item()
    runs = [compare_at(model, hf, prompt[:B], recipe) for B in recipe["batches"]]
    result = {"smoke": args.smoke, "goal": "xfl_seconds <= 0.9 * hf_seconds at every batch, identical tokens",
              "batches": {str(r["batch"]): r for r in runs},
              "meets_goal": all(r["ratio_xfl_over_hf"] <= 0.9 and r["identical_tokens"] for r in runs),
              "identical_tokens": all(r["identical_tokens"] and r["identical_to_uncached"] is not False
                                      for r in runs),
              "max_logit_difference": logit_gap, "model": {**recipe["model"], **GPT2_LAYOUT,
                                                           "parameters": count_parameters(model)},
              "prompt_tokens": recipe["prompt"], "new_tokens": recipe["new_tokens"],
              "device": device_name(torch.device("cpu")), "torch_threads": 1,
              "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
              "load_average_at_start": list(load), "load_average_at_end": list(os.getloadavg()),
              "torch": torch.__version__, "transformers": transformers.__version__,
              "wall_seconds": time.perf_counter() - wall}
    write_results(args.out or RESULTS, result)
    keys = ("ratio_xfl_over_hf", "ratio_interquartile", "xfl_seconds", "hf_seconds", "identical_tokens")
    print(json.dumps({B: {k: r[k] for k in keys} for B, r in result["batches"].items()}, indent=2))
    return result


if __name__ == "__main__":
    main()
