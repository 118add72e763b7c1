"""CIFAR-10: batch files, the tarball path, normalization, real stats (augmentation: test_augment).

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
from xfl.data.cifar import CIFAR10_MEAN, CIFAR10_STD, channel_stats, normalize, read_batch


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
    assert max_gap(mean, CIFAR10_MEAN) > 0.01  # uniform noise is not CIFAR-10


def max_gap(measured, published) -> float:
    return max(abs(a - b) for a, b in zip(measured, published))


# ----------------------------------------------------------- the real data
@pytest.fixture(scope="module")
def mirror():
    if not os.environ.get("XFL_DATA_MIRROR"):
        pytest.skip("XFL_DATA_MIRROR is not set (CI points it at ../shared/data)")


def test_real_training_set_reproduces_published_stats(mirror):
    x, y = cifar.load_cifar10(train=True)
    assert x.shape == (50_000, 3, 32, 32) and x.dtype == torch.uint8
    assert torch.bincount(y).tolist() == [5_000] * 10
    mean, std = channel_stats(x)
    assert max_gap(mean, CIFAR10_MEAN) <= 1e-4 and max_gap(std, CIFAR10_STD) <= 1e-4


def test_real_test_set(mirror):
    x, y = cifar.load_cifar10(train=False)
    assert x.shape == (10_000, 3, 32, 32) and torch.bincount(y).tolist() == [1_000] * 10
    mean, std = channel_stats(x)  # the test set is close to, not equal to, the training stats
    assert max(abs(a - b) for a, b in zip(mean, CIFAR10_MEAN)) < 0.01
    assert max(abs(a - b) for a, b in zip(std, CIFAR10_STD)) < 0.01
