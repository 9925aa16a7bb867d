"""A run's data: the stored formats, the plan (what is loaded where), batches and augmentation."""
