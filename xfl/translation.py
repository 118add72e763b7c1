"""English -> Spanish translation on Tatoeba, end to end (chapters 5-6 and bench/translate.py).

``prepare_task`` splits sentence pairs into training, validation and test sentences and
tokenizes them: lower-cased words (one vocabulary per language) or joint byte-pair subwords
(one vocabulary, shared embeddings); ``xfl.batches.epoch_batches`` batches its pairs for
``xfl.train.train``. ``translate`` decodes autoregressively (greedy or beam search, with a length
penalty, never writing ``<unk>``) and returns each translation with its log-probability;
``heldout_bleu`` scores with sacreBLEU (``xfl.bleu.sacrebleu_score``) against every reference
(case-insensitive, since the word pipeline lower-cases); ``choose_decoding`` picks beam size and
length penalty on the validation split, ``choose_weights`` the final or the averaged last weights.
Sentence pairs from www.manythings.org/anki and tatoeba.org (CC-BY 2.0 FR)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import partial
from typing import Sequence

from torch import nn

from .bpe import BPE, train_bpe
from .bleu import sacrebleu_score
from .checkpoint import LastWeights
from .data.text import (EOS, PAD, SOS, SPECIALS, UNK, Vocab, clean, detokenize, encode_pairs, filter_by_length,
                        group_references, pad_batch, split_by_english, tokenize)
from .decode import beam_search, greedy_decode
from .model import Seq2SeqConfig


class Words:
    """Word tokens, lower-cased (``xfl.data.text.tokenize``); ``text`` joins them back."""

    def tokens(self, text: str) -> list[str]:
        return tokenize(text)

    def text(self, tokens: Sequence[str]) -> str:
        return detokenize(tokens)


@dataclass
class Subwords:
    """Byte-pair tokens of the cleaned text, case kept (``xfl.bpe``); ``text`` inverts them exactly."""

    bpe: BPE

    def tokens(self, text: str) -> list[str]:
        return self.bpe.encode(clean(text))

    def text(self, tokens: Sequence[str]) -> str:
        return self.bpe.decode(tokens)


@dataclass
class TranslationTask:
    """Everything a translation run needs besides the model. ``valid`` and ``test`` hold
    ``(english, [spanish references])`` of English sentences never seen in training: every
    choice is made on ``valid``, ``test`` is scored once, at the end."""

    src_vocab: Vocab
    tgt_vocab: Vocab  # the very same object as src_vocab for a joint vocabulary
    train: list  # [(src ids, tgt ids)], both SOS ... EOS
    valid: list
    test: list
    max_len: int  # longest training sentence, in tokens
    tokenizer: Words | Subwords = field(default_factory=Words)

    @property
    def joint(self) -> bool:
        """One vocabulary for both languages (subwords), so embeddings can be shared."""
        return self.src_vocab is self.tgt_vocab

    def source_ids(self, english: str) -> list[int]:
        """SOS, the first ``max_len`` tokens of ``english`` (``<unk>`` if it has none), EOS."""
        return self.src_vocab.encode(self.tokenizer.tokens(english)[: self.max_len] or ["<unk>"])

    def target_text(self, ids: Sequence[int]) -> str:
        """Target ids (up to EOS) -> Spanish text."""
        return self.tokenizer.text(self.tgt_vocab.decode(ids))

    def model_config(self, **sizes) -> Seq2SeqConfig:
        """A ``Seq2SeqConfig`` with this task's vocabulary sizes and room for SOS/EOS; a joint
        vocabulary shares its embedding table between the languages (``share_embeddings``)."""
        sizes.setdefault("max_len", self.max_len + 2)
        sizes.setdefault("share_embeddings", self.joint)
        return Seq2SeqConfig(src_vocab=len(self.src_vocab), tgt_vocab=len(self.tgt_vocab),
                             pad_id=PAD, **sizes)


def heldout_groups(pairs: Sequence[tuple[str, str]], max_len: int) -> list[tuple[str, list[str]]]:
    """``(english, [every reference])`` for English sentences of 1..max_len words (references
    kept whatever their length)."""
    return [(en, refs) for en, refs in group_references(pairs) if 1 <= len(tokenize(en)) <= max_len]


def prepare_task(pairs: Sequence[tuple[str, str]], max_len: int = 30, test_fraction: float = 0.02,
                 valid_fraction: float = 0.02, min_freq: int = 2, seed: int = 0,
                 train_limit: int | None = None, subwords: int | None = None) -> TranslationTask:
    """Split by English sentence (seeded) into train, validation and test; keep training pairs of
    at most ``max_len`` words and held-out sentences whose English fits. Tokens: lower-cased
    words with one vocabulary per language (``min_freq``), or, with ``subwords=n``, ``n``
    byte-pair merges learned on both languages' training side: one joint vocabulary.
    ``train_limit`` keeps a seeded random subset of training pairs. Nothing is learned from
    held-out sentences."""
    if not 0 <= valid_fraction < 1 - test_fraction:
        raise ValueError(f"valid_fraction must lie in [0, 1 - test_fraction) = [0, {1 - test_fraction}), "
                         f"got {valid_fraction}")
    split = split_by_english(pairs, test_fraction=test_fraction, seed=seed)
    rest = split_by_english(split.train, test_fraction=valid_fraction / (1 - test_fraction), seed=seed + 1)
    train_pairs = filter_by_length(rest.train, max_len)
    if train_limit is not None and train_limit < len(train_pairs):
        train_pairs = random.Random(seed).sample(train_pairs, train_limit)
    held_out = heldout_groups(rest.test, max_len), heldout_groups(split.test, max_len)
    if subwords is None:
        return _word_task(train_pairs, held_out, max_len, min_freq)
    return _subword_task(train_pairs, held_out, subwords)


def _word_task(train_pairs, held_out, max_len: int, min_freq: int) -> TranslationTask:
    src_vocab = Vocab.build((tokenize(en) for en, _ in train_pairs), min_freq=min_freq)
    tgt_vocab = Vocab.build((tokenize(es) for _, es in train_pairs), min_freq=min_freq)
    return TranslationTask(src_vocab, tgt_vocab, encode_pairs(train_pairs, src_vocab, tgt_vocab),
                           *held_out, max_len)


def _subword_task(train_pairs, held_out, num_merges: int) -> TranslationTask:
    tokenizer = Subwords(train_bpe((clean(s) for pair in train_pairs for s in pair), num_merges))
    tokens = [(tokenizer.tokens(en), tokenizer.tokens(es)) for en, es in train_pairs]
    vocab = Vocab([*SPECIALS, *tokenizer.bpe.vocab])  # every symbol a seen word can encode to
    train = [(vocab.encode(en), vocab.encode(es)) for en, es in tokens]
    longest = max(len(sentence) for pair in tokens for sentence in pair)
    return TranslationTask(vocab, vocab, train, *held_out, longest, tokenizer)


@dataclass
class Translation:
    """One decoded sentence: detokenized (lower-case) text, token ids, and the model's summed
    log-probability of those ids (EOS included when it was produced)."""

    text: str
    ids: list
    log_prob: float


def translate(model: nn.Module, task: TranslationTask, sentences: Sequence[str], beam_size: int = 1,
              length_penalty: float = 0.0, batch_size: int = 128, extra_len: int = 10,
              use_cache: bool = True, banned: Sequence[int] = (UNK,)) -> list[Translation]:
    """English sentences -> Spanish ``Translation``s, decoded autoregressively: greedy for
    ``beam_size=1``, else beam search ranking finished beams by log P / length**length_penalty.
    Tokens in ``banned`` (``<unk>`` by default) are never written, nor PAD or SOS.
    ``use_cache=False`` re-runs the decoder over the whole prefix at every step instead of using
    the key-value cache (same output, slower)."""
    device = next(model.parameters()).device
    decode = greedy_decode if beam_size == 1 else partial(beam_search, beam_size=beam_size,
                                                          length_penalty=length_penalty)
    out = []
    for start in range(0, len(sentences), batch_size):
        src, _ = pad_batch([task.source_ids(s) for s in sentences[start:start + batch_size]], device=device)
        max_len = min(src.shape[1] + extra_len, model.config.max_len - 1)
        hyps, scores = decode(model, src, max_len, sos=SOS, eos=EOS, pad=PAD, banned=banned,
                              use_cache=use_cache)
        out += [Translation(task.target_text(h), h, score) for h, score in zip(hyps, scores.tolist())]
    return out


def heldout_bleu(model: nn.Module, task: TranslationTask, beam_size: int = 4, limit: int | None = None,
                 batch_size: int = 128, length_penalty: float = 0.0, split: str = "test") -> dict:
    """Multi-reference sacreBLEU of the model on the held-out English sentences of ``split``
    (``"valid"`` to make a choice, ``"test"`` once, at the end).

    Hypotheses are detokenized; references are the raw Tatoeba translations; the comparison
    ignores case (``lowercase=True``: the word pipeline lower-cases). Returns the score, its
    signature, the split, and a few example translations.
    """
    if split not in ("valid", "test"):
        raise ValueError(f"split must be 'valid' or 'test', got {split!r}")
    groups = getattr(task, split)[:limit]
    hypotheses = [t.text for t in translate(model, task, [en for en, _ in groups], beam_size,
                                            length_penalty, batch_size)]
    bleu, signature = sacrebleu_score(hypotheses, groups)
    examples = [{"english": en, "xfl": hyp, "references": refs}
                for (en, refs), hyp in list(zip(groups, hypotheses))[:5]]
    return {"bleu": bleu, "signature": signature, "split": split, "sentences": len(groups),
            "examples": examples, "hypotheses": hypotheses}


# ------------------------------------------------ what a held-out score rests on
def _scored_groups(task: TranslationTask, hypotheses: Sequence[str], split: str) -> list:
    """The first ``len(hypotheses)`` groups of ``split``: the sentences those were decoded from."""
    if split not in ("valid", "test"):
        raise ValueError(f"split must be 'valid' or 'test', got {split!r}")
    groups = getattr(task, split)
    if not 0 < len(hypotheses) <= len(groups):
        raise ValueError(f"need 1 to {len(groups)} hypotheses (one per {split} sentence, in order), "
                         f"got {len(hypotheses)}")
    return groups[: len(hypotheses)]


def references_in_training(task: TranslationTask, groups: Sequence[tuple[str, Sequence[str]]]) -> int:
    """How many ``groups`` have a reference whose tokens equal a training target. A reference
    with a word outside the vocabulary never counts (its ``<unk>`` may stand for another word)."""
    targets = {tuple(tgt) for _, tgt in task.train}

    def seen(reference: str) -> bool:
        ids = task.tgt_vocab.encode(task.tokenizer.tokens(reference))
        return UNK not in ids and tuple(ids) in targets

    return sum(any(seen(r) for r in refs) for _, refs in groups)


def bleu_conditions(task: TranslationTask, hypotheses: Sequence[str], split: str = "test") -> dict:
    """What a held-out BLEU of ``hypotheses`` (the first sentences of ``split``, in order) rests
    on: sentence lengths in English tokens (punctuation included), references per sentence, the
    share with a reference seen as a training target, and the same output scored against the
    first reference alone, lower-cased and cased (the WMT convention)."""
    groups = _scored_groups(task, hypotheses, split)
    lengths, counts = [len(tokenize(en)) for en, _ in groups], [len(refs) for _, refs in groups]
    first = [(en, refs[:1]) for en, refs in groups]
    return {"split": split, "sentences": len(groups), "longest": max(lengths),
            "mean_length": sum(lengths) / len(groups), "references": sum(counts) / len(groups),
            "two_or_more": sum(n >= 2 for n in counts) / len(groups),
            "in_training": references_in_training(task, groups) / len(groups),
            "one_reference": sacrebleu_score(hypotheses, first)[0],
            "one_reference_cased": sacrebleu_score(hypotheses, first, lowercase=False)[0]}


def describe_conditions(c: dict) -> str:
    """``bleu_conditions`` in four lines of at most 80 characters."""
    return (f"{c['sentences']} {c['split']} sentences of at most {c['longest']} English tokens "
            f"(mean {c['mean_length']:.1f}),\n"
            f"scored lower-cased against {c['references']:.2f} references each "
            f"({c['two_or_more']:.0%} have 2 or more);\n"
            f"at least {c['in_training']:.0%} have a reference identical to a training target.\n"
            f"Against the first reference only: {c['one_reference']:.1f} lower-cased, "
            f"{c['one_reference_cased']:.1f} cased.")


def bleu_by_length(task: TranslationTask, hypotheses: Sequence[str], split: str = "test",
                   width: int = 1) -> list[dict]:
    """sacreBLEU, and the share of translations equal to a reference (case ignored), per bucket
    of English length (tokens, punctuation included). The buckets have fixed edges, 1..width,
    width+1..2*width, ... (default: one length each), not drawn from ``task.max_len``, so the
    tables of two tasks with other length limits compare row by row on the sentences they
    share (BLEU does not add across buckets); empty buckets are left out."""
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise ValueError(f"width must be an int >= 1 (lengths per bucket), got {width!r}")
    groups = _scored_groups(task, hypotheses, split)
    buckets: dict[int, list] = {}
    for hyp, group in zip(hypotheses, groups):
        buckets.setdefault((len(tokenize(group[0])) - 1) // width, []).append((hyp, group))
    rows = []
    for b, members in sorted(buckets.items()):
        hyps, grouped = zip(*members)
        exact = sum(any(tokenize(h) == tokenize(r) for r in refs) for h, (_, refs) in members)
        rows.append({"shortest": b * width + 1, "longest": (b + 1) * width, "sentences": len(members),
                     "bleu": sacrebleu_score(list(hyps), list(grouped))[0], "exact": exact / len(members)})
    return rows


def choose_decoding(model: nn.Module, task: TranslationTask, beam_sizes: Sequence[int] = (1, 4),
                    length_penalties: Sequence[float] = (0.0, 0.6, 1.0), limit: int | None = None) -> dict:
    """Score every (beam size, length penalty) on the validation split; return the table and
    the best settings (``beam_size``, ``length_penalty``). Greedy has no penalty to choose."""
    table = []
    for k in beam_sizes:
        for penalty in (length_penalties if k > 1 else (0.0,)):
            score = heldout_bleu(model, task, beam_size=k, length_penalty=penalty, limit=limit, split="valid")
            table.append({"beam_size": k, "length_penalty": penalty, "valid_bleu": score["bleu"]})
    best = max(table, key=lambda row: row["valid_bleu"])
    return {"table": table, "beam_size": best["beam_size"], "length_penalty": best["length_penalty"],
            "chosen_on": "valid"}


def choose_weights(model: nn.Module, task: TranslationTask, kept: LastWeights, limit: int | None = None) -> dict:
    """Greedy validation BLEU of the model's final weights and of the average of the weights
    ``kept`` during training (``xfl.checkpoint.LastWeights``); leaves the better in ``model``."""
    final = {k: v.detach().clone() for k, v in model.state_dict().items()}
    scores = {"final": heldout_bleu(model, task, beam_size=1, limit=limit, split="valid")["bleu"]}
    model.load_state_dict(kept.average())
    scores["averaged"] = heldout_bleu(model, task, beam_size=1, limit=limit, split="valid")["bleu"]
    chosen = max(scores, key=scores.get)
    if chosen == "final":
        model.load_state_dict(final)
    return {"valid_bleu": scores, "weights": chosen, "averaged_last": len(kept.saved), "chosen_on": "valid"}
