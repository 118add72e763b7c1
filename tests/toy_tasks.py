"""A tiny copy task shared by the training tests and the torchrun worker (not a test file)."""

import torch

from xfl.model import Seq2SeqConfig, Seq2SeqTransformer

PAD, SOS, EOS, VOCAB = 0, 1, 2, 12


def copy_pairs(n, seed=0, min_len=2, max_len=6):
    """n (src, tgt) pairs: tgt is SOS + src + EOS; words are 3..VOCAB-1."""
    g = torch.Generator().manual_seed(seed)
    pairs = []
    for _ in range(n):
        length = int(torch.randint(min_len, max_len + 1, (1,), generator=g))
        words = torch.randint(3, VOCAB, (length,), generator=g).tolist()
        pairs.append((words, [SOS] + words + [EOS]))
    return pairs


def pad_rows(rows):
    width = max(len(r) for r in rows)
    return torch.tensor([r + [PAD] * (width - len(r)) for r in rows])


def epoch_batches(pairs, batch_size, epoch, seed=0):
    """The batches of one epoch, shuffled by a generator seeded with (seed, epoch)."""
    order = torch.randperm(len(pairs), generator=torch.Generator().manual_seed(seed * 1000 + epoch))
    for i in range(0, len(pairs) - batch_size + 1, batch_size):
        chunk = [pairs[j] for j in order[i:i + batch_size].tolist()]
        yield pad_rows([s for s, _ in chunk]), pad_rows([t for _, t in chunk])


def copy_model(seed=0, dropout=0.1, norm_first=True, d_model=32):
    torch.manual_seed(seed)
    return Seq2SeqTransformer(Seq2SeqConfig(
        src_vocab=VOCAB, tgt_vocab=VOCAB, d_model=d_model, num_heads=4, num_encoder_layers=1,
        num_decoder_layers=1, d_hidden=2 * d_model, dropout=dropout, norm_first=norm_first,
        max_len=16))
