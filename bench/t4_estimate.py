"""Minutes of each chapter's full profile on Colab's T4 (and on an H100), estimated.

    python -m bench.t4_estimate            # prints per chapter, writes bench/results/t4_estimate.json
    python -m bench.t4_estimate --only ch03_masking,ch08_pixel   # some chapters (the test's run)
    python -m bench.t4_estimate --data     # re-measures DATA from Tatoeba (slow: minutes)

The rule is ``xfl.estimate``'s: one step's FLOPs (``FlopCounterMode``, attention on the math
path) over a stated fraction of the GPU's peak, plus its eager aten ops (counted under autocast,
as a GPU's mixed-precision step dispatches them) times a host cost per op; work a chapter does
on the CPU (``on_cpu``) at ``COLAB_CPU``'s rate. Each chapter's full-profile work is a small
table below, read from the committed chapter source (file:line in ``source``): every training
run (model, batch, steps, how many runs) and every evaluation or decoding loop over thousands
of examples. Decoding is counted on an untrained model to the length cap (``translate``'s
source length + 10): an upper bound, as a trained model stops a batch once every row has written
EOS. A step is counted once per distinct model and shape, on a batch of ``COUNT_BATCH`` (FLOPs
scale with the batch, ops do not). Not counted: data preparation on the CPU (tokenising, BPE),
the chapters' CPU-only cells (chapters 0-2 and 4 run on the CPU even on Colab), plots, small
timing cells, and compilation (a T4 does not compile, ``xfl.precision``; the H100 figure is
eager, with the op term printed apart). ``DATA`` holds the shapes measured on Tatoeba by
``--data`` (vocabularies, mean padded batch lengths), so that this runs in about 30 s of CPU.
``PROPOSALS`` are changed full-profile values that the rule puts within 15 minutes (printed
beside the committed ones); ``stale_sources`` fails when a chapter no longer holds what the
inventory was read from.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, replace
from pathlib import Path

from bench.report import write_results
from bench.t4_workloads import COUNT_BATCH, DATA, WORKLOADS, modern_variants
from xfl.ablation import RATE_FACTORS
from xfl.ablation import RECIPES as MODERN
from xfl.estimate import COLAB_CPU, H100, T4, Device, Work
from xfl.vit_train import RECIPES as VIT

RESULTS = Path(__file__).resolve().parent / "results" / "t4_estimate.json"
LIMIT_MINUTES = 15.0  # issue 53: each chapter's full profile within 15 minutes on a T4
DECODE_BATCH = 128  # xfl.translation.translate's batch


@dataclass(frozen=True)
class Train:
    """``runs`` training runs of ``steps`` steps of ``batch`` examples of ``workload``."""

    what: str
    workload: str
    batch: int
    steps: int
    runs: int = 1
    source: str = ""
    when: str = ""  # counted only while the source's chapter holds this text (a study in flux)

    def work(self, step: Work) -> Work:
        return step.scaled(self.batch / COUNT_BATCH) * (self.steps * self.runs)


@dataclass(frozen=True)
class Pass:
    """``passes`` passes over ``examples`` examples, ``batch`` at a time: forward passes
    (evaluation) or a decoder (``workload`` names a decoding workload)."""

    what: str
    workload: str
    examples: int
    passes: int = 1
    batch: int = DECODE_BATCH
    source: str = ""
    on_cpu: bool = False  # the chapter moves the model to the CPU for it (COLAB_CPU's rate)
    when: str = ""

    def work(self, one_batch: Work) -> Work:
        batches = math.ceil(self.examples / self.batch)
        return one_batch.scaled(self.batch / COUNT_BATCH) * (batches * self.passes)


@dataclass(frozen=True)
class Fixed:
    """Work bounded by the clock, not by steps (``max_seconds``): the same seconds on any GPU."""

    what: str
    seconds: float
    source: str = ""


# ---------------------------------------------------------------- the inventory
# Read from the chapters (2026-11-26; chapters 5 and 7 with the proposals below applied);
# file:line in each entry's source.
TR, BL = "ch05_encoder_decoder/translation.md", "ch06_bleu/bleu_decoding.md"
DC = "ch06_decoding/decoding.md"  # chapter 6's second page
VT, GP = "ch07_vit/vision_transformer.md", "ch09_gpt/decoder_only.md"
MB = "ch10_modern/modern_block.md"
WORDS_VALID, WORDS_TEST = DATA["words"]["valid"], DATA["words"]["test"]  # held-out English sentences
CH06_STEPS = 6000  # bleu_decoding.md:407, decoding.md:78
VIT_STEPS_PER_EPOCH = 50_000 // VIT["full"].batch_size  # the GPU recipe: all 50,000 images
POOL_STEPS = 5 * VIT_STEPS_PER_EPOCH  # vision_transformer.md:625
HEADLINE_STEPS_T4 = 5_060  # ViT-Lite-7/4 (cls) in its 300 s on a T4 by this rule: 300 s / 0.0593 s per step
MODERN_FULL = MODERN["full"]
MODERN_RECIPE = MODERN_FULL["recipe"]

CHAPTERS = {
    "ch03_masking": [
        Train("causal vs leaky sorter, 2 variants x 3 seeds", "TinyDecoder (sorting)", 64, 1000, 6,
              "ch03_masking/masking.md:318,346"),
    ],
    "ch05_encoder_decoder": [
        Train("FG vs Pre-LN: 4 variants x 3 seeds", "translator 6+6 (words)", 128, 1000, 12, f"{TR}:631-653"),
        Train("gradient norms at initialisation, 2 x 3 models", "translator 6+6 (words)", 64, 1, 6, f"{TR}:790"),
        Train("the translator, then 5 steps resumed", "translator 6+6 (words)", 128, 3005, 1, f"{TR}:853,911"),
        Pass("held-out BLEU, greedy, every test sentence", "greedy 6+6", WORDS_TEST, source=f"{TR}:872"),
        Train("loss over padding (DLStudio's way), 3 seeds", "translator 6+6, targets padded to 32", 128,
              1000, 3, f"{TR}:944-953"),
        Pass("padding report: 2 held-out losses x 6 models", "translator 6+6 forward", 2000, 12,
             batch=2000, source=f"{TR}:961-981"),
        Pass("padding report: translate + BLEU x 6 models", "greedy 6+6", WORDS_TEST, 12,
             source=f"{TR}:970-981"),
    ],
    "ch06_bleu": [
        Train("healthy run (6 snapshots)", "translator 4+4 (words)", 128, CH06_STEPS, 1, f"{BL}:407,434"),
        Train("diverged run from step 4000", "translator 4+4 (words)", 128, CH06_STEPS // 3, 1, f"{BL}:438"),
        Pass("snapshot BLEU: 8 snapshots x 1000 sentences", "greedy 4+4", 1000, 8, source=f"{BL}:462,476-477"),
    ],
    "ch06_decoding": [
        Train("the healthy run again (the page runs on its own)", "translator 4+4 (words)", 128, CH06_STEPS, 1,
              f"{DC}:81,88"),
        Pass("greedy on every validation sentence", "greedy 4+4", WORDS_VALID, 1, source=f"{DC}:209"),
        Pass("beam 4, raw and length-normalised", "beam 4, 4+4", WORDS_VALID, 2, source=f"{DC}:209"),
        Pass("<unk> allowed: greedy", "greedy 4+4", WORDS_VALID, 1, source=f"{DC}:281"),
        Pass("<unk> allowed: beam 4", "beam 4, 4+4", WORDS_VALID, 1, source=f"{DC}:281"),
        Pass("cache timing, greedy: 4 rounds cached + ours", "greedy 4+4", WORDS_VALID, 8, source=f"{DC}:456"),
        Pass("cache timing, greedy: 4 rounds without cache", "greedy 4+4, no cache", WORDS_VALID, 4,
             source=f"{DC}:456"),
        Pass("cache timing, beam 4: 4 rounds cached + ours", "beam 4, 4+4", WORDS_VALID, 8, source=f"{DC}:456"),
        Pass("cache timing, beam 4: 4 rounds without cache", "beam 4, 4+4, no cache", WORDS_VALID, 4,
             source=f"{DC}:456"),
        # choose_decoding on the healthy run (words): greedy, then beams 2, 4 and 8 x 3 length
        # penalties; a beam-2 pass counted as a beam-4 one, a beam-8 pass as two (an upper bound)
        Pass("choose_decoding: greedy", "greedy 4+4", WORDS_VALID, 1, source=f"{DC}:546-547"),
        Pass("choose_decoding: beam 2 x 3 length penalties (as beam 4)", "beam 4, 4+4", WORDS_VALID, 3,
             source=f"{DC}:546-547"),
        Pass("choose_decoding: beam 4 x 3 length penalties", "beam 4, 4+4", WORDS_VALID, 3,
             source=f"{DC}:546-547"),
        Pass("choose_decoding: beam 8 x 3 length penalties (2 beam-4 passes each)", "beam 4, 4+4",
             WORDS_VALID, 6, source=f"{DC}:546-547"),
        Pass("test: healthy run greedy", "greedy 4+4", WORDS_TEST, 1, source=f"{DC}:567"),
        Pass("test: healthy run beam 4", "beam 4, 4+4", WORDS_TEST, 1, source=f"{DC}:567"),
        Pass("test: the chosen decoder (counted as beam 8)", "beam 4, 4+4", WORDS_TEST, 2, source=f"{DC}:568"),
    ],
}
CHAPTERS.update({
    "ch07_vit": [
        Fixed("the GPU recipe: ViT-Lite-7/4 for the chapter's max_seconds=300", 300.0,
              f"{VT}:414-415, xfl/vit_train.py RECIPES"),
        Pass("its test accuracy (10,000 images)", "ViT-Lite-7/4 predict", 10_000, 1, batch=1000, source=f"{VT}:452"),
        *(Train(f"pooling '{pool}', 3 seeds x 5 epochs", f"ViT-Lite-7/4 ({pool})", 512, POOL_STEPS, 3,
                f"{VT}:624-646") for pool in ("flatten", "cls", "mean")),
        Pass("pooling runs' test accuracy, 9 x 10,000", "ViT-Lite-7/4 predict", 10_000, 9, batch=1000,
             source=f"{VT}:634"),
        Train("the small CNN, 3 seeds x 5 epochs (its test pass not counted)", "small CNN", 512, POOL_STEPS, 3,
              f"{VT}:795-798"),
        # the CNN beside the headline: state.step steps, what ViT-Lite made in its 300 s (on a T4
        # about 5,100 by this rule: 300 s over its step estimate)
        Train("the small CNN at the headline's steps, seed 0", "small CNN", 512, HEADLINE_STEPS_T4, 1,
              f"{VT}:847-849", when="same_steps = dataclasses.replace(config, steps=state.step"),
        Pass("its test accuracy (10,000 images)", "small CNN predict", 10_000, 1, batch=1000, source=f"{VT}:850",
             when="cnn_predictions = predict(cnn, test_x, normalize)"),
    ],
    "ch08_pixel": [
        Train("the tiny pixel classifier", "TinyPixelClassifier", 32, 2000, 1, "ch08_pixel/pixel_attention.md:324"),
    ],
    "ch09_gpt": [
        Train("the character GPT + 2 more seeds", "GPT (characters)", 128, 2200, 3, f"{GP}:219-225,577"),
        Train("encoder-only (masked) models, 3 seeds", "GPT, masked (characters)", 128, 2200, 3, f"{GP}:578"),
        Train("subword GPT, 3 seeds", "GPT (subwords)", 128, 2200, 3, f"{GP}:988"),
        Train("fine-tuning: 3 variants x 3 seeds", "GPT (pairs)", 64, 750, 9, f"{GP}:772-786"),
        Train("question classifier: 2 starts x 3 seeds", "GPT (characters)", 64, 750, 6,
              f"{GP}: fine_tune_classifier", when="fine_tune_classifier("),
        Pass("scoring 4,000 sentences: 20 curve points, perplexity, hidden characters, bits per character",
             "GPT forward (characters)", 4000, 40, batch=256, source=f"{GP}:224,277,628,989-991"),
        Pass("fine-tuning curves: 10 points x 9 runs on 1,000 pairs", "GPT forward (pairs)", 1000, 91, batch=256,
             source=f"{GP}:764-786"),
    ],
    "ch10_modern": [
        *(Train(f"{name}, {len(MODERN_FULL['seeds'])} seeds", f"modern: {name}", MODERN_RECIPE.batch,
                MODERN_RECIPE.steps, len(MODERN_FULL["seeds"]), f"{MB}:439,567,702, xfl/ablation.py RECIPES")
          for name in modern_variants()),
        # the sweep's four rates: at the 2017 block's best its runs are the ablation's (counted above)
        *(Train(f"lr sweep: {name} at 3 more rates, {len(MODERN_FULL['seeds'])} seeds", f"modern: {name}",
                MODERN_RECIPE.batch, MODERN_RECIPE.steps, (len(RATE_FACTORS) - 1) * len(MODERN_FULL["seeds"]),
                f"{MB}:419 lr_sweep (xfl/ablation.py)", when="lr_sweep(") for name in ("2017 block", "all together")),
        # at the sweep's top rate: the 2017 block's runs are the sweep's, QK-norm's are new
        Train(f"QK-norm study: QK-norm at 10x the rate, {len(MODERN_FULL['seeds'])} seeds", "modern: QK-norm",
              MODERN_RECIPE.batch, MODERN_RECIPE.steps, len(MODERN_FULL["seeds"]),
              f"{MB}:515 qk_norm_study (xfl/ablation.py)", when="qk_norm_study("),
        Pass("validation curves: evals x runs x valid_windows (the studies' runs too)", "modern block forward",
             MODERN_RECIPE.valid_windows,
             MODERN_RECIPE.evals * len(MODERN_FULL["seeds"]) * (len(modern_variants()) + 2 * (len(RATE_FACTORS) - 1) + 1),
             batch=256, source="xfl/ablation.py:train_variant"),
    ],
})


# What the inventory's numbers were read from: each line must still be in the chapter source
# (``stale_sources``), and no cell may call a study the inventory does not count (ABSENT).
CHAPTER_FILES = Path(__file__).resolve().parent.parent / "chapters"
READ_FROM = {
    "ch03_masking/masking.md": ["STEPS, SEEDS = pick(full=1000, fast=100), (0, 1, 2)"],
    TR: ["STEPS, BATCH = pick(full=1000, fast=240), pick(full=128, fast=32)",
         "SEEDS = pick(full=(0, 1, 2),",
         "TRANSLATOR_STEPS = pick(full=3000,", "model = model.eval()  # where it trained",
         "for en, refs in task.test[: pick(full=2000, fast=300)]"],
    BL: ["STEPS, BATCH = pick(full=6000, fast=600, cpu=1000), pick(full=128, fast=64)",
         "EVAL = task.valid[: pick(full=1000, fast=300)]"],
    DC: ["STEPS, BATCH = pick(full=6000, fast=600, cpu=1000), pick(full=128, fast=64)",
         "BEAMS, PENALTIES = (1, 2, 4, 8), (0.0, 0.6, 1.0)",
         "VALID = task.valid[: pick(full=None, fast=300)]", "pairs=pick(full=3, fast=3)"],
    VT: ["POOL_STEPS = pick(full=5 * task.steps_per_epoch,", "POOL_SEEDS = (0, 1, 2)", "recipe = RECIPES[profile()]",
         "max_seconds=pick(full=300.0,"],
    "ch08_pixel/pixel_attention.md": ["steps = pick(full=2000, fast=150)"],
    GP: ["STEPS, BATCH, LR = (\n    pick(full=2200, fast=300, cpu=800),\n    pick(full=128, fast=32),",
         "SEEDS = pick(\n    full=(0, 1, 2),", "FT_STEPS, FT_SEEDS = pick(full=750, fast=100, cpu=250), SEEDS",
         "n_test = n_valid = pick(full=4000,"],
    MB: ["ablation = compare_variants(streams, tuned, variants, SEEDS,", "done=sweep[tuned.lr])",
         "position_study(streams, tuned, SEEDS, ablation)", "kv_head_study(streams, tuned, SEEDS, ablation)"],
}
ABSENT: dict[str, list[str]] = {}  # file -> calls that would add runs the inventory does not count


def stale_sources(root: Path = CHAPTER_FILES, absent: dict = ABSENT) -> list[str]:
    """Lines the inventory was read from that a chapter no longer holds, and calls it now makes
    that the inventory does not count: [] while the inventory is current."""
    stale = []
    for name, lines in READ_FROM.items():
        text = (root / name).read_text()
        stale += [f"{name}: no longer holds {line!r}" for line in lines if line not in text]
        stale += [f"{name}: now calls {call!r}, not in the inventory" for call in absent.get(name, ())
                  if call in text]
    return stale


def present(chapters: dict, root: Path = CHAPTER_FILES) -> dict:
    """``chapters`` without the entries whose ``when`` text their chapter does not hold (yet)."""
    holds = lambda e: not getattr(e, "when", "") or e.when in (root / e.source.split(":")[0]).read_text()  # noqa: E731
    return {chapter: [e for e in entries if holds(e)] for chapter, entries in chapters.items()}


# ---------------------------------------------------------------- the proposal
# The smallest changes found that bring each chapter within LIMIT_MINUTES by the rule, keeping
# every verdict's seeds and variants (issue 53 point 4): fewer steps, a shorter clock budget,
# evaluation on the GPU. Adopted: CHAPTERS holds the new values. Whether each lesson still shows
# at them needs a GPU run to say.
PROPOSALS: dict = {}  # all adopted on 2026-11-26 (chapters 5, 6, 7 and 9)


def proposed(chapters: dict = CHAPTERS, proposals: dict = PROPOSALS) -> dict:
    """``chapters`` with each entry whose ``what`` starts with a proposal's key changed by it."""
    changed = {}
    for chapter, entries in chapters.items():
        rules = proposals.get(chapter, {})
        changed[chapter] = [next((replace(e, **c) for key, c in rules.items() if e.what.startswith(key)), e)
                            for e in entries]
    return changed


# ---------------------------------------------------------------- the estimate
def count(chapters: dict) -> dict[str, Work]:
    """``Work`` of one counted step or batch of every workload the ``chapters`` name."""
    names = sorted({e.workload for entries in chapters.values() for e in entries if not isinstance(e, Fixed)})
    return {name: WORKLOADS[name]() for name in names}


def seconds(entry, counted: dict[str, Work], gpu: Device) -> float:
    """Seconds of one inventory entry on ``gpu`` (the CPU's rate where the chapter uses it)."""
    if isinstance(entry, Fixed):
        return entry.seconds
    device = COLAB_CPU if getattr(entry, "on_cpu", False) else gpu
    return device.seconds(entry.work(counted[entry.workload]))


def row(entry, counted: dict[str, Work]) -> dict:
    """One entry's record: what, where from, its size, FLOPs, ops, T4 and H100 minutes (the T4's
    split into the FLOP term and the op term)."""
    out = {"what": entry.what, "source": entry.source, "t4_minutes": seconds(entry, counted, T4) / 60,
           "h100_minutes": seconds(entry, counted, H100) / 60}
    if isinstance(entry, Fixed):
        return {**out, "seconds": entry.seconds}
    work = entry.work(counted[entry.workload])
    sizes = (dict(batch=entry.batch, steps=entry.steps, runs=entry.runs) if isinstance(entry, Train) else
             dict(examples=entry.examples, passes=entry.passes, batch=entry.batch, on_cpu=entry.on_cpu))
    out.update(workload=entry.workload, **sizes, flops=work.flops, ops=work.ops)
    for key, gpu in (("t4", T4), ("h100", H100)):
        flop_s, op_s = (COLAB_CPU if getattr(entry, "on_cpu", False) else gpu).terms(work)
        out.update({f"{key}_flop_minutes": flop_s / 60, f"{key}_op_minutes": op_s / 60})
    return out


TOTALS = ("t4_minutes", "h100_minutes", "t4_flop_minutes", "t4_op_minutes", "h100_flop_minutes",
          "h100_op_minutes")


def estimate(chapters: dict, counted: dict[str, Work]) -> dict:
    """Per chapter its rows and total minutes on each GPU; the book's sums."""
    result = {}
    for chapter, entries in chapters.items():
        rows = [row(e, counted) for e in entries]
        result[chapter] = {key: sum(r.get(key, 0.0) for r in rows) for key in
                           TOTALS}
        result[chapter]["rows"] = rows
    return result


def book(result: dict) -> dict:
    """The sums over the chapters; ``h100_flop_minutes`` alone is the floor if compiling on the
    H100 removed every op's host cost (issue 53 point 5 compiles where it pays)."""
    return {k: sum(r[k] for r in result.values()) for k in TOTALS}


def side_by_side(result: dict) -> dict:
    """The H100 minutes of the GPU queue's chapter steps (``tools.env.gpu_plan``), and of the whole
    book, with chapters run side by side: at least the longest chapter's (each chapter's host term
    runs on its own cores and a small model leaves the GPU idle most of a step), at most their sum
    (the GPU serialising everything). A GPU window's run measures where between."""
    from tools.env.gpu_plan import QUEUE, chapters_of

    def bounds(chapters: list[str]) -> dict:
        minutes = [result[c]["h100_minutes"] for c in chapters if c in result]
        return {"chapters": chapters, "at_least": max(minutes, default=0.0), "at_most": sum(minutes)}
    steps = {s.name: bounds(chapters_of(s)) for s in QUEUE if "execute" in s.argv}
    return {"queue_steps": steps, "book": bounds(list(result))}


def rule() -> dict:
    """The stated rule and its assumptions, recorded beside the numbers."""
    devices = {d.name: {"peak_flops": d.peak_flops, "fraction": d.fraction, "op_seconds": d.op_seconds,
                        "source": d.source} for d in (T4, H100, COLAB_CPU)}
    return {"seconds": "FLOPs / (peak * fraction) + aten ops * op_seconds (xfl.estimate)",
            "flops": "torch.utils.flop_counter under SDPBackend.MATH, forward + backward, optimizer not counted",
            "decoding": "to the length cap (source + 10), EOS banned: an upper bound",
            "devices": devices, "count_batch": COUNT_BATCH,
            "assumption": "fraction and op_seconds are assumed until a T4 or recorded H100 step times "
                          "measure them"}


SCENARIOS = {"faster: fraction 0.5, 5 us per op": (0.5, 0.5), "slower: fraction 0.125, 15 us per op": (2.0, 1.5)}


def sensitivity(result: dict) -> dict:
    """Each chapter's T4 minutes if the two assumptions were off: the FLOP term and the op term
    scaled (``SCENARIOS``: multipliers of each term), clock-bound runs unchanged."""
    out = {}
    for name, (flop_x, op_x) in SCENARIOS.items():
        out[name] = {c: r["t4_minutes"] + (flop_x - 1) * r["t4_flop_minutes"] + (op_x - 1) * r["t4_op_minutes"]
                     for c, r in result.items()}
    return out


def report(result: dict, title: str) -> str:
    """Per chapter: each row's T4 minutes and its basis, the total, and the book's sums."""
    lines = [title]
    for chapter, r in result.items():
        flag = "  OVER 15" if r["t4_minutes"] > LIMIT_MINUTES else ""
        lines.append(f"{chapter}: T4 {r['t4_minutes']:.1f} min (FLOPs {r['t4_flop_minutes']:.1f}, ops "
                     f"{r['t4_op_minutes']:.1f}), H100 {r['h100_minutes']:.1f} min{flag}")
        for x in r["rows"]:
            basis = (f"{x['runs']} x {x['steps']} steps of {x['batch']}" if "steps" in x else
                     f"{x['passes']} x {x['examples']} examples" if "passes" in x else "clock-bound")
            where = " ON THE CPU" if x.get("on_cpu") else ""
            lines.append(f"  {x['t4_minutes']:6.2f}  {x['what']}{where} [{basis}; {x['source']}]")
    for name, minutes in sensitivity(result).items():
        lines.append(f"if {name}: " + ", ".join(f"{c.split('_')[0]} {m:.1f}" for c, m in minutes.items()))
    total = book(result)
    lines.append(f"book: T4 {total['t4_minutes']:.1f} min; H100 {total['h100_minutes']:.1f} min eager "
                 f"(FLOP term {total['h100_flop_minutes']:.1f} + clock-bound runs, if compiling removed "
                 f"the op term: {total['h100_minutes'] - total['h100_op_minutes']:.1f} min)")
    parallel = side_by_side(result)
    lines.append(f"book on one H100, chapters side by side: {parallel['book']['at_least']:.1f} to "
                 f"{parallel['book']['at_most']:.1f} min; the GPU queue's chapter steps: " + ", ".join(
                     f"{name} {b['at_least']:.1f} to {b['at_most']:.1f}" for name, b in parallel["queue_steps"].items()))
    return "\n".join(lines)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", action="store_true", help="re-measure DATA from Tatoeba and print it")
    parser.add_argument("--only", default=None, help="comma-separated chapters (default: all)")
    parser.add_argument("--out", type=Path, default=None, help=f"JSON file (default {RESULTS})")
    args = parser.parse_args(argv)
    if args.data:
        from bench.t4_workloads import measure_data
        print(measure_data())
        return {}
    keep = args.only.split(",") if args.only else list(CHAPTERS)
    if unknown := sorted(set(keep) - set(CHAPTERS)):
        raise SystemExit(f"--only: {unknown} are not in the inventory; expected some of {list(CHAPTERS)}")
    now = present({c: CHAPTERS[c] for c in keep})
    then = proposed(now)
    counted = count({**now, **{f"{c} proposed": e for c, e in then.items()}})
    current, changed = estimate(now, counted), estimate(then, counted)
    print(report(current, "FULL PROFILE AS THE CHAPTERS STAND"))
    print(report(changed, "\nWITH THE PROPOSED VALUES (bench.t4_estimate.PROPOSALS)"))
    out = {"rule": rule(), "chapters": current, "book": book(current), "sensitivity": sensitivity(current),
           "h100_side_by_side": side_by_side(current),
           "proposed": {"changes": {c: PROPOSALS[c] for c in keep if c in PROPOSALS},
                        "chapters": changed, "book": book(changed), "sensitivity": sensitivity(changed)}}
    out["stale_sources"] = stale_sources()
    for line in out["stale_sources"]:
        print(f"STALE: {line}")
    write_results(args.out or RESULTS, out)
    return out


if __name__ == "__main__":
    main()
