"""A tiny copy task shared by the training tests and the torchrun worker (not a test file)."""

import torch

from xfl.batches import epoch_batches
from xfl.data.text import EOS, SOS
from xfl.model import Seq2SeqConfig, Seq2SeqTransformer

VOCAB = 12


def copy_pairs(n, seed=0, min_len=2, max_len=6):
    """n (src, tgt) pairs: tgt is SOS + src + EOS (``xfl.data.text``'s ids); words are EOS+1..VOCAB-1."""
    g = torch.Generator().manual_seed(seed)
    pairs = []
    for _ in range(n):
        length = int(torch.randint(min_len, max_len + 1, (1,), generator=g))
        words = torch.randint(EOS + 1, VOCAB, (length,), generator=g).tolist()
        pairs.append((words, [SOS] + words + [EOS]))
    return pairs


def copy_batches(pairs, batch_size, epoch, seed=0):
    """The full batches of one epoch of copy pairs, in ``xfl.batches.epoch_order`` (no length pools)."""
    return epoch_batches(pairs, batch_size, epoch, seed, pool=None, drop_last=True)


def copy_model(seed=0, dropout=0.1, norm_first=True, d_model=32):
    torch.manual_seed(seed)
    return Seq2SeqTransformer(Seq2SeqConfig(
        src_vocab=VOCAB, tgt_vocab=VOCAB, d_model=d_model, num_heads=4, num_encoder_layers=1,
        num_decoder_layers=1, d_hidden=2 * d_model, dropout=dropout, norm_first=norm_first,
        max_len=16))


def striped_images(n=256, seed=0, size=8):
    """Class 0: horizontal stripes, class 1: vertical stripes (uint8 (n, 3, size, size), with noise)."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 2, (n,), generator=g)
    stripes = (torch.arange(size) % 2).float() * 200
    horizontal = stripes[:, None].expand(size, size)
    images = torch.where(labels[:, None, None, None] == 0, horizontal, horizontal.T).expand(n, 3, size, size)
    noise = torch.randint(0, 50, (n, 3, size, size), generator=g)
    return (images + noise).to(torch.uint8), labels


def striped_task(batch_size, n=128):
    """The striped images as an ``xfl.vit_train.ImageClassification`` (no augmentation, no mixing)."""
    from xfl.vit_train import ImageClassification

    images, labels = striped_images(n)
    return ImageClassification(images, labels, lambda x: x.float() / 255 - 0.5, num_classes=2,
                               batch_size=batch_size, label_smoothing=0.1)


def tiny_vit(seed=0, dropout=0.0):
    from xfl.vit import ViT, ViTConfig

    torch.manual_seed(seed)
    return ViT(ViTConfig(image_size=8, patch_size=4, num_classes=2, d_model=16, num_heads=2,
                         num_layers=1, d_hidden=32, dropout=dropout))
