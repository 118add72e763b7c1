"""The models and batch shapes of the chapters' full profiles, for ``bench/t4_estimate.py``.

Each entry of ``WORKLOADS`` builds one model at its full-profile size (untrained: FLOPs and ops do
not depend on the weights) and returns the ``xfl.estimate.Work`` of one training step, one
forward pass or one decode of ``COUNT_BATCH`` examples. ``DATA`` holds the shapes those depend
on, measured on Tatoeba by ``measure_data`` (``python -m bench.t4_estimate --data``).
"""

from __future__ import annotations

import random
import statistics
import unicodedata
from functools import partial

import torch
from torch import nn

from xfl.ablation import RECIPES as MODERN, ablation_variants, matched_hidden, model_config
from xfl.batches import epoch_batches, padded_batches
from xfl.data.text import EOS, PAD, SOS, UNK
from xfl.decode import beam_search, greedy_decode
from xfl.estimate import Work, count_work, training_step
from xfl.model import GPT, GPTConfig, Seq2SeqConfig, Seq2SeqTransformer
from xfl.pixel import PixelAttention
from xfl.train import lm_loss, seq2seq_loss
from xfl.vit import ViT, ViTConfig
from xfl.vit_train import RECIPES as VIT

COUNT_BATCH = 4  # examples per counted step; FLOPs are scaled to the real batch

# Measured by measure_data() on 2026-11-26 (Tatoeba spa-eng, 118,964 pairs). Lengths are the
# mean padded lengths of an epoch's batches (tokens, SOS and EOS included).
DATA = {
    "words": dict(src_vocab=8882, tgt_vocab=14917, valid=2058, test=2058, S=14, L=10, decode_S=13),
    "subwords": dict(vocab=8184, max_len=54, S=15, L=11, decode_S=16),
    "chars": dict(vocab=95, L=86, valid=4000, test=4000),
    "char_subwords": dict(vocab=4174, L=25),
    "pairs": dict(L=99),
}


def _mean_shapes(pairs, batch: int) -> tuple[int, int]:
    """Mean padded (S, L) of one epoch of ``epoch_batches`` (chapters 5 and 6's batches)."""
    shapes = [(s.shape[1], t.shape[1]) for s, t in epoch_batches(pairs, batch, epoch=0)]
    return tuple(round(statistics.fmean(x)) for x in zip(*shapes))


def _decode_S(groups, task) -> int:
    """Mean padded source length of ``translate``'s batches of 128 over ``groups``."""
    lengths = [len(task.source_ids(en)) for en, _ in groups]
    return round(statistics.fmean(max(lengths[i:i + 128]) for i in range(0, len(lengths), 128)))


def _mean_padded(encoded, batch: int) -> int:
    return round(statistics.fmean(b.shape[1] for b in padded_batches(encoded, batch, epoch=0)))


def measure_data() -> dict:
    """``DATA``, measured as the chapters build their tasks (chapters 5, 6 and 9)."""
    from xfl.bpe import train_bpe
    from xfl.data.tatoeba import load_pairs
    from xfl.data.text import SPECIALS, Vocab
    from xfl.translation import prepare_task
    pairs = load_pairs()
    words = prepare_task(pairs, max_len=30)
    subwords = prepare_task(pairs, max_len=words.max_len, subwords=8000)
    data = {"words": dict(src_vocab=len(words.src_vocab), tgt_vocab=len(words.tgt_vocab),
                          valid=len(words.valid), test=len(words.test),
                          **dict(zip("SL", _mean_shapes(words.train, 128))),
                          decode_S=_decode_S(words.valid, words)),
            "subwords": dict(vocab=len(subwords.src_vocab), max_len=subwords.max_len,
                             **dict(zip("SL", _mean_shapes(subwords.train, 128))),
                             decode_S=_decode_S(subwords.valid, subwords))}
    spanish = sorted({unicodedata.normalize("NFC", es) for _, es in pairs if len(es) <= 100})
    random.Random(0).shuffle(spanish)
    train = spanish[8000:]
    vocab = Vocab.build((list(s) for s in train), min_freq=5)
    bpe = train_bpe(train, num_merges=4000)
    sub_vocab = Vocab([*SPECIALS, *bpe.vocab])
    data["chars"] = dict(vocab=len(vocab), L=_mean_padded([vocab.encode(list(s)) for s in train], 128),
                         valid=4000, test=4000)
    data["char_subwords"] = dict(vocab=len(sub_vocab),
                                 L=_mean_padded([sub_vocab.encode(bpe.encode(s)) for s in train], 128))
    data["pairs"] = dict(L=_pair_length(pairs, set(spanish) - set(train), vocab))
    return data


def _pair_length(pairs, unseen, vocab) -> int:
    """Chapter 9's fine-tuning sequences (English, SOS, Spanish, EOS): mean padded length, batch 64."""
    chosen = {}
    for en, es in pairs:
        es = unicodedata.normalize("NFC", es)
        if es in unseen and len(en) + len(es) <= 99:
            chosen.setdefault(es, en)
    chosen = sorted((en, es) for es, en in chosen.items())
    random.Random(1).shuffle(chosen)
    encoded = [vocab.encode(list(en))[1:-1] + vocab.encode(list(es)) for en, es in chosen[:3000]]
    return _mean_padded(encoded[:2000], 64)


# ------------------------------------------------------------------ the workloads
def _ids(vocab: int, batch: int, length: int) -> torch.Tensor:
    """Random token ids ``(batch, length)`` that are no special token (the counts do not care)."""
    return torch.randint(4, vocab, (batch, length), generator=torch.Generator().manual_seed(0))


def _seq2seq(layers: int, src_vocab: int, tgt_vocab: int, max_len: int, share: bool = False):
    """Chapters 5 and 6's translator: width 256, 8 heads, feed-forward 1024, ``layers`` + ``layers``."""
    torch.manual_seed(0)
    return Seq2SeqTransformer(Seq2SeqConfig(
        src_vocab=src_vocab, tgt_vocab=tgt_vocab, d_model=256, num_heads=8, num_encoder_layers=layers,
        num_decoder_layers=layers, d_hidden=1024, dropout=0.1, max_len=max_len, pad_id=PAD,
        share_embeddings=share))


def _translator(layers: int, kind: str):
    """The model, its (S, L) training shape and its decoding source length, for words or subwords."""
    d = DATA[kind]
    if kind == "words":
        return _seq2seq(layers, d["src_vocab"], d["tgt_vocab"], 32), d
    return _seq2seq(layers, d["vocab"], d["vocab"], d["max_len"] + 2, share=True), d


def seq2seq_step(layers: int, kind: str = "words", L: int | None = None) -> Work:
    """One training step (label-smoothed loss); ``L`` pads the targets (chapter 5's DLStudio run)."""
    model, d = _translator(layers, kind)
    vocab = model.config.src_vocab, model.config.tgt_vocab
    batch = (_ids(vocab[0], COUNT_BATCH, d["S"]), _ids(vocab[1], COUNT_BATCH, L or d["L"]))
    return training_step(model, partial(seq2seq_loss, label_smoothing=0.1), batch)


def seq2seq_decode(layers: int, kind: str = "words", beam: int = 1, use_cache: bool = True) -> Work:
    """One ``translate`` batch decoded to its length cap (EOS banned, so no row stops early)."""
    model, d = _translator(layers, kind)
    model.eval()
    src = _ids(model.config.src_vocab, COUNT_BATCH, d["decode_S"])
    cap = min(d["decode_S"] + 10, model.config.max_len - 1)
    ids = dict(sos=SOS, eos=EOS, pad=PAD, banned=(UNK, EOS), use_cache=use_cache)
    if beam == 1:
        return count_work(lambda: greedy_decode(model, src, cap, **ids))
    return count_work(lambda: beam_search(model, src, cap, beam_size=beam, **ids))


def seq2seq_forward(layers: int) -> Work:
    """A teacher-forced forward pass on one batch of every held-out sentence (chapter 5's held-out
    losses): source and targets padded to the longest, 32 tokens."""
    model, d = _translator(layers, "words")
    model.eval()
    batch = (_ids(d["src_vocab"], COUNT_BATCH, 32), _ids(d["tgt_vocab"], COUNT_BATCH, 32))
    return count_work(lambda: seq2seq_loss(model, batch))


def _gpt(vocab: int, causal: bool = True) -> GPT:
    """Chapter 9's GPT: width 256, 8 heads, 6 layers, GELU, learned positions, 100 characters."""
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=vocab, max_len=102, pad_id=PAD, d_model=256, num_heads=8,
                         num_layers=6, d_hidden=1024, dropout=0.1, activation="gelu",
                         positions="learned", causal=causal))


def gpt_step(kind: str = "chars", causal: bool = True) -> Work:
    """One next-token training step on ``kind``'s padded batches (pairs: chapter 9's fine-tuning);
    the masked model's loss costs what ``lm_loss`` does (one forward, one cross-entropy)."""
    vocab = DATA["char_subwords" if kind == "char_subwords" else "chars"]["vocab"]
    return training_step(_gpt(vocab, causal), lm_loss, _ids(vocab, COUNT_BATCH, DATA[kind]["L"]))


def gpt_forward(kind: str = "chars") -> Work:
    """One scoring pass (``total_nll``, ``spanish_bits``) on ``kind``'s padded batches."""
    vocab = DATA["chars"]["vocab"]
    model, tokens = _gpt(vocab).eval(), _ids(vocab, COUNT_BATCH, DATA[kind]["L"])
    return count_work(lambda: lm_loss(model, tokens))


class _Streams:
    """What ``xfl.ablation.model_config`` reads of a ``CharStreams``: the vocabulary's size."""

    def __init__(self, vocab: int):
        self.vocab = range(vocab)


def modern_model(options: dict) -> GPT:
    """Chapter 10's full recipe with ``options``, feed-forward matched to the 2017 block's size."""
    streams, recipe = _Streams(DATA["chars"]["vocab"]), MODERN["full"]["recipe"]
    target = sum(p.numel() for p in GPT(model_config(streams, recipe, {})).parameters())
    torch.manual_seed(0)
    return GPT(model_config(streams, recipe, options, matched_hidden(streams, recipe, options, target)))


def modern_step(options: dict) -> Work:
    recipe = MODERN["full"]["recipe"]
    return training_step(modern_model(options), lm_loss, _ids(DATA["chars"]["vocab"], COUNT_BATCH,
                                                               recipe.length + 1))


def modern_forward() -> Work:
    """``bits_per_char`` on validation windows of the recipe's length (the 2017 block)."""
    model, recipe = modern_model({}).eval(), MODERN["full"]["recipe"]
    tokens = _ids(DATA["chars"]["vocab"], COUNT_BATCH, recipe.length + 1)
    return count_work(lambda: lm_loss(model, tokens))


def modern_variants() -> dict[str, dict]:
    """Every block chapter 10 trains: the ablation's, the position study's two new ones and the
    kv-head study's new counts (xfl.ablation reuses the rest)."""
    heads = MODERN["full"]["recipe"].sizes["num_heads"]
    return {**ablation_variants(heads), "positions learned": dict(positions="learned"),
            "positions none": dict(positions="none"), "1 kv head": dict(num_kv_heads=1),
            "2 kv heads": dict(num_kv_heads=2)}


def _images(n: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return (torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=g),
            torch.randint(0, 10, (n,), generator=g))


def vit_step(pool: str = "cls") -> Work:
    """A step of chapter 7's GPU recipe (ViT-Lite-7/4), augmentation and mixing included."""
    recipe = VIT["full"]
    torch.manual_seed(0)
    model = ViT(ViTConfig(**{**vars(recipe.model), "pool": pool}))
    task = recipe.task(*_images())
    task.mix_prob = 1.0  # count the mixing (a chance of 0.3 per batch in the recipe)
    return training_step(model, task.loss, torch.arange(COUNT_BATCH))


def small_cnn() -> nn.Module:
    """Chapter 7's scale: 3 blocks of 3x3 conv, 2x2 max-pool, BatchNorm, ReLU; mean; Linear."""
    block = lambda c_in, c_out: [nn.Conv2d(c_in, c_out, 3, padding=1), nn.MaxPool2d(2),  # noqa: E731
                                 nn.BatchNorm2d(c_out), nn.ReLU()]
    return nn.Sequential(*block(3, 16), *block(16, 56), *block(56, 128), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(128, 10))


def cnn_step() -> Work:
    torch.manual_seed(0)
    return training_step(small_cnn(), VIT["full"].task(*_images()).loss, torch.arange(COUNT_BATCH))


def cnn_predict() -> Work:
    """The small CNN's forward on ``COUNT_BATCH`` test images (chapter 7's headline comparison)."""
    torch.manual_seed(0)
    model, (x, _) = small_cnn().eval(), _images(COUNT_BATCH)
    return count_work(lambda: model(x.float() / 255))


def vit_predict() -> Work:
    """``xfl.vit_train.predict``'s forward on ``COUNT_BATCH`` test images."""
    torch.manual_seed(0)
    model, (x, _) = ViT(VIT["full"].model).eval(), _images(COUNT_BATCH)
    return count_work(lambda: model(x.float() / 255))


class TinyPixelClassifier(nn.Module):
    """Chapter 8's: a strided 3x3 conv to 32 channels at 16x16, GELU, one PixelAttention,
    the mean over pixels, a Linear."""

    def __init__(self, C: int = 32):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, C, 3, stride=2, padding=1), nn.GELU())
        self.attn, self.head = PixelAttention(C, num_heads=1), nn.Linear(C, 10)

    def forward(self, x):
        return self.head(self.attn(self.stem(x)).mean((2, 3)))  # (B, 10)


def pixel_step() -> Work:
    torch.manual_seed(0)
    images, labels = _images()
    task = VIT["full"].task(images, labels)
    task.augment, task.mix_prob = None, 0.0  # chapter 8's ImageClassification: no augmentation
    return training_step(TinyPixelClassifier(), task.loss, torch.arange(COUNT_BATCH))


def sorter_step() -> Work:
    """Chapter 3's TinyDecoder (width 64, 2 layers, 4 heads, 12 symbols, sequences of 13),
    counted as xfl's GPT of the same sizes."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=12, d_model=64, num_heads=4, num_layers=2, max_len=64, dropout=0.0))
    return training_step(model, lm_loss, _ids(12, COUNT_BATCH, 14))


WORKLOADS = {
    "translator 6+6 (words)": lambda: seq2seq_step(6),
    "translator 6+6, targets padded to 32": lambda: seq2seq_step(6, L=32),
    "translator 6+6 forward": lambda: seq2seq_forward(6),
    "greedy 6+6": lambda: seq2seq_decode(6),
    "translator 4+4 (words)": lambda: seq2seq_step(4),
    "translator 4+4 (subwords)": lambda: seq2seq_step(4, "subwords"),
    "greedy 4+4": lambda: seq2seq_decode(4),
    "greedy 4+4, no cache": lambda: seq2seq_decode(4, use_cache=False),
    "beam 4, 4+4": lambda: seq2seq_decode(4, beam=4),
    "beam 4, 4+4, no cache": lambda: seq2seq_decode(4, beam=4, use_cache=False),
    "greedy 4+4 (subwords)": lambda: seq2seq_decode(4, "subwords"),
    "beam 4, 4+4 (subwords)": lambda: seq2seq_decode(4, "subwords", beam=4),
    "GPT (characters)": lambda: gpt_step(),
    "GPT, masked (characters)": lambda: gpt_step(causal=False),
    "GPT (subwords)": lambda: gpt_step("char_subwords"),
    "GPT (pairs)": lambda: gpt_step("pairs"),
    "GPT forward (characters)": lambda: gpt_forward(),
    "GPT forward (pairs)": lambda: gpt_forward("pairs"),
    "modern block forward": modern_forward,
    "ViT-Lite-7/4 (cls)": lambda: vit_step(),
    "ViT-Lite-7/4 (flatten)": lambda: vit_step("flatten"),
    "ViT-Lite-7/4 (mean)": lambda: vit_step("mean"),
    "ViT-Lite-7/4 predict": vit_predict,
    "small CNN": cnn_step,
    "small CNN predict": cnn_predict,
    "TinyPixelClassifier": pixel_step,
    "TinyDecoder (sorting)": sorter_step,
}
WORKLOADS.update({f"modern: {name}": partial(modern_step, options) for name, options in modern_variants().items()})
