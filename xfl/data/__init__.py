"""Real data for the book: Tatoeba English–Spanish and CIFAR-10 (page "The datasets").

Modules: ``download`` (cache -> offline mirror -> verified download), ``tatoeba``
(``load_pairs``), ``text`` (normalize_text, tokenize, ``Vocab``, splits, batches) and ``cifar``
(``load_cifar10``, ``normalize``, ``augment_batch``). Import from the modules, e.g.
``from xfl.data.cifar import load_cifar10``.
"""
