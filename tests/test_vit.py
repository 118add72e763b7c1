"""xfl.vit: patches, patch embedding, the ViT and what reaches the optimizer."""

import pytest
import torch
import torch.nn.functional as F

from xfl.vit import PatchEmbedding, ViT, ViTConfig, patchify, to_torchvision, unpatchify


def images(B=2, C=3, H=8, W=12, seed=0):
    return torch.randn(B, C, H, W, generator=torch.Generator().manual_seed(seed))


def test_patchify_matches_unfold():
    x = images()
    torch.testing.assert_close(patchify(x, 4), F.unfold(x, 4, stride=4).transpose(1, 2))


def test_patchify_order_row_major_and_kernel_flattening():
    B, C, H, W, P = 2, 3, 8, 12, 4
    x = torch.arange(B * C * H * W, dtype=torch.float).reshape(B, C, H, W)
    patches = patchify(x, P)
    assert patches.shape == (B, (H // P) * (W // P), C * P * P)
    cols = W // P
    for n in range(patches.shape[1]):
        r, c = divmod(n, cols)  # row-major: left to right, then down
        expected = x[:, :, r * P:(r + 1) * P, c * P:(c + 1) * P].reshape(B, -1)  # (C, P, P) order
        torch.testing.assert_close(patches[:, n], expected)


def test_unpatchify_inverts_patchify():
    x = images()
    torch.testing.assert_close(unpatchify(patchify(x, 2), 2, (8, 12)), x)


def test_unfold_reshape_without_permute_scrambles_patches():
    """DLStudio's pitfall: Tensor.unfold twice then reshape, skipping the permute."""
    x, P = images(), 4
    B, C, H, W = x.shape
    tiles = x.unfold(2, P, P).unfold(3, P, P)  # (B, C, rows, cols, P, P)
    wrong = tiles.reshape(B, -1, C * P * P)
    right = tiles.permute(0, 2, 3, 1, 4, 5).reshape(B, -1, C * P * P)
    assert wrong.shape == right.shape
    assert not torch.allclose(wrong, patchify(x, P))
    torch.testing.assert_close(right, patchify(x, P))


def test_unfold_plus_linear_equals_conv_patch_embedding():
    torch.manual_seed(0)
    embed = PatchEmbedding(patch_size=4, in_channels=3, d_model=16).double()
    x = images().double()
    linear = embed.as_linear()
    torch.testing.assert_close(linear(F.unfold(x, 4, stride=4).transpose(1, 2)), embed(x))
    torch.testing.assert_close(linear(patchify(x, 4)), embed(x))


@pytest.mark.parametrize("bad, match", [
    (torch.zeros(3, 8, 8), "4-D"), (torch.zeros(1, 3, 8, 10), "not divisible"),
])
def test_patchify_errors(bad, match):
    with pytest.raises(ValueError, match=match):
        patchify(bad, 4)


def test_patchify_rejects_bad_patch_size():
    with pytest.raises(ValueError, match="patch_size"):
        patchify(torch.zeros(1, 3, 8, 8), 0)


def small_vit(**kw):
    torch.manual_seed(0)
    cfg = dict(image_size=16, patch_size=4, in_channels=3, num_classes=10, d_model=32,
               num_heads=4, num_layers=2, d_hidden=64, dropout=0.0)
    return ViT(ViTConfig(**{**cfg, **kw}))


def test_vit_shapes():
    model = small_vit()
    x = torch.randn(5, 3, 16, 16)
    assert model(x).shape == (5, 10)
    assert model.tokens(x).shape == (5, 1 + 16, 32)
    assert model.attention_maps(x).shape == (5, 2, 4, 17, 17)
    assert model.class_token_attention(x).shape == (5, 4, 4, 4)


def test_attention_maps_equal_the_step_by_step_weights():
    model = small_vit().eval()
    x = torch.randn(2, 3, 16, 16)
    h, expected = model.tokens(x), []
    with torch.no_grad():
        for block in model.encoder.layers:  # Pre-LN: attention sees the normalized input
            expected.append(block.self_attn(block.residuals[0].norm(h), need_weights=True)[1])
            h = block(h)
    torch.testing.assert_close(model.attention_maps(x), torch.stack(expected, dim=1))


def test_attention_maps_are_distributions():
    weights = small_vit().attention_maps(torch.randn(2, 3, 16, 16))
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))


def test_every_vit_parameter_reaches_the_optimizer():
    model = small_vit()
    params = {id(p) for p in model.parameters()}
    for p in (model.patch_embed.proj.weight, model.patch_embed.proj.bias,
              model.pos_embedding, model.cls_token):
        assert id(p) in params
    loss = F.cross_entropy(model(torch.randn(4, 3, 16, 16)), torch.arange(4))
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, f"{name} got no gradient"


def test_one_optimizer_step_changes_pos_embedding_and_class_token():
    model = small_vit()
    before = model.pos_embedding.detach().clone(), model.cls_token.detach().clone()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    F.cross_entropy(model(torch.randn(4, 3, 16, 16)), torch.arange(4)).backward()
    opt.step()
    assert not torch.equal(before[0], model.pos_embedding)
    assert not torch.equal(before[1], model.cls_token)


def test_vit_rejects_wrong_image_size():
    with pytest.raises(ValueError, match="16x16"):
        small_vit()(torch.randn(1, 3, 32, 32))
    with pytest.raises(ValueError, match="divisible"):
        ViT(ViTConfig(image_size=30, patch_size=4))


@pytest.mark.parametrize("pool, features", [("mean", 32), ("flatten", 16 * 32)])
def test_pooling_without_a_class_token(pool, features):
    model = small_vit(pool=pool)
    x = torch.randn(3, 3, 16, 16)
    assert model.cls_token is None and model.tokens(x).shape == (3, 16, 32)
    assert model.head.in_features == features and model(x).shape == (3, 10)
    out = model.encoder(model.tokens(x))  # (3, 16, 32)
    expected = out.mean(1) if pool == "mean" else out.reshape(3, -1)
    torch.testing.assert_close(model(x), model.head(expected))
    with pytest.raises(ValueError, match=pool):
        model.class_token_attention(x)


def test_mean_pooling_ignores_patch_order_after_the_positions():
    model = small_vit(pool="mean").eval()
    tokens = model.tokens(torch.randn(2, 3, 16, 16))
    perm = torch.randperm(16)
    with torch.no_grad():
        a = model.head(model.encoder(tokens).mean(1))
        b = model.head(model.encoder(tokens[:, perm]).mean(1))
    torch.testing.assert_close(a, b)


def test_vit_config_names_a_bad_pool():
    with pytest.raises(ValueError, match="max"):
        ViTConfig(pool="max")


def test_vit_refuses_an_empty_batch_and_images_of_another_dtype():
    model = ViT(ViTConfig(image_size=8, patch_size=4, d_model=16, num_heads=2, num_layers=1))
    with pytest.raises(ValueError, match=r"at least one image, got an empty batch \(0, 3, 8, 8\)"):
        model(torch.zeros(0, 3, 8, 8))
    with pytest.raises(ValueError, match=r"weights' dtype torch.float32, got torch.float64"):
        model(torch.zeros(2, 3, 8, 8, dtype=torch.float64))
    assert model.double()(torch.zeros(2, 3, 8, 8, dtype=torch.float64)).dtype == torch.float64


def test_torchvision_vit_with_copied_weights_gives_the_same_logits():
    model = small_vit().eval()
    twin = to_torchvision(model).eval()
    images = torch.randn(3, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(twin(images), model(images), atol=1e-5, rtol=1e-5)
        twin.encoder.layers[0].ln_1.eps = 1e-6  # torchvision's default: the bridge matters
        assert not torch.allclose(twin(images), model(images), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="need pool='cls', got 'mean'"):
        to_torchvision(small_vit(pool="mean"))
