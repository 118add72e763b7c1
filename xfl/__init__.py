"""xfl: the hardened transformer pieces behind the xfl course book.

Each module holds one idea and links back to the chapter that builds it:

- ``attention``: scaled dot-product and multi-head attention, masks (chapters 1-3)
- ``position``: sinusoidal positional encoding (chapter 4)
- ``blocks``: the post-LN / Pre-LN transformer block and stacks (chapter 5)
- ``model``: the encoder-decoder and the decoder-only GPT (chapters 5, 9)
- ``train``: the training loop, schedules, checkpoints, DDP (chapters 5, 6, 9)
- ``decode``: greedy, beam search, sampling (chapters 6, 9)
- ``translation``: the Tatoeba English-Spanish task and held-out BLEU (chapters 5, 6)
- ``bleu``: BLEU from clipped n-gram precision and the brevity penalty (chapter 6)
- ``attention_maps``: recording every attention layer's weights (chapter 6)
- ``lecture``: the lecture's decoding scheme (one decoder pass per target word), for comparison (chapter 3)
- ``vit``, ``vit_train``: the Vision Transformer and its CIFAR-10 training (chapter 7)
- ``augment``: TrivialAugment on whole image batches, on their device (chapter 7)
- ``pixel``: inter-pixel attention as in diffusion UNets (chapter 8)
- ``data``: checksum-verified Tatoeba and CIFAR-10 loaders, text pipeline (the datasets page)
- ``runtime``: device choice, seeding and the fast profile (every chapter)
- ``precision``: bf16, fp16 + gradient scaler or fp32, and compilation, by device (chapters 5-7, 9)
- ``timing``: the one timer, warm-up, median and spread (chapters 2-4, 8, ``bench/``)
- ``files``: atomic writes for checkpoints, results, exercises and grades (no chapter)
"""

__version__ = "0.1.0"
