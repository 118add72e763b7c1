"""xfl.augment: crop and flip, each TrivialAugment operation against its definition, the batch
sampler, and MixUp/CutMix targets that match the mixed pixels."""

import pytest
import torch

from xfl.augment import (MAX_SHIFT, OPS, apply_op, augment_batch, grayscale, mix_batch, random_crop,
                         random_flip, trivial_augment)


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
    x = images(n=7, size=8)
    only_identity = trivial_augment(x, torch.Generator().manual_seed(0), ops=("identity",))
    assert torch.equal(only_identity, x)
    out = trivial_augment(x, torch.Generator().manual_seed(3), ops=("identity", "solarize"))
    gen = torch.Generator().manual_seed(3)
    order = torch.randperm(7, generator=gen)  # the same draws: the first 4 of it get identity
    magnitude = torch.rand(7, generator=gen) * 2 - 1
    for rank, i in enumerate(order.tolist()):
        expected = x[i:i + 1].float() if rank < 4 else apply_op("solarize", x[i:i + 1].float(), magnitude[i:i + 1])
        torch.testing.assert_close(out[i:i + 1].float(), expected.round())


def test_operations_are_dealt_evenly_and_run_only_on_their_share(monkeypatch):
    from xfl import augment

    seen = []
    for name, fn in list(augment.OPERATIONS.items()):
        monkeypatch.setitem(augment.OPERATIONS, name,
                            lambda x, m, _fn=fn, _name=name: seen.append((_name, len(x))) or _fn(x, m))
    trivial_augment(images(n=40, size=8), torch.Generator().manual_seed(0))
    assert [name for name, _ in seen] == list(OPS)  # every operation once per batch ...
    assert sorted(n for _, n in seen) == [3] * 12 + [4]  # ... on its share alone: 40 images in all
    seen.clear()
    trivial_augment(images(n=5, size=8), torch.Generator().manual_seed(0))
    assert [n for _, n in seen] == [1] * 5  # fewer images than operations: the first five run


@pytest.mark.parametrize("bad", [torch.zeros(2, 3, 8, 8), torch.zeros(2, 1, 8, 8, dtype=torch.uint8),
                                 torch.zeros(3, 8, 8, dtype=torch.uint8)])
def test_bad_images_are_refused(bad):
    with pytest.raises(ValueError, match="uint8 \\(B, 3, H, W\\)"):
        trivial_augment(bad)


def test_unknown_operation_is_named():
    with pytest.raises(ValueError, match="'blur'"):
        apply_op("blur", torch.zeros(1, 3, 4, 4), torch.zeros(1))


def test_augment_batch_adds_it_after_crop_and_flip():
    x = images(n=16, size=32)
    out = augment_batch(x, torch.Generator().manual_seed(5), trivial=True)
    g = torch.Generator().manual_seed(5)
    assert torch.equal(out, trivial_augment(augment_batch(x, g), g))


# ------------------------------------------------------------------- crop and flip
def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_crop_keeps_shape_dtype_and_cuts_a_window():
    x = images(6, size=32)
    out = random_crop(x, padding=4, generator=gen())
    assert out.shape == x.shape and out.dtype == x.dtype
    padded = torch.nn.functional.pad(x, (4,) * 4)
    for b in range(x.shape[0]):  # every output is some 32x32 window of the padded image
        windows = [padded[b, :, i:i + 32, j:j + 32] for i in range(9) for j in range(9)]
        assert any(torch.equal(out[b], w) for w in windows)
    assert torch.equal(random_crop(x, padding=0, generator=gen()), x)


def test_flip_twice_with_the_same_seed_is_identity():
    x = images(16, size=32)
    once = random_flip(x, gen(5))
    assert not torch.equal(once, x)  # 16 coin flips: some image was mirrored
    assert torch.equal(random_flip(once, gen(5)), x)
    assert torch.equal(random_flip(x, gen(), p=1.0), x.flip(-1))
    assert torch.equal(random_flip(x, gen(), p=0.0), x)


def test_augmentation_is_seeded_and_works_on_floats():
    x = images(32, size=32)
    assert torch.equal(augment_batch(x, gen(1)), augment_batch(x, gen(1)))
    assert not torch.equal(augment_batch(x, gen(1)), augment_batch(x, gen(2)))
    out = augment_batch(x.float(), gen(1))
    assert out.dtype == torch.float32
    assert torch.equal(out, augment_batch(x, gen(1)).float())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_augmentation_on_the_gpu_matches_the_cpu():
    x = images(32, size=32)
    assert torch.equal(augment_batch(x.cuda(), gen(3)).cpu(), augment_batch(x, gen(3)))


# -------------------------------------------------------------------------- mixing
@pytest.mark.parametrize("seed", range(6))
def test_mixed_targets_are_distributions_matching_the_pixels(seed):
    torch.manual_seed(seed)  # the mixing weight comes from the device's global generator
    images = torch.stack([torch.full((3, 8, 8), float(i)) for i in range(4)])  # image i is all i
    labels = torch.tensor([0, 1, 2, 3])
    mixed, targets = mix_batch(images, labels, 4, 1.0, generator=torch.Generator().manual_seed(seed))
    torch.testing.assert_close(targets.sum(-1), torch.ones(4))
    for b in range(4):  # the pixel mean of a mixed image equals its target-weighted label
        expected = (targets[b] * torch.arange(4.0)).sum()
        torch.testing.assert_close(mixed[b].mean(), expected)


def test_no_mixing_gives_one_hot():
    images, labels = torch.randn(4, 3, 8, 8), torch.tensor([0, 1, 2, 1])
    out, targets = mix_batch(images, labels, 3, 0.0, generator=torch.Generator())
    assert out is images
    assert torch.equal(targets.argmax(-1), labels) and torch.equal(targets.sum(-1), torch.ones(4))
