"""xfl: the hardened transformer pieces behind the xfl course book.

Each module holds one idea and links back to the chapter that builds it:

- ``attention``: scaled dot-product and multi-head attention, every mask (chapters 1-5, 8)
- ``position``: sinusoidal positional encoding (chapter 4)
- ``bpe``: byte-pair encoding, learned, applied, decoded exactly and saved (the subwords chapter)
- ``blocks``: the post-LN / Pre-LN transformer block and stacks (chapters 3, 5)
- ``model``: the encoder-decoder and the decoder-only GPT (chapters 5, 6, 9)
- ``train``: the one training loop, its schedules and optimizer (chapters 3, 5-7, 9)
- ``checkpoint``: checkpoints that resume exactly and cannot run code (chapters 5, 6)
- ``distributed``: DistributedDataParallel plumbing for the loop (no chapter imports it)
- ``batches``: the batches of an epoch, for images, token sequences and translation pairs (chapters 5-7, 9)
- ``inference``: ``eval_mode``, evaluation mode without gradients, restored afterwards (used by ``decode``, ``vit_train``, ``train``)
- ``decode``: greedy, beam search, sampling (chapter 9; chapter 6 through ``translation``)
- ``cache``: the key-value cache of incremental decoding, beside the models (built in chapter 6)
- ``translation``: the Tatoeba English-Spanish task and held-out BLEU (chapters 5, 6)
- ``bleu``: BLEU from clipped n-gram precision and the brevity penalty, and the sacreBLEU score reported (chapters 5, 6)
- ``attention_maps``: recording every attention layer's weights (chapter 6)
- ``n_pass``: the lecture's decoding scheme (one decoder pass per target word), for comparison (chapter 3)
- ``vit``, ``vit_train``: the Vision Transformer and its CIFAR-10 data, loss and metrics (chapter 7)
- ``augment``: crop, flip, TrivialAugment, MixUp and CutMix on whole batches, on their device (chapters 0, 7)
- ``pixel``: inter-pixel attention as in diffusion UNets (chapter 8)
- ``data``: checksum-verified Tatoeba and CIFAR-10 loaders, text pipeline (the datasets page)
- ``runtime``: device choice, seeding and the fast profile (every chapter)
- ``precision``: bf16, fp16 + gradient scaler or fp32, and compilation, by device (chapters 5-7, 9)
- ``timing``: the one timer, warm-up, median and spread (chapters 2-4, 8, ``bench/``)
- ``atomic_files``: atomic writes for checkpoints, results, exercises and grades (no chapter)
- ``version``: the release and the commit xfl was installed from (``__version__``, the run banner)
"""


def __getattr__(name: str):
    """``xfl.__version__``: the release plus the commit when known, e.g. ``0.1.0+g1a2b3c4d5e6f``
    (``xfl.version``; computed on first use, since finding the commit may run git)."""
    if name == "__version__":
        from xfl.version import describe
        return describe()
    raise AttributeError(f"module 'xfl' has no attribute {name!r}")
