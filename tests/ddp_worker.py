"""Run by tests/test_train.py under ``torchrun --nproc_per_node=2`` (gloo, CPU).

Trains with xfl.train.train, unchanged, and writes rank-local results.
argv: output directory, batch size per process, task ("copy": the copy task; "vit": a tiny
ViT on striped images, without augmentation so that one process can reproduce the run).
"""

import json
import os
import sys
from functools import partial

import torch

from toy_tasks import copy_batches, copy_model, copy_pairs, striped_task, tiny_vit
from xfl.train import TrainConfig, seq2seq_loss, train

out_dir, per_process, task_name = sys.argv[1], int(sys.argv[2]), sys.argv[3]
config = TrainConfig(steps=6, lr=3e-3, warmup=2, log_every=1, progress=False, device="cpu",
                     checkpoint_path=os.path.join(out_dir, "ddp.pt"))
if task_name == "copy":
    pairs = copy_pairs(64, seed=1, min_len=5, max_len=5)  # fixed length: equal tokens per process
    model, data, loss = copy_model(dropout=0.0), partial(copy_batches, pairs, per_process), seq2seq_loss
else:
    model, task = tiny_vit(), striped_task(per_process)
    data, loss = task.batches, task.loss
state = train(model, data, loss, config)
rank = int(os.environ["RANK"])
flat = torch.cat([p.detach().flatten() for p in model.parameters()])
torch.save(flat, os.path.join(out_dir, f"params{rank}.pt"))
with open(os.path.join(out_dir, f"history{rank}.json"), "w") as f:
    json.dump({"history": state.history, "tokens": state.tokens}, f)
