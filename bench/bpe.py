"""How long xfl.bpe takes to learn merges on all of Tatoeba (English and Spanish, case kept).

    python -m bench.bpe [--merges 8000] [--repeats 3] [--subword-nmt]

Prints the median wall time of ``train_bpe`` over ``--repeats`` runs and writes
``bench/results/bpe.json`` atomically. ``--subword-nmt`` also times subword-nmt's ``learn_bpe``
(0.3.8) on the same words, the two alternated (``xfl.timing.compare``, ``--repeats`` rounds):
the ratio is the median of per-round ratios, with their interquartile range and the verdict;
and it records whether the two learned the same merges.
Sentence pairs from www.manythings.org/anki and tatoeba.org (CC-BY 2.0 FR).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
from pathlib import Path
from typing import Callable

from xfl.bpe import pretokenize, train_bpe
from xfl.data.tatoeba import ATTRIBUTION, load_pairs
from xfl.atomic_files import write_text_atomic
from xfl.timing import Timing, compare, time_call

RESULTS = Path(__file__).resolve().parent / "results" / "bpe.json"


def subword_nmt_learner(sentences: list[str], merges: int, learned: list) -> Callable[[], None]:
    """A call that runs subword-nmt's ``learn_bpe`` on the same words and puts its merges in
    ``learned``."""
    from subword_nmt.learn_bpe import learn_bpe

    text = "".join(" ".join(pretokenize(s)) + "\n" for s in sentences)

    def run():
        out = io.StringIO()
        with contextlib.redirect_stderr(io.StringIO()):  # its progress bar
            learn_bpe(io.StringIO(text), out, merges)
        learned[:] = [tuple(line.split(" ")) for line in out.getvalue().splitlines()[1:]]
    return run


def against_subword_nmt(learn: Callable[[], None], sentences: list[str], merges: int,
                        repeats: int) -> tuple[Timing, dict]:
    """xfl.bpe and subword-nmt in alternation, ``repeats`` rounds (no warm-up round: a run takes
    seconds, far longer than any first-call cost): xfl's timing and what to record."""
    reference = []
    timing = compare({"xfl.bpe": learn, "subword-nmt": subword_nmt_learner(sentences, merges, reference)},
                     pairs=repeats, warmup=0, threads=1)
    ratio = timing.ratio("subword-nmt", "xfl.bpe")
    return timing.timing("xfl.bpe"), {
        "subword_nmt_seconds": round(timing.median_s("subword-nmt"), 2),
        "subword_nmt_over_xfl": round(ratio.median, 2),
        "subword_nmt_over_xfl_interquartile": [round(ratio.low, 2), round(ratio.high, 2)],
        "verdict": ratio.verdict(), "reference_merges": reference}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--merges", type=int, default=8000)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs (rounds with --subword-nmt, >= 3)")
    parser.add_argument("--subword-nmt", action="store_true", help="also time subword-nmt, interleaved")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    sentences = [text for pair in load_pairs() for text in pair]
    load = os.getloadavg()[0]  # other work on the machine slows the timings
    learned = []
    learn = lambda: learned.append(train_bpe(sentences, args.merges))  # noqa: E731
    if args.subword_nmt:
        timing, versus = against_subword_nmt(learn, sentences, args.merges, args.repeats)
    else:
        timing, versus = time_call(learn, repeats=args.repeats, warmup=0), {}
    bpe = learned[-1]
    results = {"what": "xfl.bpe.train_bpe on all of Tatoeba (English + Spanish, case kept)",
               "sentences": len(sentences), "merges": len(bpe.merges), "vocab": len(bpe),
               "train_seconds_median": round(timing.median_s, 2),
               "train_seconds_spread": round(timing.spread_s, 2), "repeats": timing.repeats,
               "device": f"cpu ({platform.processor() or platform.machine()}, "
                         f"{os.cpu_count()} cores, OMP_NUM_THREADS="
                         f"{os.environ.get('OMP_NUM_THREADS', 'unset')})",
               "load_average_1min_before": round(load, 2),
               "python": platform.python_version(), "data": ATTRIBUTION}
    if versus:
        reference = versus.pop("reference_merges")
        results.update(versus, same_merges_as_subword_nmt=reference == bpe.merges)
    print(json.dumps(results, indent=2, ensure_ascii=False))
    write_text_atomic(args.out, json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    return results


if __name__ == "__main__":
    main()
