"""English -> Spanish translation on Tatoeba, end to end (chapters 5-6 and bench/translate.py).

``prepare_task`` turns sentence pairs into vocabularies, encoded training pairs and held-out
test sentences with all their reference translations; ``epoch_batches`` feeds
``xfl.train.train``; ``translate`` decodes autoregressively (greedy or beam search, with a length
penalty) and returns each translation with its log-probability; ``sacrebleu_score`` and
``heldout_bleu`` score with sacreBLEU against every reference (case-insensitive, since
``xfl.data.text`` lower-cases).
Sentence pairs from www.manythings.org/anki and tatoeba.org (CC-BY 2.0 FR).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

import torch
from torch import nn

from .batches import epoch_rng, shuffled
from .data.text import (EOS, PAD, SOS, Vocab, detokenize, encode_pairs, filter_by_length,
                        group_references, pad_batch, split_by_english, tokenize)
from .decode import beam_search, greedy_decode
from .model import Seq2SeqConfig


@dataclass
class TranslationTask:
    """Everything a translation run needs besides the model."""

    src_vocab: Vocab
    tgt_vocab: Vocab
    train: list  # [(src ids, tgt ids)], both SOS ... EOS
    test: list  # [(english, [spanish references])], English sentences never seen in training
    max_len: int  # longest sentence kept, in word tokens

    def model_config(self, **sizes) -> Seq2SeqConfig:
        """A ``Seq2SeqConfig`` with this task's vocabulary sizes and room for SOS/EOS."""
        sizes.setdefault("max_len", self.max_len + 2)
        return Seq2SeqConfig(src_vocab=len(self.src_vocab), tgt_vocab=len(self.tgt_vocab),
                             pad_id=PAD, **sizes)


def prepare_task(pairs: Sequence[tuple[str, str]], max_len: int = 30, test_fraction: float = 0.02,
                 min_freq: int = 2, seed: int = 0, train_limit: int | None = None) -> TranslationTask:
    """Split by English sentence (seeded), keep training pairs of at most ``max_len`` tokens
    and test sentences whose English fits (with every reference, however long), build
    vocabularies from the training side only, encode. ``train_limit`` keeps a seeded random
    subset of training pairs."""
    split = split_by_english(pairs, test_fraction=test_fraction, seed=seed)
    train_pairs = filter_by_length(split.train, max_len)
    test = [(en, refs) for en, refs in group_references(split.test) if 1 <= len(tokenize(en)) <= max_len]
    if train_limit is not None and train_limit < len(train_pairs):
        train_pairs = random.Random(seed).sample(train_pairs, train_limit)
    src_vocab = Vocab.build((tokenize(en) for en, _ in train_pairs), min_freq=min_freq)
    tgt_vocab = Vocab.build((tokenize(es) for _, es in train_pairs), min_freq=min_freq)
    return TranslationTask(src_vocab, tgt_vocab, encode_pairs(train_pairs, src_vocab, tgt_vocab),
                           test, max_len)


def epoch_batches(encoded: Sequence, batch_size: int, epoch: int, seed: int = 0, pool: int = 50):
    """The batches ``(src (B, S), tgt (B, L))`` of one epoch, the same for the same epoch.

    Pairs are shuffled, then sorted by length inside pools of ``pool`` batches so that a batch
    holds sentences of similar length (little padding); the batch order is shuffled again.
    """
    rng = epoch_rng(epoch, seed)
    order = shuffled(range(len(encoded)), rng)
    batches = []
    for start in range(0, len(order), batch_size * pool):
        chunk = sorted(order[start:start + batch_size * pool], key=lambda i: len(encoded[i][1]))
        batches += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
    for rows in shuffled(batches, rng):
        src, _ = pad_batch([encoded[i][0] for i in rows])
        tgt, _ = pad_batch([encoded[i][1] for i in rows])
        yield src, tgt


@dataclass
class Translation:
    """One decoded sentence: detokenized (lower-case) text, token ids, and the model's summed
    log-probability of those ids (EOS included when it was produced)."""

    text: str
    ids: list
    log_prob: float


def translate(model: nn.Module, task: TranslationTask, sentences: Sequence[str], beam_size: int = 1,
              length_penalty: float = 0.0, batch_size: int = 128, extra_len: int = 10) -> list[Translation]:
    """English sentences -> Spanish ``Translation``s, decoded autoregressively: greedy for
    ``beam_size=1``, else beam search ranking finished beams by log P / length**length_penalty."""
    device = next(model.parameters()).device
    out = []
    for start in range(0, len(sentences), batch_size):
        chunk = [task.src_vocab.encode(tokenize(s)[: task.max_len] or ["<unk>"])
                 for s in sentences[start:start + batch_size]]
        src, _ = pad_batch(chunk, device=device)
        max_len = min(src.shape[1] + extra_len, model.config.max_len - 1)
        if beam_size == 1:
            hyps, scores = greedy_decode(model, src, max_len, SOS, EOS, PAD)
        else:
            hyps, scores = beam_search(model, src, max_len, SOS, EOS, PAD, beam_size, length_penalty)
        out += [Translation(detokenize(task.tgt_vocab.decode(h)), h, score)
                for h, score in zip(hyps, scores.tolist())]
    return out


def reference_streams(references: Sequence[Sequence[str]]) -> list[list[str | None]]:
    """Per-sentence reference lists -> sacreBLEU's streams (None where a sentence has fewer)."""
    most = max(len(r) for r in references)
    return [[r[i] if i < len(r) else None for r in references] for i in range(most)]


def sacrebleu_score(hypotheses: Sequence[str], groups: Sequence[tuple[str, Sequence[str]]]) -> tuple[float, str]:
    """Multi-reference, case-insensitive sacreBLEU of detokenized ``hypotheses`` against the raw
    references of ``groups`` (``[(english, [spanish, ...])]``); returns (score, signature)."""
    import sacrebleu

    metric = sacrebleu.metrics.BLEU(lowercase=True)
    score = metric.corpus_score(list(hypotheses), reference_streams([refs for _, refs in groups]))
    return score.score, str(metric.get_signature())


def heldout_bleu(model: nn.Module, task: TranslationTask, beam_size: int = 4, limit: int | None = None,
                 batch_size: int = 128, length_penalty: float = 0.0) -> dict:
    """Multi-reference sacreBLEU of the model on the held-out English sentences.

    Hypotheses are detokenized; references are the raw Tatoeba translations; the comparison
    ignores case (``lowercase=True``) because the pipeline lower-cases. Returns the score,
    its signature and a few example translations.
    """
    groups = task.test[:limit]
    hypotheses = [t.text for t in translate(model, task, [en for en, _ in groups], beam_size,
                                            length_penalty, batch_size)]
    bleu, signature = sacrebleu_score(hypotheses, groups)
    examples = [{"english": en, "xfl": hyp, "references": refs}
                for (en, refs), hyp in list(zip(groups, hypotheses))[:5]]
    return {"bleu": bleu, "signature": signature, "sentences": len(groups), "examples": examples}
