"""xfl.n_pass: the lecture's N-pass decoders against one causal pass; timing both."""

import pytest
import torch

from xfl.blocks import TransformerStack
from xfl.n_pass import causal_decode, lecture_decode, n_pass_decode, time_decoders, zero_future_rows


def make_stack(norm_first, cross):
    torch.manual_seed(0)
    return TransformerStack(2, d_model=32, num_heads=4, norm_first=norm_first, cross=cross).eval()


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("cross", [False, True])
def test_n_pass_equals_one_causal_pass(norm_first, cross):
    stack = make_stack(norm_first, cross)
    x = torch.randn(3, 7, 32)
    memory = torch.randn(3, 5, 32) if cross else None
    torch.testing.assert_close(n_pass_decode(stack, x, memory), causal_decode(stack, x, memory))


def test_zeroing_rows_alone_is_a_different_function():
    """Zeroed rows without a mask still receive attention weight."""
    stack, x = make_stack(True, False), torch.randn(3, 7, 32)
    gap = (n_pass_decode(stack, x, hide_future_keys=False) - causal_decode(stack, x)).abs().max()
    assert gap > 1e-2
    # ... but it does not leak: output row t does not depend on input rows after t.
    x2 = x.clone()
    x2[:, 4:] = torch.randn(3, 3, 32)
    torch.testing.assert_close(n_pass_decode(stack, x, hide_future_keys=False)[:, :4],
                               n_pass_decode(stack, x2, hide_future_keys=False)[:, :4])


def test_zero_future_rows():
    x = torch.ones(2, 4, 3)
    assert zero_future_rows(x, 1).sum(dim=(0, 2)).tolist() == [6.0, 6.0, 0.0, 0.0]
    assert x.sum() == 24  # the input is not modified


def test_errors_and_decoder_timings():
    with pytest.raises(ValueError, match=r"\(B, L, D\)"):
        n_pass_decode(make_stack(True, False), torch.randn(7, 32))
    timing = time_decoders(make_stack(True, False), torch.randn(2, 4, 32), pairs=3, warmup=0)
    assert timing.order == ("lecture", "causal", "causal", "lecture", "lecture", "causal")
    assert timing.median_s("causal") > 0 and timing.threads == 1


@pytest.mark.parametrize("cross", [False, True])
def test_lecture_decode_reads_only_earlier_rows(cross):
    """Word t's row depends on input rows 0..t-1 only, and the scheme differs from a causal pass."""
    stack, x = make_stack(False, cross), torch.randn(3, 7, 32)
    memory = torch.randn(3, 5, 32) if cross else None
    out = lecture_decode(stack, x, memory)
    assert out.shape == (3, 6, 32)
    x2 = x.clone()
    x2[:, 4:] = torch.randn(3, 3, 32)  # rewrite rows 4.. : predictions of words 1..4 unchanged
    torch.testing.assert_close(lecture_decode(stack, x2, memory)[:, :4], out[:, :4])
    assert not torch.allclose(lecture_decode(stack, x2, memory)[:, 4:], out[:, 4:])
    shifted = causal_decode(stack, x, memory)[:, :-1]  # row t-1 sees rows 0..t-1, too
    assert (out - shifted).abs().max() > 1e-2


def test_lecture_decode_rejects_2d_input():
    with pytest.raises(ValueError, match=r"\(B, L, D\)"):
        lecture_decode(make_stack(True, False), torch.randn(7, 32))
