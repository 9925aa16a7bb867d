"""Population-based training's policy: who copies a leader, how values are explored, how the
agent answers its members' reports; the engine's members and the checks before launch. A
member's files (reports, decisions, lineage) are tested in tests/trial/test_pbt_files.py."""

from __future__ import annotations

import random

import pytest
import yaml

from tests.trial.test_pbt_files import LR, report, settings
from trainer.sweep.definition import pbt_checks
from trainer.sweep.definition.problems import schema_problems
from trainer.sweep.definition.translate import build_sweep_config, run_count
from trainer.sweep.search import pbt_policy as policy
from trainer.sweep.search.pbt_engine import next_member
from trainer.sweep.store.database import RunRecord
from trainer.sweep.store.directory import write_sweep_yaml
from trainer.trial import pbt_files


def test_the_bottom_quantile_copies_a_leader_and_explores_its_values(tmp_path):
    for member, score in [("a", 0.9), ("b", 0.8), ("c", 0.7)]:
        report(tmp_path, member, score, lr=0.1)
    last = report(tmp_path, "d", 0.2, lr=0.001)
    step = policy.decide(settings(tmp_path, "d"), last)
    assert step.copied_from == "a" and step.leader_score == 0.9  # 4 members: top 1 of 4
    assert step.epoch == 2 and step.score == 0.2
    lr = step.params["optimizer.lr"]
    assert LR["min"] <= lr <= LR["max"] and lr != 0.001
    # the same member, epoch and seed decide alike (a resumed member redoes the same step)
    assert policy.decide(settings(tmp_path, "d"), last) == step


def test_a_member_outside_the_bottom_keeps_its_checkpoint(tmp_path):
    for member, score in [("a", 0.9), ("b", 0.8), ("c", 0.7), ("d", 0.2)]:
        report(tmp_path, member, score)
    step = policy.decide(settings(tmp_path, "b"), report(tmp_path, "b", 0.8))
    assert step.copied_from is None and step.params == {"optimizer.lr": 0.1}


def test_the_first_member_at_a_boundary_has_nobody_to_copy(tmp_path):
    alone = report(tmp_path, "a", 0.1)
    assert policy.decide(settings(tmp_path, "a"), alone).copied_from is None


def test_a_minimizing_metric_ranks_the_lowest_first(tmp_path):
    s = pbt_files.Settings(
        str(tmp_path), {"optimizer.lr": LR}, "val/loss", False, member="b", **policy.DEFAULTS
    )
    report(tmp_path, "a", 0.3)
    step = policy.decide(s, report(tmp_path, "b", 0.9))
    assert step.copied_from == "a"


@pytest.mark.parametrize(("n", "size"), [(1, 0), (2, 1), (4, 1), (5, 2), (8, 2)])
def test_quantile_sizes_follow_ray_tunes_rule(tmp_path, n, size):
    assert policy.quantile_size(settings(tmp_path), n) == size


def test_explore_multiplies_within_bounds_or_moves_to_a_neighbour():
    rng = random.Random(0)
    for _ in range(200):
        value = policy.perturb(LR, 0.45, rng, 0.0)
        assert value in (pytest.approx(0.36), 0.5)  # x0.8, or x1.2 capped at max
    values = {"values": [0.0, 0.05, 0.1]}
    assert {policy.perturb(values, 0.05, rng, 0.0) for _ in range(50)} == {0.0, 0.1}
    assert policy.perturb({"value": 3}, 3, rng, 1.0) == 3
    ints = {"distribution": "int_uniform", "min": 1, "max": 10}
    assert all(isinstance(policy.perturb(ints, 5, rng, 0.0), int) for _ in range(20))


def test_the_agent_answers_each_report_once_and_the_member_takes_the_answer(tmp_path):
    """A member publishes and waits; its agent's poll answers (and keeps answering only what is
    new); the answer survives the member's death, so a resumed member takes the same one."""
    for member, score in [("a", 0.9), ("b", 0.8), ("c", 0.7)]:
        report(tmp_path, member, score)
    last = report(tmp_path, "d", 0.1)
    s = settings(tmp_path, "d")
    [step] = policy.answer_reports(s, "d")
    assert step == policy.decide(s, last) and step.copied_from in ("a", "b", "c")
    assert policy.answer_reports(s, "d") == []  # answered once
    assert pbt_files.await_decision(s, last, wait_s=1.0) == step
    assert pbt_files.await_decision(s, last, wait_s=1.0) == step  # read again after a resume


def pbt_config(**pbt):
    sweeper = {
        "method": "pbt",
        "metric": {"name": "val/acc", "goal": "maximize"},
        "parameters": {"optimizer.lr": LR},
        "pbt": {"population": 3, "interval": 1, **pbt},
    }
    return build_sweep_config(sweeper, [])


def test_the_engine_hands_out_the_population_with_seeded_starting_values():
    config = pbt_config()
    runs = []
    for i in range(3):
        params, info = next_member(config, runs)
        assert info == {"pbt_member": i} and LR["min"] <= params["optimizer.lr"] <= LR["max"]
        runs.append(RunRecord(id=f"r{i}", seq=i, state="running", params=params))
    assert next_member(config, runs) is None
    assert next_member(config, runs[:1]) == next_member(config, runs[:1])  # seeded
    assert run_count(config) == 3


def test_sweep_yaml_stays_valid_by_wandbs_schema(tmp_path):
    config = pbt_config()
    assert config["method"] == "random" and config["run_cap"] == 3
    assert schema_problems(config) == []
    write_sweep_yaml(config, tmp_path / "sweep.yaml")
    text = (tmp_path / "sweep.yaml").read_text()
    written = yaml.safe_load(text)
    assert "pbt" not in written and schema_problems(written) == []
    assert text.startswith('# pbt: {"interval": 1, "population": 3')


def test_checks_name_each_key_that_cannot_change_in_place():
    config = pbt_config(population=1, quantile=0.9)
    config["parameters"]["model.width"] = {"values": [8, 16]}
    config["parameters"]["optimizer.momentum"] = {"distribution": "uniform", "min": 0.5, "max": 1}
    config["parameters"]["trainer.seed"] = {"value": 3}  # one value for every member: fine
    found = pbt_checks.problems(config, "wandb", 4, 1, compiled_update=True)
    text = "\n".join(found)
    assert "hydra.sweeper.parameters.model.width cannot be a PBT parameter" in text
    assert "optimizer.momentum cannot be a PBT parameter with compile.optimizer=true" in text
    assert "hydra.sweeper.pbt.population=1" in text and "hydra.sweeper.pbt.quantile=0.9" in text
    assert "backend=local only" in text and "trainer.seed" not in text
    assert len(found) == 5
    assert pbt_checks.problems(pbt_config(), "local", 4, 1) == []
    assert (
        "interval=4 leaves no decision"
        in pbt_checks.problems(pbt_config(interval=4), "local", 4, 1)[0]
    )
    other = build_sweep_config(
        {"method": "random", "parameters": {"model.width": {"values": [1]}}}, []
    )
    assert pbt_checks.problems(other, "wandb", 1, 4) == []


def test_pbt_members_of_every_machine_report_to_the_first_agents_folder(tmp_path, capsys):
    from trainer.sweep.agents.local_agent import _pbt_settings
    from trainer.sweep.store.directory import SweepLayout

    config = {"metric": {"name": "val/acc", "goal": "maximize"}, "pbt": {"population": 2}}
    config["parameters"] = {"optimizer.lr": {"values": [0.1, 0.01]}}
    from trainer.sweep.store.database import SweepStore

    store = SweepStore(tmp_path / "a" / "s" / "sweep.db")
    here, there = SweepLayout(tmp_path / "a" / "s"), SweepLayout(tmp_path / "b" / "s")
    folder = lambda settings: settings.folder  # noqa: E731
    assert folder(_pbt_settings(store, config, here)) == str(here.pbt)
    assert folder(_pbt_settings(store, config, there)) == str(here.pbt)  # shared: one population
    assert capsys.readouterr().out == ""
    store.set("pbt_folder", "/nowhere/on/this/machine/pbt")
    assert folder(_pbt_settings(store, config, there)) == str(there.pbt)
    assert "is not on this machine" in capsys.readouterr().out
