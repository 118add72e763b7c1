"""xfl.position: the sinusoidal table against its formula, and the offset rotation."""

import math

import pytest
import torch

from xfl.position import offset_rotation, sinusoidal_encoding


@pytest.mark.parametrize("d_model", [8, 7])
def test_matches_formula(d_model):
    pe = sinusoidal_encoding(50, d_model)
    assert pe.shape == (50, d_model) and pe.dtype == torch.float32
    for pos in (0, 1, 17, 49):
        for j in range(d_model):
            angle = pos / 10000 ** (2 * (j // 2) / d_model)
            want = math.sin(angle) if j % 2 == 0 else math.cos(angle)
            assert pe[pos, j].item() == pytest.approx(want, abs=1e-5)


def test_base_changes_wavelengths():
    assert not torch.allclose(sinusoidal_encoding(20, 16, base=100.0), sinusoidal_encoding(20, 16))
    torch.testing.assert_close(sinusoidal_encoding(20, 16, base=100.0)[:, :2], sinusoidal_encoding(20, 16)[:, :2])


@pytest.mark.parametrize("k", [1, 5, 37])
def test_offset_is_a_fixed_linear_map(k):
    d, n = 32, 100
    pe = sinusoidal_encoding(n + k, d)
    M = offset_rotation(k, d)
    torch.testing.assert_close(pe[:n] @ M.T, pe[k:], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(M @ M.T, torch.eye(d), atol=1e-5, rtol=1e-5)  # a rotation


def test_dot_product_depends_only_on_offset():
    pe = sinusoidal_encoding(200, 64)
    torch.testing.assert_close(pe[10] @ pe[13], pe[150] @ pe[153], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("args, message", [
    ((0, 8), "length must be a positive int, got 0"),
    ((5, 0), "d_model must be a positive int, got 0"),
    ((5, 8.0), "d_model must be a positive int, got 8.0"),
])
def test_errors(args, message):
    with pytest.raises(ValueError, match=message):
        sinusoidal_encoding(*args)


def test_error_bad_base_and_odd_rotation():
    with pytest.raises(ValueError, match="base must be > 1, got 1.0"):
        sinusoidal_encoding(5, 8, base=1.0)
    with pytest.raises(ValueError, match="even d_model, got 7"):
        offset_rotation(1, 7)
