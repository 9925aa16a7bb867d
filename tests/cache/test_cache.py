"""The compile-cache bundle without compiling: entries and keys, bundles on disk (Triton's group
files rewritten), the session's notice and miss reasons, `python -m trainer.cache`, the W&B
artifact calls (offline, W&B's own API), prewarm's plan and compile.trace's report step."""

from __future__ import annotations

import inspect
import json
import logging
import tarfile
import time
from pathlib import Path

import pytest

from tests.conftest import make_cfg
from trainer.cache import entries, env, session
from trainer.cache.__main__ import main as cache_main
from trainer.cache.artifact import ArtifactBundle
from trainer.cache.bundle import Bundle, BundleLayout
from trainer.cache.key import differences, key_id, machine_key
from trainer.cache.workload import workload, workload_id
from trainer.compiling import configure_cache
from trainer.config.schema import ConfigError
from trainer.outputs.layout import RunLayout
from trainer.preflight import validate
from trainer.sweep import prewarm
from trainer.sweep.store.directory import SweepLayout

FX = "inductor/fxgraph/ab/fabcdefghijklmnopqrstuvwxyz0123/entry"
KERNEL = "inductor/qk/cqkde7c7iae2dnmmtmcsi3vzddvqqdojna6fp.main.so"
TRITON = "triton/ABCDEFGHIJKLMNOPQRSTUVWXYZ234567/__grp__k.json"


@pytest.mark.parametrize(
    "path, entry",
    [
        (FX, "fabcdefghijklmnopqrstuvwxyz0123"),
        (KERNEL, "cqkde7c7iae2dnmmtmcsi3vzddvqqdojna6fp"),
        ("inductor/locks/cqkde7c7iae2dnmmtmcsi3vzddvqqdojna6fp.lock", "cqkde7c7iae2dnmmtmcsi3vzddvqqdojna6fp"),
        (TRITON, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"),
        ("inductor/short/x.py", None),
        ("elsewhere/cqkde7c7iae2dnmmtmcsi3vzddvqqdojna6fp.so", None),
    ],
)  # fmt: skip
def test_each_cache_file_belongs_to_the_entry_its_hash_names(path, entry):
    assert entries.entry_of(path) == entry


def _cache(root: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    return root


def test_the_audit_hook_records_the_entries_a_process_touches(tmp_path):
    root = _cache(tmp_path / "cache", {FX: "graph", KERNEL: "kernel"})
    entries.start_watching(root)
    (root / FX).read_text()  # a hit reads the FX graph; the kernel is not touched
    touched = entries.stop_watching()
    (root / KERNEL).read_text()  # after stop: not recorded
    files = entries.cache_files(root)
    assert entries.files_of(touched, files) == [FX] and entries.stop_watching() == set()


KEY = {"device": "cpu", "arch": "x86_64-avx2", "torch": "2.14.1", "python": "3.11"}


def test_a_key_id_is_readable_and_a_difference_names_the_part():
    other = {**KEY, "torch": "2.13.0"}
    assert key_id(KEY).startswith("cpu-x86_64-avx2-torch2.14.1-") and key_id(KEY) != key_id(other)
    assert differences(other, KEY) == ["torch 2.13.0 there, 2.14.1 here"]
    here = machine_key("cpu")
    assert here["device"] == "cpu" and here["torch"] and "compiler" in here


def _record(model="small_cnn", wid="w1", files=(FX, KERNEL)):
    return {"workload": {"model": {"name": model}}, "workload_id": wid, "label": model,
            "run": "r1", "files": dict.fromkeys(files, 1)}  # fmt: skip


def test_bundle_round_trip_between_two_cache_dirs_rewrites_triton_groups(tmp_path):
    group = json.dumps({"child_paths": {"k.cubin": "/elsewhere/triton/X/k.cubin"}})
    source = _cache(tmp_path / "a", {FX: "graph", KERNEL: "kernel", TRITON: group})
    bundle = Bundle(BundleLayout(tmp_path / "bundle"))
    kid, files = key_id(KEY), [FX, KERNEL, TRITON]
    assert bundle.add(kid, KEY, source, files, _record(files=files)) == 3
    assert bundle.add(kid, KEY, source, files, _record(files=files)) == 0  # nothing new
    assert len(bundle.records(kid)) == 1
    fresh = Bundle(BundleLayout(tmp_path / "b", in_cache=True))
    assert bundle.put_in_place(kid, fresh) == 3
    assert (tmp_path / "b" / FX).read_text() == "graph"
    moved = json.loads((tmp_path / "b" / TRITON).read_text())["child_paths"]["k.cubin"]
    assert moved == str(tmp_path / "b" / "triton/ABCDEFGHIJKLMNOPQRSTUVWXYZ234567/k.cubin")
    assert fresh.records(kid)[0]["workload_id"] == "w1" and fresh.parts() == {kid: KEY}


def _open(tmp_path, monkeypatch, bundle_key: dict, *overrides: str) -> session.CacheSession:
    """A session on a fresh cache dir, with a bundle that holds this workload for `bundle_key`."""
    conf = validate(make_cfg(f"compile.cache_dir={tmp_path / 'cache'}", *overrides))
    source = _cache(tmp_path / "src", {FX: "graph"})
    kid = key_id(bundle_key)
    record = _record(wid=workload_id(workload(conf)), files=[FX])
    Bundle(BundleLayout(tmp_path / "bundle")).add(kid, bundle_key, source, [FX], record)
    monkeypatch.setenv(env.BUNDLE_ENV, str(tmp_path / "bundle"))
    return session.open_session(
        conf, RunLayout(tmp_path / "run"), "cpu", configure_cache(conf.compile)
    )


def test_an_incompatible_bundle_is_ignored_with_a_one_line_notice(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.WARNING, logger="trainer.cache")
    other = {**machine_key("cpu"), "torch": "0.0.0"}
    opened = _open(tmp_path, monkeypatch, other)
    report = session.close_session(opened, {"fxgraph_cache_miss": 2})
    notices = [r.getMessage() for r in caplog.records if r.name == "trainer.cache.session"]
    assert len(notices) == 1 and "\n" not in notices[0], notices
    assert "torch 0.0.0 there" in notices[0] and not (tmp_path / "cache" / FX).exists()
    assert report["pulled"] == 0 and report["expected_hit"]
    assert "only for other machines (torch 0.0.0 there" in report["miss_reason"]


def test_a_matching_bundle_is_put_in_place_and_a_miss_there_is_explained(tmp_path, monkeypatch):
    opened = _open(tmp_path, monkeypatch, machine_key("cpu"))
    assert (tmp_path / "cache" / FX).read_text() == "graph" and opened.notice is None
    hit = session.close_session(opened, {"fxgraph_cache_miss": 0})
    assert hit["pulled"] == 1 and hit["expected_hit"] and hit["miss_reason"] is None
    opened.report = None  # the same workload missing graphs: Inductor's own key moved
    assert (
        "Inductor's own key differs"
        in session.close_session(opened, {"fxgraph_cache_miss": 1})["miss_reason"]
    )


def test_compile_off_runs_have_no_cache_session_report(tmp_path, monkeypatch):
    opened = _open(tmp_path, monkeypatch, machine_key("cpu"), "compile=off")
    assert session.close_session(opened, {}) is None and not (tmp_path / "cache" / FX).exists()


def test_where_the_bundle_is(tmp_path, monkeypatch):
    for name in (env.BUNDLE_ENV, "WANDB_SWEEP_ID", "WANDB_MODE"):
        monkeypatch.delenv(name, raising=False)
    assert env.bundle_setting("offline", True) is None
    monkeypatch.setenv("WANDB_SWEEP_ID", "abc")
    assert env.bundle_setting("online", True) == env.WANDB  # a W&B-server sweep trial
    assert env.bundle_setting("online", False) is None
    bundle = SweepLayout(tmp_path).compile_cache  # a local sweep's, handed to its trials
    assert env.sweep_bundle_env(bundle) == {env.BUNDLE_ENV: str(tmp_path / "compile_cache")}
    monkeypatch.setenv(env.BUNDLE_ENV, "off")
    assert env.sweep_bundle_env(bundle) == {} and env.bundle_setting("online", True) is None


# ---- python -m trainer.cache ----------------------------------------------------------------


def _recorded_cache(tmp_path) -> Path:
    """A cache dir whose records hold a small_cnn and a resnet18 workload for this machine."""
    root = _cache(tmp_path / "cache", {FX: "graph", KERNEL: "kernel", TRITON: "{}"})
    local = Bundle(BundleLayout(root, in_cache=True))
    here = machine_key("cpu")
    local.add(key_id(here), here, root, [FX, KERNEL], _record("small_cnn", "w1", [FX, KERNEL]))
    local.add(key_id(here), here, root, [TRITON], _record("resnet18", "w2", [TRITON]))
    return root


def test_ls_export_by_model_and_import(tmp_path, capsys):
    cache = _recorded_cache(tmp_path)
    cache_main(["--cache-dir", str(cache), "ls"])
    out = capsys.readouterr().out
    assert "(this machine)" in out and "small_cnn" in out and "resnet18" in out
    cache_main(
        ["--cache-dir", str(cache), "export", str(tmp_path / "r18.tar.gz"), "--model", "resnet18"]
    )
    assert "exported 1 workload(s), 1 file(s)" in capsys.readouterr().out
    with tarfile.open(tmp_path / "r18.tar.gz") as archive:
        names = archive.getnames()
    assert any(n.endswith(TRITON) for n in names) and not any(n.endswith(FX) for n in names)
    fresh = tmp_path / "fresh"
    cache_main(["--cache-dir", str(fresh), "import", str(tmp_path / "r18.tar.gz")])
    assert "imported 1 file(s)" in capsys.readouterr().out and (fresh / TRITON).is_file()
    cache_main(["--cache-dir", str(fresh), "ls"])
    assert "resnet18" in capsys.readouterr().out


def test_ls_reads_the_bundle_a_sweep_directory_keeps(tmp_path, capsys):
    sweep = SweepLayout(tmp_path / "sweeps" / "abc")
    cache = _recorded_cache(tmp_path)
    cache_main(
        ["--cache-dir", str(cache), "export", str(sweep.compile_cache), "--model", "resnet18"]
    )
    capsys.readouterr()
    cache_main(["--cache-dir", str(cache), "ls", str(sweep.root)])
    out = capsys.readouterr().out
    assert "resnet18" in out and "small_cnn" not in out


def test_ls_takes_a_sweep_id_under_the_output_root(tmp_path, capsys, monkeypatch):
    output = tmp_path / "outputs"
    monkeypatch.setenv("TRAINER_OUTPUT_DIR", str(output))
    sweep = SweepLayout.under(output, "abc")
    cache = _recorded_cache(tmp_path)
    cache_main(
        ["--cache-dir", str(cache), "export", str(sweep.compile_cache), "--model", "resnet18"]
    )
    capsys.readouterr()
    monkeypatch.chdir(tmp_path)  # no folder named abc here: the id is looked up
    cache_main(["--cache-dir", str(cache), "ls", "abc"])
    assert "resnet18" in capsys.readouterr().out


def test_import_skips_other_machines_and_says_why(tmp_path, capsys):
    cache = _recorded_cache(tmp_path)
    cache_main(["--cache-dir", str(cache), "export", str(tmp_path / "all")])
    part = next((tmp_path / "all").iterdir())
    key = {**json.loads((part / "key.json").read_text()), "torch": "0.0.0"}
    (part / "key.json").write_text(json.dumps(key))
    part = part.rename(part.with_name(key_id(key)))  # a bundle made with another torch
    with pytest.raises(SystemExit) as stop:
        cache_main(["--cache-dir", str(tmp_path / "fresh"), "import", str(tmp_path / "all")])
    captured = capsys.readouterr()
    assert stop.value.code == 1 and f"skipped {part.name}" in captured.out
    assert "torch 0.0.0 there" in captured.out and "nothing in" in captured.err
    assert not (tmp_path / "fresh" / FX).exists()


def test_export_refuses_a_missing_model_and_an_existing_target(tmp_path, capsys):
    cache = _recorded_cache(tmp_path)
    for argv, words in (
        (["export", str(tmp_path / "x"), "--model", "vit_tiny"], "no recorded workload of model vit_tiny"),
        (["export", str(cache)], "it exists"),
    ):  # fmt: skip
        with pytest.raises(SystemExit):
            cache_main(["--cache-dir", str(cache), *argv])
        assert words in capsys.readouterr().err


# ---- W&B artifacts: W&B's own API, offline ---------------------------------------------------


class _Api:
    """wandb.Api as the server would answer: one artifact version (aliased by a key id) holding
    a bundle. Every call is bound against the real method's signature."""

    calls: list[tuple[str, tuple, dict]] = []
    stored: dict[str, Path] = {}

    def __init__(self, *args, **kwargs):
        self._check("__init__", args, kwargs)

    def _check(self, name, args, kwargs):
        import wandb

        inspect.signature(getattr(wandb.Api, name)).bind(self, *args, **kwargs)
        self.calls.append((name, args, kwargs))

    def artifact_exists(self, name, type=None):
        self._check("artifact_exists", (name,), {"type": type})
        return name in self.stored

    def artifact(self, name, type=None):
        self._check("artifact", (name,), {"type": type})
        return _Artifact(self.stored[name])


class _Artifact:
    def __init__(self, folder: Path):
        self.folder, self.metadata = folder, json.loads((folder / "meta.json").read_text())

    def download(self, root=None, **kwargs):
        import shutil

        import wandb

        inspect.signature(wandb.Artifact.download).bind(self, root=root, **kwargs)
        shutil.copytree(self.folder / "bundle", root, dirs_exist_ok=True)
        return root


def test_a_trial_logs_its_compile_as_a_wandb_artifact_offline(tmp_path, monkeypatch):
    import wandb

    root = _cache(tmp_path / "cache", {FX: "graph", KERNEL: "kernel"})
    run = wandb.init(
        project="p", mode="offline", dir=str(tmp_path), settings=wandb.Settings(silent=True)
    )
    logged = []
    real = run.log_artifact
    monkeypatch.setattr(
        run, "log_artifact", lambda a, **kw: logged.append((a, kw)) or real(a, **kw)
    )
    try:
        remote = ArtifactBundle("p")
        assert remote.publish(key_id(KEY), KEY, root, [FX, KERNEL], _record(wid="w1"), run) == 2
    finally:
        run.finish()
    ((artifact, kwargs),) = logged
    inspect.signature(wandb.sdk.wandb_run.Run.log_artifact).bind(run, artifact, **kwargs)
    assert artifact.name == "compile-cache-w1" and artifact.type == "compile-cache"
    assert kwargs == {"aliases": [key_id(KEY)]} and artifact.metadata["key"] == KEY
    paths = set(artifact.manifest.entries)
    assert f"{key_id(KEY)}/files/{FX}" in paths and f"{key_id(KEY)}/key.json" in paths
    record = next(Path(tmp_path, "wandb").glob("offline-run-*/run-*.wandb"))
    for _ in range(100):  # W&B's service process writes the offline run file on its own time
        if b"compile-cache-w1" in record.read_bytes():
            break
        time.sleep(0.1)
    assert b"compile-cache-w1" in record.read_bytes()  # in the offline run, for `wandb sync`


def test_a_trial_on_another_machine_puts_the_artifact_in_place(tmp_path, monkeypatch):
    import wandb

    kid = key_id(KEY)
    stored = tmp_path / "server"
    Bundle(BundleLayout(stored / "bundle")).add(
        kid, KEY, _cache(tmp_path / "a", {FX: "g"}), [FX], _record(wid="w1", files=[FX])
    )
    (stored / "meta.json").write_text(json.dumps({"key": KEY}))
    _Api.calls, _Api.stored = [], {f"ent/p/compile-cache-w1:{kid}": stored}
    monkeypatch.setattr(wandb, "Api", _Api)
    into = Bundle(BundleLayout(tmp_path / "b", in_cache=True))
    remote = ArtifactBundle("p", "ent")
    assert remote.fetch(kid, "w1", into) == (1, None) and (tmp_path / "b" / FX).read_text() == "g"
    assert [c[0] for c in _Api.calls] == ["__init__", "artifact_exists", "artifact"]
    assert _Api.calls[1][1:] == ((f"ent/p/compile-cache-w1:{kid}",), {"type": "compile-cache"})
    other = {**KEY, "torch": "0.0.0"}  # only another machine's version: its key, for the reason
    _Api.stored = {"ent/p/compile-cache-w1:latest": stored}
    (stored / "meta.json").write_text(json.dumps({"key": other}))
    assert ArtifactBundle("p", "ent").fetch(kid, "w1", into) == (0, other)


# ---- prewarm's plan, warm_only, trace ------------------------------------------------------


def _compose(values: dict):
    return make_cfg(*(f"{k}={v}" for k, v in values.items()))


@pytest.mark.parametrize(
    "parameters, distinct, note",
    [
        ({"model.width": {"values": [8, 16]}, "optimizer.lr": {"values": [0.1, 0.01, 0.001]}}, 2, None),
        ({"model": {"values": ["small_cnn", "resnet18"]}, "optimizer.lr": {"distribution": "uniform", "min": 0.01, "max": 0.1}}, 2, None),
        ({"compile.mode": {"value": "default"}, "data.batch_size": {"distribution": "int_uniform", "min": 16, "max": 64}}, 1, "data.batch_size is drawn"),
    ],
)  # fmt: skip
def test_prewarm_plans_one_compile_per_distinct_workload(parameters, distinct, note):
    plan = prewarm.plan({"parameters": parameters}, _compose)
    assert len(plan.targets) == distinct and len({t.id for t in plan.targets}) == distinct
    assert (note is None and plan.notes == []) or any(note in n for n in plan.notes)


def test_warm_only_needs_a_compiled_single_process_run():
    for overrides in (["compile=off"], ["trainer.strategy=ddp"]):
        with pytest.raises(ConfigError, match="compile.warm_only=true"):
            validate(make_cfg("compile.warm_only=true", *overrides))


def test_a_trace_without_tlparse_says_how_to_get_its_report(tmp_path, monkeypatch, caplog):
    from trainer.compiling import trace

    layout = RunLayout(tmp_path)
    trace.start(layout)
    (layout.compile_trace / "dedicated_log_torch_trace_x.log").write_text("{}\n")
    monkeypatch.setattr(trace, "tlparse", lambda: None)
    with caplog.at_level(logging.WARNING):
        assert trace.finish(layout).name == "dedicated_log_torch_trace_x.log"
    assert trace.INSTALL in caplog.text and str(layout.compile_report.parent) in caplog.text


def test_an_unreachable_wandb_server_costs_a_notice_not_the_run(tmp_path, monkeypatch):
    import wandb

    class Down(_Api):
        def artifact_exists(self, name, type=None):
            raise wandb.errors.CommError("could not reach the server")

    monkeypatch.setattr(wandb, "Api", Down)
    monkeypatch.setenv(env.BUNDLE_ENV, env.WANDB)
    conf = validate(make_cfg(f"compile.cache_dir={tmp_path / 'cache'}"))
    opened = session.open_session(
        conf, RunLayout(tmp_path / "run"), "cpu", configure_cache(conf.compile)
    )
    assert "W&B artifacts unavailable" in opened.notice and "could not reach" in opened.notice
    assert session.close_session(opened, {})["pulled"] == 0
