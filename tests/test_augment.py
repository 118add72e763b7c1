"""xfl.augment: each TrivialAugment operation against its definition, and the batch sampler."""

import pytest
import torch

from xfl.augment import MAX_SHIFT, OPS, apply_op, grayscale, trivial_augment


def images(n=4, size=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, 3, size, size), generator=g, dtype=torch.uint8)


@pytest.mark.parametrize("name", [op for op in OPS if op != "autocontrast"])
def test_magnitude_zero_is_the_identity(name):
    x = images().float()
    torch.testing.assert_close(apply_op(name, x, torch.zeros(len(x))), x)


def test_translate_by_one_pixel_shifts_and_fills_with_zeros():
    x, size = images(size=8).float(), 8
    one_pixel = torch.full((len(x),), 1 / (MAX_SHIFT * size))  # magnitude of a 1-pixel shift
    left = apply_op("translate_x", x, one_pixel)
    torch.testing.assert_close(left[..., :-1], x[..., 1:])
    assert torch.all(left[..., -1] == 0)
    up = apply_op("translate_y", x, one_pixel)
    torch.testing.assert_close(up[..., :-1, :], x[..., 1:, :])


def test_rotating_by_ninety_degrees_is_rot90():
    x = images(size=8).float()
    ninety = torch.full((len(x),), 3.0)  # 3 x MAX_DEGREES (30)
    torch.testing.assert_close(apply_op("rotate", x, ninety), torch.rot90(x, 1, dims=(-2, -1)))


def test_full_strength_colour_operations():
    x = images().float()
    ones = torch.ones(len(x))
    torch.testing.assert_close(apply_op("solarize", x, ones), 255 - x)  # threshold 0: all inverted
    torch.testing.assert_close(apply_op("posterize", x, ones), (images().int() & 0xF0).float())
    gray = apply_op("color", x, -ones / 0.9)  # factor 0: the luma in every channel
    torch.testing.assert_close(gray, grayscale(x).expand_as(x))
    torch.testing.assert_close(apply_op("brightness", x, -ones / 0.9), torch.zeros_like(x))
    flat = apply_op("contrast", x, -ones / 0.9)  # factor 0: each image's mean luma everywhere
    torch.testing.assert_close(flat, grayscale(x).mean((-2, -1), keepdim=True).expand_as(x))


def test_sharpness_keeps_borders_and_flat_images():
    x = images().float()
    blurred = apply_op("sharpness", x, -torch.ones(len(x)) / 0.9)  # factor 0: the smoothed image
    torch.testing.assert_close(blurred[..., 0, :], x[..., 0, :])
    assert not torch.allclose(blurred[..., 1:-1, 1:-1], x[..., 1:-1, 1:-1])
    flat = torch.full((2, 3, 8, 8), 77.0)
    torch.testing.assert_close(apply_op("sharpness", flat, torch.ones(2)), flat)


def test_autocontrast_stretches_each_channel_to_the_full_range():
    x = images().float() * 0.5 + 40  # pixels in [40, 167.5]
    out = apply_op("autocontrast", x, torch.zeros(len(x)))
    assert torch.all(out.amin((-2, -1)) == 0) and torch.allclose(out.amax((-2, -1)), torch.tensor(255.0))
    flat = torch.full((1, 3, 8, 8), 9.0)
    torch.testing.assert_close(apply_op("autocontrast", flat, torch.zeros(1)), flat)


def test_batch_keeps_shape_dtype_and_is_seeded():
    x = images(n=64, size=32)
    a = trivial_augment(x, torch.Generator().manual_seed(1))
    b = trivial_augment(x, torch.Generator().manual_seed(1))
    assert a.dtype == torch.uint8 and a.shape == x.shape and torch.equal(a, b)
    changed = (a != x).flatten(1).any(1).float().mean()
    assert 0.5 < changed < 1.0  # most images change; identity (and magnitude ~0) leave some alone


def test_each_image_gets_one_operation_of_its_own():
    x = images(n=2, size=8)
    only_identity = trivial_augment(x, torch.Generator().manual_seed(0), ops=("identity",))
    assert torch.equal(only_identity, x)
    gen = torch.Generator().manual_seed(3)
    out = trivial_augment(x, gen, ops=("identity", "solarize"))
    gen = torch.Generator().manual_seed(3)
    choice = torch.randint(2, (2,), generator=gen)
    magnitude = torch.rand(2, generator=gen) * 2 - 1
    for i in range(2):
        expected = x[i:i + 1] if choice[i] == 0 else apply_op("solarize", x[i:i + 1].float(), magnitude[i:i + 1])
        torch.testing.assert_close(out[i:i + 1].float(), expected.float().round())


@pytest.mark.parametrize("bad", [torch.zeros(2, 3, 8, 8), torch.zeros(2, 1, 8, 8, dtype=torch.uint8),
                                 torch.zeros(3, 8, 8, dtype=torch.uint8)])
def test_bad_images_are_refused(bad):
    with pytest.raises(ValueError, match="uint8 \\(B, 3, H, W\\)"):
        trivial_augment(bad)


def test_unknown_operation_is_named():
    with pytest.raises(ValueError, match="'blur'"):
        apply_op("blur", torch.zeros(1, 3, 4, 4), torch.zeros(1))


def test_cifar_augment_batch_adds_it_after_crop_and_flip():
    from xfl.data.cifar import augment_batch

    x = images(n=16, size=32)
    out = augment_batch(x, torch.Generator().manual_seed(5), trivial_augment=True)
    g = torch.Generator().manual_seed(5)
    assert torch.equal(out, trivial_augment(augment_batch(x, g), g))
