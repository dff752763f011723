#!/usr/bin/env python3
"""Data-parallel training of a small MNIST classifier with Horovod and PyTorch.

Every rank runs this script. Horovod averages the gradients of all ranks after each
step, so the ranks train one model together: rank 0's initial weights are broadcast
to everyone, the learning rate is scaled by the number of ranks, and only rank 0
prints metrics and writes checkpoints.

Configuration comes from the environment (hvdctl.yaml `parameters:` become these
variables, e.g. `batch-size: 64` -> BATCH_SIZE=64):

  EPOCHS          passes over the training set (default 2)
  BATCH_SIZE      samples per step on each rank (default 64)
  LR              learning rate of one rank; the job uses LR x ranks (default 0.01)
  MOMENTUM        SGD momentum (default 0.9)
  DATA_DIR        directory holding MNIST in torchvision's layout
                  (DATA_DIR/MNIST/raw/train-images-idx3-ubyte, ...). Unset, empty or
                  missing: synthetic MNIST-shaped data is generated instead.
  CHECKPOINT_DIR  where rank 0 writes checkpoint-EPOCH.pt (default /tmp/checkpoints);
                  a run resumes from the newest checkpoint found there.
  KEEP_CHECKPOINTS  how many checkpoints to keep (default 3, 0 keeps all)
  SYNTHETIC_SAMPLES training samples of the synthetic data set (default 10000)
  SEED            random seed (default 42)
  TENSORBOARD_LOG_DIR  where rank 0 writes TensorBoard scalars (train_loss, test_loss,
                  test_accuracy per epoch); hvdctl sets it from `tensorboard.logDir`.
                  Unset, or no `tensorboard` package in the image: skipped, said once.

Run by hand (one machine, two ranks):  horovodrun -np 2 python3 train.py
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


def read_config():
    return {
        "epochs": env_value("EPOCHS", 2, int),
        "batch_size": env_value("BATCH_SIZE", 64, int),
        "lr": env_value("LR", 0.01, float),
        "momentum": env_value("MOMENTUM", 0.9, float),
        "data_dir": env_value("DATA_DIR", ""),
        "checkpoint_dir": env_value("CHECKPOINT_DIR", "/tmp/checkpoints"),
        "keep_checkpoints": env_value("KEEP_CHECKPOINTS", 3, int),
        "synthetic_samples": env_value("SYNTHETIC_SAMPLES", 10000, int),
        "seed": env_value("SEED", 42, int),
        "tensorboard_log_dir": env_value("TENSORBOARD_LOG_DIR", ""),
    }


def log(message):
    """Prints on rank 0 only, flushed at once so `hvdctl logs -f` shows it live."""
    if hvd.rank() == 0:
        print(message, flush=True)


def scalar_writer(cfg):
    """Rank 0's TensorBoard writer for TENSORBOARD_LOG_DIR, or None (said once, why)."""
    if hvd.rank() != 0:
        return None
    log_dir = cfg["tensorboard_log_dir"]
    if not log_dir:
        log("tensorboard: skipped (TENSORBOARD_LOG_DIR is not set; tensorboard.logDir in hvdctl.yaml)")
        return None
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as e:
        log("tensorboard: skipped (%s; install the tensorboard package in the image)" % e)
        return None
    log("tensorboard: writing scalars to %s" % log_dir)
    return SummaryWriter(log_dir=log_dir)


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


def mnist_from(data_dir):
    """MNIST from DATA_DIR in torchvision's layout; never downloads."""
    from torchvision import datasets, transforms

    prepare = transforms.Compose([
        transforms.ToTensor(),
        transforms.Normalize((0.1307,), (0.3081,)),
    ])
    train = datasets.MNIST(root=data_dir, train=True, download=False, transform=prepare)
    test = datasets.MNIST(root=data_dir, train=False, download=False, transform=prepare)
    return train, test


def choose_source(cfg):
    """Rank 0 decides between the real data set and synthetic data; returns (source, why)."""
    data_dir = cfg["data_dir"]
    if not data_dir:
        return "synthetic", "DATA_DIR is not set"
    if not os.path.isdir(data_dir) or not os.listdir(data_dir):
        return "synthetic", "DATA_DIR=%s is missing or empty" % data_dir
    return "mnist", "DATA_DIR=%s" % data_dir


def load_data(cfg, source):
    """Loads the data set rank 0 chose on every rank. A rank that cannot (say, the volume
    is not mounted on its node) makes every rank stop with one clear message instead of
    leaving the others waiting in an allreduce."""
    error = ""
    train = test = None
    try:
        if source == "mnist":
            train, test = mnist_from(cfg["data_dir"])
        else:
            train = synthetic_mnist(cfg["synthetic_samples"], cfg["seed"], 1)
            test = synthetic_mnist(max(1000, cfg["synthetic_samples"] // 5), cfg["seed"], 2)
    except Exception as e:  # noqa: BLE001 - reported below, on rank 0, for every rank
        error = "%s: %s" % (type(e).__name__, e)
    reports = hvd.allgather_object((hvd.rank(), socket.gethostname(), error),
                                   name="data_check")
    failed = [r for r in reports if r[2]]
    if failed:
        for rank, host, err in failed:
            log("rank %d on %s cannot load the %s data: %s" % (rank, host, source, err))
        log("every worker must see the same DATA_DIR (mount it with a `volumes:` entry)")
        sys.exit(1)
    return train, test


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


def save_checkpoint(cfg, epoch, model, optimizer):
    """Rank 0 only: write atomically (temp file + rename), then prune old ones."""
    directory = cfg["checkpoint_dir"]
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "checkpoint-%04d.pt" % epoch)
    tmp = path + ".tmp"
    torch.save({"epoch": epoch, "model": model.state_dict(),
                "optimizer": optimizer.state_dict()}, tmp)
    os.replace(tmp, path)
    keep = cfg["keep_checkpoints"]
    if keep > 0:
        for _, old in checkpoints(directory)[:-keep]:
            os.remove(old)
    return path


def resume(cfg, model, optimizer):
    """Rank 0 loads the newest checkpoint, if any; returns the first epoch to train."""
    found = checkpoints(cfg["checkpoint_dir"])
    if not found:
        return 1
    epoch, path = found[-1]
    state = torch.load(path, map_location="cpu")
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    for group in optimizer.param_groups:  # the number of ranks may have changed
        group["lr"] = cfg["lr"] * hvd.size()
    print("resuming from %s (epoch %d done)" % (path, epoch), flush=True)
    return epoch + 1


# --------------------------------------------------------------------------- training


def evaluate(model, test, device, batch_size):
    """Loss and accuracy over the whole test set, each rank scoring its own share."""
    model.eval()
    share = tud.Subset(test, range(hvd.rank(), len(test), hvd.size()))
    loader = tud.DataLoader(share, batch_size=batch_size)
    totals = torch.zeros(3, dtype=torch.float64)  # loss sum, correct, count
    with torch.no_grad():
        for images, labels in loader:
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

    # One GPU per rank (the rank's index on its node), or the CPU.
    if torch.cuda.is_available():
        torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
        if "OMP_NUM_THREADS" not in os.environ:
            # Share the node's cores between the ranks that run on it.
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // hvd.local_size()))

    # Every rank uses rank 0's configuration, so that a variable missing on one node
    # cannot make the ranks disagree on epochs or batch counts (and hang).
    cfg = hvd.broadcast_object(read_config() if hvd.rank() == 0 else None, root_rank=0,
                               name="config")
    torch.manual_seed(cfg["seed"])

    print("rank %d of %d (local rank %d) on %s, device %s"
          % (hvd.rank(), hvd.size(), hvd.local_rank(), socket.gethostname(), device),
          flush=True)

    source, why = choose_source(cfg) if hvd.rank() == 0 else (None, None)
    source, why = hvd.broadcast_object((source, why), root_rank=0, name="data_source")
    log("data: %s (%s)" % ("MNIST" if source == "mnist" else "synthetic MNIST-shaped", why))
    train, test = load_data(cfg, source)

    # Each rank trains on its own share of the data, reshuffled every epoch.
    sampler = tud.distributed.DistributedSampler(
        train, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=True, seed=cfg["seed"])
    loader_options = {"num_workers": 1, "pin_memory": True} if device.type == "cuda" else {}
    loader = tud.DataLoader(train, batch_size=cfg["batch_size"], sampler=sampler,
                            **loader_options)

    model = Net().to(device)
    # The gradients are averaged over hvd.size() ranks, so the effective batch is
    # hvd.size() times larger: scale the learning rate with it.
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg["lr"] * hvd.size(),
                                momentum=cfg["momentum"])

    start_epoch = resume(cfg, model, optimizer) if hvd.rank() == 0 else None
    start_epoch = hvd.broadcast_object(start_epoch, root_rank=0, name="start_epoch")

    # Start every rank from rank 0's weights and optimizer state.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    log("training: %d epochs from epoch %d, %d samples, batch %d x %d ranks, lr %g"
        % (cfg["epochs"], start_epoch, len(train), cfg["batch_size"], hvd.size(),
           cfg["lr"] * hvd.size()))
    if start_epoch > cfg["epochs"]:
        log("nothing to do: the checkpoints in %s already cover %d epochs"
            % (cfg["checkpoint_dir"], cfg["epochs"]))

    writer = scalar_writer(cfg)
    first_step = True
    for epoch in range(start_epoch, cfg["epochs"] + 1):
        model.train()
        sampler.set_epoch(epoch)
        started = time.time()
        totals = torch.zeros(2, dtype=torch.float64)  # loss sum, samples
        for images, labels in loader:
            images, labels = images.to(device), labels.to(device)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(images), labels)
            loss.backward()
            optimizer.step()
            totals[0] += loss.item() * labels.numel()
            totals[1] += labels.numel()
            if first_step:
                # The first allreduce is done: every rank is up and training.
                log("first step: epoch %d, loss=%.4f" % (epoch, loss.item()))
                first_step = False
        totals = hvd.allreduce(totals, op=hvd.Sum, name="train_totals")
        elapsed = time.time() - started
        train_loss = totals[0].item() / max(totals[1].item(), 1.0)
        test_loss, accuracy = evaluate(model, test, device, 1000)
        log("epoch %d/%d: train_loss=%.4f test_loss=%.4f test_accuracy=%.4f "
            "time=%.1fs samples/s=%.0f"
            % (epoch, cfg["epochs"], train_loss, test_loss, accuracy, elapsed,
               totals[1].item() / max(elapsed, 1e-9)))
        if writer is not None:
            writer.add_scalar("train_loss", train_loss, epoch)
            writer.add_scalar("test_loss", test_loss, epoch)
            writer.add_scalar("test_accuracy", accuracy, epoch)
            writer.flush()  # TensorBoard shows each epoch as it ends
        if hvd.rank() == 0:
            log("checkpoint: %s" % save_checkpoint(cfg, epoch, model, optimizer))

    if writer is not None:
        writer.close()
    log("done")


if __name__ == "__main__":
    main()
