"""xfl.cooccurrence: pair counts by hand, PPMI vectors that group words sharing contexts."""

import pytest
import torch

from xfl.cooccurrence import (cooccurrence, neighbour_pairs, ppmi_embeddings, top_words,
                              words)


def test_words_and_vocabulary():
    assert words("My dog's food, please!") == ["my", "dog's", "food", ",", "please", "!"]
    index = top_words([["a", "b", "a"], ["c", "a", "b"]], 2)
    assert index == {"a": 0, "b": 1}
    with pytest.raises(ValueError, match="size must be >= 1, got 0"):
        top_words([["a"]], 0)


def test_pairs_and_counts_by_hand():
    index = {"a": 0, "b": 1, "c": 2}
    sentence = ["a", "b", "x", "c"]  # x is out of vocabulary: a b c are neighbours
    assert sorted(neighbour_pairs([sentence], index, window=1)) == [(1, 0), (2, 1)]
    assert sorted(neighbour_pairs([sentence], index, window=2)) == [(1, 0), (2, 0), (2, 1)]
    counts = cooccurrence([sentence, sentence], index, window=1)
    assert torch.equal(counts, torch.tensor([[0., 2, 0], [2, 0, 2], [0, 2, 0]]))
    assert torch.equal(cooccurrence([["x"]], index), torch.zeros(3, 3))
    with pytest.raises(ValueError, match="window must be >= 1, got 0"):
        list(neighbour_pairs([sentence], index, window=0))


def test_words_in_the_same_contexts_get_similar_vectors():
    torch.manual_seed(0)
    sentences = ([["the", "cat", "sleeps"], ["the", "dog", "sleeps"]] * 20
                 + [["red", "car", "drives"], ["blue", "car", "drives"]] * 20)
    index = top_words(sentences, 10)
    vectors = ppmi_embeddings(cooccurrence(sentences, index, window=1), dim=4)
    assert vectors.shape == (len(index), 4)
    assert torch.allclose(vectors.norm(dim=-1), torch.ones(len(index)), atol=1e-5)
    cos = lambda a, b: float(vectors[index[a]] @ vectors[index[b]])  # noqa: E731
    assert cos("cat", "dog") > 0.9 > 0.2 > cos("cat", "car")


def test_ppmi_rejects_bad_shapes():
    with pytest.raises(ValueError, match=r"square \(V, V\), got \(2, 3\)"):
        ppmi_embeddings(torch.ones(2, 3))
    with pytest.raises(ValueError, match="dim must be in 1..3, got 4"):
        ppmi_embeddings(torch.ones(3, 3), dim=4)
