"""xfl.batches: the batches of an epoch, for images, token sequences and translation pairs."""

import pytest
import torch

from xfl.batches import epoch_batches, epoch_order, epoch_rows, index_batches, padded_batches
from xfl.data.text import PAD

PAIRS = [([2] + [5] * n + [3], [2] + [6] * (n % 4 + 1) + [3]) for n in range(1, 51)]


def test_rows_without_length_are_the_epoch_order_cut_in_batches():
    rows = epoch_rows(50, 8, epoch=2, seed=1)
    assert [len(r) for r in rows] == [8] * 6 + [2]
    assert sum(rows, []) == epoch_order(50, epoch=2, seed=1)
    assert epoch_rows(50, 8, epoch=2, seed=1, drop_last=True) == rows[:-1]
    assert epoch_rows(50, 8, epoch=3, seed=1) != rows


def test_length_pools_hold_similar_lengths_and_cover_every_example_once():
    lengths = [(7 * i) % 23 for i in range(200)]
    rows = epoch_rows(200, 10, epoch=0, length=lengths.__getitem__, pool=5)
    assert sorted(sum(rows, [])) == list(range(200))
    spread = sum(max(lengths[i] for i in r) - min(lengths[i] for i in r) for r in rows) / len(rows)
    plain = epoch_rows(200, 10, epoch=0)
    plain_spread = sum(max(lengths[i] for i in r) - min(lengths[i] for i in r) for r in plain) / len(plain)
    assert spread < plain_spread / 2, (spread, plain_spread)
    assert rows == epoch_rows(200, 10, epoch=0, length=lengths.__getitem__, pool=5)


def test_index_batches_drop_the_last_incomplete_batch():
    batches = index_batches(50, 8, epoch=0)
    assert [b.shape for b in batches] == [(8,)] * 6
    assert torch.cat(batches).tolist() == epoch_order(50, 0)[:48]
    with pytest.raises(ValueError, match="batch_size"):
        index_batches(5, 6, epoch=0)


def test_padded_batches_pad_each_batch_to_its_longest_sequence():
    sequences = [[2] + [7] * n + [3] for n in range(1, 21)]
    batches = padded_batches(sequences, 6, epoch=1, pad_id=31)
    assert [b.shape[0] for b in batches] == [6, 6, 6, 2]
    for batch in batches:
        lengths = (batch != 31).sum(1)
        assert batch.shape[1] == int(lengths.max())
    assert sorted(int(n) for b in batches for n in (b != 31).sum(1)) == [len(s) for s in sequences]
    with pytest.raises(ValueError, match="batch_size"):
        padded_batches(sequences, 0, epoch=0)


def test_epoch_batches_cover_every_pair_once_and_repeat_per_epoch():
    batches = list(epoch_batches(PAIRS, 8, epoch=0))
    assert sum(len(s) for s, _ in batches) == 50
    assert sorted(int((t != PAD).sum()) for _, t in batches for t in t) == sorted(len(t) for _, t in PAIRS)
    again, other = list(epoch_batches(PAIRS, 8, epoch=0)), list(epoch_batches(PAIRS, 8, epoch=1))
    assert all(torch.equal(a[0], b[0]) for a, b in zip(batches, again))
    assert not all(a[0].shape == b[0].shape and torch.equal(a[0], b[0]) for a, b in zip(batches, other))


def test_epoch_batches_without_pools_follow_the_epoch_order():
    batches = list(epoch_batches(PAIRS, 8, epoch=0, pool=None, drop_last=True))
    assert len(batches) == 6
    order = epoch_order(len(PAIRS), 0)
    for k, (src, _) in enumerate(batches):
        expected = [len(PAIRS[i][0]) for i in order[8 * k:8 * k + 8]]
        assert (src != PAD).sum(1).tolist() == expected
