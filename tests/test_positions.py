"""Word-order blindness and the two normalisations."""

import pytest
import torch

from attnviz import StackConfig
from attnviz.lessons.norms import compare_norms, norm_example
from attnviz.lessons.positions import order_blindness


@pytest.mark.parametrize("layers", [1, 2])
def test_dog_bites_man_is_man_bites_dog_without_positions(layers: int) -> None:
    check = order_blindness("狗咬人", "人咬狗", StackConfig(d_model=32, n_heads=4, n_layers=layers))
    assert check.tokens_a == ["狗", "咬", "人"]
    assert max(check.without_pe) < 1e-5  # each token's output is the same in both sentences
    assert max(check.with_pe) > 1e-2  # with positions, they differ


def test_order_blindness_needs_a_permutation() -> None:
    with pytest.raises(ValueError, match="same tokens"):
        order_blindness("狗咬人", "猫咬人", StackConfig(d_model=16, n_heads=2))


def test_layernorm_and_batchnorm_fix_different_axes() -> None:
    x = norm_example()
    res, stats = compare_norms(x)
    torch.testing.assert_close(stats["ln_token_mean"], torch.zeros(2, 5), atol=1e-5, rtol=0)
    torch.testing.assert_close(stats["ln_token_std"], torch.ones(2, 5), atol=1e-3, rtol=0)
    torch.testing.assert_close(stats["bn_feature_mean"], torch.zeros(8), atol=1e-5, rtol=0)
    torch.testing.assert_close(stats["bn_feature_std"], torch.ones(8), atol=1e-3, rtol=0)
    # and not each other's: LayerNorm leaves features uneven, BatchNorm leaves tokens uneven
    assert res.layer_norm.mean((0, 1)).abs().max() > 0.1
    assert res.batch_norm.mean(-1).abs().max() > 0.1
