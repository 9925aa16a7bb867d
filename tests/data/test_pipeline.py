"""The input pipeline: device-resident and streamed batches agree, `data.pipeline=auto` and
`data.num_workers=auto` decide as documented, augmentation is seeded, resumable, alike at any
world size and never touches evaluation; the speed settings' rules."""

from __future__ import annotations

import pytest
import torch
import torchvision
from torch import nn

from benchmarks.idx_files import write_mnist_format
from tests.conftest import make_cfg
from trainer.config.schema import ConfigError, DataConfig, OptimizerConfig
from trainer.data import augment
from trainer.data.plan import Placement, build_data, plan_data
from trainer.preflight import validate
from trainer.train import speed
from trainer.train.ema import WeightAverage
from trainer.train.models import SmallCNN
from trainer.train.optim import build_optimizer, keep_kernel, kernel_name

CPU = torch.device("cpu")


def _bundle(cfg: DataConfig, *, size=32, rank=0, world=1, epoch=1):
    data = build_data(
        cfg, channels=3, size=size, seed=0, placement=Placement(rank=rank, world_size=world)
    )
    data.set_epoch(epoch)
    return data


def _same(a, b) -> bool:
    return len(a) == len(b) and all(
        torch.equal(x1, x2) and torch.equal(y1, y2) for (x1, y1), (x2, y2) in zip(a, b, strict=True)
    )


@pytest.fixture(scope="module")
def idx_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("idx")
    for name in ("mnist", "fashion_mnist"):
        write_mnist_format(root, name, train=320, test=70)
    return root


@pytest.mark.parametrize("name, aug", [("mnist", "none"), ("fashion_mnist", "standard")])
def test_resident_and_streamed_batches_are_the_same(idx_root, name, aug):
    """MNIST-format files (torchvision's raw layout): decoded once into memory or per sample
    by a DataLoader, resized to 32 and made RGB, the batches agree exactly."""
    cfg = {"name": name, "root": str(idx_root), "augment": aug, "num_workers": 0}
    memory = _bundle(DataConfig(**cfg, pipeline="memory"))
    stream = _bundle(DataConfig(**cfg, pipeline="stream"))
    assert memory.info["pipeline"] == "memory" and stream.info["pipeline"] == "stream"
    assert memory.sample_shape == (3, 32, 32) and memory.info["stored_shape"] == [1, 32, 32]
    assert _same(list(memory.train), list(stream.train)) and len(memory.train) == 320 // 64
    assert _same(list(memory.val), list(stream.val)) and memory.val.num_samples == 70


def test_auto_pipeline_follows_the_memory_limit_and_workers_the_cpu_share(idx_root, monkeypatch):
    monkeypatch.setenv("TRAINER_CPU_BUDGET", "4")
    small = plan_data(DataConfig(name="mnist", root=str(idx_root)), 3, 32)
    assert small.pipeline == "memory" and small.workers == 0
    assert small.stored_mb == pytest.approx(70_000 * 32 * 32 / 2**20)  # grey stays grey
    big = plan_data(DataConfig(name="mnist", root=str(idx_root), in_memory_max_mb=10), 3, 32)
    assert big.pipeline == "stream" and big.workers == 3  # the share minus the training thread
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # two torchrun ranks share this node
    assert plan_data(DataConfig(name="cifar10", pipeline="stream"), None, None).workers == 1
    assert plan_data(DataConfig(name="digits", num_workers=9), None, None).workers == 0


def test_small_image_folders_are_decoded_once_into_memory(tmp_path):
    from PIL import Image

    for cls in ("a", "b"):
        (tmp_path / cls).mkdir()
        for i in range(5):
            Image.new("RGB", (20, 12), color=(40 * i, 0, 200 if cls == "a" else 0)).save(
                tmp_path / cls / f"{i}.png"
            )
    cfg = {"name": "imagefolder", "root": str(tmp_path), "batch_size": 4, "num_workers": 0}
    memory = _bundle(DataConfig(**cfg, augment="standard"), size=16)
    stream = _bundle(DataConfig(**cfg, augment="standard", pipeline="stream"), size=16)
    assert memory.info["pipeline"] == "memory" and memory.info["stored_mb"] < 0.01
    assert memory.info["augment_ops"] == ["random_resized_crop(0.08-1)", "hflip"]
    assert _same(list(memory.train), list(stream.train))


def test_augmentation_is_seeded_and_resumes_from_its_checkpointed_state(tmp_path):
    cfg = DataConfig(name="fake", augment="strong", num_samples=256, image_shape=[3, 16, 16])
    whole = list(_bundle(cfg).train)
    assert not _same(whole, list(_bundle(DataConfig(**{**vars(cfg), "augment": "none"})).train))
    again = _bundle(cfg)
    batches = again.train.iterate(0)
    first = [next(batches), next(batches)]
    torch.save(again.train.transform.augment.state_dict(), tmp_path / "rng.pt")
    resumed = _bundle(cfg)
    resumed.train.transform.augment.load_state_dict(torch.load(tmp_path / "rng.pt"))
    assert _same(first + list(resumed.train.iterate(2)), whole)  # skipped, not re-drawn


def test_a_sample_is_augmented_alike_at_any_world_size():
    cfg = DataConfig(name="fake", augment="standard", num_samples=128, image_shape=[3, 8, 8])
    one = list(_bundle(cfg, size=8).train)
    ranks = [list(_bundle(cfg, size=8, rank=r, world=2).train) for r in range(2)]
    for k, (x, y) in enumerate(one):  # rank r holds global positions r, r + 2, ...
        for r in range(2):
            assert torch.equal(ranks[r][k][0], x[r::2]) and torch.equal(ranks[r][k][1], y[r::2])


def test_evaluation_and_compile_probes_are_never_augmented():
    base = {"name": "fake", "num_samples": 128, "image_shape": [3, 8, 8]}
    plain, strong = (
        _bundle(DataConfig(**base), size=8),
        _bundle(DataConfig(**base, augment="strong"), size=8),
    )
    assert _same(list(strong.val), list(plain.val))
    before = strong.train.transform.augment.state_dict()
    assert _same(list(strong.train.plain()), list(plain.train))
    after = strong.train.transform.augment.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # no draw from its generators


def test_crop_flip_erase_and_resized_crop_per_sample():
    x = torch.arange(2 * 8 * 8, dtype=torch.float32).view(2, 1, 8, 8)
    centre = torch.full((2, 5), 0.5)  # offset = pad: the image itself
    flip = torch.tensor([False, True])
    out = augment.crop_flip(x, centre, flip)
    assert torch.equal(out[0], x[0]) and torch.equal(out[1], x[1].flip(-1))
    shifted = augment.crop_flip(x, torch.zeros(2, 5), torch.tensor([False, False]))
    assert torch.equal(shifted[0, 0, 1:, 1:], x[0, 0, :-1, :-1]) and shifted[0, 0, 0].eq(0).all()
    whole = augment.resized_crop_flip(x, torch.tensor([[1.0, 0.5, 0.5, 0.5, 0.0]] * 2), flip)
    assert torch.allclose(whole[0], x[0]) and torch.allclose(whole[1], x[1].flip(-1))
    erased = augment.erase(
        torch.ones(2, 1, 8, 8), torch.tensor([[0.0, 1, 0.5, 0.5, 0.5], [0.9, 1, 0.5, 0.5, 0.5]])
    )
    assert erased[0].eq(0).sum() > 8 and erased[1].eq(1).all()  # p=0.25: only the first draw


def test_channels_last_goes_to_convolutional_models_on_cuda_only():
    cuda = torch.device("cuda")
    resnet = torchvision.models.resnet18(num_classes=10)
    vit = torchvision.models.VisionTransformer(32, 4, 2, 2, 64, 128, num_classes=10)
    assert speed.wants_channels_last("auto", resnet, cuda)
    assert speed.wants_channels_last("auto", SmallCNN(1, 10), cuda)
    assert not speed.wants_channels_last("auto", vit, cuda)
    assert not speed.wants_channels_last("auto", resnet, CPU)
    assert speed.wants_channels_last(True, vit, CPU) and not speed.wants_channels_last(
        False, resnet, cuda
    )
    model = SmallCNN(3, 10)
    assert speed.maybe_channels_last(model, True, CPU)
    assert model.features[0].weight.is_contiguous(memory_format=torch.channels_last)


def test_tf32_and_cudnn_benchmark_only_on_cuda():
    flags = speed.apply_backend_flags(tf32=True, cudnn_benchmark=True, device=CPU)
    assert flags == {"tf32": False, "matmul_precision": "highest", "cudnn_benchmark": False}


def test_optimizer_kernels_and_their_fallback(monkeypatch):
    model = SmallCNN(1, 3, width=4)
    assert kernel_name(build_optimizer(OptimizerConfig(kernel="foreach"), model)) == "foreach"
    assert kernel_name(build_optimizer(OptimizerConfig(kernel="for-loop"), model)) == "for-loop"
    auto = build_optimizer(OptimizerConfig(name="adamw"), model, compiled_step=True)
    assert kernel_name(auto) == "foreach"  # Inductor fuses a compiled foreach step itself
    fused = build_optimizer(OptimizerConfig(), model)
    assert kernel_name(fused) == "fused"  # torch has fused SGD/AdamW kernels for the CPU too
    loop = build_optimizer(OptimizerConfig(kernel="for-loop"), model)
    keep_kernel(loop, fused.state_dict())  # a fused run's checkpoint keeps this run's choice
    assert kernel_name(loop) == "for-loop"
    real = torch.optim.SGD

    def no_fused(*args, fused=None, **kwargs):
        if fused:
            raise RuntimeError("`fused=True` requires all the params to be on a supported device")
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.optim, "SGD", no_fused)
    assert kernel_name(build_optimizer(OptimizerConfig(), model)) == "for-loop"  # CPU fallback
    with pytest.raises(ConfigError, match="optimizer.kernel=fused cannot run here"):
        build_optimizer(OptimizerConfig(kernel="fused"), model)


def test_weight_average_warms_up_swaps_in_place_and_loads_into_a_plain_model():
    model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    ema = WeightAverage(model, decay=0.99)
    start = model[0].weight.detach().clone()
    with torch.no_grad():
        model[0].weight.add_(1.0)
    model[1].num_batches_tracked.fill_(5)
    ema.update(step=1)  # decay min(0.99, 2/11): mostly the new weights
    expected = start + (1 - 2 / 11)
    assert torch.allclose(ema.state_dict()["0.weight"], expected)
    assert ema.state_dict()["1.num_batches_tracked"] == 5
    live = model[0].weight
    with ema.swapped():
        assert model[0].weight is live and torch.allclose(live, expected)
    assert torch.equal(model[0].weight, start + 1.0)
    plain = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    plain.load_state_dict(ema.state_dict(), strict=True)


@pytest.mark.parametrize(
    "override, key",
    [
        ("data.augment=heavy", "data.augment"),
        ("data.pipeline=disk", "data.pipeline"),
        ("data.num_workers=-1", "data.num_workers"),
        ("data.num_workers=many", "data.num_workers"),
        ("data.in_memory_max_mb=0", "data.in_memory_max_mb"),
        ("optimizer.kernel=fast", "optimizer.kernel"),
        ("trainer.ema=1.0", "trainer.ema"),
        ("trainer.label_smoothing=1.0", "trainer.label_smoothing"),
        ("trainer.channels_last=maybe", "trainer.channels_last"),
    ],
)
def test_bad_speed_and_recipe_values_name_their_key(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        validate(make_cfg(override))
