#!/usr/bin/env python3
"""Elastic data-parallel training of a small MNIST classifier with Horovod and PyTorch.

Run with `horovodrun --min-np/--max-np --host-discovery-script ...` (hvdctl does that for
`mpi.launcher: horovodrun` + `elastic:`): workers may join or leave while the job runs.
When one does, Horovod interrupts the training function, rolls every rank back to the last
commit of the training state, re-forms the ring with the ranks that are left (or added) and
calls the function again. So:

- everything that must survive a reset lives in `hvd.elastic.TorchState`: the model, the
  optimizer, the sampler (which remembers the samples of this epoch already trained on),
  the epoch and the batch;
- `state.commit()` every BATCHES_PER_COMMIT batches saves that state in memory (and checks
  for new hosts); a failure loses at most the work since the last commit;
- no collective operation runs outside the function decorated with `@hvd.elastic.run`,
  because a worker that joins later starts this script from the top while the others are
  already training.

Configuration comes from the environment (hvdctl.yaml `parameters:` become these
variables, e.g. `batch-size: 64` -> BATCH_SIZE=64):

  EPOCHS              passes over the training set (default 3)
  BATCH_SIZE          samples per step on each rank (default 64)
  LR                  learning rate of one rank; the job uses LR x ranks (default 0.01)
  MOMENTUM            SGD momentum (default 0.9)
  BATCHES_PER_COMMIT  batches between two commits of the training state (default 20)
  DATA_DIR            directory holding MNIST in torchvision's layout
                      (DATA_DIR/MNIST/raw/train-images-idx3-ubyte, ...). Unset, empty or
                      missing: synthetic MNIST-shaped data is generated instead.
  CHECKPOINT_DIR      where rank 0 writes checkpoint-EPOCH.pt (default /tmp/checkpoints); a
                      new job resumes from the newest checkpoint found there.
  KEEP_CHECKPOINTS    how many checkpoints to keep (default 3, 0 keeps all)
  SYNTHETIC_SAMPLES   training samples of the synthetic data set (default 10000)
  SEED                random seed (default 42)
  PAUSE_AFTER_EPOCH   after this epoch is committed, every rank waits PAUSE_SECONDS before
  PAUSE_SECONDS       the next one (default: no pause): a window to add or remove workers
                      "between epochs" when trying elasticity out (rank 0 says when it starts)

Every worker must get the same configuration (hvdctl sets the same environment on every
pod) and see the same DATA_DIR.

Run by hand (one machine):  horovodrun -np 2 --min-np 1 --max-np 4 \\
    --host-discovery-script ./discover_hosts.sh python3 train.py
"""

import glob
import os
import re
import socket
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data as tud

import horovod.torch as hvd


# --------------------------------------------------------------------------- config


def env_value(name, default, kind=str):
    """An environment variable converted to `kind`; unset or blank gives `default`."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        return kind(text)
    except ValueError:
        raise SystemExit("%s=%r is not a valid %s" % (name, text, kind.__name__))


CFG = {
    "epochs": env_value("EPOCHS", 3, int),
    "batch_size": env_value("BATCH_SIZE", 64, int),
    "lr": env_value("LR", 0.01, float),
    "momentum": env_value("MOMENTUM", 0.9, float),
    "batches_per_commit": max(1, env_value("BATCHES_PER_COMMIT", 20, int)),
    "data_dir": env_value("DATA_DIR", ""),
    "checkpoint_dir": env_value("CHECKPOINT_DIR", "/tmp/checkpoints"),
    "keep_checkpoints": env_value("KEEP_CHECKPOINTS", 3, int),
    "synthetic_samples": env_value("SYNTHETIC_SAMPLES", 10000, int),
    "seed": env_value("SEED", 42, int),
    "pause_after_epoch": env_value("PAUSE_AFTER_EPOCH", 0, int),
    "pause_seconds": env_value("PAUSE_SECONDS", 0.0, float),
}


def log(message):
    """Prints on rank 0 only, flushed at once so `hvdctl logs -f` shows it live."""
    if hvd.rank() == 0:
        print(message, flush=True)


# --------------------------------------------------------------------------- data


def synthetic_mnist(samples, seed, split):
    """MNIST-shaped data a model can actually learn: each class is a fixed random
    28x28 pattern (the same in every split), every sample is its class pattern plus
    noise. The same seed gives every rank the same data set, which the sampler then
    splits between the ranks."""
    patterns = torch.rand(10, 1, 28, 28, generator=torch.Generator().manual_seed(seed))
    gen = torch.Generator().manual_seed(seed * 1000 + split)
    labels = torch.randint(0, 10, (samples,), generator=gen)
    images = patterns[labels] + 0.6 * torch.randn(samples, 1, 28, 28, generator=gen)
    return tud.TensorDataset(images, labels)


def load_data():
    """(train, test, description). Real MNIST when DATA_DIR has data, synthetic otherwise.
    Decided on each worker from its own view of DATA_DIR; `check_agreement` makes sure
    all ranks ended up with the same data set."""
    data_dir = CFG["data_dir"]
    if not data_dir:
        why = "DATA_DIR is not set"
    elif not os.path.isdir(data_dir) or not os.listdir(data_dir):
        why = "DATA_DIR=%s is missing or empty" % data_dir
    else:
        from torchvision import datasets, transforms

        prepare = transforms.Compose([
            transforms.ToTensor(),
            transforms.Normalize((0.1307,), (0.3081,)),
        ])
        train = datasets.MNIST(root=data_dir, train=True, download=False, transform=prepare)
        test = datasets.MNIST(root=data_dir, train=False, download=False, transform=prepare)
        return train, test, "MNIST (DATA_DIR=%s)" % data_dir
    train = synthetic_mnist(CFG["synthetic_samples"], CFG["seed"], 1)
    test = synthetic_mnist(max(1000, CFG["synthetic_samples"] // 5), CFG["seed"], 2)
    return train, test, "synthetic MNIST-shaped (%s)" % why


def check_agreement(description, train):
    """Every rank must train on the same data set, or their batch counts differ and the
    ranks wait for each other forever. Checked after every (re)start of the ring."""
    views = hvd.allgather_object((hvd.rank(), socket.gethostname(), description, len(train)),
                                 name="data_check")
    if len({(v[2], v[3]) for v in views}) > 1:
        for rank, host, desc, size in views:
            log("rank %d on %s: %s, %d samples" % (rank, host, desc, size))
        log("the ranks disagree on the data set: every worker must see the same DATA_DIR")
        sys.exit(1)


# --------------------------------------------------------------------------- model


class Net(nn.Module):
    """Two convolutions and two dense layers: small enough to train quickly on CPUs."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, kernel_size=5)
        self.conv2 = nn.Conv2d(16, 32, kernel_size=5)
        self.dropout = nn.Dropout(0.25)
        self.fc1 = nn.Linear(32 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = self.dropout(torch.flatten(x, 1))
        x = F.relu(self.fc1(x))
        return self.fc2(x)


# --------------------------------------------------------------------------- checkpoints

CHECKPOINT_NAME = re.compile(r"checkpoint-(\d+)\.pt$")


def checkpoints(directory):
    """(epoch, path) of the checkpoints in `directory`, oldest first."""
    found = []
    for path in glob.glob(os.path.join(directory, "checkpoint-*.pt")):
        match = CHECKPOINT_NAME.search(path)
        if match:
            found.append((int(match.group(1)), path))
    return sorted(found)


def save_checkpoint(epoch, model, optimizer):
    """Rank 0 only: write atomically (temp file + rename), then prune old ones."""
    directory = CFG["checkpoint_dir"]
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "checkpoint-%04d.pt" % epoch)
    tmp = path + ".tmp"
    torch.save({"epoch": epoch, "model": model.state_dict(),
                "optimizer": optimizer.state_dict()}, tmp)
    os.replace(tmp, path)
    keep = CFG["keep_checkpoints"]
    if keep > 0:
        for _, old in checkpoints(directory)[:-keep]:
            os.remove(old)
    return path


# --------------------------------------------------------------------------- training


def evaluate(model, test, device):
    """Loss and accuracy over the whole test set, each rank scoring its own share of it
    (computed from the current ranks, so it works with any number of them)."""
    model.eval()
    share = tud.Subset(test, range(hvd.rank(), len(test), hvd.size()))
    totals = torch.zeros(3, dtype=torch.float64)  # loss sum, correct, count
    with torch.no_grad():
        for images, labels in tud.DataLoader(share, batch_size=1000):
            images, labels = images.to(device), labels.to(device)
            output = model(images)
            totals[0] += F.cross_entropy(output, labels, reduction="sum").item()
            totals[1] += (output.argmax(dim=1) == labels).sum().item()
            totals[2] += labels.numel()
    totals = hvd.allreduce(totals, op=hvd.Sum, name="eval_totals")
    count = max(totals[2].item(), 1.0)
    return totals[0].item() / count, totals[1].item() / count


def main():
    hvd.init()

    if torch.cuda.is_available():
        torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
        if "OMP_NUM_THREADS" not in os.environ:
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // hvd.local_size()))
    torch.manual_seed(CFG["seed"])

    print("rank %d of %d (local rank %d) on %s, device %s"
          % (hvd.rank(), hvd.size(), hvd.local_rank(), socket.gethostname(), device),
          flush=True)

    train, test, description = load_data()
    # The elastic sampler splits the samples not yet trained on this epoch between the
    # current ranks, and splits them again when the ranks change.
    sampler = hvd.elastic.ElasticSampler(train, shuffle=True, seed=CFG["seed"])
    loader_options = {"num_workers": 1, "pin_memory": True} if device.type == "cuda" else {}
    loader = tud.DataLoader(train, batch_size=CFG["batch_size"], sampler=sampler,
                            **loader_options)

    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=CFG["lr"] * hvd.size(),
                                momentum=CFG["momentum"])
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    # A new job continues from the newest checkpoint. Only the process that starts as rank 0
    # reads it: the state's first sync, at the start of train(), gives it to every rank.
    start_epoch = 1
    if hvd.rank() == 0:
        found = checkpoints(CFG["checkpoint_dir"])
        if found:
            done, path = found[-1]
            saved = torch.load(path, map_location="cpu")
            model.load_state_dict(saved["model"])
            optimizer.load_state_dict(saved["optimizer"])
            for group in optimizer.param_groups:  # the number of ranks may have changed
                group["lr"] = CFG["lr"] * hvd.size()
            start_epoch = done + 1
            print("resuming from %s (epoch %d done)" % (path, done), flush=True)

    state = hvd.elastic.TorchState(model=model, optimizer=optimizer, train_sampler=sampler,
                                   epoch=start_epoch, batch=0)
    sampler.set_epoch(start_epoch)

    def on_reset():
        # Called on every rank after the ring was re-formed, before train() runs again.
        for group in optimizer.param_groups:
            group["lr"] = CFG["lr"] * hvd.size()
        log("workers changed: now %d ranks, lr %g" % (hvd.size(), CFG["lr"] * hvd.size()))

    state.register_reset_callbacks([on_reset])

    @hvd.elastic.run
    def train_loop(state):
        check_agreement(description, train)
        if state.epoch > CFG["epochs"]:
            log("nothing to do: the checkpoints in %s already cover %d epochs"
                % (CFG["checkpoint_dir"], CFG["epochs"]))
            return
        log("training: %d epochs from epoch %d, %s, %d samples, batch %d x %d ranks, "
            "commit every %d batches"
            % (CFG["epochs"], state.epoch, description, len(train), CFG["batch_size"],
               hvd.size(), CFG["batches_per_commit"]))
        while state.epoch <= CFG["epochs"]:
            state.model.train()
            started = time.time()
            totals = torch.zeros(2, dtype=torch.float64)  # loss sum, samples
            # The loader yields only this epoch's samples not yet trained on (the sampler
            # restarts from the last commit after a reset).
            for batch, (images, labels) in enumerate(loader):
                state.batch = batch
                images, labels = images.to(device), labels.to(device)
                state.optimizer.zero_grad()
                loss = F.cross_entropy(state.model(images), labels)
                loss.backward()
                state.optimizer.step()
                totals[0] += loss.item() * labels.numel()
                totals[1] += labels.numel()
                state.train_sampler.record_batch(batch, CFG["batch_size"])
                if (batch + 1) % CFG["batches_per_commit"] == 0:
                    state.commit()
            totals = hvd.allreduce(totals, op=hvd.Sum, name="train_totals")
            elapsed = time.time() - started
            test_loss, accuracy = evaluate(state.model, test, device)
            log("epoch %d/%d: ranks=%d train_loss=%.4f test_loss=%.4f test_accuracy=%.4f "
                "time=%.1fs"
                % (state.epoch, CFG["epochs"], hvd.size(),
                   totals[0].item() / max(totals[1].item(), 1.0), test_loss, accuracy,
                   elapsed))
            if hvd.rank() == 0:
                log("checkpoint: %s"
                    % save_checkpoint(state.epoch, state.model, state.optimizer))
            # Next epoch: fresh sample order, nothing trained on yet; commit that.
            state.epoch += 1
            state.batch = 0
            state.train_sampler.set_epoch(state.epoch)
            state.commit()
            if state.epoch - 1 == CFG["pause_after_epoch"] and CFG["pause_seconds"] > 0:
                log("pausing %gs after epoch %d" % (CFG["pause_seconds"], state.epoch - 1))
                time.sleep(CFG["pause_seconds"])

    train_loop(state)
    log("done")


if __name__ == "__main__":
    main()
