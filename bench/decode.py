"""Decoding with and without the key-value cache (xfl.decode, chapter 6), timed on the CPU.

    python -m bench.decode                      # 1,200 s of training, then 1,000 sentences
    python -m bench.decode --train-seconds 300  # another training budget
    python -m bench.decode --threads 1          # decode on one CPU thread (a shared machine)
    python -m bench.decode --smoke              # tiny model, 50 sentences (a few seconds)
    python -m bench.decode --hf [--smoke]       # greedy generation vs Hugging Face: bench/generate_hf.py

Trains a word-level English -> Spanish model (Pre-LN, d=128, 2+2 layers; sentences of at most
10 words, words seen at least 5 times) on Tatoeba on the CPU for ``--train-seconds``, so that it
writes real sentences that end, not max-length noise (on a shared 2-core CPU, 900 s of a d=256,
3+3-layer model were 234 steps, too few: its greedy output still looped), then decodes held-out
English sentences (the validation split; nothing is chosen with it) four ways in the same run:
greedy and beam search, each with ``use_cache=True`` and ``use_cache=False``, the two
interleaved (``xfl.timing.compare``: one untimed round, then ``pairs`` rounds). Writes JSON to
``bench/results/decode_cache.json`` (or ``--out``): the median seconds of each, the speed-ups
(median of per-pair ratios, with their interquartile range, and the verdict), the
number of sentences, the mean output length, the model's sizes, torch version and CPU threads,
and how many sentences the cached and uncached decoders translated differently (must be 0).
Sentence pairs from www.manythings.org/anki and tatoeba.org (CC-BY 2.0 FR).
Data: XFL_DATA_MIRROR (offline mirror) or a verified download.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from functools import partial
from pathlib import Path

import torch

from bench.report import write_results
from xfl.batches import epoch_batches
from xfl.data.tatoeba import load_pairs
from xfl.data.text import EOS, PAD, SOS, UNK, pad_batch
from xfl.decode import beam_search, greedy_decode
from xfl.model import Seq2SeqTransformer, count_parameters
from xfl.runtime import device_name, seed_everything
from xfl.timing import compare
from xfl.train import TrainConfig, seq2seq_loss, train
from xfl.translation import prepare_task

RESULTS = Path(__file__).resolve().parent / "results" / "decode_cache.json"

FULL = dict(model=dict(d_model=128, num_heads=4, num_encoder_layers=2, num_decoder_layers=2,
                       d_hidden=512, dropout=0.1, norm_first=True),
            task=dict(max_len=10, min_freq=5), lr=3e-3, batch_size=64, sentences=1000,
            decode_batch=100, beam_size=4, train_seconds=1200.0, pairs=3)
SMOKE = dict(model=dict(d_model=32, num_heads=2, num_encoder_layers=1, num_decoder_layers=1,
                        d_hidden=64, dropout=0.1, norm_first=True),
             task=dict(max_len=12, train_limit=3000), lr=3e-3, batch_size=32, sentences=50,
             decode_batch=25, beam_size=4, train_seconds=3.0, pairs=3)


def trained_model(recipe: dict, seconds: float):
    """The Tatoeba task and a model trained on the CPU for ``seconds`` (cosine schedule)."""
    seed_everything(0)
    task = prepare_task(load_pairs(), **recipe["task"])
    model = Seq2SeqTransformer(task.model_config(**recipe["model"]))
    config = TrainConfig(steps=None, max_seconds=seconds, schedule="cosine", lr=recipe["lr"],
                         device="cpu", progress=False, log_every=50)
    state = train(model, partial(epoch_batches, task.train, recipe["batch_size"]), seq2seq_loss, config)
    return task, model.eval(), {"train_seconds": state.seconds, "steps": state.step,
                                "final_loss": state.history[-1]["loss"]}


def source_batches(task, sentences: list[str], batch_size: int) -> list[torch.Tensor]:
    """English sentences -> padded source ids ``(B, S)``, ``batch_size`` sentences a batch."""
    return [pad_batch([task.source_ids(s) for s in sentences[i:i + batch_size]])[0]
            for i in range(0, len(sentences), batch_size)]


def decode_all(model, batches: list[torch.Tensor], beam_size: int, use_cache: bool, extra_len: int = 10):
    """Every batch decoded (greedy for beam_size 1), with or without the cache, as
    ``xfl.translation.translate`` does: hypotheses (id lists) and their scores."""
    hyps, scores = [], []
    with torch.no_grad():
        for src in batches:
            max_len = min(src.shape[1] + extra_len, model.config.max_len - 1)
            if beam_size == 1:
                h, s = greedy_decode(model, src, max_len, sos=SOS, eos=EOS, pad=PAD, banned=(UNK,),
                                     use_cache=use_cache)
            else:
                h, s = beam_search(model, src, max_len, sos=SOS, eos=EOS, pad=PAD, beam_size=beam_size,
                                   banned=(UNK,), use_cache=use_cache)
            hyps, scores = hyps + h, scores + s.tolist()
    return hyps, scores


def cache_comparison(model, batches, beam_size: int, pairs: int, threads: int | None):
    """Cached against uncached decoding of the same batches, interleaved after one untimed round
    (``xfl.timing.compare`` on ``threads`` CPU threads): median seconds, the speed-up as the
    median of per-pair ratios with its interquartile range, the verdict, agreement, and the
    cached hypotheses."""
    out = {}

    def run(use_cache):
        return lambda: out.update({use_cache: decode_all(model, batches, beam_size, use_cache)})
    timing = compare({"uncached": run(False), "cached": run(True)}, pairs=pairs, warmup=1, threads=threads)
    (hyps, scores), (plain_hyps, plain_scores) = out[True], out[False]
    summary = timing.summary("uncached", "cached")
    return {"cached_seconds": summary["cached_s"], "uncached_seconds": summary["uncached_s"],
            "speedup": summary["ratio"], "speedup_interquartile": summary["ratio_interquartile"],
            "pairs": summary["pairs"], "threads": summary["threads"], "verdict": summary["verdict"],
            "differing_sentences": sum(a != b for a, b in zip(hyps, plain_hyps)),
            "max_score_difference": max(abs(a - b) for a, b in zip(scores, plain_scores)),
            "mean_output_tokens": sum(map(len, hyps)) / len(hyps)}, hyps


def model_sizes(model: Seq2SeqTransformer) -> dict:
    c = model.config
    return {"parameters": count_parameters(model), "d_model": c.d_model, "num_heads": c.num_heads,
            "num_encoder_layers": c.num_encoder_layers, "num_decoder_layers": c.num_decoder_layers,
            "d_hidden": c.d_hidden, "norm_first": c.norm_first, "src_vocab": c.src_vocab,
            "tgt_vocab": c.tgt_vocab}


def main(argv=None) -> dict:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--hf" in argv:  # the decoder-only comparison with transformers has its own module
        from bench.generate_hf import main as generate_hf
        return generate_hf([a for a in argv if a != "--hf"])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny model, 50 sentences (for the tests)")
    parser.add_argument("--train-seconds", type=float, default=None, help="training budget (1200; smoke 3)")
    parser.add_argument("--sentences", type=int, default=None, help="how many to decode (1000; smoke 50)")
    parser.add_argument("--threads", type=int, default=None, help="decoding CPU threads (default: torch's)")
    parser.add_argument("--out", type=Path, default=None, help=f"JSON file (default {RESULTS})")
    parser.add_argument("--hf", action="store_true", help="run bench/generate_hf.py instead (xfl vs transformers)")
    args = parser.parse_args(argv)
    recipe = SMOKE if args.smoke else FULL
    wall, load = time.perf_counter(), os.getloadavg()[0]
    task, model, training = trained_model(recipe, args.train_seconds or recipe["train_seconds"])
    training["threads"] = torch.get_num_threads()
    sentences = [en for en, _ in task.valid[: args.sentences or recipe["sentences"]]]
    batches = source_batches(task, sentences, recipe["decode_batch"])
    (greedy, greedy_hyps), (beam, beam_hyps) = (cache_comparison(model, batches, k, recipe["pairs"], args.threads)
                                                for k in (1, recipe["beam_size"]))
    examples = [{"english": en, "greedy": task.target_text(g), "beam": task.target_text(b)}
                for en, g, b in list(zip(sentences, greedy_hyps, beam_hyps))[:5]]
    result = {"smoke": args.smoke, "sentences": len(sentences), "decode_batch": recipe["decode_batch"],
              "greedy": greedy, f"beam_{recipe['beam_size']}": beam, "beam_size": recipe["beam_size"],
              "identical_translations": greedy["differing_sentences"] + beam["differing_sentences"] == 0,
              "examples": examples,
              "model": model_sizes(model), "training": training, "device": device_name(torch.device("cpu")),
              "cpu_threads": greedy["threads"], "load_average_at_start": load,
              "torch": torch.__version__, "recipe": recipe,
              "wall_seconds": time.perf_counter() - wall}
    write_results(args.out or RESULTS, result)
    summary = ("greedy", f"beam_{recipe['beam_size']}", "cpu_threads", "examples")
    print(json.dumps({k: result[k] for k in summary}, indent=2, ensure_ascii=False))
    return result


if __name__ == "__main__":
    main()
