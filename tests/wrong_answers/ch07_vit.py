"""Chapter 7's plausible wrong answers: each must earn 0 on its question's hidden tests."""

_DISTANCE = '''
def mean_attention_distance(weights, grid, patch_size):
    rows, cols = grid
    where = torch.stack(torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij"), -1)
    where = where.reshape(rows * cols, 2).to(weights.dtype) * patch_size
    apart = (where[:, None, :] - where[None, :, :]).norm(dim=-1)
    return (weights * apart).sum(dim=-1).mean(dim=-1)
'''


def _distance(old: str, new: str) -> str:
    """The right mean attention distance with one mistake: ``old`` replaced by ``new``."""
    assert _DISTANCE.count(old) == 1, old
    return _DISTANCE.replace(old, new)


WRONG_ANSWERS: dict[str, dict[str, str]] = {
    "q1": {
        "reshape without the permute (patches scrambled)": '''
def patchify(images, patch_size):
    B, C, H, W = images.shape
    P = patch_size
    return images.reshape(B, (H // P) * (W // P), C * P * P)
''',
        "each patch flattened channels-last (P, P, C)": '''
def patchify(images, patch_size):
    B, C, H, W = images.shape
    P = patch_size
    x = images.reshape(B, C, H // P, P, W // P, P).permute(0, 2, 4, 3, 5, 1)
    return x.reshape(B, (H // P) * (W // P), C * P * P)
''',
    },
    "q2": {
        "reshape without the permute": '''
def unpatchify(patches, patch_size, image_size):
    B, N, CPP = patches.shape
    H, W = image_size
    return patches.reshape(B, CPP // (patch_size * patch_size), H, W)
''',
        "rows and columns of the patch grid swapped": '''
def unpatchify(patches, patch_size, image_size):
    B, N, CPP = patches.shape
    P, (H, W) = patch_size, image_size
    C = CPP // (P * P)
    x = patches.reshape(B, W // P, H // P, C, P, P).permute(0, 3, 2, 4, 1, 5)
    return x.reshape(B, C, H, W)
''',
    },
    "q3": {
        "flattens each filter channels-last": '''
def conv_to_linear_weight(conv_weight):
    return conv_weight.permute(0, 2, 3, 1).reshape(conv_weight.shape[0], -1)
''',
        "flattens each filter column-major (P, P swapped)": '''
def conv_to_linear_weight(conv_weight):
    return conv_weight.transpose(-1, -2).reshape(conv_weight.shape[0], -1)
''',
    },
    "q4": {
        "the column's encoding first, then the row's": '''
def sincos_2d(rows, cols, dim, base=10000.0):
    half = dim // 2
    omega = base ** (-torch.arange(0, half, 2, dtype=torch.float32) / half)

    def encode(positions):
        angles = positions[:, None] * omega
        return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(1)

    r, c = torch.arange(rows).repeat_interleave(cols), torch.arange(cols).repeat(rows)
    return torch.cat([encode(c.float()), encode(r.float())], dim=-1)
''',
        "sines then cosines (concatenated, not interleaved)": '''
def sincos_2d(rows, cols, dim, base=10000.0):
    half = dim // 2
    omega = base ** (-torch.arange(0, half, 2, dtype=torch.float32) / half)

    def encode(positions):
        angles = positions[:, None] * omega
        return torch.cat([angles.sin(), angles.cos()], dim=-1)

    r, c = torch.arange(rows).repeat_interleave(cols), torch.arange(cols).repeat(rows)
    return torch.cat([encode(r.float()), encode(c.float())], dim=-1)
''',
    },
    "q5": {
        "align_corners=True": '''
def resize_positions(pos, old_grid, new_grid):
    (old_r, old_c), (new_r, new_c) = old_grid, new_grid
    M = pos.shape[-1]
    images = pos.T.reshape(1, M, old_r, old_c)
    resized = torch.nn.functional.interpolate(images, size=(new_r, new_c), mode="bilinear", align_corners=True)
    return resized.reshape(M, new_r * new_c).T
''',
        "reshapes the table without transposing (channels read as positions)": '''
def resize_positions(pos, old_grid, new_grid):
    (old_r, old_c), (new_r, new_c) = old_grid, new_grid
    M = pos.shape[-1]
    images = pos.reshape(1, M, old_r, old_c)
    resized = torch.nn.functional.interpolate(images, size=(new_r, new_c), mode="bilinear", align_corners=False)
    return resized.reshape(new_r * new_c, M)
''',
        "grid read column-major, (cols, rows)": '''
def resize_positions(pos, old_grid, new_grid):
    (old_r, old_c), (new_r, new_c) = old_grid, new_grid
    M = pos.shape[-1]
    images = pos.T.reshape(1, M, old_c, old_r).transpose(-2, -1)
    resized = torch.nn.functional.interpolate(images, size=(new_r, new_c), mode="bilinear", align_corners=False)
    return resized.transpose(-2, -1).reshape(M, new_r * new_c).T
''',
        "antialias=True": '''
def resize_positions(pos, old_grid, new_grid):
    (old_r, old_c), (new_r, new_c) = old_grid, new_grid
    M = pos.shape[-1]
    images = pos.T.reshape(1, M, old_r, old_c)
    resized = torch.nn.functional.interpolate(images, size=(new_r, new_c), mode="bilinear", align_corners=False,
                                              antialias=True)
    return resized.reshape(M, new_r * new_c).T
''',
        "nearest neighbour instead of bilinear": '''
def resize_positions(pos, old_grid, new_grid):
    (old_r, old_c), (new_r, new_c) = old_grid, new_grid
    M = pos.shape[-1]
    images = pos.T.reshape(1, M, old_r, old_c)
    resized = torch.nn.functional.interpolate(images, size=(new_r, new_c), mode="nearest")
    return resized.reshape(M, new_r * new_c).T
''',
    },
    "q6": {
        "distances in patches, not pixels": _distance(".to(weights.dtype) * patch_size", ".to(weights.dtype)"),
        "column-major patch positions": _distance('indexing="ij"', 'indexing="xy"'),
        "squared distances": _distance(".norm(dim=-1)", ".pow(2).sum(dim=-1)"),
        "Manhattan distances": _distance(".norm(dim=-1)", ".abs().sum(dim=-1)"),
        "the query's own weight dropped and the rest renormalised": _distance(
            "return (weights * apart).sum(dim=-1).mean(dim=-1)",
            "others = weights * (1 - torch.eye(weights.shape[-1], dtype=weights.dtype))\n"
            "    others = others / others.sum(-1, keepdim=True)\n"
            "    return (others * apart).sum(dim=-1).mean(dim=-1)"),
    },
}

RIGHT_ANSWERS: dict[str, dict[str, str]] = {  # correct by another route: they earn every point
    "q6": {
        # issue 66: the right formula in float32 (the tests' weights are float64) lost 4 of 5 points
        "the solution's formula computed in float32": _distance("return (weights * apart)",
                                                                 "return (weights.float() * apart.float())"),
        "loops over queries and keys, positions from divmod": '''
def mean_attention_distance(weights, grid, patch_size):
    import math
    rows, cols = grid
    n = rows * cols
    out = torch.zeros(weights.shape[:-2], dtype=torch.float32)
    for i in range(n):
        for j in range(n):
            (ri, ci), (rj, cj) = divmod(i, cols), divmod(j, cols)
            d = patch_size * math.hypot(ri - rj, ci - cj)
            out += weights[..., i, j].float() * d / n
    return out
''',
    },
}
