"""run(cfg) end to end on CPU: metrics, files, checkpoints, exact resume, W&B offline runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torchvision
import yaml
from omegaconf import OmegaConf

from tests.conftest import FAST
from tests.wandb_records import run_config, run_history, run_metrics
from trainer.config.schema import ConfigError
from trainer.preflight import check_schema
from trainer.run import resolved_config, run
from trainer.train import checkpoint as ckpt


@pytest.mark.slow
def test_default_model_learns_digits(cfg_factory, tmp_path):
    # The default epochs, eager, so this stays fast; compiled training is covered below.
    result = run(cfg_factory("compile=off", "logger=none"), run_dir=tmp_path)
    assert result["val/acc"] > 0.9
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "finished"
    assert summary["epochs_completed"] == 8
    assert summary["best"]["name"] == "val/acc" and summary["best"]["value"] >= result["val/acc"]
    assert (tmp_path / "checkpoints" / "last.pt").is_file()
    assert (tmp_path / "checkpoints" / "best.pt").is_file()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == list(range(1, 9))
    for key in (
        "train/loss",
        "train/acc",
        "val/loss",
        "val/acc",
        "perf/compile_s",
        "perf/samples_per_s",
        "perf/step_ms",
    ):
        assert key in rows[-1]


@pytest.mark.slow
def test_compiled_run_keeps_clean_checkpoint_keys(cfg_factory, tmp_path):
    cfg = cfg_factory(
        "logger=none", "trainer.max_epochs=1", "compile.backend=aot_eager", "model=resnet18"
    )
    run(cfg, run_dir=tmp_path)
    state = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=False)
    assert not any("_orig_mod" in k or k.startswith("module.") for k in state["model"])
    plain = torchvision.models.get_model("resnet18", num_classes=10)
    plain.load_state_dict(state["model"], strict=True)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["compile"]["enabled"] and summary["compile"]["graphs"] >= 1


@pytest.mark.slow
@pytest.mark.pyversion  # Inductor's C++ build against this interpreter
def test_inductor_compiles_a_tiny_model(cfg_factory, tmp_path):
    result = run(cfg_factory("logger=none", "trainer.max_epochs=2"), run_dir=tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["compile"]["backend"] == "inductor" and summary["compile"]["graphs"] >= 1
    assert summary["perf"]["compile_s"] > 0
    assert result["val/acc"] > 0.5


def _weights(path):
    return torch.load(path, weights_only=False)


@pytest.mark.slow
def test_resume_after_epoch_k_matches_uninterrupted(cfg_factory, tmp_path):
    full = run(
        cfg_factory(*FAST, "trainer.max_epochs=4", "scheduler=step", "scheduler.step_size=1"),
        run_dir=tmp_path / "full",
    )
    part = tmp_path / "part"
    run(
        cfg_factory(*FAST, "trainer.max_epochs=2", "scheduler=step", "scheduler.step_size=1"),
        run_dir=part,
    )
    resumed = run(
        cfg_factory(
            *FAST,
            "trainer.max_epochs=4",
            "scheduler=step",
            "scheduler.step_size=1",
            "trainer.resume=auto",
        ),
        run_dir=part,
    )
    assert resumed["val/acc"] == full["val/acc"] and resumed["val/loss"] == full["val/loss"]
    a, b = _weights(tmp_path / "full/checkpoints/last.pt"), _weights(part / "checkpoints/last.pt")
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
    assert a["progress"]["history"] == b["progress"]["history"] or all(
        x["val/acc"] == y["val/acc"]
        for x, y in zip(a["progress"]["history"], b["progress"]["history"], strict=True)
    )


@pytest.mark.slow
def test_resume_auto_without_checkpoint_starts_fresh(cfg_factory, tmp_path):
    result = run(
        cfg_factory(*FAST, "trainer.max_epochs=1", "trainer.resume=auto"), run_dir=tmp_path
    )
    assert "val/acc" in result


@pytest.mark.slow
def test_orig_mod_prefixed_checkpoint_loads(cfg_factory, tmp_path):
    run(cfg_factory(*FAST, "trainer.max_epochs=1"), run_dir=tmp_path / "a")
    state = _weights(tmp_path / "a/checkpoints/last.pt")
    foreign = tmp_path / "foreign.pt"
    torch.save({"_orig_mod." + k: v for k, v in state["model"].items()}, foreign)
    result = run(
        cfg_factory(*FAST, "trainer.max_epochs=1", f"trainer.resume={foreign}"),
        run_dir=tmp_path / "b",
    )
    assert "val/acc" in result


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["missing", "corrupt", "other_model"])
def test_bad_resume_is_a_config_error(cfg_factory, tmp_path, kind):
    target = tmp_path / "ckpt.pt"
    if kind == "corrupt":
        target.write_bytes(b"not a checkpoint at all")
    elif kind == "other_model":
        run(cfg_factory(*FAST, "trainer.max_epochs=1", "model=resnet18"), run_dir=tmp_path / "r")
        target = tmp_path / "r/checkpoints/last.pt"
    before = target.read_bytes() if target.exists() else None
    with pytest.raises(ConfigError) as err:
        run(cfg_factory(*FAST, f"trainer.resume={target}"), run_dir=tmp_path / "run")
    assert "trainer.resume" in str(err.value)
    if before is not None:
        assert target.read_bytes() == before  # nothing already written is lost


def test_atomic_save_keeps_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "last.pt"
    ckpt.save(path, {"model": {"w": torch.ones(2)}})

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(OSError):
        ckpt.save(path, {"model": {"w": torch.zeros(2)}})
    assert torch.equal(ckpt.load(path)["model"]["w"], torch.ones(2))
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]


def test_a_diverging_run_stops_keeps_last_finite_epoch_and_says_so(
    cfg_factory, tmp_path, monkeypatch
):
    from trainer.train import step as loop

    finite = loop._epoch_result
    calls = []

    def second_epoch_diverges(totals, progress, **timing):
        calls.append(progress.epoch)
        if len(calls) == 2:
            totals = {**totals, "loss": float("nan")}
        return finite(totals, progress, **timing)

    monkeypatch.setattr(loop, "_epoch_result", second_epoch_diverges)
    with pytest.raises(loop.Diverged) as caught:
        run(cfg_factory(*FAST, "data.num_samples=64", "data=fake"), run_dir=tmp_path / "r")
    err = caught.value
    assert err.exit_code == 3 and err.epoch == 2
    assert "optimizer.lr" in str(err) and "trainer.grad_clip" in str(err)
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["status"] == "diverged" and summary["epochs_completed"] == 1
    assert summary["diverged"]["epoch"] == 2 and summary["diverged"]["loss"] == "nan"
    assert ckpt.load(tmp_path / "r" / "checkpoints" / "last.pt")["progress"]["epoch"] == 1


def test_missing_data_root_names_the_key(cfg_factory, tmp_path):
    with pytest.raises(ConfigError, match="data.root"):
        run(
            cfg_factory(*FAST, "data=cifar10", f"data.root={tmp_path}/nowhere"),
            run_dir=tmp_path / "r",
        )
    with pytest.raises(ConfigError, match="data.download=true"):
        run(cfg_factory(*FAST, "data=mnist", f"data.root={tmp_path}"), run_dir=tmp_path / "r")


@pytest.mark.slow
def test_imagefolder_and_fake_data(cfg_factory, tmp_path):
    from PIL import Image

    for cls in ("cat", "dog"):
        (tmp_path / "img" / cls).mkdir(parents=True)
        for i in range(6):
            Image.new("RGB", (20, 16), color=(i * 40, 10, 200 if cls == "cat" else 0)).save(
                tmp_path / "img" / cls / f"{i}.png"
            )
    result = run(
        cfg_factory(
            *FAST,
            "data=imagefolder",
            f"data.root={tmp_path / 'img'}",
            "model.image_size=16",
            "data.batch_size=4",
        ),
        run_dir=tmp_path / "r1",
    )
    assert 0.0 <= result["val/acc"] <= 1.0
    result = run(
        cfg_factory(
            *FAST, "data=fake", "data.num_samples=64", "model=resnet18", "trainer.max_epochs=1"
        ),
        run_dir=tmp_path / "r2",
    )
    assert "val/acc" in result


@pytest.mark.slow
def test_wandb_offline_run_has_flat_config(cfg_factory, tmp_path):
    run(cfg_factory("compile=off", "trainer.max_epochs=1", "logger.tags=[a,b]"), run_dir=tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    wandb_dir = summary["paths"]["wandb_run_dir"]
    assert wandb_dir and "offline-run" in wandb_dir
    (record_file,) = Path(wandb_dir).glob("run-*.wandb")
    config = run_config(record_file)
    keys = [k for k in config if not k.startswith("_")]
    assert "optimizer.lr" in keys and "trainer.max_epochs" in keys
    assert config["logger.tags"] == ["a", "b"]
    assert not any(isinstance(config[k], dict) and config[k] for k in keys)  # flat and dotted
    assert len(keys) == len(set(keys))
    history = run_history(record_file)
    assert len(history) == 1 and history[0]["epoch"] == 1 and "val/acc" in history[0]
    declared = run_metrics(record_file)  # W&B plots the epoch metrics against epoch
    assert {declared[g] for g in ("train/*", "val/*", "perf/*")} == {"epoch"}


@pytest.mark.slow
def test_two_jobs_in_one_process_get_two_wandb_runs(cfg_factory, tmp_path):
    run(cfg_factory("compile=off", "trainer.max_epochs=1"), run_dir=tmp_path / "a")
    run(cfg_factory("compile=off", "trainer.max_epochs=1"), run_dir=tmp_path / "b")
    a = json.loads((tmp_path / "a/summary.json").read_text())["paths"]
    b = json.loads((tmp_path / "b/summary.json").read_text())["paths"]
    assert a["wandb_run_id"] != b["wandb_run_id"]


def test_logger_none_starts_no_wandb_run(cfg_factory, tmp_path):
    run(cfg_factory(*FAST, "trainer.max_epochs=1"), run_dir=tmp_path)
    assert json.loads((tmp_path / "summary.json").read_text())["paths"]["wandb_run_dir"] is None
    assert not list(tmp_path.rglob("offline-run-*"))


@pytest.mark.slow
def test_sweep_params_that_disagree_stop_the_run(cfg_factory, tmp_path, monkeypatch):
    params = tmp_path / "params.yaml"
    params.write_text(
        yaml.safe_dump({"optimizer.lr": {"value": 0.5}, "model": {"value": "small_cnn"}})
    )
    monkeypatch.setenv("WANDB_SWEEP_PARAM_PATH", str(params))
    with pytest.raises(ConfigError, match="optimizer.lr"):
        run(cfg_factory(*FAST, "optimizer.lr=0.1"), run_dir=tmp_path / "r")
    result = run(
        cfg_factory(*FAST, "optimizer.lr=0.5", "trainer.max_epochs=1"), run_dir=tmp_path / "ok"
    )
    assert "val/acc" in result


@pytest.mark.parametrize(
    "overrides",
    [
        (),
        ("model=resnet18", "+model.kwargs.zero_init_residual=true", "optimizer=adamw"),
        ("compile.options={max_autotune: true, coordinate_descent_tuning: false}",),
        ("data=fake", "data.image_shape=[3,16,16]", "trainer.resume=auto"),
    ],
)
def test_the_runs_kept_config_is_omegaconfs_plain_container(cfg_factory, overrides):
    """The config a checkpoint and the summary keep: a dataclass copy of the checked config,
    the same plain dicts, lists and values as OmegaConf's round trip."""
    conf = check_schema(cfg_factory(*overrides))
    assert resolved_config(conf) == OmegaConf.to_container(OmegaConf.structured(conf), resolve=True)
