"""xfl.train: schedule, loss without padding, exact resumption, atomic and safe checkpoints,
no host synchronisation inside a step, the evaluation callback, DDP for text and images."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import torch

from toy_tasks import PAD, SOS, EOS, copy_model, copy_pairs, epoch_batches, striped_task, tiny_vit
from xfl import train as T
from xfl.checkpoint import LastWeights, load_checkpoint
from xfl.decode import greedy_decode
from xfl.train import TrainConfig, inverse_sqrt_factor, seq2seq_loss, train

HERE = Path(__file__).parent



def test_inverse_sqrt_schedule():
    assert inverse_sqrt_factor(0, 4) == pytest.approx(0.25)
    assert inverse_sqrt_factor(3, 4) == pytest.approx(1.0)  # peak at step = warmup
    assert inverse_sqrt_factor(15, 4) == pytest.approx(0.5)  # sqrt(4 / 16)
    assert inverse_sqrt_factor(123, 0) == 1.0  # no warm-up: constant
    with pytest.raises(ValueError, match="warmup"):
        inverse_sqrt_factor(0, -1)


def test_padding_carries_no_loss():
    model = copy_model(dropout=0.0).eval()
    src, tgt = next(epoch_batches(copy_pairs(8), 8, 0))
    more_pad = torch.cat([tgt, torch.full((8, 3), PAD)], dim=1)
    loss_a, n_a = seq2seq_loss(model, (src, tgt), label_smoothing=0.1)
    loss_b, n_b = seq2seq_loss(model, (src, more_pad), label_smoothing=0.1)
    assert int(n_a) == int(n_b) == int((tgt[:, 1:] != PAD).sum())
    torch.testing.assert_close(loss_a, loss_b)


def run(tmp_path, steps, name="ckpt.pt", loss=partial(seq2seq_loss, label_smoothing=0.1), **overrides):
    pairs = copy_pairs(40, seed=2)
    config = TrainConfig(steps=steps, lr=2e-3, warmup=3, log_every=2, checkpoint_every=2,
                         grad_norm_every=2, progress=False, device="cpu",
                         checkpoint_path=str(tmp_path / name), **overrides)
    model = copy_model(seed=overrides.get("seed", 0) + 5, dropout=0.1)  # dropout: RNG matters
    return train(model, partial(epoch_batches, pairs, 8), loss, config), model


def test_resumed_run_follows_the_uninterrupted_trajectory(tmp_path):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    full, full_model = run(tmp_path / "a", steps=8)  # 5 batches per epoch: crosses epochs
    run(tmp_path / "b", steps=4)
    resumed, resumed_model = run(tmp_path / "b", steps=8)  # a fresh model, loads step 4
    assert [h["step"] for h in resumed.history] == [h["step"] for h in full.history]
    for a, b in zip(full.history, resumed.history):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
        assert a["lr"] == pytest.approx(b["lr"])
    assert full.tokens == resumed.tokens and full.epoch == resumed.epoch
    for p, q in zip(full_model.parameters(), resumed_model.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-6)
    assert [s for s, _ in resumed.grad_norms] == [2, 4, 6, 8]
    assert list(resumed.grad_norms[0][1])[:2] == ["encoder.layers.0", "encoder.final_norm"]


def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    state, _ = run(tmp_path, steps=4)
    path = tmp_path / "ckpt.pt"
    before = path.read_bytes()

    def crash(obj, f, *a, **k):
        f.write(b"half a checkpoint")
        raise RuntimeError("disk full")

    monkeypatch.setattr(T.torch, "save", crash)
    with pytest.raises(RuntimeError, match="disk full"):
        run(tmp_path, steps=8)
    assert path.read_bytes() == before  # the old checkpoint is untouched
    monkeypatch.undo()
    model = copy_model()
    assert T.TrainState(**load_checkpoint(str(path), model)).step == 4


def test_training_learns_to_copy():
    """Train + greedy decoding end to end: a tiny model learns to copy short sequences."""
    pairs = copy_pairs(512, seed=3, max_len=5)
    model = copy_model(dropout=0.0, d_model=48)
    config = TrainConfig(steps=600, lr=3e-3, warmup=40, log_every=25, progress=False, device="cpu")
    state = train(model, partial(epoch_batches, pairs, 32), seq2seq_loss, config)
    assert state.history[-1]["loss"] < 0.2 * state.history[0]["loss"]
    test = copy_pairs(32, seed=99, max_len=5)
    src = torch.nn.utils.rnn.pad_sequence([torch.tensor(s) for s, _ in test], batch_first=True)
    hyps, _ = greedy_decode(model, src, max_len=8, sos=SOS, eos=EOS)
    accuracy = sum(h == s for h, (s, _) in zip(hyps, test)) / len(test)
    assert accuracy >= 0.9


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def merged_batches(pairs, per_process, epoch):
    """What two processes see together at each step, as one batch (single-process reference)."""
    batches = list(epoch_batches(pairs, per_process, epoch))
    for a, b in zip(batches[0::2], batches[1::2]):
        yield torch.cat([a[0], b[0]]), torch.cat([a[1], b[1]])


def run_torchrun(tmp_path, task, per_process):
    env = {**os.environ, "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "OMP_NUM_THREADS": "1"}
    cmd = [os.path.join(os.path.dirname(sys.executable), "torchrun"), "--nproc_per_node=2",
           f"--master_port={free_port()}", str(HERE / "ddp_worker.py"), str(tmp_path), str(per_process), task]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # torchrun and both workers
        output, _ = proc.communicate()
    assert proc.returncode == 0, output[-3000:]
    p0, p1 = (torch.load(tmp_path / f"params{r}.pt") for r in (0, 1))
    torch.testing.assert_close(p0, p1, rtol=0, atol=0)  # replicas stay identical
    assert (tmp_path / "ddp.pt").exists()
    return p0, json.loads((tmp_path / "history0.json").read_text())


def single_process_reference(task):
    """The DDP worker's run in one process, each step on the two processes' batches together."""
    config = TrainConfig(steps=6, lr=3e-3, warmup=2, log_every=1, progress=False, device="cpu")
    if task == "copy":
        pairs = copy_pairs(64, seed=1, min_len=5, max_len=5)
        model = copy_model(dropout=0.0)
        return model, train(model, partial(merged_batches, pairs, 4), seq2seq_loss, config)
    model, images = tiny_vit(), striped_task(8)
    both = lambda epoch: [torch.cat(pair) for pair in zip(*[iter(images.batches(epoch))] * 2)]  # noqa: E731
    return model, train(model, both, images.loss, config)


@pytest.mark.skipif(shutil.which("torchrun", path=os.path.dirname(sys.executable)) is None,
                    reason="torchrun not installed")
@pytest.mark.parametrize("task, per_process", [("copy", 4), ("vit", 8)])
def test_same_loop_under_torchrun_ddp(tmp_path, task, per_process):
    p0, ddp = run_torchrun(tmp_path, task, per_process)
    model, single = single_process_reference(task)
    assert [h["loss"] for h in ddp["history"]] == pytest.approx([h["loss"] for h in single.history],
                                                                 rel=1e-4)
    assert ddp["tokens"] == single.tokens
    reference = torch.cat([p.detach().flatten() for p in model.parameters()])
    # Adam amplifies rounding in near-zero gradients, so compare the whole vector
    assert float((p0 - reference).norm() / reference.norm()) < 1e-3


def test_same_loop_trains_a_decoder_only_model():
    """The GPT chapter's use: batches are plain token tensors, the loss is next-token CE."""
    from xfl.model import GPT, GPTConfig
    from xfl.train import lm_loss

    pattern = torch.tensor([1, 3, 4, 5, 6, 7, 8, 9, 2] * 2)  # a repeating sequence to learn

    def data(epoch):
        g = torch.Generator().manual_seed(epoch)
        for _ in range(8):
            starts = torch.randint(0, 9, (16,), generator=g)
            yield torch.stack([pattern[s:s + 8] for s in starts.tolist()])

    torch.manual_seed(0)
    gpt = GPT(GPTConfig(vocab_size=10, d_model=32, num_heads=2, num_layers=1, dropout=0.0, max_len=8))
    config = TrainConfig(steps=60, lr=3e-3, warmup=10, log_every=10, progress=False, device="cpu")
    state = train(gpt, data, lm_loss, config)
    assert state.history[-1]["loss"] < 0.3 * state.history[0]["loss"]
    assert state.tokens == 60 * 16 * 7


# ------------------------------------------------------------------ safe checkpoints
class RunsCode:
    """Unpickling this would call ``os.system`` (what a malicious checkpoint does)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_a_checkpoint_that_would_run_code_is_refused(tmp_path):
    state, _ = run(tmp_path, steps=2)
    path, marker = tmp_path / "ckpt.pt", tmp_path / "pwned"
    payload = torch.load(path, weights_only=True)  # an honest checkpoint is plain data
    payload["state"]["history"].append(RunsCode(marker))
    torch.save(payload, path)
    with pytest.raises(ValueError, match=r"refusing to load .*ckpt\.pt.*could run code"):
        load_checkpoint(str(path), copy_model())
    assert not marker.exists()
    with pytest.raises(ValueError, match="refusing"):
        run(tmp_path, steps=4)  # resuming refuses it too


def test_fp16_runs_resume_with_the_scaler_state(tmp_path, monkeypatch):
    """The second batch overflows, so the loss scale halves once; a resumed run must go on
    with the halved scale (a fresh scaler would start again at 2**16)."""
    monkeypatch.setenv("XFL_PRECISION", "fp16")
    second = next(b for i, b in enumerate(epoch_batches(copy_pairs(40, seed=2), 8, 0)) if i == 1)

    def overflow_on_the_second_batch(model, batch):
        loss, n = seq2seq_loss(model, batch, label_smoothing=0.1)
        return (loss * float("inf"), n) if torch.equal(batch[0], second[0]) else (loss, n)

    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    full, full_model = run(tmp_path / "a", steps=6, loss=overflow_on_the_second_batch)
    run(tmp_path / "b", steps=4, loss=overflow_on_the_second_batch)
    resumed, resumed_model = run(tmp_path / "b", steps=6, loss=overflow_on_the_second_batch)
    scales = [torch.load(tmp_path / d / "ckpt.pt", weights_only=True)["scaler"]["scale"] for d in "ab"]
    assert scales == [2.0 ** 15] * 2
    for a, b in zip(full.history, resumed.history):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
    for p, q in zip(full_model.parameters(), resumed_model.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-6)


# ------------------------------------------------------------- no host synchronisation
READ_BACKS = ("item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__")
XFL_DIR = str(Path(T.__file__).parent)


@pytest.fixture
def read_backs(monkeypatch):
    """Count tensor read-backs (host syncs on a GPU) made by xfl's own code, on any device."""
    counted = []
    for name in READ_BACKS:
        original = getattr(torch.Tensor, name)

        def counting(self, *args, _original=original, _name=name, **kwargs):
            if sys._getframe(1).f_code.co_filename.startswith(XFL_DIR):
                counted.append((_name, sys._getframe(1).f_code.co_name))
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counting)
    return counted


def run_copy(steps, **overrides):
    config = TrainConfig(steps=steps, lr=1e-3, warmup=2, log_every=100, progress=False, device="cpu",
                         **overrides)
    return train(copy_model(), partial(epoch_batches, copy_pairs(64), 8), seq2seq_loss, config)


def test_xfl_reads_nothing_back_inside_a_step(read_backs):
    """The ViT's step (gather, crop, flip, TrivialAugment, MixUp/CutMix, loss, fp32 step)."""
    from xfl.augment import augment_batch
    from xfl.precision import choose_precision

    model, task = tiny_vit(dropout=0.1), striped_task(16)
    task.augment, task.mix_prob = partial(augment_batch, padding=1, trivial=True), 1.0
    config = TrainConfig(weight_decay=0.05)
    optimizer, precision = T.make_optimizer(model, config), choose_precision("cpu")
    sync_debug = torch.cuda.is_available()  # a real GPU: let CUDA itself flag any sync too
    if sync_debug:
        torch.cuda.set_sync_debug_mode("error")
    try:
        for index in task.batches(0):
            T.train_step(model, task.loss, index, optimizer, precision.grad_scaler(), precision)
    finally:
        if sync_debug:
            torch.cuda.set_sync_debug_mode("default")
    assert read_backs == []


def test_read_backs_happen_only_when_logging(read_backs):
    run_copy(steps=3)
    few = list(read_backs)
    read_backs.clear()
    run_copy(steps=12)
    assert read_backs == few and 1 <= len(few) <= 4  # the final log line's, whatever the step count


# ------------------------------------------------------------------ evaluation callback
def test_evaluate_runs_in_eval_mode_outside_the_clock():
    seen = []

    def evaluate(model):
        seen.append(model.training)
        return {"n": len(seen)}

    state = train(copy_model(), partial(epoch_batches, copy_pairs(64), 8), seq2seq_loss,
                  TrainConfig(steps=6, eval_every=2, log_every=3, progress=False, device="cpu"),
                  evaluate=evaluate)
    assert [e["step"] for e in state.evals] == [2, 4, 6] and [e["n"] for e in state.evals] == [1, 2, 3]
    assert seen == [False] * 3  # eval mode inside the callback ...
    assert [h["step"] for h in state.history] == [3, 6]


def test_last_weights_average_the_last_copies_only():
    model = torch.nn.Linear(3, 2)
    keeper = LastWeights(keep=2)
    for value in (1.0, 2.0, 4.0):
        with torch.no_grad():
            model.weight.fill_(value)
        keeper(model)
    averaged = keeper.average()
    assert torch.equal(averaged["weight"], torch.full((2, 3), 3.0))  # (2 + 4) / 2: the first dropped
    model.load_state_dict(averaged)
    with pytest.raises(ValueError, match="keep must be a positive int, got 0"):
        LastWeights(keep=0)
    with pytest.raises(ValueError, match="no weights kept"):
        LastWeights(keep=3).average()
