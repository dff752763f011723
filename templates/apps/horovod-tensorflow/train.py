#!/usr/bin/env python3
"""Data-parallel training of a small MNIST classifier with Horovod and TensorFlow 2 Keras.

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
  WARMUP_EPOCHS   epochs over which the learning rate ramps up to LR x ranks (default 1)
  DATA_DIR        directory holding mnist.npz in Keras' format (arrays x_train, y_train,
                  x_test, y_test). Unset, empty or missing: synthetic MNIST-shaped data.
  CHECKPOINT_DIR  where rank 0 writes checkpoint-EPOCH.weights.h5 (default
                  /tmp/checkpoints); a run resumes from the newest checkpoint found there.
  SYNTHETIC_SAMPLES training samples of the synthetic data set (default 10000)
  SEED            random seed (default 42)

Run by hand (one machine, two ranks):  horovodrun -np 2 python3 train.py
"""

import glob
import math
import os
import re
import socket
import sys

import numpy as np
import tensorflow as tf

import horovod.tensorflow as hvd_tf
import horovod.tensorflow.keras as hvd


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
        "warmup_epochs": env_value("WARMUP_EPOCHS", 1, int),
        "data_dir": env_value("DATA_DIR", ""),
        "checkpoint_dir": env_value("CHECKPOINT_DIR", "/tmp/checkpoints"),
        "synthetic_samples": env_value("SYNTHETIC_SAMPLES", 10000, int),
        "seed": env_value("SEED", 42, int),
    }


def log(message):
    """Prints on rank 0 only, flushed at once so `hvdctl logs -f` shows it live."""
    if hvd.rank() == 0:
        print(message, flush=True)


# --------------------------------------------------------------------------- data


def synthetic_mnist(samples, seed, split):
    """MNIST-shaped data a model can actually learn: each class is a fixed random
    28x28 pattern (the same in every split), every sample is its class pattern plus
    noise. The same seed gives every rank the same data set; each rank then trains on
    its own shard."""
    patterns = np.random.default_rng(seed).random((10, 28, 28, 1), dtype=np.float32)
    rng = np.random.default_rng([seed, split])
    labels = rng.integers(0, 10, size=samples)
    noise = rng.standard_normal((samples, 28, 28, 1), dtype=np.float32)
    images = patterns[labels] + 0.6 * noise
    return images.astype(np.float32), labels.astype(np.int64)


def mnist_from(data_dir):
    """MNIST from DATA_DIR/mnist.npz (what tf.keras.datasets.mnist.load_data() downloads)."""
    path = os.path.join(data_dir, "mnist.npz")
    with np.load(path) as data:
        x_train, y_train = data["x_train"], data["y_train"]
        x_test, y_test = data["x_test"], data["y_test"]

    def prepare(x):
        return (x.astype(np.float32) / 255.0).reshape(-1, 28, 28, 1)

    return (prepare(x_train), y_train.astype(np.int64)), (prepare(x_test), y_test.astype(np.int64))


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
    data = None
    try:
        if source == "mnist":
            data = mnist_from(cfg["data_dir"])
        else:
            data = (synthetic_mnist(cfg["synthetic_samples"], cfg["seed"], 1),
                    synthetic_mnist(max(1000, cfg["synthetic_samples"] // 5), cfg["seed"], 2))
    except Exception as e:  # noqa: BLE001 - reported below, on rank 0, for every rank
        error = "%s: %s" % (type(e).__name__, e)
    reports = hvd_tf.allgather_object((hvd.rank(), socket.gethostname(), error),
                                      name="data_check")
    failed = [r for r in reports if r[2]]
    if failed:
        for rank, host, err in failed:
            log("rank %d on %s cannot load the %s data: %s" % (rank, host, source, err))
        log("every worker must see the same DATA_DIR (mount it with a `volumes:` entry)")
        sys.exit(1)
    return data


# --------------------------------------------------------------------------- model


def build_model():
    """Two convolutions and two dense layers: small enough to train quickly on CPUs."""
    return tf.keras.Sequential([
        tf.keras.Input(shape=(28, 28, 1)),
        tf.keras.layers.Conv2D(16, 5, activation="relu"),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Conv2D(32, 5, activation="relu"),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dropout(0.25),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dense(10),
    ])


def sgd(learning_rate, momentum):
    """Horovod wraps the classic Keras optimizers; newer TensorFlow keeps them in `legacy`."""
    optimizers = getattr(tf.keras.optimizers, "legacy", tf.keras.optimizers)
    return optimizers.SGD(learning_rate=learning_rate, momentum=momentum)


# --------------------------------------------------------------------------- checkpoints

CHECKPOINT_NAME = re.compile(r"checkpoint-(\d+)\.weights\.h5$")


def newest_checkpoint(directory):
    """(epoch, path) of the newest checkpoint in `directory`, or (0, None)."""
    found = []
    for path in glob.glob(os.path.join(directory, "checkpoint-*.weights.h5")):
        match = CHECKPOINT_NAME.search(path)
        if match:
            found.append((int(match.group(1)), path))
    return max(found) if found else (0, None)


class EpochLog(tf.keras.callbacks.Callback):
    """One plain line of metrics per epoch on rank 0 (Keras' progress bar is made for
    terminals, not for logs). Runs after MetricAverageCallback, so the values are the
    averages over all ranks."""

    def __init__(self, epochs):
        super().__init__()
        self.epochs = epochs

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        values = " ".join("%s=%.4f" % (k, v) for k, v in sorted(logs.items())
                          if isinstance(v, (int, float, np.floating)))
        log("epoch %d/%d: %s" % (epoch + 1, self.epochs, values))


# --------------------------------------------------------------------------- training


def main():
    hvd.init()

    # One GPU per rank (the rank's index on its node), or the CPU.
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        tf.config.set_visible_devices(gpus[hvd.local_rank() % len(gpus)], "GPU")

    # Every rank uses rank 0's configuration, so that a variable missing on one node
    # cannot make the ranks disagree on epochs or batch counts (and hang).
    cfg = hvd_tf.broadcast_object(read_config() if hvd.rank() == 0 else None, root_rank=0,
                                  name="config")
    tf.random.set_seed(cfg["seed"])

    print("rank %d of %d (local rank %d) on %s, device %s"
          % (hvd.rank(), hvd.size(), hvd.local_rank(), socket.gethostname(),
             "GPU" if gpus else "CPU"), flush=True)

    source, why = choose_source(cfg) if hvd.rank() == 0 else (None, None)
    source, why = hvd_tf.broadcast_object((source, why), root_rank=0, name="data_source")
    log("data: %s (%s)" % ("MNIST" if source == "mnist" else "synthetic MNIST-shaped", why))
    (x_train, y_train), (x_test, y_test) = load_data(cfg, source)

    # Each rank trains on its own shard; all ranks take the same number of steps.
    batch_size = cfg["batch_size"]
    steps_per_epoch = max(1, len(x_train) // (batch_size * hvd.size()))
    train = (tf.data.Dataset.from_tensor_slices((x_train, y_train))
             .shard(hvd.size(), hvd.rank())
             .shuffle(10000, seed=cfg["seed"] + hvd.rank())
             .repeat()
             .batch(batch_size)
             .prefetch(tf.data.AUTOTUNE))
    validation_steps = max(1, math.ceil(len(x_test) / hvd.size() / 1000))
    test = (tf.data.Dataset.from_tensor_slices((x_test, y_test))
            .shard(hvd.size(), hvd.rank())
            .batch(1000)
            .repeat())

    model = build_model()
    # The gradients are averaged over hvd.size() ranks, so the effective batch is
    # hvd.size() times larger: scale the learning rate with it (warmed up, see below).
    scaled_lr = cfg["lr"] * hvd.size()
    optimizer = hvd.DistributedOptimizer(sgd(scaled_lr, cfg["momentum"]))
    model.compile(optimizer=optimizer,
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])

    # Resume: rank 0 loads the newest checkpoint, the broadcast below shares its weights.
    start_epoch, path = newest_checkpoint(cfg["checkpoint_dir"]) if hvd.rank() == 0 else (0, None)
    if path:
        model.load_weights(path)
        print("resuming from %s (epoch %d done)" % (path, start_epoch), flush=True)
    start_epoch = hvd_tf.broadcast_object(start_epoch, root_rank=0, name="start_epoch")

    callbacks = [
        # Start every rank from rank 0's weights (fresh or restored).
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        # Average the epoch's metrics over all ranks before anyone reads them.
        hvd.callbacks.MetricAverageCallback(),
    ]
    if cfg["warmup_epochs"] > 0 and start_epoch < cfg["warmup_epochs"]:
        # Ramp the learning rate up to LR x ranks instead of starting there.
        callbacks.append(hvd.callbacks.LearningRateWarmupCallback(
            initial_lr=scaled_lr, warmup_epochs=cfg["warmup_epochs"],
            steps_per_epoch=steps_per_epoch, verbose=0))
    callbacks.append(EpochLog(cfg["epochs"]))
    if hvd.rank() == 0:
        os.makedirs(cfg["checkpoint_dir"], exist_ok=True)
        callbacks.append(tf.keras.callbacks.ModelCheckpoint(
            os.path.join(cfg["checkpoint_dir"], "checkpoint-{epoch:04d}.weights.h5"),
            save_weights_only=True))

    log("training: %d epochs from epoch %d, %d samples, batch %d x %d ranks, lr %g"
        % (cfg["epochs"], start_epoch + 1, len(x_train), batch_size, hvd.size(), scaled_lr))
    if start_epoch >= cfg["epochs"]:
        log("nothing to do: the checkpoints in %s already cover %d epochs"
            % (cfg["checkpoint_dir"], cfg["epochs"]))
    else:
        model.fit(train, epochs=cfg["epochs"], initial_epoch=start_epoch,
                  steps_per_epoch=steps_per_epoch, validation_data=test,
                  validation_steps=validation_steps, callbacks=callbacks, verbose=0)
    log("done")


if __name__ == "__main__":
    main()
