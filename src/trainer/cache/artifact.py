"""The bundle of a W&B-server sweep: one W&B artifact per workload (`compile-cache-<workload>`,
type `compile-cache`) in the sweep's project, one version per machine key, aliased by the key
id. The trial that compiled logs it; trials on other machines with the same key download it."""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from trainer.cache.bundle import Bundle, BundleLayout
from trainer.cache.key import describe
from trainer.config.schema import LoggerConfig

log = logging.getLogger(__name__)

TYPE = "compile-cache"


def unavailable() -> tuple[type[BaseException], ...]:
    """What W&B raises when the server, the project or an artifact cannot be reached."""
    # lazy: wandb costs 0.4 s at start-up; only a W&B-server sweep's trials use artifacts
    import wandb

    return (wandb.errors.Error, ValueError, OSError)


class ArtifactBundle:
    """Compile-cache artifacts of one W&B project (`entity` None: the user's default)."""

    def __init__(self, project: str, entity: str | None = None) -> None:
        self.project, self.entity = project, entity
        self.fetched: Any = None  # the artifact put in place, declared used when the run ends
        self.files: set[str] = set()  # the files it held

    @classmethod
    def from_env(cls, logger: LoggerConfig) -> ArtifactBundle:
        """The sweep's project: what `wandb agent` exports to its trials, else logger.*."""
        project = os.environ.get("WANDB_PROJECT") or logger.project
        return cls(project, os.environ.get("WANDB_ENTITY") or logger.entity)

    @staticmethod
    def name(workload_id: str) -> str:
        return f"{TYPE}-{workload_id}"

    def path(self, workload_id: str, alias: str) -> str:
        prefix = f"{self.entity}/" if self.entity else ""
        return f"{prefix}{self.project}/{self.name(workload_id)}:{alias}"

    def describe(self) -> str:
        return f"wandb:{self.path('<workload>', '<key>').rsplit('/', 1)[0]}/{TYPE}-*"

    def fetch(self, key_id: str, workload_id: str, into: Bundle) -> tuple[int, dict | None]:
        """Put this key's version of the workload's artifact in place in `into`; returns the
        files copied, and the key of the latest version when none has this key (else None)."""
        import wandb  # lazy: wandb, as in unavailable()

        api = wandb.Api()
        ours = self.path(workload_id, key_id)
        if api.artifact_exists(ours, type=TYPE):
            artifact = api.artifact(ours, type=TYPE)
            with tempfile.TemporaryDirectory(prefix="compile-cache-") as tmp:
                artifact.download(root=tmp)
                found = Bundle(BundleLayout(tmp))
                self.fetched, self.files = artifact, set(found.files(key_id))
                return found.put_in_place(key_id, into), None
        latest = self.path(workload_id, "latest")
        if api.artifact_exists(latest, type=TYPE):
            key = (api.artifact(latest, type=TYPE).metadata or {}).get("key")
            return 0, key if isinstance(key, dict) else None
        return 0, None

    def publish(
        self,
        key_id: str,
        key: dict[str, Any],
        root: Path,
        files: list[str],
        record: dict[str, Any],
        run: Any = None,
    ) -> int:
        """Log the workload's files as a new version aliased `key_id`, unless the version put
        in place held them all; with `run` None, in a short run of its own (a prewarm). Returns
        the files the artifact did not hold."""
        import wandb  # lazy: wandb, as in unavailable()

        new = sorted(set(files) - self.files)
        own = run is None
        if own and new:
            run = wandb.init(
                project=self.project,
                entity=self.entity,
                job_type=TYPE,
                group=os.environ.get("WANDB_SWEEP_ID"),
                settings=wandb.Settings(console="off", silent=True, x_disable_stats=True),
            )
        if self.fetched is not None and run is not None and not own:
            run.use_artifact(self.fetched)  # lineage: this trial ran on another's compile
        if new:
            with tempfile.TemporaryDirectory(prefix="compile-cache-") as tmp:
                Bundle(BundleLayout(tmp)).add(key_id, key, root, files, record)
                artifact = wandb.Artifact(
                    self.name(record["workload_id"]),
                    type=TYPE,
                    description=f"{record['label']}; {describe(key)}",
                    metadata={"key": key, "key_id": key_id, "workload": record["workload"]},
                )
                artifact.add_dir(tmp)  # staged (copied) now: the folder may go
                run.log_artifact(artifact, aliases=[key_id])
            log.info("compile cache: logged %s (%d new file(s))", artifact.name, len(new))
        if own and new:
            run.finish()
        return len(new)
