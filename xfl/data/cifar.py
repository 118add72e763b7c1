"""CIFAR-10: load the python batches, measure and apply the channel statistics.

Public API
----------
``load_cifar10(train=True) -> (images uint8 (N, 3, 32, 32), labels int64 (N,))``
``CLASSES``                      the ten class names, index = label.
``CIFAR10_MEAN``, ``CIFAR10_STD``   published per-channel mean/std of the training pixels in [0, 1].
``channel_stats(images)``         measure those numbers.
``normalize(images)``            uint8 (or float in [0, 1]) ``(..., 3, H, W)`` -> standardized float32.
``read_batch(path)``             one pickled batch file -> numpy arrays (corrupt file -> ValueError).

Files come from the cache, the offline mirror (``XFL_DATA_MIRROR``; its re-packed batches are
verified by their sha256) or the official tarball (md5-verified, extracted atomically). Cite
A. Krizhevsky, "Learning Multiple Layers of Features from Tiny Images", 2009. Described in the
book's page "The datasets" (chapters/ch00_data/datasets.md). Augmentations live in
``xfl.augment``.
"""

from __future__ import annotations

import pickle
import shutil
import tarfile
import tempfile
from pathlib import Path
from functools import lru_cache

import numpy as np
import torch
from torch import Tensor

from xfl.attention import checks_values
from xfl.data.download import (CIFAR10_TARBALL, DataUnavailableError, cache_dir, fetch,
                               hash_matches, mirror_dir)

FOLDER = "cifar-10-batches-py"
TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_BATCHES = ("test_batch",)
CLASSES = ("airplane", "automobile", "bird", "cat", "deer",
           "dog", "frog", "horse", "ship", "truck")
# Per-channel mean and std of all 50,000 training images, pixels scaled to [0, 1].
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)

OFFICIAL_MD5 = {  # the batch files inside the official tarball
    "data_batch_1": "c99cafc152244af753f735de768cd75f",
    "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
    "data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
    "data_batch_4": "634d18415352ddfa80567beed471001a",
    "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
    "test_batch": "40351d587109b95175f43aff81a1287e",
}
MIRROR_SHA256 = {  # the losslessly re-packed batches in ../shared/data (other bytes, same pixels)
    "data_batch_1": "4930410b0d98e99540293dac006722c3abff4b709c894bd461faba215c704996",
    "data_batch_2": "4729096f283953f2a6bff762de9ef763df649afa23bfc0c268718fcd9d6f9125",
    "data_batch_3": "418f3f0ac1d5a171d57ef30ac33374fa0cb4d729409a04e1e8932594f8a5a36a",
    "data_batch_4": "ddd529981baad7e4b46c68e9dc44729545a426530a4a59d2d1bc1152b4f09c4f",
    "data_batch_5": "c33c7514580c52b6868fa74693c2a7d54c7d97bb745a1a804fe16720f2385e05",
    "test_batch": "7dcbff13096326a8f991112023875ffa8fee9ea1bc28bc01dd1b67af90511729",
}


# ------------------------------------------------------------------ the files
def _is_good_batch(path: Path, name: str) -> bool:
    return path.is_file() and (hash_matches(path, f"md5:{OFFICIAL_MD5[name]}")
                               or hash_matches(path, f"sha256:{MIRROR_SHA256[name]}"))


def batch_path(name: str) -> Path:
    """Verified path of one batch file: cache, then mirror, then the official tarball."""
    if name not in OFFICIAL_MD5:
        raise ValueError(f"unknown CIFAR-10 batch {name!r}; expected one of {sorted(OFFICIAL_MD5)}")
    cached = cache_dir() / FOLDER / name
    if _is_good_batch(cached, name):
        return cached
    if cached.is_file():
        cached.unlink()  # truncated or corrupt copy: fetch it again, as download.fetch does
    mirror = mirror_dir()
    if mirror is not None and (mirror / FOLDER / name).is_file():
        if not hash_matches(mirror / FOLDER / name, f"sha256:{MIRROR_SHA256[name]}"):
            raise ValueError(f"mirror file {mirror / FOLDER / name} does not match the sha256 "
                             f"{MIRROR_SHA256[name]} listed in the mirror's README")
        return mirror / FOLDER / name
    extract_tarball(fetch(CIFAR10_TARBALL), cache_dir())
    if not _is_good_batch(cached, name):
        raise DataUnavailableError(f"{cached} is missing or corrupt after extracting "
                                   f"{CIFAR10_TARBALL.name}")
    return cached


def extract_tarball(tarball: Path, folder: Path) -> Path:
    """Extract ``cifar-10-batches-py/`` from ``tarball`` into ``folder``, atomically: into a
    temporary folder first, renamed into place only when complete."""
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".extract-") as tmp:
        try:
            with tarfile.open(tarball, "r:gz") as archive:
                archive.extractall(tmp, filter="data")
        except (tarfile.TarError, OSError, EOFError) as err:
            raise ValueError(f"cannot extract {tarball} ({type(err).__name__}: {err}); "
                             f"delete it and fetch it again") from err
        target = folder / FOLDER
        if target.exists():
            shutil.rmtree(target)
        (Path(tmp) / FOLDER).rename(target)
    return target


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickles plain containers and numpy arrays only (no arbitrary code)."""

    ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
               ("numpy", "ndarray"), ("numpy", "dtype"),
               ("_codecs", "encode")}  # protocol-2 pickles of bytes written by Python 3

    def find_class(self, module, name):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}")
        return super().find_class(module, name)


def read_batch(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """One batch file -> images uint8 ``(N, 3, 32, 32)`` and labels int64 ``(N,)``."""
    try:
        with open(path, "rb") as f:
            batch = _ArrayUnpickler(f, encoding="bytes").load()
        data, labels = np.asarray(batch[b"data"]), np.asarray(batch[b"labels"])
    except (pickle.UnpicklingError, EOFError, KeyError, TypeError, ValueError,
            AttributeError, IndexError, OverflowError) as err:  # random bytes can raise any
        raise ValueError(f"{path} is not a readable CIFAR-10 batch "
                         f"({type(err).__name__}: {err}); delete it and fetch it again") from err
    if data.ndim != 2 or data.shape[1] != 3072 or labels.shape != (data.shape[0],):
        raise ValueError(f"{path}: expected data (N, 3072) and labels (N,), got "
                         f"{data.shape} and {labels.shape}")
    _check_values(path, data, labels)
    return data.reshape(-1, 3, 32, 32), labels.astype(np.int64)  # planar R, G, B; rows of 32 pixels


def _check_values(path, data: np.ndarray, labels: np.ndarray) -> None:
    """uint8 pixels (no silent wrap of other values) and integer labels in 0..9."""
    if data.dtype != np.uint8:
        raise ValueError(f"{path}: pixels must be uint8 (0..255), got {data.dtype}")
    if labels.dtype.kind not in "iu":
        raise ValueError(f"{path}: labels must be integers in 0..{len(CLASSES) - 1}, got {labels.dtype}")
    bad = labels[(labels < 0) | (labels >= len(CLASSES))]
    if bad.size:
        raise ValueError(f"{path}: labels must lie in 0..{len(CLASSES) - 1}, got {bad[:3].tolist()} "
                         f"({bad.size} out of range)")


def load_cifar10(train: bool = True) -> tuple[Tensor, Tensor]:
    """The 50,000 training (or 10,000 test) images, uint8 ``(N, 3, 32, 32)``, and labels
    int64 ``(N,)``, on the CPU."""
    parts = [read_batch(batch_path(n)) for n in (TRAIN_BATCHES if train else TEST_BATCHES)]
    images = np.concatenate([p[0] for p in parts])
    labels = np.concatenate([p[1] for p in parts])
    return torch.from_numpy(images), torch.from_numpy(labels)


# ---------------------------------------------------------------- statistics
def channel_stats(images: Tensor) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and std of uint8 images ``(N, C, H, W)``, pixels scaled to [0, 1].

    Exact and light: from each channel's histogram of the 256 pixel values."""
    if images.dtype != torch.uint8 or images.ndim != 4:
        raise ValueError(f"images must be uint8 (N, C, H, W), got {images.dtype} "
                         f"{tuple(images.shape)}")
    if images.numel() == 0:
        raise ValueError(f"images must hold at least one pixel per channel, got an empty batch "
                         f"{tuple(images.shape)} (its mean and std would be NaN)")
    values = torch.arange(256, dtype=torch.float64) / 255  # (256,)
    means, stds = [], []
    for c in range(images.shape[1]):
        counts = torch.bincount(images[:, c].reshape(-1).cpu(), minlength=256).double()
        p = counts / counts.sum()  # (256,) share of each pixel value
        mean = (p * values).sum()
        means.append(float(mean))
        stds.append(float(((p * (values - mean) ** 2).sum()).sqrt()))
    return tuple(means), tuple(stds)


FLOAT_SLACK = 0.25  # floats up to 1.25 pass: resampled [0, 1] images overshoot a little, 0..255 ones far


def normalize(images: Tensor) -> Tensor:
    """uint8 ``(..., 3, H, W)`` (or float in [0, 1]) -> float32 ``(x - mean) / std``, same device.

    Floats above ``1 + FLOAT_SLACK`` (pixels in 0..255 given as floats) are refused, on the CPU
    and, with autograd off, on an accelerator (the check reads the maximum back); never inside
    ``xfl.attention.trusted_inputs`` (a training step)."""
    if images.ndim < 3 or images.shape[-3] != 3:
        raise ValueError(f"images must be (..., 3, H, W), got shape {tuple(images.shape)}")
    if images.dtype != torch.uint8:
        _check_unit_floats(images)
    x = images.float() / 255 if images.dtype == torch.uint8 else images.float()
    mean, std = _mean_std(x.device)
    return (x - mean) / std


def _check_unit_floats(images: Tensor) -> None:
    """Raise ValueError when float ``images`` exceed ``1 + FLOAT_SLACK`` (read back only where cheap)."""
    if not images.is_floating_point():
        raise ValueError(f"images must be uint8 (0..255) or floating point in [0, 1], got {images.dtype}")
    on_cpu = images.device.type == "cpu"
    if images.numel() == 0 or not checks_values() or not (on_cpu or not torch.is_grad_enabled()):
        return
    top = float(images.detach().amax())
    if top > 1 + FLOAT_SLACK:
        raise ValueError(f"float images must hold pixels in [0, 1], got a maximum of {top:g} (pixels in "
                         f"0..255?); expected floats in [0, 1] (divide by 255 first) or uint8 pixels")


@lru_cache(maxsize=None)
def _mean_std(device: torch.device) -> tuple[Tensor, Tensor]:
    """CIFAR10_MEAN and CIFAR10_STD as ``(3, 1, 1)`` tensors on ``device``, made once per device
    (a fresh host-to-device copy at every call would wait for the GPU)."""
    as_tensor = lambda values: torch.tensor(values, device=device).view(3, 1, 1)  # noqa: E731
    return as_tensor(CIFAR10_MEAN), as_tensor(CIFAR10_STD)
