"""Define-by-run search spaces for the sweeps of this folder (`scheduler.search_space`): each
takes an optuna.Trial and returns Hydra keys (config groups included) to values. Each
trial.suggest_* is named after the key it returns, so a rebuilt optimizer replays stored runs."""


def optimizer_space(trial):
    """The optimizer group first, then only the keys that optimizer has."""
    optimizer = trial.suggest_categorical("optimizer", ["sgd", "adamw"])
    params = {"optimizer": optimizer}
    if optimizer == "sgd":
        params["optimizer.lr"] = trial.suggest_float("optimizer.lr", 1e-3, 0.5, log=True)
        params["optimizer.momentum"] = trial.suggest_float("optimizer.momentum", 0.5, 0.99)
    else:
        params["optimizer.lr"] = trial.suggest_float("optimizer.lr", 1e-4, 1e-2, log=True)
        params["optimizer.weight_decay"] = trial.suggest_float(
            "optimizer.weight_decay", 1e-6, 1e-2, log=True
        )
    return params
