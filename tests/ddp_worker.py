"""Run by tests/test_train.py under ``torchrun --nproc_per_node=2`` (gloo, CPU).

Trains the copy task with xfl.train.train, unchanged, and writes rank-local results.
argv: output directory, global batch size per process.
"""

import json
import os
import sys
from functools import partial

import torch

from toy_tasks import copy_model, copy_pairs, epoch_batches
from xfl.train import TrainConfig, seq2seq_loss, train

out_dir, per_process = sys.argv[1], int(sys.argv[2])
pairs = copy_pairs(64, seed=1, min_len=5, max_len=5)  # fixed length: equal tokens per process
model = copy_model(dropout=0.0)
config = TrainConfig(steps=6, lr=3e-3, warmup=2, log_every=1, progress=False, device="cpu",
                     checkpoint_path=os.path.join(out_dir, "ddp.pt"))
state = train(model, partial(epoch_batches, pairs, per_process), seq2seq_loss, config)
rank = int(os.environ["RANK"])
flat = torch.cat([p.detach().flatten() for p in model.parameters()])
torch.save(flat, os.path.join(out_dir, f"params{rank}.pt"))
with open(os.path.join(out_dir, f"history{rank}.json"), "w") as f:
    json.dump({"history": state.history, "tokens": state.tokens}, f)
