"""xfl.checkpoint: what a checkpoint records (class, configuration, optimizer, format version,
checksum), and a clear ValueError naming the file for every damaged or mismatched one (issue 39).
Exact resumption and crafted pickles: tests/test_train.py."""

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import zipfile
from pathlib import Path

import pytest
import torch

from xfl import atomic_files
from xfl.checkpoint import VERSION, load_checkpoint, read_checkpoint, save_checkpoint
from xfl.model import GPT, GPTConfig

ROOT = Path(__file__).resolve().parents[1]


def gpt(num_heads=4, dropout=0.0):
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=13, d_model=16, num_heads=num_heads, num_layers=1, max_len=8,
                         dropout=dropout))


def saved(tmp_path, model=None, optimizer_class=torch.optim.AdamW, step=3):
    model = model or gpt()
    optimizer = optimizer_class(model.parameters(), lr=1e-3)
    path = tmp_path / "run.pt"
    save_checkpoint(str(path), model, optimizer, torch.amp.GradScaler("cpu", enabled=False),
                    {"step": step}, {"lr": 1e-3})
    return path


def test_the_header_records_what_the_file_holds(tmp_path):
    header = read_checkpoint(saved(tmp_path))["header"]
    assert header["format"] == "xfl-checkpoint" and header["version"] == VERSION
    assert header["model_class"] == "xfl.model.GPT"
    assert header["model_config"]["num_heads"] == 4 and header["model_config"]["vocab_size"] == 13
    assert header["optimizer_class"] == "torch.optim.adamw.AdamW"
    assert len(header["checksum"]) == 64


def test_a_model_of_the_same_configuration_loads(tmp_path):
    """Dropout is not compared: it changes training, not what the weights compute."""
    path, model = saved(tmp_path), gpt(dropout=0.3)
    assert load_checkpoint(str(path), model) == {"step": 3}
    torch.testing.assert_close(model.state_dict(), gpt().state_dict())


# ----------------------------------------------------------------- damaged files
def test_truncated_file(tmp_path):
    path = saved(tmp_path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(ValueError, match=rf"{path} is damaged or not a checkpoint: its \d+ bytes are not"):
        load_checkpoint(str(path), gpt())


def test_ten_byte_file(tmp_path):
    path = saved(tmp_path)
    path.write_bytes(path.read_bytes()[:10])
    with pytest.raises(ValueError, match=rf"{path} is damaged or not a checkpoint: its 10 bytes"):
        load_checkpoint(str(path), gpt())


def test_empty_file(tmp_path):
    path = tmp_path / "run.pt"
    path.write_bytes(b"")
    with pytest.raises(ValueError, match=rf"{path} is damaged or not a checkpoint: it is empty"):
        load_checkpoint(str(path), gpt())


def test_random_bytes_are_damaged_not_code(tmp_path):
    path = tmp_path / "run.pt"
    path.write_bytes(os.urandom(5000))
    with pytest.raises(ValueError, match=rf"{path} is damaged or not a checkpoint") as err:
        load_checkpoint(str(path), gpt())
    assert "run code" not in str(err.value)


def test_a_flipped_bit_in_a_weight(tmp_path):
    path = saved(tmp_path)
    with zipfile.ZipFile(path) as archive:  # torch stores tensors uncompressed: find one's bytes
        info = next(i for i in archive.infolist() if "/data/" in i.filename and i.file_size >= 64)
    raw = bytearray(path.read_bytes())
    local = raw[info.header_offset: info.header_offset + 30]
    start = info.header_offset + 30 + int.from_bytes(local[26:28], "little") + int.from_bytes(local[28:30], "little")
    raw[start + 13] ^= 0x10
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=rf"{path} is damaged: its content does not match the checksum"):
        load_checkpoint(str(path), gpt())


def test_a_file_without_a_header(tmp_path):
    """What xfl before format 2 wrote (no header), or any other program's state dict."""
    path = tmp_path / "old.pt"
    torch.save({"model": gpt().state_dict(), "state": {"step": 1}}, path)
    with pytest.raises(ValueError, match=rf"{path} is not an xfl checkpoint of format {VERSION} .*older xfl"):
        load_checkpoint(str(path), gpt())


def test_another_format_version(tmp_path):
    path = saved(tmp_path)
    payload = torch.load(path, weights_only=True)
    payload["header"]["version"] = 99
    torch.save(payload, path)
    with pytest.raises(ValueError, match=rf"{path} has checkpoint format version 99; this xfl reads version {VERSION}"):
        load_checkpoint(str(path), gpt())


# ------------------------------------------------------------- mismatched loads
def test_four_heads_into_two_heads_of_the_same_width(tmp_path):
    path = saved(tmp_path, gpt(num_heads=4))
    with pytest.raises(ValueError, match=rf"{path} holds a model with another configuration "
                                         r"\(num_heads: checkpoint 4, model 2\)"):
        load_checkpoint(str(path), gpt(num_heads=2))


def test_another_model_class(tmp_path):
    path = saved(tmp_path)
    with pytest.raises(ValueError, match=rf"{path} holds a xfl.model.GPT, not a torch.nn.modules.linear.Linear"):
        load_checkpoint(str(path), torch.nn.Linear(16, 16))


def test_adamw_state_into_sgd(tmp_path):
    path, model = saved(tmp_path), gpt()
    with pytest.raises(ValueError, match=rf"{path} holds the state of a torch.optim.adamw.AdamW, not of the "
                                         r"torch.optim.sgd.SGD given"):
        load_checkpoint(str(path), model, torch.optim.SGD(model.parameters(), lr=0.1))


# ------------------------------------------------------------------ killed saves
KILLED_SAVER = textwrap.dedent("""
    import sys, time
    import torch
    import xfl.checkpoint as C

    class SlowFile:  # writes for real, then stops halfway so that the parent can kill us
        def __init__(self, f):
            self.f, self.written = f, 0
        def write(self, data):
            self.f.write(data)
            self.written += len(data)
            if self.written > 4_000_000:
                self.f.flush()
                print("halfway", flush=True)
                time.sleep(120)
            return len(data)
        def __getattr__(self, name):
            return getattr(self.f, name)
        def __enter__(self):
            return self
        def __exit__(self, *exc):
            self.f.close()

    real_open = open
    C.open = lambda *a, **k: SlowFile(real_open(*a, **k))
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.Linear(1024, 1024))  # 8 MB
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    C.save_checkpoint(sys.argv[1], model, optimizer, torch.amp.GradScaler("cpu", enabled=False),
                      {"step": 99}, {})
""")


def kill_a_save_halfway(path: Path, anonymous: bool) -> None:
    """Start a process that saves over ``path`` and SIGKILL it once half the file is written."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    saver = KILLED_SAVER if anonymous else (
        "import xfl.atomic_files; xfl.atomic_files._can_name_anonymous_files = lambda folder: False\n" + KILLED_SAVER)
    child = subprocess.Popen([sys.executable, "-c", saver, str(path)], stdout=subprocess.PIPE,
                             text=True, env=env)
    try:
        assert child.stdout.readline().strip() == "halfway"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()


@pytest.mark.skipif(not atomic_files._can_name_anonymous_files(Path(tempfile.gettempdir())),
                    reason="this file system cannot name anonymous files (O_TMPFILE + linkat)")
def old_checkpoint_then_a_killed_save(tmp_path: Path, anonymous: bool):
    """An 8 MB checkpoint at step 5, then a save over it killed halfway: (model, path, old bytes)."""
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.Linear(1024, 1024))
    path = saved(tmp_path, model, torch.optim.SGD, step=5)
    before = path.read_bytes()
    kill_a_save_halfway(path, anonymous)
    return model, path, before


def test_a_save_killed_halfway_leaves_the_old_checkpoint_and_nothing_else(tmp_path):
    model, path, before = old_checkpoint_then_a_killed_save(tmp_path, anonymous=True)
    assert [p.name for p in tmp_path.iterdir()] == ["run.pt"]  # the half-written file had no name
    assert path.read_bytes() == before
    assert load_checkpoint(str(path), model, torch.optim.SGD(model.parameters(), lr=0.1)) == {"step": 5}


def test_without_anonymous_files_a_killed_save_s_file_is_removed_by_the_next_load(tmp_path):
    model, path, before = old_checkpoint_then_a_killed_save(tmp_path, anonymous=False)
    hidden = [p.name for p in tmp_path.iterdir() if p.name != "run.pt"]
    assert len(hidden) == 1 and hidden[0].startswith(".run.pt.") and os.path.getsize(tmp_path / hidden[0]) > 4e6
    assert path.read_bytes() == before  # the old checkpoint is intact ...
    assert load_checkpoint(str(path), model, torch.optim.SGD(model.parameters(), lr=0.1)) == {"step": 5}
    assert [p.name for p in tmp_path.iterdir()] == ["run.pt"]  # ... and the next load removed the rest


def test_a_killed_writer_s_file_is_removed_by_the_next_save_not_a_live_one(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    orphan, live = tmp_path / f".run.pt.{dead}.abc.tmp", tmp_path / f".run.pt.{os.getpid()}.xyz.tmp"
    orphan.write_bytes(b"half")
    live.write_bytes(b"being written")
    saved(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["run.pt", live.name])
