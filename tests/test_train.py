"""xfl.train: schedule, loss without padding, exact resumption, atomic and safe checkpoints,
no host synchronisation inside a step, the evaluation callback, DDP for text and images."""

import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import traceback
from functools import partial
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from toy_tasks import copy_batches, copy_model, copy_pairs, striped_task, tiny_vit
from xfl.data.text import EOS, PAD, SOS
from xfl import train as T
from xfl.checkpoint import LastWeights, load_checkpoint
from xfl.decode import greedy_decode
from xfl.train import TrainConfig, inverse_sqrt_factor, ramp_factor, seq2seq_loss, train

HERE = Path(__file__).parent



def test_inverse_sqrt_schedule():
    assert inverse_sqrt_factor(0, 4) == pytest.approx(0.25)
    assert inverse_sqrt_factor(3, 4) == pytest.approx(1.0)  # peak at step = warmup
    assert inverse_sqrt_factor(15, 4) == pytest.approx(0.5)  # sqrt(4 / 16)
    assert inverse_sqrt_factor(123, 0) == 1.0  # no warm-up: constant
    with pytest.raises(ValueError, match="warmup"):
        inverse_sqrt_factor(0, -1)


def test_ramp_schedule_is_the_warm_up_without_the_decay():
    """Chapter 5's control: inverse_sqrt's ramp, then the peak rate kept (no 1/sqrt decay)."""
    ramp = [TrainConfig(lr=2.0, schedule="ramp", warmup=4).lr_at(step, 0.0) for step in range(20)]
    decay = [TrainConfig(lr=2.0, warmup=4).lr_at(step, 0.0) for step in range(20)]
    assert ramp[:4] == decay[:4] == [0.5, 1.0, 1.5, 2.0]
    assert ramp[4:] == [2.0] * 16 and decay[15] == pytest.approx(1.0)  # inverse_sqrt halves by step 16
    assert TrainConfig(lr=2.0, schedule="ramp", warmup=0).lr_at(7, 0.0) == 2.0
    with pytest.raises(ValueError, match="warmup"):
        ramp_factor(0, -1)


def test_padding_carries_no_loss():
    model = copy_model(dropout=0.0).eval()
    src, tgt = next(copy_batches(copy_pairs(8), 8, 0))
    more_pad = torch.cat([tgt, torch.full((8, 3), PAD)], dim=1)
    loss_a, n_a = seq2seq_loss(model, (src, tgt), label_smoothing=0.1)
    loss_b, n_b = seq2seq_loss(model, (src, more_pad), label_smoothing=0.1)
    assert int(n_a) == int(n_b) == int((tgt[:, 1:] != PAD).sum())
    torch.testing.assert_close(loss_a, loss_b)


def test_the_cpu_step_updates_all_tensors_at_once_with_the_per_tensor_numbers():
    """``make_optimizer`` on the CPU takes AdamW's multi-tensor step, and ``train_step`` clips all
    gradients at once: bit for bit what the per-tensor loop and clip give, step after step."""
    models = [copy_model(seed=3, dropout=0.0) for _ in range(2)]
    config = TrainConfig(lr=3e-3, weight_decay=0.01)
    fast = T.make_optimizer(models[0], config)
    plain = torch.optim.AdamW(T.parameter_groups(models[1], config.weight_decay), lr=config.lr,
                              betas=tuple(config.betas), eps=config.eps, foreach=False)
    assert fast.defaults["foreach"] and not fast.defaults["fused"]
    batches = copy_batches(copy_pairs(32, seed=4), 8, 0)
    for batch in itertools.islice(batches, 4):
        *_, norm = T.train_step(models[0], seq2seq_loss, batch, fast, torch.amp.GradScaler("cpu", enabled=False),
                                T.choose_precision("cpu"), clip_norm=0.05)
        plain.zero_grad(set_to_none=True)
        seq2seq_loss(models[1], batch)[0].backward()
        assert torch.equal(torch.nn.utils.clip_grad_norm_(models[1].parameters(), 0.05, foreach=False), norm)
        assert norm > 0.05  # so the step clipped
        plain.step()
        assert all(torch.equal(a, b) for a, b in zip(models[0].parameters(), models[1].parameters()))


def run(tmp_path, steps, name="ckpt.pt", loss=partial(seq2seq_loss, label_smoothing=0.1), **overrides):
    pairs = copy_pairs(40, seed=2)
    config = TrainConfig(steps=steps, lr=2e-3, warmup=3, log_every=2, checkpoint_every=2,
                         grad_norm_every=2, progress=False, device="cpu",
                         checkpoint_path=str(tmp_path / name), **overrides)
    model = copy_model(seed=overrides.get("seed", 0) + 5, dropout=0.1)  # dropout: RNG matters
    return train(model, partial(copy_batches, pairs, 8), loss, config), model


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
    state = train(model, partial(copy_batches, pairs, 32), seq2seq_loss, config)
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
    batches = list(copy_batches(pairs, per_process, epoch))
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
    second = next(b for i, b in enumerate(copy_batches(copy_pairs(40, seed=2), 8, 0)) if i == 1)

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
READ_BACKS = ("tolist", "numpy", "cpu")  # read values without going through the dispatcher
TRAIN_PY = T.__file__
XFL_DIR = str(Path(T.__file__).parent)


class DeviceReads(TorchDispatchMode):
    """Records every read of a tensor's value by the host, by any code (xfl's, PyTorch's): the
    dispatcher's ``_local_scalar_dense`` (``item``, ``bool``, ``int``, ``float`` and C++ checks
    such as ``F.one_hot``'s or ``Beta``'s argument validation) and ``tolist``/``numpy``/``cpu``.
    On a GPU each would wait for the device. Each read is kept with the names of the functions
    of ``xfl/train.py`` on the stack."""

    def __init__(self):
        super().__init__()
        self.reads, self.where, self.active = [], [], False

    def record(self, what):
        if not self.active:
            return
        xfl = [f for f in traceback.extract_stack() if f.filename.startswith(XFL_DIR)]
        self.reads.append((what, tuple(f.name for f in xfl if f.filename == TRAIN_PY)))
        self.where.append(" <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in xfl[-3:]))

    def __enter__(self):
        self.active = True
        return super().__enter__()

    def __exit__(self, *exc):
        self.active = False
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            self.record("_local_scalar_dense")
        return func(*args, **(kwargs or {}))


@pytest.fixture
def device_reads(monkeypatch):
    """A ``DeviceReads`` (active inside ``with``), with AdamW fused as on CUDA (the CPU's default
    AdamW reads its step counters, which live on the host by design)."""
    mode = DeviceReads()
    for name in READ_BACKS:
        original = getattr(torch.Tensor, name)

        def counting(self, *args, _original=original, _name=name, **kwargs):
            mode.record(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counting)
    make_optimizer = T.make_optimizer
    monkeypatch.setattr(T, "make_optimizer", lambda *a, **k: make_optimizer(*a, **k, fused=True))
    return mode


def vit_task():
    """The ViT recipe's batches: gather, crop, flip, TrivialAugment, MixUp/CutMix on each."""
    from xfl.augment import augment_batch

    task = striped_task(16)
    task.augment, task.mix_prob = partial(augment_batch, padding=1, trivial=True), 1.0
    return tiny_vit(dropout=0.1), task.batches, task.loss


def copy_task():
    return copy_model(), partial(copy_batches, copy_pairs(64), 8), seq2seq_loss


@pytest.mark.parametrize("make", [vit_task, copy_task])
def test_nothing_is_read_back_inside_a_step(device_reads, make):
    """Batches made, moved, augmented and mixed, then a fused fp32 AdamW step: no read-back."""
    from xfl.precision import choose_precision

    model, data, loss_fn = make()
    optimizer, precision = T.make_optimizer(model, TrainConfig(weight_decay=0.05)), choose_precision("cpu")
    sync_debug = torch.cuda.is_available()  # a real GPU: let CUDA itself flag any sync too
    if sync_debug:
        torch.cuda.set_sync_debug_mode("error")
    try:
        with device_reads:
            for batch in data(0):
                T.train_step(model, loss_fn, T._to_device(batch, torch.device("cpu")), optimizer,
                             precision.grad_scaler(), precision)
    finally:
        if sync_debug:
            torch.cuda.set_sync_debug_mode("default")
    assert device_reads.reads == [], device_reads.where


def train_quietly(make, steps, reads):
    model, data, loss_fn = make()
    config = TrainConfig(steps=steps, lr=1e-3, warmup=2, log_every=100, progress=False, device="cpu")
    with reads:
        return train(model, data, loss_fn, config)


@pytest.mark.parametrize("make", [vit_task, copy_task])
def test_the_loop_reads_back_only_when_logging(device_reads, make):
    """The whole loop (data, steps, clock): the only reads are the final log line's, as many
    after 3 steps as after 12."""
    train_quietly(make, 3, device_reads)
    few = list(device_reads.reads)
    device_reads.reads.clear()
    train_quietly(make, 12, device_reads)
    assert device_reads.reads == few and 1 <= len(few) <= 4, device_reads.where
    assert all("log" in names for _, names in few), few


# ------------------------------------------------------------------ evaluation callback
def test_evaluate_runs_in_eval_mode_outside_the_clock():
    seen = []

    def evaluate(model):
        seen.append(model.training)
        return {"n": len(seen)}

    state = train(copy_model(), partial(copy_batches, copy_pairs(64), 8), seq2seq_loss,
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


# ---------------------------------------------------------- no compilation inside the clock
@pytest.mark.parametrize("bucketing", [True, False])
def test_every_compilation_happens_before_the_clock_starts(monkeypatch, bucketing):
    """Counts dynamo's compilations (a backend that records them, ``torch.compile`` on the CPU)
    over a short run on varied sentence lengths: with buckets compiled first (``shapes``), all
    happen before the first step; without, some happen after it, inside the clock."""
    from xfl.batches import bucket_batches, bucketed
    from xfl.precision import Precision

    compiled_at, loss_calls = [], [0]

    def counting_backend(graph, example_inputs):
        compiled_at.append(loss_calls[0])
        return graph.forward

    def counted_loss(model, batch):
        loss_calls[0] += 1
        return seq2seq_loss(model, batch)

    compile_ = torch.compile
    monkeypatch.setattr(torch, "compile", lambda model, **kw: compile_(model, backend=counting_backend))
    monkeypatch.setattr(T, "choose_precision", lambda device, amp=True: Precision("fp32", "cpu", compile=True))
    torch._dynamo.reset()
    pairs = copy_pairs(96, min_len=2, max_len=13)  # 2..13 words: 4..15 target tokens
    data = partial(copy_batches, pairs, 8)
    if bucketing:
        data = lambda epoch: bucketed(copy_batches(pairs, 8, epoch), 8, multiple=8)  # noqa: E731
    shapes = bucket_batches(8, longest=15, multiple=8) if bucketing else None
    config = TrainConfig(steps=12, lr=1e-3, warmup=2, log_every=100, progress=False, device="cpu",
                         compile=True)
    train(copy_model(), data, counted_loss, config, shapes=shapes)
    torch._dynamo.reset()
    before_clock = len(shapes) + 1 if bucketing else 1  # the precompiled shapes, then step 1
    assert compiled_at and loss_calls[0] == before_clock + 11
    if bucketing:
        assert max(compiled_at) <= len(shapes), compiled_at  # none during the 12 steps
    else:
        assert max(compiled_at) > before_clock, compiled_at  # a new shape recompiled on the clock


@pytest.mark.parametrize("compile_seconds, compiles", [(30.0, False), (0.0, True)])
def test_auto_compiles_only_a_run_long_enough_to_pay_for_it(monkeypatch, compile_seconds, compiles):
    """With compilation available (a faked capable GPU's precision, on the CPU), "auto" times one
    eager step and compiles only when ``compile_pays``: a 12-step toy run never repays 30 s of
    compilation; at a (fictitious) cost of 0 s it does. Either way training is unchanged."""
    from xfl.precision import Precision

    compiled = []
    compile_ = torch.compile
    monkeypatch.setattr(torch, "compile", lambda model, **kw: compiled.append(model) or compile_(
        model, backend=lambda graph, example_inputs: graph.forward))
    monkeypatch.setattr(T, "choose_precision", lambda device, amp=True: Precision("fp32", "cpu", compile=True))
    monkeypatch.setattr("xfl.precision.COMPILE_SECONDS", compile_seconds)
    torch._dynamo.reset()
    pairs = copy_pairs(64, min_len=3, max_len=3)
    config = TrainConfig(steps=12, lr=1e-3, warmup=2, log_every=100, progress=False, device="cpu")
    state = train(copy_model(), partial(copy_batches, pairs, 8), seq2seq_loss, config)
    torch._dynamo.reset()
    assert bool(compiled) is compiles and state.step == 12
    assert state.compile_seconds > 0  # the timed eager step is reported with compilation


def test_bucketed_batches_give_the_loss_of_the_unpadded_ones():
    from xfl.batches import bucketed

    model = copy_model(dropout=0.0).eval()
    batches = list(copy_batches(copy_pairs(24, max_len=9), 8, 0))
    padded = list(bucketed(batches + [(batches[0][0][:3], batches[0][1][:3])], 8, multiple=8))
    assert len(padded) == 3  # the short batch is dropped
    for (src, tgt), (psrc, ptgt) in zip(batches, padded):
        assert psrc.shape[1] == ptgt.shape[1] - 1 and psrc.shape[1] % 8 == 0
        torch.testing.assert_close(seq2seq_loss(model, (psrc, ptgt))[0], seq2seq_loss(model, (src, tgt))[0])


# ------------------------------------------------------------- one run over several calls
def test_a_run_past_its_deadline_checkpoints_and_the_next_call_resumes(tmp_path, monkeypatch):
    data = partial(copy_batches, copy_pairs(64), 8)
    config = TrainConfig(steps=12, lr=1e-3, warmup=2, log_every=3, progress=False, device="cpu")
    straight = copy_model()
    train(straight, data, seq2seq_loss, config)
    monkeypatch.setenv("XFL_CHECKPOINT_DIR", str(tmp_path))
    clock = iter(range(10**6))
    monkeypatch.setattr(T.time, "time", lambda: next(clock))  # one tick per read of the clock
    monkeypatch.setenv("XFL_DEADLINE", "5")  # passes during the first call
    first = copy_model()
    with pytest.raises(T.DeadlineReached, match="run again to resume"):
        train(first, data, seq2seq_loss, config)
    saved = list(tmp_path.glob("run*.pt"))
    assert len(saved) == 1 and 0 < load_checkpoint(str(saved[0]), copy_model())["step"] < 12
    monkeypatch.delenv("XFL_DEADLINE")
    monkeypatch.setattr(T, "_runs_started", T.itertools.count())  # the notebook, run again
    resumed = copy_model()
    state = train(resumed, data, seq2seq_loss, config)
    assert state.step == 12 and [h["step"] for h in state.history] == [3, 6, 9, 12]
    for p, q in zip(straight.parameters(), resumed.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-6)  # as if never stopped


def test_warmup_counted_in_steps_then_cosine_on_the_clock():
    config = TrainConfig(lr=1.0, schedule="cosine", steps=None, max_seconds=100.0, warmup_steps=4)
    assert config.lr_at(0, 50.0) == pytest.approx(0.25 * 0.5)  # step 1 of 4, half-way on the clock
    assert config.lr_at(3, 0.0) == pytest.approx(1.0) and config.lr_at(9, 100.0) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="warmup_steps must be an int >= 0, got -1"):
        TrainConfig(warmup_steps=-1)


def test_no_step_limit_is_steps_none_and_needs_a_time_budget():
    state = train(copy_model(), partial(copy_batches, copy_pairs(64), 8), seq2seq_loss,
                  TrainConfig(steps=None, max_seconds=0.3, log_every=1, progress=False, device="cpu"))
    assert state.seconds >= 0.3 and state.step == len(state.history) >= 2  # stopped by the clock
    with pytest.raises(ValueError, match=r"steps=None \(no step limit\) needs a time budget"):
        TrainConfig(steps=None)
    with pytest.raises(ValueError, match="steps must be None or an int >= 0, got 2.5"):
        TrainConfig(steps=2.5)
