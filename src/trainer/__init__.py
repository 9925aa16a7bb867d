"""compiled-trainer: Hydra-configured training of torchvision models under torch.compile."""

__version__ = "0.1.0"
