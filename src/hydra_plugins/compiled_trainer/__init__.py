"""compiled-trainer's config schemas, registered in Hydra's ConfigStore when Hydra scans its
plugins (before any composition, as Hydra's own plugins register their configs)."""

from trainer.config.schema import register_schemas

register_schemas()
