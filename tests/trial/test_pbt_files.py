"""A PBT member's files: its settings in one environment, its reports, its agent's decision, the
lineage it keeps, and the checkpoints pruned once every member has passed a boundary."""

from __future__ import annotations

from trainer.trial import pbt_files

LR = {"distribution": "log_uniform_values", "min": 0.001, "max": 0.5}
POPULATION = {"population": 4, "interval": 1, "quantile": 0.25, "resample_probability": 0.25, "seed": 0}  # fmt: skip


def settings(tmp_path, member="a", **kw):
    return pbt_files.Settings(
        folder=str(tmp_path), parameters={"optimizer.lr": LR}, metric="val/acc",
        maximize=True, member=member, **{**POPULATION, **kw},
    )  # fmt: skip


def report(tmp_path, member, score, epoch=2, lr=0.1):
    ckpt = tmp_path / member / f"epoch-{epoch:04d}.pt"
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    ckpt.write_bytes(b"x")
    rep = pbt_files.Report(member, epoch, score, {"optimizer.lr": lr}, str(ckpt))
    pbt_files.publish(settings(tmp_path, member), rep)
    return rep


def test_settings_travel_in_one_environment_for_every_member(tmp_path):
    env = settings(tmp_path, member="").to_env()
    back = pbt_files.Settings.from_env({**env, "WANDB_RUN_ID": "r1"})
    assert back.member == "r1" and back.parameters == {"optimizer.lr": LR}
    assert pbt_files.Settings.from_env({}) is None
    assert back.is_boundary(1, 4) and not back.is_boundary(4, 4) and not back.is_boundary(0, 4)


def test_lineage_keeps_one_step_per_epoch(tmp_path):
    lineage = pbt_files.Lineage()
    lineage.add(pbt_files.Step(0, {"optimizer.lr": 0.1}))
    lineage.add(pbt_files.Step(2, {"optimizer.lr": 0.2}, "b"))
    lineage.add(pbt_files.Step(2, {"optimizer.lr": 0.3}, "c"))  # decided again after a resume
    lineage.write(tmp_path, "a")
    again = pbt_files.Lineage.read(tmp_path, "a")
    assert [s.epoch for s in again.steps] == [0, 2] and again.at(3).copied_from == "c"
    assert again.at(1).params == {"optimizer.lr": 0.1}
    assert pbt_files.lineage_of(tmp_path, "nobody") == []
    assert pbt_files.lineage_of(None, "a") == []  # no member has started: no folder yet
    assert [s["copied_from"] for s in pbt_files.lineage_of(tmp_path, "a")] == [None, "c"]


def test_a_report_waits_for_its_answer_and_the_answer_is_read_again_after_a_resume(tmp_path):
    own = report(tmp_path, "a", 0.5)
    s = settings(tmp_path, "a")
    assert pbt_files.undecided(s, "a") == [own]
    step = pbt_files.Step(own.epoch, {"optimizer.lr": 0.2}, "b", own.score, 0.9)
    pbt_files.answer(s, "a", step)
    assert pbt_files.undecided(s, "a") == []
    assert pbt_files.await_decision(s, own, wait_s=1.0) == step
    assert pbt_files.await_decision(s, own, wait_s=1.0) == step


def test_a_member_whose_agent_does_not_answer_keeps_its_own_values(tmp_path):
    own = report(tmp_path, "a", 0.5)
    step = pbt_files.await_decision(settings(tmp_path, "a"), own, wait_s=0.1)
    assert step.copied_from is None and step.params == own.params and step.epoch == own.epoch


def test_checkpoints_go_once_every_member_has_passed_their_boundary(tmp_path):
    s = settings(tmp_path, population=2)
    for member in ("a", "b"):
        report(tmp_path, member, 0.5, epoch=1)
    report(tmp_path, "a", 0.6, epoch=2)
    assert pbt_files.prune(s, 2) == []  # b has not reached epoch 2: it may still copy from 1
    report(tmp_path, "b", 0.7, epoch=2)
    removed = pbt_files.prune(s, 2)
    assert sorted(p.parent.name for p in removed) == ["a", "b"]
    assert {p.name for p in tmp_path.glob("*/*.pt")} == {"epoch-0002.pt"}
    assert [r.member for r in pbt_files.reports_at(s, 2)] == ["a", "b"]
