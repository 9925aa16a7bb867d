"""A sweep's compile-cache bundle: the Inductor/Triton cache files its runs used, keyed by the
machines that can load them (`key`), recorded per workload (`workload`), moved between cache
dirs, sweep directories and W&B artifacts (`bundle`, `artifact`) around each run (`session`)."""
