"""The documentation is a contract: every command a user can copy from README.md,
benchmarks/README.md and the pages of docs/ has one entry in COMMANDS, and is either typed into a
shell here (small-size overrides appended) or listed as not run, with the reason and, where a page
promises one, the clear error checked instead. Every row of the compile table (docs/compile.md)
has a check of what it claims. Every link and anchor resolves, every file, folder and module a
page names exists, and the README stays a front door that links every page.

The scenario tests type commands into a shell (processes, sweeps): they are marked slow."""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from trainer.config.hydra_version import VERSION_BASE

from .readme_commands import DOCS, ROOT, Shell, all_commands, anchors, links, pages, source_paths

SMALL = "trainer.max_epochs=1 logger=none compile=off"
TRIAL = f"{SMALL} hydra.sweeper.run_cap=1"


@dataclass(frozen=True)
class Run:
    scenario: str  # the test_scenario_<name> below that types it
    extra: str = SMALL  # appended by the test, as a user would shrink the run


@dataclass(frozen=True)
class NotRun:
    reason: str
    checked_by: str = ""  # the test that checks its documented error here, if any


COMMANDS: dict[str, Run | NotRun] = {
    'python3 -m venv .venv && .venv/bin/pip install -e ".[dev]" && .venv/bin/python -m trainer': NotRun(
        "installs from a package index (network); the training it ends with is `python -m trainer`"
    ),
    "python -m pytest": NotRun("the test suite itself (the fast set)"),
    "python -m pytest --slow": NotRun("the test suite itself, everything: what CI runs"),
    "python -m trainer": Run("single", "trainer.max_epochs=1 compile=off"),
    "python -m trainer compile.mode=max-autotune": NotRun(
        "Inductor autotuning takes minutes on a CPU; its CPU warning is checked in "
        "tests/compiling/test_compile.py"
    ),
    "python -m trainer compile=off": Run("overrides"),
    "python -m trainer compile=auto": NotRun(
        "this run in-process (its decision and figures in summary.json): "
        "tests/train/test_compile_auto.py::test_auto_chooses_eager_for_small_cnn_on_this_cpu"
    ),
    "python -m trainer model=resnet18 data=cifar10 data.root=~/data": NotRun(
        "needs the CIFAR-10 data set in ~/data; without it the docs promise a clear error",
        "test_scenario_cifar10_without_data",
    ),
    "python -m trainer model=resnet18 model.name=efficientnet_b0": NotRun(
        "builds and trains a torchvision classifier by name: "
        "tests/train/test_models.py::test_any_torchvision_name_works"
    ),
    "python -m trainer optimizer=adamw optimizer.lr=3e-4 scheduler=cosine": Run("overrides"),
    "python -m trainer trainer.precision=bf16-mixed": NotRun(
        "bf16 mixed precision is for a GPU: tests/test_cli.py::test_bf16_where_the_device_cannot"
    ),
    "python -m trainer trainer.num_threads=4": Run("overrides"),
    "python -m trainer data=fake data.augment=strong trainer.label_smoothing=0.1 "
    "trainer.ema=0.999": Run("fast", f"{SMALL} data.num_samples=128 model.width=8"),
    "python -m trainer model=resnet18 data=cifar10 data.root=~/data trainer.precision=bf16-mixed "
    "compile=reduce-overhead data.augment=standard trainer.label_smoothing=0.1 trainer.ema=0.999 "
    "scheduler=cosine trainer.max_epochs=30": NotRun(
        "needs CIFAR-10 and a GPU; its keys run on the CPU in test_scenario_fast and "
        "tests/train/test_recipe.py, on CUDA in "
        "tests/train/test_gpu.py::test_bf16_training_with_the_fast_settings and "
        "tests/train/test_gpu.py::test_reduce_overhead_records_cuda_graphs_once_then_only_replays"
    ),
    "python -m trainer logger=none": Run("single"),
    "python -m trainer logger.mode=online logger.project=myproj": NotRun(
        "needs a W&B account and a network"
    ),
    "python -m trainer -m optimizer.lr=0.1,0.01 compile=off,default": Run(
        "multirun", "trainer.max_epochs=1 trainer.max_steps=2 logger=none compile.backend=aot_eager"
    ),
    "python -m trainer <same overrides> hydra.run.dir=<run dir> trainer.resume=auto": Run(
        "single", "trainer.max_epochs=2"
    ),
    "python -m trainer trainer.resume=path/to/last.pt": Run("resume_finished"),
    "python -m trainer --cfg job": Run("single", ""),
    "python -m trainer.evaluate checkpoint=<run dir>/checkpoints/best.pt": Run(
        "single", "compile=off eval.warmup=1 eval.steps=2"
    ),
    "python -m trainer.evaluate checkpoint=<run dir>/checkpoints/last.pt": NotRun(
        "the best.pt line on the other checkpoint file, typed in test_scenario_single"
    ),
    "python -m trainer sweep=lr_bayes": Run("sweeps", TRIAL),
    "torchrun --nproc_per_node=2 -m trainer trainer.strategy=ddp": NotRun(
        "this torchrun on 2 CPU processes (Gloo): "
        "tests/hardware/test_ddp.py::test_ddp_matches_single_writes_once_and_resumes_single"
    ),
    "python -m trainer sweep=lr_random hydra.sweeper.dry_run=true": Run("sweeps", ""),
    "python -m trainer sweep=compile_grid hydra.sweeper.repeats=3 hydra.sweeper.dry_run=true": (
        Run("sweeps", "")
    ),
    "python -m trainer -m hydra/sweeper=wandb hydra.sweeper.dry_run=true "
    "'hydra.sweeper.parameters={optimizer.lr: {distribution: log_uniform_values, min: 0.001, "
    "max: 0.5}}'": Run("sweeps", ""),
    "python -m trainer -m hydra/sweeper=wandb hydra.sweeper.method=grid "
    "hydra.sweeper.metric.name=val/acc hydra.sweeper.metric.goal=maximize "
    "'optimizer.lr=0.01,0.1' 'model=small_cnn,resnet18' compile=off": Run(
        "sweeps", "hydra.sweeper.dry_run=true"
    ),
    "python -m trainer sweep=lr_bayes hydra.sweep.dir=sweeps/lr": Run(
        "sweeps", "hydra.sweeper.dry_run=true"
    ),
    "mkdir -p ~/my_conf/sweep && cp conf/sweep/lr_random.yaml ~/my_conf/sweep/mine.yaml": Run(
        "own_config", ""
    ),
    "python -m trainer --config-dir ~/my_conf sweep=mine": Run(
        "own_config", "hydra.sweeper.dry_run=true"
    ),
    "cd /anywhere && python -m trainer --config-dir ~/my_conf sweep=mine": Run(
        "own_config", "hydra.sweeper.dry_run=true"
    ),
    "python -m trainer sweep=lr_bayes hydra.sweeper.backend=wandb hydra.sweeper.agents=0 "
    "hydra.sweeper.project=my-project": NotRun(
        "needs a W&B account; without an API key the docs promise an error within seconds",
        "test_scenario_wandb_backend_without_a_key",
    ),
    "WANDB_MODE=online wandb agent --count 10 my-team/my-project/8fz3k2qa": NotRun(
        "needs a W&B account, a network and a sweep on the server"
    ),
    'cd "$SLURM_SUBMIT_DIR"': NotRun("a line of a SLURM job script"),
    "source .venv/bin/activate": NotRun("a line of a SLURM job script"),
    "export WANDB_MODE=online TRAINER_OUTPUT_DIR=$SCRATCH/outputs": NotRun(
        "a line of a SLURM job script"
    ),
    "wandb agent --count 5 my-team/my-project/8fz3k2qa": NotRun(
        "a SLURM job script's agent: needs SLURM, a W&B account and a network"
    ),
    "wandb sync outputs/sweeps/<sweep id>/runs/*/wandb/offline-run-*": NotRun(
        "uploads to the W&B server: needs an account and a network"
    ),
    "wandb sync --dry-run outputs/runs/*/*/wandb/offline-run-*": Run("single", ""),
    "python -m trainer -m sweep=lr_random hydra.sweeper.agents=4": NotRun(
        "four agents on one sweep: tests/sweep/agents/test_local_agent.py::"
        "test_four_agents_on_an_eight_point_grid_run_each_point_once"
    ),
    "python -m trainer.agent SWEEP_ID --count 3": Run("sweeps", ""),
    "python -m trainer.agent path/to/sweep/dir": Run("sweeps", ""),
    "python -m trainer.agent SWEEP_ID --devices 2,3": NotRun(
        "needs GPUs 2 and 3; joining agents with disjoint --devices on CPU: "
        "tests/sweep/agents/test_gpu_slots.py::"
        "test_joining_agents_with_disjoint_devices_share_the_sweep"
    ),
    "python -m trainer sweep=lr_bayes hydra.sweeper.devices=auto": NotRun(
        "on a CPU machine auto finds no GPU and this is `sweep=lr_bayes`, typed above; device "
        "slots with explicit indices: tests/sweep/agents/test_gpu_slots.py"
    ),
    "python -m trainer sweep=lr_random hydra.sweeper.devices=[0,1] "
    "hydra.sweeper.trials_per_device=2": NotRun(
        "four trials on 2 x 2 slots: "
        "tests/sweep/agents/test_gpu_slots.py::test_two_trials_per_device_share_it_and_never_three"
    ),
    "python -m trainer sweep=lr_random hydra.sweeper.devices=[0,1,2,3] "
    "hydra.sweeper.gpus_per_trial=2": NotRun(
        "a 2-process torchrun trial (Gloo): tests/sweep/agents/test_gpu_slots.py::"
        "test_a_two_gpu_trial_runs_through_torchrun; the command: "
        "tests/plugin/test_wandb_sweeper.py::test_a_multi_gpu_sweep_writes_the_torchrun_command"
    ),
    "python -m trainer -m sweep=lr_random hydra.sweeper.sweep_id=SWEEP_ID "
    "hydra.sweeper.rerun_crashed=true": NotRun(
        "needs a trial that Ctrl-C interrupted: "
        "tests/sweep/agents/test_interrupt.py::"
        "test_ctrl_c_then_rerun_crashed_resumes_the_trial_in_place"
    ),
    "python -m trainer.sweep ls": Run("sweeps", ""),
    "python -m trainer.sweep show SWEEP_ID": Run("sweeps", ""),
    "python -m trainer.sweep watch SWEEP_ID": Run("sweeps", ""),
    "python -m trainer.sweep pause SWEEP_ID": NotRun(
        "needs a live sweep to pause: tests/sweep/test_steer_live.py::"
        "test_pause_holds_new_runs_until_resume_and_stop_ends_one_run"
    ),
    "python -m trainer.sweep resume SWEEP_ID": NotRun(
        "needs a paused live sweep: tests/sweep/test_steer_live.py::"
        "test_pause_holds_new_runs_until_resume_and_stop_ends_one_run"
    ),
    "python -m trainer.sweep stop SWEEP_ID": NotRun(
        "ends a live sweep; every verb from every state: tests/sweep/store/test_steering.py::"
        "test_every_verb_from_every_state"
    ),
    "python -m trainer.sweep cancel SWEEP_ID": NotRun(
        "ends a live sweep; tests/sweep/test_steer_cli.py::"
        "test_cancel_with_nothing_running_writes_the_report and tests/sweep/store/"
        "test_steering.py::test_cancel_stops_the_running_and_ends_the_waiting_and_none_comes_back"
    ),
    "python -m trainer.sweep stop SWEEP_ID RUN_ID": NotRun(
        "needs a running run: tests/sweep/test_steer_live.py::"
        "test_pause_holds_new_runs_until_resume_and_stop_ends_one_run"
    ),
    "python -m trainer.sweep pause my-team/my-project/8fz3k2qa": NotRun(
        "needs the W&B server; at its contract (argv, environment, W&B's own parser): "
        "tests/sweep/test_server_steering.py::test_each_verb_is_w_and_b_own_command; no "
        "credentials: tests/sweep/test_server_steering.py::"
        "test_without_credentials_a_clear_error_within_seconds"
    ),
    "python -m trainer.sweep stop my-team/my-project/8fz3k2qa RUN_ID": NotRun(
        "needs the W&B server; at its contract: tests/sweep/test_server_steering.py::"
        "test_stop_run_is_the_public_apis_stop"
    ),
    "python -m trainer.sweep extend SWEEP_ID hydra.sweeper.run_cap=80": NotRun(
        "runs trials: tests/sweep/test_extend_live.py::"
        "test_extend_a_finished_bayes_sweep_by_four_runs"
    ),
    "python -m trainer.sweep extend SWEEP_ID 'optimizer.lr=tag(log, interval(0.0001, 1.0))'": (
        NotRun(
            "needs a sweep to extend: tests/sweep/test_extend_cli.py::"
            "test_no_run_records_the_revision_and_prints_the_join_line"
        )
    ),
    "python -m trainer.sweep extend SWEEP_ID optimizer.lr=0.1,0.05,0.02": NotRun(
        "needs a grid sweep: tests/sweep/definition/test_revision.py::"
        "test_a_grid_gains_only_its_new_points"
    ),
    "python -m trainer.sweep extend SWEEP_ID optimizer.weight_decay=0.0005,0.01 "
    "--default optimizer.weight_decay=0.0005": NotRun(
        "needs a sweep to extend: tests/sweep/test_extend_cli.py::"
        "test_a_parameter_added_with_the_value_the_runs_had"
    ),
    "python -m trainer.sweep extend SWEEP_ID hydra.sweeper.run_cap=80 --no-run": NotRun(
        "needs a sweep to extend: tests/sweep/test_extend_cli.py::"
        "test_no_run_records_the_revision_and_prints_the_join_line"
    ),
    "python -m trainer -m sweep=lr_bayes hydra.sweeper.warm_start=SWEEP_ID": NotRun(
        "needs an earlier sweep and runs trials: tests/sweep/test_extend_live.py::"
        "test_warm_start_seeds_a_new_bayes_sweep"
    ),
    "head -1 outputs/sweeps/SWEEP_ID/best.yaml": Run("sweeps", ""),
    "python -m trainer sweep=tpe_optuna": Run("engines", "hydra.sweeper.dry_run=true"),
    "python -m trainer sweep=conditional_optuna": Run("engines", TRIAL),
    "python -m trainer sweep=pareto_optuna": Run("engines", "hydra.sweeper.dry_run=true"),
    'pip install -e ".[ax]" && python -m trainer sweep=ax_bayes': NotRun(
        "installs from a package index (network); engine ax itself: "
        "tests/sweep/search/test_suggest.py::test_engine_ax_runs_a_small_sweep_when_installed "
        "(.ci/run installs "
        "the extra for it)"
    ),
    "python -m trainer sweep=bayes_wandb hydra.sweeper.dry_run=true": Run("engines", ""),
    "python -m trainer sweep=tpe_optuna hydra.sweeper.backend=wandb "
    "hydra.sweeper.project=my-project": NotRun(
        "needs a W&B account and a network; without a key the docs promise an error within "
        "seconds, before anything is created",
        "test_scenario_wandb_backend_without_a_key",
    ),
    "torchrun --standalone --nproc_per_node=4 -m trainer trainer.strategy=ddp data=cifar10 "
    "data.root=~/data": NotRun("needs the CIFAR-10 data set (and a GPU node to be worth it)"),
    "torchrun --nnodes=2 --nproc_per_node=8 --rdzv_backend=c10d --rdzv_endpoint=HOST0:29400 "
    "--rdzv_id=cifar-ddp -m trainer trainer.strategy=ddp model=resnet50 data.batch_size=1024": NotRun(
        "needs two nodes with 8 GPUs each"
    ),
    "bash .ci/run": NotRun("creates venvs and installs from a package index (network)"),
    ".ci/refresh-constraints": NotRun(
        "resolves the newest releases from a package index (network)"
    ),
    "python -m benchmarks.compile_modes": NotRun(
        "a benchmark of minutes on an idle machine; tests/benchmarks/test_benchmarks.py runs it reduced"
    ),
    "python -m benchmarks.compile_modes --device cuda": NotRun("needs a GPU"),
    "python -m benchmarks.compile_regions": NotRun(
        "cold Inductor compiles of resnet18 and vit_tiny, one fresh process each: minutes per "
        "variant; compile.target=blocks itself is checked by the compile table rows here and by "
        "tests/compiling/test_regional.py"
    ),
    "python -m benchmarks.compile_regions --device cuda": NotRun("needs a GPU"),
    "python -m benchmarks.overhead": NotRun(
        "a benchmark of minutes on an idle machine; tests/benchmarks/test_benchmarks.py runs it reduced"
    ),
    "python -m benchmarks.overhead --device cuda --model resnet18": NotRun("needs a GPU"),
    "python -m benchmarks.input_pipeline": NotRun(
        "a benchmark of minutes on an idle machine; tests/benchmarks/test_benchmarks.py runs it reduced"
    ),
    "python -m benchmarks.input_pipeline --device cuda --format fashion_mnist --model resnet18 "
    "--augment standard --precision bf16-mixed --batch 512": NotRun("needs a GPU"),
    "python -m benchmarks.gpu_suite --dry-run": NotRun(
        "run in-process (the benchmarks package is not installed, so a shell outside the "
        "checkout lacks it): "
        "tests/benchmarks/test_benchmarks.py::test_gpu_suite_dry_run_prints_the_steps_on_any_machine"
    ),
    "python -m benchmarks.gpu_suite": NotRun(
        "needs a GPU; its report: tests/benchmarks/test_benchmarks.py"
    ),
    "python -m benchmarks.bayes_parity": NotRun(
        "a benchmark of minutes; tests/benchmarks/test_bayes_parity.py runs it reduced"
    ),
    "python -m benchmarks.sweep_engines": NotRun(
        "nine whole sweeps, minutes each; tests/benchmarks/test_sweep_engines.py checks its sweeps' "
        "commands and its summary"
    ),
    "python -m benchmarks.sweep_store": NotRun(
        "starts a PostgreSQL server and 42 agent processes, minutes; the hand-out it times: "
        "tests/sweep/store/test_postgres.py::"
        "test_eight_agents_claiming_at_once_get_each_run_exactly_once"
    ),
    "python -m benchmarks.sweep_scale": NotRun(
        "simulated agents by the hundred against PostgreSQL and SQLite, minutes per round; "
        "tests/benchmarks/test_sweep_scale.py::test_sweep_scale_writes_one_object_per_round "
        "runs it with tiny rounds"
    ),
    'pip install -e ".[postgres]"': NotRun("installs from a package index (network)"),
    "python -m trainer sweep=lr_bayes "
    "hydra.sweeper.storage=postgresql://sweeper@db.example:5432/sweeps": NotRun(
        "needs a PostgreSQL server at db.example; the store on a real server: "
        "tests/sweep/store/test_postgres.py::test_a_sweep_resumes_by_id_from_another_machine"
    ),
    "python -m trainer.agent SWEEP_ID --storage postgresql://sweeper@db.example:5432/sweeps": NotRun(
        "needs a PostgreSQL server at db.example; an unreachable one's error: "
        "tests/sweep/store/test_postgres.py::"
        "test_an_unreachable_server_is_a_clear_error_before_anything_runs"
    ),
    "python -m trainer.sweep --storage postgresql://sweeper@db.example:5432/sweeps ls": NotRun(
        "needs a PostgreSQL server at db.example; ls on a real one: "
        "tests/sweep/store/test_postgres.py::test_the_password_is_written_nowhere"
    ),
    'pip install -e ".[dashboard]"': NotRun("installs from a package index (network)"),
    "python -m trainer.sweep dashboard SWEEP_ID": NotRun(
        "serves until Ctrl-C; the same command on a real sweep, opened in headless chromium: "
        "tests/sweep/report/test_dashboard_browser.py::"
        "test_the_page_shows_every_run_and_chart_and_a_new_run_without_reload"
    ),
    "python -m trainer.sweep dashboard": NotRun(
        "serves until Ctrl-C; the list of sweeps it serves: tests/sweep/report/test_dashboard.py::"
        "test_the_server_answers_the_page_and_leaves_the_store_untouched"
    ),
    "python -m trainer.sweep dashboard --storage postgresql://sweeper@db.example:5432/sweeps": NotRun(
        "needs a PostgreSQL server at db.example; the dashboard's reader on a real one: "
        "tests/sweep/store/test_postgres.py::test_a_reader_of_the_server_reads_and_never_writes"
    ),
    "python -m trainer.sweep dashboard SWEEP_ID --port 0": NotRun(
        "serves until Ctrl-C; the browser test starts it so: tests/sweep/report/"
        "test_dashboard_browser.py::test_the_page_shows_every_run_and_chart_and_a_new_run_without_reload"
    ),
    "python -m trainer.sweep dashboard SWEEP_ID --control": NotRun(
        "serves until Ctrl-C; the browser test starts it so and stops a run from the page: "
        "tests/sweep/report/test_dashboard_control_browser.py::"
        "test_the_page_stops_a_running_run_and_shows_it_stopped_without_reload"
    ),
    "ssh -N -L 8765:127.0.0.1:8765 login.cluster.example": NotRun(
        "an SSH tunnel to another machine (login.cluster.example is an example)"
    ),
    "python -m trainer -m hydra/sweeper=wandb hydra.sweeper.method=pbt "
    "'hydra.sweeper.metric={name: val/acc, goal: maximize}' 'hydra.sweeper.parameters="
    "{optimizer.lr: {distribution: log_uniform_values, min: 0.0005, max: 0.5}, "
    "trainer.label_smoothing: {values: [0.0, 0.05, 0.1]}}' data=digits model=small_cnn "
    "compile=default trainer.max_epochs=4": NotRun(
        "four compiled members; tests/sweep/store/test_pbt_sweep.py types it with 3 epochs and "
        "quantile 0.5 (SQLite and PostgreSQL) and checks the copies and 0 recompiles"
    ),
    "python -m benchmarks.pbt": NotRun(
        "nine sweeps (three methods, three seeds) for about ten minutes; its figures are "
        "published in benchmarks/results/pbt.md"
    ),
    "python -m benchmarks.sweep_faults": NotRun(
        "injects six cluster faults for about 15 minutes on a real SLURM; its requeue and "
        "SIGKILL cases run in tests/plugin/test_slurm_faults.py and "
        "tests/sweep/agents/test_faults.py"
    ),
    "python -m benchmarks.sweep_cluster": NotRun(
        "three whole sweeps and SLURM jobs; tests/benchmarks/test_benchmarks.py::"
        "test_sweep_cluster_writes_its_table runs it reduced"
    ),
    "python -m trainer sweep=lr_bayes hydra.sweeper.agents=8 "
    "hydra.sweeper.storage=postgresql://sweeper@db.example:5432/sweeps "
    "hydra/launcher=submitit_slurm hydra.launcher.partition=gpu hydra.launcher.account=my-lab "
    "hydra.launcher.gpus_per_node=1 hydra.launcher.cpus_per_task=8 hydra.launcher.mem_gb=64 "
    "hydra.launcher.timeout_min=240 hydra.launcher.max_num_timeout=5 "
    "'hydra.launcher.setup=[\"source .venv/bin/activate\"]'": NotRun(
        "needs a SLURM cluster with GPUs and a PostgreSQL server at db.example; agents as SLURM "
        "jobs on a real one-node cluster: tests/plugin/test_launchers.py::"
        "test_submitit_slurm_runs_each_agent_as_a_slurm_job, and preempted: "
        "tests/plugin/test_slurm_preemption.py::"
        "test_a_warning_signal_mid_trial_resumes_the_run_in_the_requeued_job"
    ),
    "python -m benchmarks.compile_cache": NotRun(
        "cold Inductor compiles of resnet18 in fresh processes, minutes per round; the bundle it "
        "times: tests/cache/test_cache_runs.py::test_bundle_round_trip_and_an_incompatible_bundle"
    ),
    "python -m trainer.cache ls": Run("compile_cache", ""),
    "python -m trainer.cache ls outputs/sweeps/SWEEP_ID": Run("compile_cache", ""),
    "python -m trainer.cache export cache.tar.gz --model resnet18": Run("compile_cache", ""),
    "python -m trainer.cache import cache.tar.gz": Run("compile_cache", ""),
    "python -m trainer -m sweep=compile_grid hydra.sweeper.prewarm=true": NotRun(
        "compile_grid compiles mobilenet_v3_small and max-autotune cold: minutes on a CPU; prewarm "
        "in a real sweep: tests/cache/test_cache_runs.py::"
        "test_prewarm_compiles_each_distinct_architecture_once_before_the_trials"
    ),
}


def test_the_docs_pages_are_read():
    names = [p.relative_to(ROOT).as_posix() for p in pages()]
    assert names[:2] == ["README.md", "benchmarks/README.md"]
    assert {"docs/compile.md", "docs/sweeps.md", "docs/agents.md"} <= set(names)
    assert set(names[2:]) == {p.relative_to(ROOT).as_posix() for p in DOCS.glob("*.md")}


def test_every_readme_command_has_an_entry():
    missing = [f"{where}: {cmd}" for cmd, where in all_commands().items() if cmd not in COMMANDS]
    assert not missing, "commands of the docs without an entry in COMMANDS:\n" + "\n".join(missing)


def test_every_entry_is_still_in_a_readme():
    gone = sorted(set(COMMANDS) - set(all_commands()))
    assert not gone, "COMMANDS entries no page shows any more:\n" + "\n".join(gone)


def test_every_test_a_reason_names_exists():
    """`tests/x/test_y.py::test_z` in a NotRun reason names a test that is there."""
    wrong = []
    for cmd, entry in COMMANDS.items():
        if not isinstance(entry, NotRun):
            continue
        for path, name in re.findall(r"(tests/[\w/]+\.py)(?:::(\w+))?", entry.reason):
            source = ROOT / path
            if not source.is_file() or (name and f"def {name}(" not in source.read_text()):
                wrong.append(f"{cmd!r}: {path}::{name}")
    assert wrong == []


def test_every_entry_is_typed_by_a_test():
    tests = {name for name in globals() if name.startswith("test_scenario_")}
    for cmd, entry in COMMANDS.items():
        name = f"test_scenario_{entry.scenario}" if isinstance(entry, Run) else entry.checked_by
        assert not name or name in tests, f"{cmd!r}: no test {name}"


def test_extraction_joins_continuations_drops_comments_and_reads_the_usage_table(tmp_path):
    from .readme_commands import commands

    readme = tmp_path / "README.md"
    readme.write_text(
        "| you want | command |\n| --- | --- |\n| a run | `python -m trainer x=1` (note) |\n\n"
        "```bash\n# a comment\npython -m trainer -m a=1 \\\n    'b=#2'   # why\n```\n"
        "```yaml\nnot: a command\n```\n"
    )
    assert commands(readme) == [
        (3, "python -m trainer x=1"),
        (7, "python -m trainer -m a=1 'b=#2'"),
    ]


TYPED: set[str] = set()


def _all_typed(test: str) -> None:
    """Each scenario test ends here: it typed every command whose entry names it."""
    mine = {
        cmd
        for cmd, e in COMMANDS.items()
        if (isinstance(e, Run) and f"test_scenario_{e.scenario}" == test)
        or (isinstance(e, NotRun) and e.checked_by == test)
    }
    assert mine <= TYPED, f"{test} did not type: {sorted(mine - TYPED)}"


def _type(shell: Shell, cmd: str, fill: dict[str, str] | None = None, rc: int = 0, **kw):
    """Type a README command (its placeholders filled) with its entry's small-size overrides."""
    entry = COMMANDS[cmd]
    TYPED.add(cmd)
    line = cmd
    for placeholder, value in (fill or {}).items():
        line = line.replace(placeholder, value)
    extra = entry.extra if isinstance(entry, Run) else ""
    proc = shell.type(line, extra, **kw)
    assert proc.returncode == rc, f"{line} {extra}\nexit {proc.returncode}\n{proc.out[-3000:]}"
    assert "Traceback" not in proc.out, proc.out[-3000:]
    return proc


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


@pytest.fixture
def shell(tmp_path) -> Shell:
    return Shell(tmp_path)


@pytest.mark.slow
@pytest.mark.pyversion  # the Quick start's terminal on this interpreter: no third-party warning
def test_scenario_single(shell):
    """A run, its config, wandb sync --dry-run, resuming it further and evaluating it."""
    proc = _type(shell, "python -m trainer --cfg job")
    assert "compile:" in proc.out and "model:" in proc.out and not shell.runs()
    _type(shell, "python -m trainer")
    first = shell.runs()[-1]
    assert _summary(first)["compile"]["enabled"] is False
    assert list(first.glob("wandb/offline-run-*")), "the default logger writes an offline W&B run"
    proc = _type(shell, "wandb sync --dry-run outputs/runs/*/*/wandb/offline-run-*")
    assert "offline-run-" in proc.out
    _type(shell, "python -m trainer logger=none")
    run_dir = shell.runs()[-1]
    _type(
        shell,
        "python -m trainer <same overrides> hydra.run.dir=<run dir> trainer.resume=auto",
        {"<same overrides>": SMALL, "<run dir>": str(run_dir)},
    )
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in lines] == [1, 2], lines
    for name in ("best", "last"):
        cmd = f"python -m trainer.evaluate checkpoint=<run dir>/checkpoints/{name}.pt"
        proc = _type(shell, cmd, {"<run dir>": str(run_dir)})
        report = next((shell.outputs / "evaluations").glob("*/*/evaluation.json"))
        doc = json.loads(report.read_text())
        assert doc["val/acc"] > 0.5 and doc["latency_ms"]["p50"] > 0 and "p50" in proc.out
        report.unlink()
    _all_typed("test_scenario_single")


@pytest.mark.slow
def test_scenario_overrides(shell):
    """Usage-table overrides that change the run: each run ends and its summary says so."""
    _type(shell, "python -m trainer compile=off")
    _type(shell, "python -m trainer optimizer=adamw optimizer.lr=3e-4 scheduler=cosine")
    config = json.loads((shell.runs()[-1] / "summary.json").read_text())
    assert "adamw" in json.dumps(config).lower()
    _type(shell, "python -m trainer trainer.num_threads=4")
    assert _summary(shell.runs()[-1])["cpu"]["threads"] == 4
    _all_typed("test_scenario_overrides")


@pytest.mark.slow
def test_scenario_fast(shell):
    """Augmentation, label smoothing and EMA on the CPU: summary.json says what it did."""
    _type(
        shell,
        "python -m trainer data=fake data.augment=strong trainer.label_smoothing=0.1 "
        "trainer.ema=0.999",
    )
    doc = _summary(shell.runs()[-1])
    assert doc["val_weights"] == "ema" and doc["data"]["pipeline"] == "memory"
    assert "random_erasing(p=0.25)" in doc["data"]["augment_ops"]
    assert doc["config"]["trainer"]["label_smoothing"] == 0.1
    _all_typed("test_scenario_fast")


@pytest.mark.slow
def test_scenario_multirun(shell):
    _type(shell, "python -m trainer -m optimizer.lr=0.1,0.01 compile=off,default")
    jobs = sorted(p.name for p in (shell.outputs / "multiruns").glob("*/*/*") if p.is_dir())
    assert jobs == ["0", "1", "2", "3"], jobs
    _all_typed("test_scenario_multirun")


@pytest.mark.slow
def test_scenario_cifar10_without_data(shell):
    """No CIFAR-10 in ~/data and no download: exit 2 with the message naming the fix."""
    cmd = "python -m trainer model=resnet18 data=cifar10 data.root=~/data"
    proc = _type(shell, cmd, rc=2)
    assert f"data.root={shell.home}/data does not exist" in proc.out, proc.out[-2000:]
    assert "data.download=true" in proc.out
    _all_typed("test_scenario_cifar10_without_data")


@pytest.mark.slow
def test_scenario_resume_finished(shell):
    """Resuming a finished run's last.pt says it is at epoch N of N and how to train further."""
    shell.type("python -m trainer", SMALL)
    last = shell.runs()[-1] / "checkpoints" / "last.pt"
    proc = _type(
        shell,
        "python -m trainer trainer.resume=path/to/last.pt",
        {"path/to/last.pt": str(last)},
        rc=2,  # an explicit checkpoint that has nothing left to train is refused (README)
    )
    assert re.search(r"already at epoch 1 of trainer.max_epochs=1", proc.out), proc.out[-2000:]
    assert "trainer.max_epochs" in proc.out
    _all_typed("test_scenario_resume_finished")


@pytest.mark.slow
def test_scenario_wandb_backend_without_a_key(shell):
    """No API key: the README promises an error within seconds, before anything is created."""
    cmd = (
        "python -m trainer sweep=lr_bayes hydra.sweeper.backend=wandb hydra.sweeper.agents=0 "
        "hydra.sweeper.project=my-project"
    )
    env = {"WANDB_API_KEY": "", "WANDB_BASE_URL": "http://127.0.0.1:9", "WANDB_MODE": ""}
    engines = (
        "python -m trainer sweep=tpe_optuna hydra.sweeper.backend=wandb "
        "hydra.sweeper.project=my-project"
    )
    for line in (cmd, engines):
        proc = _type(shell, line, rc=2, env=env)  # a pre-launch error, as a bad value
        assert "needs a W&B API key" in proc.out and "wandb login" in proc.out
        assert not (shell.outputs / "sweeps").exists() or not any(
            (shell.outputs / "sweeps").iterdir()
        )
    _all_typed("test_scenario_wandb_backend_without_a_key")


@pytest.mark.slow
def test_scenario_engines(shell):
    """Optuna through W&B's scheduler optimizer: a one-run define-by-run sweep (its optimizer
    group chosen per run); the TPE, two-objective and engine-wandb definitions checked and
    written (their study factories called)."""
    proc = _type(shell, "python -m trainer sweep=tpe_optuna")  # its study factory checked
    source = (ROOT / "conf" / "sweep" / "optuna_studies.py").resolve()
    assert f"source: {source}" in _sweep_yaml(proc).read_text()
    proc = _type(shell, "python -m trainer sweep=conditional_optuna")
    sweep_id = re.search(r"sweep (\S+): join from another terminal", proc.out).group(1)
    doc = json.loads((shell.outputs / "sweeps" / sweep_id / "results.json").read_text())
    assert doc["engine"].startswith("W&B scheduler optimizer, engine optuna"), doc["engine"]
    assert [r["state"] for r in doc["runs"]] == ["finished"]
    assert doc["runs"][0]["params"]["optimizer"] in ("sgd", "adamw")
    proc = _type(shell, "python -m trainer sweep=pareto_optuna")
    assert "metrics:" in _sweep_yaml(proc).read_text()
    proc = _type(shell, "python -m trainer sweep=bayes_wandb hydra.sweeper.dry_run=true")
    assert "engine: wandb" in _sweep_yaml(proc).read_text()
    _all_typed("test_scenario_engines")


def _sweep_yaml(proc) -> Path:
    match = re.search(r"(\S+sweep\.yaml)", proc.out)
    assert match, proc.out[-2000:]
    return Path(match.group(1))


@pytest.mark.slow
def test_scenario_sweeps(shell):
    """Dry runs print and write sweep.yaml; a one-trial bayes sweep, then its id and files."""
    proc = _type(shell, "python -m trainer sweep=lr_random hydra.sweeper.dry_run=true")
    assert "method: random" in _sweep_yaml(proc).read_text()
    repeats = (
        "python -m trainer sweep=compile_grid hydra.sweeper.repeats=3 hydra.sweeper.dry_run=true"
    )
    assert "# runs: 4 configurations x 3 seeds = 12 runs" in _type(shell, repeats).out
    grid = (
        "python -m trainer -m hydra/sweeper=wandb hydra.sweeper.method=grid "
        "hydra.sweeper.metric.name=val/acc hydra.sweeper.metric.goal=maximize "
        "'optimizer.lr=0.01,0.1' 'model=small_cnn,resnet18' compile=off"
    )
    assert "method: grid" in _sweep_yaml(_type(shell, grid)).read_text()
    space = (
        "python -m trainer -m hydra/sweeper=wandb hydra.sweeper.dry_run=true "
        "'hydra.sweeper.parameters={optimizer.lr: {distribution: log_uniform_values, min: 0.001, "
        "max: 0.5}}'"
    )
    assert "distribution: log_uniform_values" in _sweep_yaml(_type(shell, space)).read_text()
    _type(shell, "python -m trainer sweep=lr_bayes hydra.sweep.dir=sweeps/lr")
    assert (shell.cwd / "sweeps" / "lr" / "sweep.yaml").is_file()
    proc = _type(shell, "python -m trainer sweep=lr_bayes")
    sweep_id = re.search(r"sweep (\S+): join from another terminal", proc.out).group(1)
    sweep_dir = (shell.outputs / "sweeps" / sweep_id).resolve()
    fill = {"SWEEP_ID": sweep_id}
    _type(shell, "python -m trainer.agent SWEEP_ID --count 3", fill)
    _type(shell, "python -m trainer.agent path/to/sweep/dir", {"path/to/sweep/dir": str(sweep_dir)})
    assert sweep_id in _type(shell, "python -m trainer.sweep ls").out
    _type(shell, "python -m trainer.sweep show SWEEP_ID", fill)
    assert (sweep_dir / "sweep.png").is_file()
    assert "best:" in _type(shell, "python -m trainer.sweep watch SWEEP_ID", fill).out
    proc = _type(shell, "head -1 outputs/sweeps/SWEEP_ID/best.yaml", fill)
    assert "python -m trainer" in proc.out and "optimizer.lr=" in proc.out
    _all_typed("test_scenario_sweeps")


@pytest.mark.slow
def test_scenario_own_config(shell):
    """A sweep in the user's own config dir, from the checkout and from any directory."""
    _type(
        shell, "mkdir -p ~/my_conf/sweep && cp conf/sweep/lr_random.yaml ~/my_conf/sweep/mine.yaml"
    )
    proc = _type(shell, "python -m trainer --config-dir ~/my_conf sweep=mine")
    assert f"--config-dir={shell.home}/my_conf" in _sweep_yaml(proc).read_text()
    anywhere = shell.tmp / "anywhere"
    anywhere.mkdir()
    cmd = "cd /anywhere && python -m trainer --config-dir ~/my_conf sweep=mine"
    proc = _type(shell, cmd, {"/anywhere": str(anywhere)})
    assert "method: random" in _sweep_yaml(proc).read_text()
    repeats = (
        "python -m trainer sweep=compile_grid hydra.sweeper.repeats=3 hydra.sweeper.dry_run=true"
    )
    assert "# runs: 4 configurations x 3 seeds = 12 runs" in _type(shell, repeats).out
    _all_typed("test_scenario_own_config")


@pytest.mark.slow
def test_scenario_compile_cache(shell, tmp_path):
    """ls, export by model and import by hand, on a cache that records two workloads, and ls of
    a sweep's bundle."""
    import tarfile

    from tests.cache.test_cache import _recorded_cache

    cache = {"TRAINER_CACHE_DIR": str(_recorded_cache(tmp_path))}
    proc = _type(shell, "python -m trainer.cache ls", env=cache)
    assert "(this machine)" in proc.out and "resnet18" in proc.out and "small_cnn" in proc.out
    _type(shell, "python -m trainer.cache export cache.tar.gz --model resnet18", env=cache)
    fresh = {"TRAINER_CACHE_DIR": str(tmp_path / "fresh")}
    proc = _type(shell, "python -m trainer.cache import cache.tar.gz", env=fresh)
    assert "imported 1 file(s)" in proc.out and (tmp_path / "fresh" / "triton").is_dir()
    sweep = shell.outputs / "sweeps" / "abc"
    sweep.mkdir(parents=True)
    (sweep / "sweep.db").touch()
    with tarfile.open(shell.cwd / "cache.tar.gz") as archive:
        archive.extractall(sweep / "compile_cache", filter="data")
    proc = _type(shell, "python -m trainer.cache ls outputs/sweeps/SWEEP_ID", {"SWEEP_ID": "abc"})
    assert "resnet18" in proc.out and "small_cnn" not in proc.out
    _all_typed("test_scenario_compile_cache")


# ---- the compile table: each row's claim, on tiny models with eager backends ----------------


def _compile_rows() -> dict[str, str]:
    """`compile.*` key -> the row's text, from the compile table of docs/compile.md."""
    rows = {}
    for line in (DOCS / "compile.md").read_text().splitlines():
        for key in re.findall(r"^\| `(compile\.[a-z_]+)`", line):
            rows[key] = line
    return rows


def _tiny():
    from torch import nn

    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))


class _Breaks(__import__("torch").nn.Module):
    def __init__(self):
        super().__init__()
        from torch import nn

        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 3)

    def forward(self, x):
        import torch

        x = self.a(x)
        torch._dynamo.graph_break()
        return self.b(x)


def _refused(override: str, *names: str, also: tuple[str, ...] = ()) -> None:
    from tests.conftest import make_cfg
    from trainer.config.schema import ConfigError
    from trainer.preflight import validate

    with pytest.raises(ConfigError) as err:
        validate(make_cfg(*also, override))
    for name in names:
        assert name in str(err.value), str(err.value)


@pytest.fixture
def dynamo():
    from trainer import compiling

    compiling.reset()
    yield compiling
    compiling.reset()


def _cc(**kw):
    from trainer.config.schema import CompileConfig

    return CompileConfig(**{"backend": "eager", **kw})


def _row_disable(c, tmp_path, capsys):
    assert not c.is_compiled(c.apply_compile(_tiny(), compile_config=_cc(disable=True)))
    from tests.conftest import make_cfg
    from trainer.preflight import validate

    assert validate(make_cfg("compile=off")).compile.disable


def _row_mode(c, tmp_path, capsys):
    for mode in (
        "default",
        "reduce-overhead",
        "max-autotune",
        "max-autotune-no-cudagraphs",
        "lite",
    ):
        c.check_config(_cc(mode=mode, backend="inductor"))
    _refused("compile.mode=turbo", "compile.mode='turbo'", "max-autotune")


def _row_backend(c, tmp_path, capsys):
    model = c.apply_compile(_tiny(), compile_config=_cc(backend="aot_eager"))
    model(__import__("torch").randn(2, 4)).sum().backward()
    assert c.compile_stats()["graphs"] == 1
    _refused("compile.backend=indcutor", "compile.backend='indcutor'", "aot_eager")


def _row_backend_module(c, tmp_path, capsys):
    (tmp_path / "readme_backend_mod.py").write_text(
        "import torch._dynamo\ncalls = []\n"
        "@torch._dynamo.register_backend(name='readme_backend')\n"
        "def readme_backend(gm, example_inputs):\n    calls.append(gm)\n    return gm.forward\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        cfg = _cc(backend="readme_backend", backend_module="readme_backend_mod")
        c.check_config(cfg)
        c.apply_compile(_tiny(), compile_config=cfg)(__import__("torch").randn(2, 4))
        assert len(sys.modules["readme_backend_mod"].calls) == 1
    finally:
        sys.path.remove(str(tmp_path))
    _refused("compile.backend_module=no_such_mod", "compile.backend_module=no_such_mod")


def _row_dynamic(c, tmp_path, capsys):
    import torch

    model = c.apply_compile(_tiny(), compile_config=_cc(dynamic=True))
    for batch in (2, 3, 5):
        model(torch.randn(batch, 4))
    assert c.compile_stats()["recompiles"] == 0
    _refused("compile.dynamic=sometimes", "compile.dynamic")


def _row_fullgraph(c, tmp_path, capsys):
    import torch

    from trainer.config.schema import ConfigError

    with pytest.raises(ConfigError, match=r"graph break.*test_readme\.py:\d+"):
        c.apply_compile(_Breaks(), compile_config=_cc(fullgraph=True), example=torch.randn(2, 4))


def _row_options(c, tmp_path, capsys):
    from tests.conftest import make_cfg
    from trainer.preflight import validate

    validate(make_cfg("compile.options={epilogue_fusion: true}"))
    _refused(
        "compile.options={epilogue_fusion: true}",
        "compile.options",
        also=("compile.mode=max-autotune",),
    )
    _refused("compile.options={epilogue_fusoin: true}", "did you mean epilogue_fusion")


def _row_target(c, tmp_path, capsys):
    import torch
    import torchvision

    from trainer.train.models import SmallCNN

    assert c.is_compiled(
        c.apply_compile(SmallCNN(1, 10, width=4), compile_config=_cc(target="blocks"))
    )
    model = torchvision.models.resnet18(num_classes=3)
    blocks = c.repeated_blocks(model)
    assert blocks and all(type(b).__name__ == "BasicBlock" for b in blocks)
    c.apply_compile(model, compile_config=_cc(target="blocks"))
    for _ in range(2):
        model(torch.randn(2, 3, 16, 16)).sum().backward()
    assert c.compile_stats()["recompiles"] == 0, c.compile_stats()["recompile_reasons"]


def _row_optimizer(c, tmp_path, capsys):
    from tests.conftest import make_cfg
    from trainer.run import run

    overrides = ["logger=none", "trainer.max_epochs=2", "trainer.max_steps=6"]
    cfg = make_cfg(
        *overrides, "compile.backend=aot_eager", "compile.optimizer=true", "scheduler=cosine"
    )
    run(cfg, run_dir=tmp_path / "run")
    comp = _summary(tmp_path / "run")["compile"]
    assert comp["recompiles"] == 0 and comp["graph_breaks"] == 0, comp


def _row_explain(c, tmp_path, capsys):
    import torch

    c.apply_compile(_Breaks(), compile_config=_cc(explain=True), example=torch.randn(2, 4))
    out = capsys.readouterr().out
    assert "Graph Count: 2" in out and "Graph Break Count: 1" in out


def _row_fail_on_recompile_limit(c, tmp_path, capsys):
    import torch
    import torch._dynamo

    with torch._dynamo.config.patch(recompile_limit=2):
        model = c.apply_compile(
            _tiny(), compile_config=_cc(dynamic=False, fail_on_recompile_limit=True)
        )
        with pytest.raises(c.CompileError, match="recompile limit"):
            try:
                for batch in range(1, 5):
                    model(torch.randn(batch, 4))
            except Exception as err:
                c.raise_if_limit_error(err)
                raise


def _row_cache_dir(c, tmp_path, capsys):
    import os

    c.configure_cache(_cc(cache_dir=str(tmp_path / "cache")))
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"].startswith(str(tmp_path / "cache"))


def _row_trace(c, tmp_path, capsys):
    from tests.conftest import make_cfg
    from trainer.run import run

    small = ("logger=none", "trainer.max_epochs=1", "trainer.max_steps=2")
    run(make_cfg(*small, "compile.backend=aot_eager", "compile.trace=true"), run_dir=tmp_path)
    paths = _summary(tmp_path)["paths"]
    assert list((tmp_path / "compile_trace").glob("*.log")), "torch's trace files"
    assert paths["compile_trace"] == str(tmp_path / "compile_trace")
    assert paths["compile_report"] == str(tmp_path / "compile_trace" / "report" / "index.html")
    assert Path(paths["compile_report"]).is_file()  # tlparse comes with the dev extra
    assert paths["compile_report"] in capsys.readouterr().out
    run(make_cfg(*small, "compile.backend=aot_eager"), run_dir=tmp_path / "after")
    assert not (tmp_path / "after" / "compile_trace").exists()  # the trace ended with its run


def _row_warm_only(c, tmp_path, capsys):
    from tests.conftest import make_cfg
    from trainer.run import run

    small = ("logger=none", "trainer.max_epochs=1", "compile.backend=aot_eager")
    assert run(make_cfg(*small, "compile.warm_only=true"), run_dir=tmp_path)["best"] is None
    doc = _summary(tmp_path)
    assert doc["status"] == "prewarmed" and doc["steps"] == 1 and doc["compile"]["graphs"] == 2
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "metrics.jsonl").exists()
    _refused("compile.warm_only=true", "compile.warm_only", also=("compile=off",))


def _row_auto(c, tmp_path, capsys):
    from tests.conftest import make_cfg
    from trainer.preflight import validate

    conf = validate(make_cfg("compile=auto"))
    assert conf.compile.auto and conf.compile.auto_steps == 5


COMPILE_ROWS = {
    "compile.disable": _row_disable,
    "compile.mode": _row_mode,
    "compile.backend": _row_backend,
    "compile.backend_module": _row_backend_module,
    "compile.dynamic": _row_dynamic,
    "compile.fullgraph": _row_fullgraph,
    "compile.options": _row_options,
    "compile.target": _row_target,
    "compile.optimizer": _row_optimizer,
    "compile.explain": _row_explain,
    "compile.fail_on_recompile_limit": _row_fail_on_recompile_limit,
    "compile.cache_dir": _row_cache_dir,
    "compile.trace": _row_trace,
    "compile.warm_only": _row_warm_only,
    "compile.auto": _row_auto,
}


def test_every_compile_row_has_a_check():
    assert set(_compile_rows()) == set(COMPILE_ROWS)


@pytest.mark.parametrize("check", list(COMPILE_ROWS.values()), ids=list(COMPILE_ROWS))
def test_compile_row(check, dynamo, tmp_path, capsys):
    check(dynamo, tmp_path, capsys)


# ---- links, anchors, source paths and the front door ---------------------------------------


def test_every_link_and_anchor_resolves():
    broken = []
    for page in pages():
        for number, target in links(page):
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            where = f"{page.relative_to(ROOT)}:{number}: {target}"
            if not dest.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
                broken.append(f"{where} (no such heading)")
    assert broken == []


def _project_paths() -> list[str]:
    found = []
    for top in ("src", "tests", "benchmarks", "conf"):
        found += [p.relative_to(ROOT).as_posix() for p in (ROOT / top).rglob("*")]
    return [p for p in found if "__pycache__" not in p]


def _module_exists(dotted: str) -> bool:
    for base in (ROOT / "src", ROOT):
        path = base.joinpath(*dotted.split("."))
        if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file():
            return True
    return False


def _names_a_module(dotted: str) -> bool:
    """`trainer.sweep.search` (a module) or `trainer.preflight.validate` (one name it defines);
    `trainer.max_epochs` is a key of the `trainer` config group, not a module, and passes."""
    from dataclasses import fields

    from trainer.config.schema import TrainerConfig

    parts = dotted.split(".")
    if len(parts) == 2 and parts[1] in {f.name for f in fields(TrainerConfig)}:
        return True
    for cut in range(len(parts), 0, -1):
        if _module_exists(".".join(parts[:cut])):
            rest = parts[cut:]
            break
    else:
        return False
    if not rest:
        return True
    if len(rest) > 1:
        return False
    base = ROOT / "src" if (ROOT / "src" / parts[0]).is_dir() else ROOT
    module = base.joinpath(*parts[:cut])
    source = module / "__init__.py" if module.is_dir() else module.with_suffix(".py")
    return (
        re.search(rf"^(def|class) {rest[0]}\b|^{rest[0]}\b.*=", source.read_text(), re.M)
        is not None
    )


def test_every_file_folder_and_module_a_page_names_exists():
    """After the source tree moves, no page names a module path that is gone: `sweep/definition/`,
    `translate.py`, `src/trainer/config/schema.py`, `trainer.sweep.search.wandb_sweeps`."""
    paths = _project_paths()
    wrong = []
    for page in pages():
        for number, name in source_paths(page):
            if "/" in name or name.endswith(".py"):
                bare = name.rstrip("/")
                ok = (ROOT / bare).exists() or any(p.endswith("/" + bare) for p in paths)
            else:
                ok = _names_a_module(name)
            if not ok:
                wrong.append(f"{page.relative_to(ROOT)}:{number}: {name}")
    assert wrong == []


def test_the_readme_is_a_front_door_to_every_page():
    readme = ROOT / "README.md"
    assert len(readme.read_text().splitlines()) <= 250
    linked = {(ROOT / target.partition("#")[0]).resolve() for _, target in links(readme)}
    assert {p.resolve() for p in DOCS.glob("*.md")} <= linked


def test_the_readme_names_the_test_commands():
    text = (ROOT / "README.md").read_text()
    assert (
        "`python -m pytest` runs the fast set (at most 5 minutes on 2 CPU cores; tests marked"
        in text
    )
    assert (
        "`python -m pytest --slow` runs everything, as CI does (`.ci/run`, on Python 3.11)" in text
    )


def test_a_group_file_of_ones_own_inherits_the_schema(tmp_path):
    """The README's own model file (`- /model_schema@_here_`) composes with the project's
    defaults, and no group offers the schema as an option."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from trainer.preflight import validate

    text = (ROOT / "README.md").read_text()
    block = re.search(r"```yaml\n(defaults:\n  - /model_schema@_here_\n.*?)```", text, re.S)
    assert block, "the README's example of a group file of one's own"
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "mine.yaml").write_text(block.group(1))
    with initialize_config_dir(config_dir=str(ROOT / "conf"), **VERSION_BASE):
        cfg = compose(
            config_name="train",
            overrides=[f"hydra.searchpath=[file://{tmp_path}]", "model=mine"],
            return_hydra_config=True,
        )
        options = GlobalHydra.instance().config_loader().get_group_options("model")
    assert cfg.model.name == "efficientnet_b0" and cfg.model.width == 32  # the schema's default
    assert validate(cfg).model.image_size == 32
    assert "schema" not in options and "model_schema" not in options
