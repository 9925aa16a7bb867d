"""The fast recipe end to end on the CPU: summary.json records the speed settings, the data
pipeline and which weights val/* measured; a run stopped mid-epoch with augmentation, EMA and
label smoothing resumes bit-exactly; the EMA checkpoint loads into a plain model and is what
`trainer.evaluate` measures."""

from __future__ import annotations

import json
import signal

import pytest
import torch

from tests.conftest import FAST
from trainer.config.hydra_version import VERSION_BASE
from trainer.run import run
from trainer.train import step as loop
from trainer.train.fit import Interrupted
from trainer.train.models import SmallCNN

RECIPE = [
    *FAST,
    "data=fake",
    "data.num_samples=192",
    "data.image_shape=[3,8,8]",
    "model.width=8",
    "data.batch_size=32",
    "data.augment=strong",
    "trainer.ema=0.9",
    "trainer.label_smoothing=0.1",
    "scheduler=cosine",
]


def _summary(run_dir):
    return json.loads((run_dir / "summary.json").read_text())


def test_summary_records_speed_settings_data_pipeline_and_val_weights(cfg_factory, tmp_path):
    result = run(cfg_factory(*RECIPE, "trainer.max_epochs=1"), run_dir=tmp_path)
    doc = _summary(tmp_path)
    assert doc["speed"] == {
        "tf32": False,  # CUDA only; the CPU keeps exact fp32
        "matmul_precision": "highest",
        "cudnn_benchmark": False,
        "channels_last": False,  # auto: CUDA only
        "optimizer_kernel": "fused",
    }
    data = doc["data"]
    assert data["pipeline"] == "memory" and data["stored_on"] == "cpu" and data["num_workers"] == 0
    assert data["augment"] == "strong" and "random_erasing(p=0.25)" in data["augment_ops"]
    assert doc["val_weights"] == "ema" and doc["config"]["trainer"]["ema"] == 0.9
    assert 0.0 <= result["val/acc"] <= 1.0


@pytest.mark.slow
def test_mid_epoch_stop_resumes_bit_exact_with_augmentation_and_ema(
    cfg_factory, tmp_path, monkeypatch
):
    cfg = cfg_factory(*RECIPE, "trainer.max_epochs=2", "trainer.resume=auto")
    full = run(cfg, run_dir=tmp_path / "full")
    real_step, calls = loop.train_step, []

    def stop_at_step_8(*args, **kwargs):
        calls.append(1)
        out = real_step(*args, **kwargs)
        if len(calls) == 8:  # mid-epoch 2 (6 steps per epoch): as from `kill -TERM`
            signal.raise_signal(signal.SIGTERM)
        return out

    monkeypatch.setattr(loop, "train_step", stop_at_step_8)
    with pytest.raises(Interrupted):
        run(cfg, run_dir=tmp_path / "part")
    monkeypatch.setattr(loop, "train_step", real_step)
    saved = torch.load(tmp_path / "part/checkpoints/last.pt")  # weights_only=True, torch's default
    assert saved["progress"]["batches_done"] == 2 and set(saved["augment_rng"]) == {
        "device_rng",
        "host_rng",
    }
    resumed = run(cfg, run_dir=tmp_path / "part")
    assert resumed["val/acc"] == full["val/acc"] and resumed["val/loss"] == full["val/loss"]
    a = torch.load(tmp_path / "full/checkpoints/last.pt")
    b = torch.load(tmp_path / "part/checkpoints/last.pt")
    for part in ("model", "ema"):
        for key in a[part]:
            assert torch.equal(a[part][key], b[part][key]), (part, key)


def test_ema_checkpoint_loads_into_a_plain_model_and_is_what_evaluate_measures(
    cfg_factory, tmp_path
):
    from trainer.evaluate import evaluate_checkpoint

    result = run(cfg_factory(*RECIPE, "trainer.max_epochs=1"), run_dir=tmp_path)
    state = torch.load(tmp_path / "checkpoints/last.pt")
    SmallCNN(3, 10, width=8).load_state_dict(state["ema"], strict=True)
    assert any(not torch.equal(state["ema"][k], state["model"][k]) for k in state["model"])
    report = evaluate_checkpoint(_eval_cfg(tmp_path), run_dir=tmp_path / "eval")
    assert report["weights"] == "ema" and report["val/acc"] == pytest.approx(result["val/acc"])


def _eval_cfg(run_dir):
    from hydra import compose, initialize_config_dir

    from tests.conftest import CONF

    overrides = [f"checkpoint={run_dir}/checkpoints/last.pt", "eval.steps=1", "eval.device=cpu"]
    with initialize_config_dir(config_dir=str(CONF), **VERSION_BASE):
        return compose(config_name="evaluate", overrides=[*overrides, "compile=off"])


def test_label_smoothing_smooths_the_training_loss_only():
    torch.manual_seed(0)
    model = SmallCNN(1, 3, width=4)
    x, y = torch.randn(4, 1, 8, 8), torch.tensor([0, 1, 2, 0])
    with torch.no_grad():
        logits = model(x)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    rules = loop.StepRules(torch.device("cpu"), label_smoothing=0.2)
    loss, _ = loop.train_step(model, optimizer, scaler, x, y, rules)
    expected = torch.nn.functional.cross_entropy(logits, y, label_smoothing=0.2)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
