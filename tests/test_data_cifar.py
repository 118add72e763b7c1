"""CIFAR-10: batch files, the tarball path, normalization, augmentation, loaders, real stats.

Real-data tests need XFL_DATA_MIRROR (CI sets it to ../shared/data).
"""

import hashlib
import io
import os
import pickle
import tarfile

import numpy as np
import pytest
import torch

from xfl.data import cifar
from xfl.data.cifar import (CIFAR10_MEAN, CIFAR10_STD, augment_batch, channel_stats,
                            check_channel_stats, cifar_dataloader, device_batches, normalize,
                            random_crop, random_flip, read_batch)


def batch_bytes(n=20, seed=0) -> bytes:
    rng = np.random.default_rng(seed)
    batch = {b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
             b"labels": rng.integers(0, 10, n).tolist()}
    return pickle.dumps(batch, protocol=2)


def images(n=6, seed=0) -> torch.Tensor:
    return torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8,
                         generator=torch.Generator().manual_seed(seed))


# -------------------------------------------------------------- batch files
def test_read_batch_layout(tmp_path):
    (tmp_path / "b").write_bytes(batch_bytes())
    x, y = read_batch(tmp_path / "b")
    raw = pickle.loads(batch_bytes())[b"data"]
    assert x.shape == (20, 3, 32, 32) and x.dtype == np.uint8 and y.dtype == np.int64
    assert x[3, 1, 2, 5] == raw[3, 1024 + 2 * 32 + 5]  # planar channels, rows of 32


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_corrupt_pickle_is_a_clear_error(tmp_path, damage):
    good = batch_bytes()
    bad = {"truncate": good[: len(good) // 2], "garbage": os.urandom(500), "empty": b""}[damage]
    (tmp_path / "data_batch_1").write_bytes(bad)
    with pytest.raises(ValueError, match="not a readable CIFAR-10 batch"):
        read_batch(tmp_path / "data_batch_1")


def test_pickle_with_code_is_refused(tmp_path):
    (tmp_path / "evil").write_bytes(pickle.dumps({b"data": os.getcwd}))  # a global function
    with pytest.raises(ValueError, match="refusing"):
        read_batch(tmp_path / "evil")


def test_wrong_shape_is_a_clear_error(tmp_path):
    (tmp_path / "b").write_bytes(pickle.dumps({b"data": np.zeros((4, 100), np.uint8),
                                               b"labels": [0] * 4}))
    with pytest.raises(ValueError, match="3072"):
        read_batch(tmp_path / "b")


# ---------------------------------------------------------------- tarball path
def make_tarball(path, members):
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_batches_come_from_the_extracted_tarball(tmp_path, monkeypatch):
    """The download path without the internet: ``fetch`` hands over a (tiny) tarball."""
    monkeypatch.setenv("XFL_DATA_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("XFL_DATA_MIRROR", raising=False)
    data = batch_bytes()
    tarball = make_tarball(tmp_path / "cifar.tar.gz", {"test_batch": data})
    monkeypatch.setattr(cifar, "fetch", lambda item: tarball)
    monkeypatch.setitem(cifar.OFFICIAL_MD5, "test_batch", hashlib.md5(data).hexdigest())
    x, y = cifar.load_cifar10(train=False)
    assert x.shape == (20, 3, 32, 32) and x.dtype == torch.uint8 and y.dtype == torch.int64
    assert (tmp_path / "cache" / "cifar-10-batches-py" / "test_batch").is_file()
    assert not list((tmp_path / "cache").glob(".extract-*"))  # temporary folder gone


def test_corrupt_tarball_leaves_no_folder(tmp_path):
    good = make_tarball(tmp_path / "good.tar.gz", {"test_batch": batch_bytes(200)})
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    out = tmp_path / "cache"
    with pytest.raises(ValueError, match="cannot extract"):
        cifar.extract_tarball(bad, out)
    assert list(out.iterdir()) == []  # no half-extracted folder, no temporary folder


def test_unknown_batch_name():
    with pytest.raises(ValueError, match="data_batch_1"):
        cifar.batch_path("data_batch_6")


# -------------------------------------------------------------- normalization
def test_normalize_values_and_device_dtype():
    x = torch.full((2, 3, 4, 4), 255, dtype=torch.uint8)
    out = normalize(x)
    assert out.dtype == torch.float32 and out.shape == x.shape
    expected = (1 - torch.tensor(CIFAR10_MEAN)) / torch.tensor(CIFAR10_STD)
    torch.testing.assert_close(out[0, :, 0, 0], expected)
    torch.testing.assert_close(normalize(x.float() / 255), out)
    with pytest.raises(ValueError, match="3, H, W"):
        normalize(torch.zeros(2, 1, 4, 4))


def test_channel_stats_match_torch():
    x = images(50)
    mean, std = channel_stats(x)
    f = x.double() / 255
    torch.testing.assert_close(torch.tensor(mean, dtype=torch.float64), f.mean(dim=(0, 2, 3)))
    torch.testing.assert_close(torch.tensor(std, dtype=torch.float64),
                               f.std(dim=(0, 2, 3), unbiased=False))
    with pytest.raises(ValueError, match="differs from the published"):
        check_channel_stats(x)  # uniform noise is not CIFAR-10


# --------------------------------------------------------------- augmentation
def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_crop_keeps_shape_dtype_and_cuts_a_window():
    x = images()
    out = random_crop(x, padding=4, generator=gen())
    assert out.shape == x.shape and out.dtype == x.dtype
    padded = torch.nn.functional.pad(x, (4,) * 4)
    for b in range(x.shape[0]):  # every output is some 32x32 window of the padded image
        windows = [padded[b, :, i:i + 32, j:j + 32] for i in range(9) for j in range(9)]
        assert any(torch.equal(out[b], w) for w in windows)
    assert torch.equal(random_crop(x, padding=0, generator=gen()), x)


def test_flip_twice_with_the_same_seed_is_identity():
    x = images(16)
    once = random_flip(x, gen(5))
    assert not torch.equal(once, x)  # 16 coin flips: some image was mirrored
    assert torch.equal(random_flip(once, gen(5)), x)
    assert torch.equal(random_flip(x, gen(), p=1.0), x.flip(-1))
    assert torch.equal(random_flip(x, gen(), p=0.0), x)


def test_augmentation_is_seeded_and_works_on_floats():
    x = images(32)
    assert torch.equal(augment_batch(x, gen(1)), augment_batch(x, gen(1)))
    assert not torch.equal(augment_batch(x, gen(1)), augment_batch(x, gen(2)))
    out = augment_batch(x.float(), gen(1))
    assert out.dtype == torch.float32
    assert torch.equal(out, augment_batch(x, gen(1)).float())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_augmentation_on_the_gpu_matches_the_cpu():
    x = images(32)
    assert torch.equal(augment_batch(x.cuda(), gen(3)).cpu(), augment_batch(x, gen(3)))


# ------------------------------------------------------------------- loaders
def test_device_batches_visit_every_image_once():
    x, y = images(50), torch.arange(50)
    seen = []
    for xb, yb in device_batches(x, y, 16, augment=True, generator=gen()):
        assert xb.dtype == torch.float32 and xb.shape[1:] == (3, 32, 32)
        seen += yb.tolist()
    assert sorted(seen) == list(range(50)) and seen != list(range(50))
    xb, yb = next(device_batches(x, y, 50, shuffle=False))
    torch.testing.assert_close(xb, normalize(x))


def test_cpu_dataloader_is_seeded():
    x, y = images(40), torch.arange(40)
    first = [(xb, yb) for xb, yb in cifar_dataloader(x, y, 16, augment=True, seed=7)]
    again = [(xb, yb) for xb, yb in cifar_dataloader(x, y, 16, augment=True, seed=7)]
    assert [b[0].shape[0] for b in first] == [16, 16, 8]
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(first, again))
    assert sorted(torch.cat([b[1] for b in first]).tolist()) == list(range(40))


# ----------------------------------------------------------- the real data
@pytest.fixture(scope="module")
def mirror():
    if not os.environ.get("XFL_DATA_MIRROR"):
        pytest.skip("XFL_DATA_MIRROR is not set (CI points it at ../shared/data)")


def test_real_training_set_reproduces_published_stats(mirror):
    x, y = cifar.load_cifar10(train=True)
    assert x.shape == (50_000, 3, 32, 32) and x.dtype == torch.uint8
    assert torch.bincount(y).tolist() == [5_000] * 10
    check_channel_stats(x, tol=1e-4)


def test_real_test_set(mirror):
    x, y = cifar.load_cifar10(train=False)
    assert x.shape == (10_000, 3, 32, 32) and torch.bincount(y).tolist() == [1_000] * 10
    mean, std = channel_stats(x)  # the test set is close to, not equal to, the training stats
    assert max(abs(a - b) for a, b in zip(mean, CIFAR10_MEAN)) < 0.01
    assert max(abs(a - b) for a, b in zip(std, CIFAR10_STD)) < 0.01
