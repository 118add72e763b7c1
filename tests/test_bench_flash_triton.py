"""bench/flash_triton.py: it refuses without a CUDA GPU and says what to do; the card's peak by
name. (Its --smoke run, the Triton kernels under the interpreter, is the GPU queue's dry run in
tests/test_gpu_plan.py.)"""

import torch

from bench import flash_triton


def test_without_cuda_it_refuses_and_says_where_to_run(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert flash_triton.main(["--out", str(tmp_path / "out.json")]) == 2
    assert not (tmp_path / "out.json").exists()
    message = capsys.readouterr().err
    assert "needs a CUDA GPU" in message and "gpu_plan" in message and "--smoke" in message


def test_peak_by_card_name():
    assert flash_triton.peak_tflops("NVIDIA H200") == flash_triton.peak_tflops("NVIDIA H100 80GB HBM3") == 989.0
    assert flash_triton.peak_tflops("Tesla T4") == 65.0 and flash_triton.peak_tflops("cpu") is None
