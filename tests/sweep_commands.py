"""The W&B `command` the local-backend tests give their sweeps: a cheap trial on small_cnn/digits."""

TRIAL = [
    "${env}",
    "${interpreter}",
    "-m",
    "trainer",
    "${args_no_hyphens}",
    "compile=off",
    "logger=none",
    "model=small_cnn",
    "data=digits",
]
