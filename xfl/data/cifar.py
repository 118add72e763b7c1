"""CIFAR-10: load the python batches, normalize, augment whole batches on any device.

Public API
----------
``load_cifar10(train=True) -> (images uint8 (N, 3, 32, 32), labels int64 (N,))``
``CLASSES``                      the ten class names, index = label.
``CIFAR10_MEAN``, ``CIFAR10_STD``   published per-channel mean/std of the training pixels in [0, 1].
``channel_stats(images)``, ``check_channel_stats(images)``   measure / verify those numbers.
``normalize(images)``            uint8 (or float in [0, 1]) ``(..., 3, H, W)`` -> standardized float32.
``random_crop``, ``random_flip``, ``augment_batch``   vectorized, seeded by a ``torch.Generator``,
                                 on whichever device the images live (the GPU path);
                                 ``augment_batch(..., trivial_augment=True)`` adds ``xfl.augment``.
``device_batches(...)``          shuffled, augmented, normalized batches from tensors on a device.
``cifar_dataloader(...)``        a ``torch.utils.data.DataLoader`` doing the same on the CPU.
``read_batch(path)``             one pickled batch file -> numpy arrays (corrupt file -> ValueError).

Files come from the cache, the offline mirror (``XFL_DATA_MIRROR``; its re-packed batches are
verified by their sha256) or the official tarball (md5-verified, extracted atomically). Cite
A. Krizhevsky, "Learning Multiple Layers of Features from Tiny Images", 2009. Described in the
book's page "The datasets" (chapters/ch00_data/datasets.md).
"""

from __future__ import annotations

import pickle
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from xfl import augment
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
        data = np.asarray(batch[b"data"], dtype=np.uint8)
        labels = np.asarray(batch[b"labels"], dtype=np.int64)
    except (pickle.UnpicklingError, EOFError, KeyError, TypeError, ValueError,
            AttributeError, IndexError) as err:
        raise ValueError(f"{path} is not a readable CIFAR-10 batch "
                         f"({type(err).__name__}: {err}); delete it and fetch it again") from err
    if data.ndim != 2 or data.shape[1] != 3072 or labels.shape != (data.shape[0],):
        raise ValueError(f"{path}: expected data (N, 3072) and labels (N,), got "
                         f"{data.shape} and {labels.shape}")
    return data.reshape(-1, 3, 32, 32), labels  # planar R, G, B; rows of 32 pixels


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
    values = torch.arange(256, dtype=torch.float64) / 255  # (256,)
    means, stds = [], []
    for c in range(images.shape[1]):
        counts = torch.bincount(images[:, c].reshape(-1).cpu(), minlength=256).double()
        p = counts / counts.sum()  # (256,) share of each pixel value
        mean = (p * values).sum()
        means.append(float(mean))
        stds.append(float(((p * (values - mean) ** 2).sum()).sqrt()))
    return tuple(means), tuple(stds)


def check_channel_stats(images: Tensor, tol: float = 1e-3) -> None:
    """Raise ValueError unless ``images`` (the training set) reproduce CIFAR10_MEAN/STD."""
    mean, std = channel_stats(images)
    for what, got, want in (("mean", mean, CIFAR10_MEAN), ("std", std, CIFAR10_STD)):
        if max(abs(g - w) for g, w in zip(got, want)) > tol:
            raise ValueError(f"channel {what} {tuple(round(g, 4) for g in got)} differs from "
                             f"the published {want} by more than {tol}")


def normalize(images: Tensor) -> Tensor:
    """uint8 ``(..., 3, H, W)`` (or float in [0, 1]) -> float32 ``(x - mean) / std``, same device."""
    if images.ndim < 3 or images.shape[-3] != 3:
        raise ValueError(f"images must be (..., 3, H, W), got shape {tuple(images.shape)}")
    x = images.float() / 255 if images.dtype == torch.uint8 else images.float()
    mean = torch.tensor(CIFAR10_MEAN, device=x.device).view(3, 1, 1)
    std = torch.tensor(CIFAR10_STD, device=x.device).view(3, 1, 1)
    return (x - mean) / std


# -------------------------------------------------------------- augmentation
def _randint(high: int, size: int, generator: torch.Generator | None, device) -> Tensor:
    gen_device = generator.device if generator is not None else "cpu"
    return torch.randint(high, (size,), generator=generator, device=gen_device).to(device)


def random_crop(images: Tensor, padding: int = 4, generator: torch.Generator | None = None) -> Tensor:
    """Zero-pad ``(B, C, H, W)`` by ``padding`` and cut a random ``H x W`` window per image."""
    if images.ndim != 4:
        raise ValueError(f"images must be (B, C, H, W), got shape {tuple(images.shape)}")
    B, C, H, W = images.shape
    padded = F.pad(images, (padding,) * 4)  # (B, C, H + 2p, W + 2p)
    top = _randint(2 * padding + 1, B, generator, images.device)  # (B,)
    left = _randint(2 * padding + 1, B, generator, images.device)
    rows = top[:, None] + torch.arange(H, device=images.device)  # (B, H)
    cols = left[:, None] + torch.arange(W, device=images.device)  # (B, W)
    b = torch.arange(B, device=images.device)[:, None, None, None]
    c = torch.arange(C, device=images.device)[None, :, None, None]
    return padded[b, c, rows[:, None, :, None], cols[:, None, None, :]]  # (B, C, H, W)


def random_flip(images: Tensor, generator: torch.Generator | None = None, p: float = 0.5) -> Tensor:
    """Mirror each image of ``(B, C, H, W)`` left-right with probability ``p``."""
    gen_device = generator.device if generator is not None else "cpu"
    flip = torch.rand(images.shape[0], generator=generator, device=gen_device) < p
    return torch.where(flip.to(images.device)[:, None, None, None], images.flip(-1), images)


def augment_batch(images: Tensor, generator: torch.Generator | None = None,
                  padding: int = 4, trivial_augment: bool = False) -> Tensor:
    """Random crop with ``padding`` and a random horizontal flip, for a whole batch; with
    ``trivial_augment``, then one random TrivialAugment operation per image (``xfl.augment``)."""
    images = random_flip(random_crop(images, padding, generator), generator)
    return augment.trivial_augment(images, generator) if trivial_augment else images


# ------------------------------------------------------------------- batches
def device_batches(images: Tensor, labels: Tensor, batch_size: int, *, augment: bool = False,
                   shuffle: bool = True, generator: torch.Generator | None = None
                   ) -> Iterator[tuple[Tensor, Tensor]]:
    """Normalized float batches ``(B, 3, H, W)`` and labels ``(B,)``, on ``images.device``
    (move the whole set to the GPU once, then every step stays there)."""
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    n = images.shape[0]
    gen_device = generator.device if generator is not None else "cpu"
    order = (torch.randperm(n, generator=generator, device=gen_device) if shuffle
             else torch.arange(n)).to(images.device)
    for start in range(0, n, batch_size):
        idx = order[start:start + batch_size]
        x = images[idx]
        if augment:
            x = augment_batch(x, generator)
        yield normalize(x), labels[idx]


def cifar_dataloader(images: Tensor, labels: Tensor, batch_size: int, *, augment: bool = False,
                     shuffle: bool = True, seed: int = 0) -> torch.utils.data.DataLoader:
    """A CPU DataLoader yielding the same normalized (and optionally augmented) batches.

    Augmentation runs once per batch in the main process (``num_workers=0``): it is
    vectorized, so worker processes would only copy the seeded generator."""
    generator = torch.Generator().manual_seed(seed)

    def collate(items):
        x = torch.stack([item[0] for item in items])  # (B, 3, H, W) uint8
        y = torch.stack([item[1] for item in items])
        return normalize(augment_batch(x, generator) if augment else x), y

    dataset = torch.utils.data.TensorDataset(images, labels)
    return torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=shuffle,
                                       generator=torch.Generator().manual_seed(seed + 1),
                                       collate_fn=collate)
