"""Checkpoints that resume a run exactly and cannot run code when opened (chapters 5 and 6 load
them; ``xfl.train`` writes them).

A checkpoint holds the model, the optimizer, the fp16 gradient scaler, the loop's state, the
configuration and every random generator's state, all as tensors and plain Python data, so
``torch.load(..., weights_only=True)`` opens it: a file someone crafted to execute code on
load is refused instead. Writes are atomic (``xfl.atomic_files``): a crash while saving leaves the
previous checkpoint as it was.

A header records the format version, the model's class and configuration, the optimizer's
class and a sha256 of everything else; loading checks each, so a damaged file, a checkpoint of
another model (4 heads into 2 of the same width) or another optimizer's state is refused with
a ValueError naming the file and both sides.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import random
import zipfile
from dataclasses import asdict, is_dataclass

import numpy as np
import torch

from .distributed import unwrap
from .atomic_files import atomic_path, remove_orphans


# ------------------------------------------------------------------- random states
def rng_state() -> dict:
    """The state of Python's, NumPy's and torch's (CPU and CUDA) generators, as tensors and
    plain data."""
    version, keys, gauss = random.getstate()
    name, np_keys, pos, has_gauss, cached = np.random.get_state()
    state = {"torch": torch.get_rng_state(),
             "python": {"version": version, "keys": torch.tensor(keys, dtype=torch.int64), "gauss": gauss},
             "numpy": {"name": name, "keys": torch.from_numpy(np_keys.astype(np.int64)), "pos": int(pos),
                       "has_gauss": int(has_gauss), "cached": float(cached)}}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Restore what :func:`rng_state` saved."""
    torch.set_rng_state(state["torch"].cpu())
    py = state["python"]
    random.setstate((py["version"], tuple(py["keys"].tolist()), py["gauss"]))
    n = state["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                         n["cached"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])


# ------------------------------------------------------------------------- header
FORMAT, VERSION = "xfl-checkpoint", 2
IGNORED_CONFIG = ("dropout",)  # changes how a model trains, not what its weights compute


def class_name(obj) -> str:
    """``module.QualifiedName`` of ``obj``'s class."""
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def model_config(model) -> dict | None:
    """``model.config`` as a dict (a dataclass config, as xfl's models have); without one, the
    ``settings`` of its modules that declare them (``xfl.attention.MultiHeadAttention``'s head
    count, ...) as ``{"path.name": value}``; None when there are none."""
    config = getattr(model, "config", None)
    if is_dataclass(config):
        return asdict(config)
    if not isinstance(model, torch.nn.Module):
        return None
    settings = {f"{path}.{name}" if path else name: getattr(module, name)
                for path, module in model.named_modules() for name in _settings(module)}
    return settings or None


def _settings(module) -> tuple[str, ...]:
    names = getattr(type(module), "settings", ())
    return names if isinstance(names, tuple) else ()


def checksum(content) -> str:
    """sha256 of nested dicts, lists, tuples, tensors (dtype, shape and bytes) and plain values."""
    digest = hashlib.sha256()
    _digest(content, digest)
    return digest.hexdigest()


def _digest(obj, digest) -> None:
    if isinstance(obj, torch.Tensor):
        t = obj.detach().to("cpu").contiguous()
        digest.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        digest.update(memoryview(t.reshape(-1).view(torch.uint8).numpy()))
    elif isinstance(obj, dict):
        digest.update(f"D{len(obj)}".encode())
        for key, value in obj.items():
            _digest(key, digest)
            _digest(value, digest)
    elif isinstance(obj, (list, tuple)):
        digest.update(f"{type(obj).__name__}{len(obj)}".encode())
        for value in obj:
            _digest(value, digest)
    else:
        digest.update(f"{type(obj).__name__}:{obj!r};".encode())


# --------------------------------------------------------------------- save / load
def save_checkpoint(path: str, model, optimizer, scaler, state: dict, config: dict) -> None:
    """Write model, optimizer, scaler, loop state, config and random states to ``path``, with a
    header: format version, model class and config, optimizer class, and a checksum of the rest."""
    net = unwrap(model)
    content = {"model": net.state_dict(), "optimizer": optimizer.state_dict(),
               "scaler": scaler.state_dict(), "state": state, "config": config, "rng": rng_state()}
    header = {"format": FORMAT, "version": VERSION, "model_class": class_name(net),
              "model_config": model_config(net), "optimizer_class": class_name(optimizer)}
    header["checksum"] = checksum([header, content])
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        torch.save({"header": header, **content}, f)


def read_checkpoint(path: str, map_location="cpu") -> dict:
    """The payload of ``path`` (``"header"``, ``"model"``, ``"optimizer"``, ...), loaded with
    ``weights_only=True`` and checked against its header's format version and checksum. A
    pickled object that would run code, a damaged file or an unknown format raise ValueError
    naming ``path``. Hidden files of a save to ``path`` that was killed are removed."""
    if os.path.isdir(path):
        raise ValueError(f"{path} is a folder; expected a checkpoint file (the path save_checkpoint wrote)")
    remove_orphans(path)
    payload = _load(str(path), map_location)
    header = _header(str(path), payload)
    content = {k: v for k, v in payload.items() if k != "header"}
    expected = header["checksum"]
    if checksum([{k: v for k, v in header.items() if k != "checksum"}, content]) != expected:
        raise ValueError(f"{path} is damaged: its content does not match the checksum {expected[:16]}... "
                         f"saved with it (a changed byte); use another copy or train again")
    return payload


def _load(path: str, map_location) -> dict:
    """``torch.load(path, weights_only=True)``; every failure becomes a ValueError naming path."""
    if os.path.isfile(path) and not zipfile.is_zipfile(path):
        size = os.path.getsize(path)
        raise ValueError(f"{path} is damaged or not a checkpoint: "
                         f"{'it is empty' if size == 0 else f'its {size} bytes are not a torch.save archive'}")
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except FileNotFoundError:
        raise
    except pickle.UnpicklingError as err:
        if "global" in str(err).lower():
            raise ValueError(f"refusing to load {path}: it holds objects other than tensors and "
                             f"plain data, which could run code when unpickled ({err})") from err
        raise ValueError(f"{path} is damaged: it cannot be unpickled ({err})") from err
    except Exception as err:  # truncated or corrupted archives: OSError, RuntimeError, EOFError...
        raise ValueError(f"{path} is damaged (truncated or corrupted): torch.load failed with "
                         f"{type(err).__name__}: {err}") from err


def _header(path: str, payload) -> dict:
    """The header of a loaded payload, after checking it is one this version of xfl reads."""
    header = payload.get("header") if isinstance(payload, dict) else None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        keys = sorted(payload)[:8] if isinstance(payload, dict) else type(payload).__name__
        raise ValueError(f"{path} is not an xfl checkpoint of format {VERSION} (no {FORMAT!r} header; "
                         f"it holds {keys}); an older xfl (format 1) or another program wrote it")
    if header.get("version") != VERSION:
        raise ValueError(f"{path} has checkpoint format version {header.get('version')!r}; this xfl "
                         f"reads version {VERSION}")
    return header


def check_matches(path: str, header: dict, model, optimizer=None) -> None:
    """Refuse to load a checkpoint into another kind of model or optimizer, naming both sides."""
    net = unwrap(model)
    if header["model_class"] != class_name(net):
        raise ValueError(f"{path} holds a {header['model_class']}, not a {class_name(net)}")
    saved, given = header["model_config"], model_config(net)
    if saved is not None and given is not None:
        differ = {k: (saved.get(k), given.get(k)) for k in sorted(set(saved) | set(given))
                  if k not in IGNORED_CONFIG and saved.get(k) != given.get(k)}
        if differ:
            sides = ", ".join(f"{k}: checkpoint {a!r}, model {b!r}" for k, (a, b) in differ.items())
            raise ValueError(f"{path} holds a model with another configuration ({sides})")
    if optimizer is not None and header["optimizer_class"] != class_name(optimizer):
        raise ValueError(f"{path} holds the state of a {header['optimizer_class']}, not of the "
                         f"{class_name(optimizer)} given")


def load_checkpoint(path: str, model, optimizer=None, scaler=None, map_location="cpu") -> dict:
    """Restore ``model`` (and, to resume, ``optimizer``, ``scaler`` and the random states) from
    ``path``; return the saved loop state (a dict). The model's class and configuration and the
    optimizer's class must be those saved."""
    payload = read_checkpoint(path, map_location)
    check_matches(path, payload["header"], model, optimizer)
    unwrap(model).load_state_dict(payload["model"])
    if optimizer is not None:
        optimizer.load_state_dict(payload["optimizer"])
        set_rng_state(payload["rng"])
    if scaler is not None:
        scaler.load_state_dict(payload["scaler"])
    return payload["state"]


# ------------------------------------------------------------------- averaging
class LastWeights:
    """Keeps copies of the last ``keep`` weights it is shown; ``average()`` is their mean.

    Pass it as ``evaluate`` to ``xfl.train.train`` (with ``eval_every``) to average the last
    checkpoints of a run, as Vaswani et al. (2017) did (the last 5 checkpoints of their base
    model). Floating-point tensors are averaged; others (counters) are taken from the last copy.
    """

    def __init__(self, keep: int):
        if not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep must be a positive int, got {keep!r}")
        self.keep, self.saved = keep, []

    def __call__(self, model) -> dict:
        weights = {k: v.detach().to("cpu", copy=True) for k, v in unwrap(model).state_dict().items()}
        self.saved = (self.saved + [weights])[-self.keep:]
        return {"weights_kept": len(self.saved)}

    def average(self) -> dict:
        """The mean of the kept weights, a ``state_dict`` for ``model.load_state_dict``."""
        if not self.saved:
            raise ValueError("no weights kept yet: call this object with a model first")
        last = self.saved[-1]
        return {k: torch.stack([w[k].float() for w in self.saved]).mean(0).to(v.dtype)
                if v.is_floating_point() else v for k, v in last.items()}
