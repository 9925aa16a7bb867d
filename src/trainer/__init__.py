"""compiled-trainer: Hydra-configured training of torchvision models under torch.compile."""

from trainer.config import register_schemas

__version__ = "0.1.0"

register_schemas()  # conf/<group>/*.yaml build on these defaults; Hydra needs them first
