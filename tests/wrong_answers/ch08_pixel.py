"""Chapter 8's plausible wrong answers: each must earn 0 on its question's hidden tests."""

_AXIAL = '''
def axial_pixel_attention(x, num_heads):
    B, C, H, W = x.shape
    d = C // num_heads
    t = x.reshape(B, num_heads, d, H, W).permute(0, 1, 3, 4, 2)
    for _ in range(2):
        weights = torch.softmax(t @ t.transpose(-2, -1) / math.sqrt(d), dim=-1)
        t = (weights @ t).transpose(2, 3)
    return t.permute(0, 1, 4, 2, 3).reshape(B, C, H, W)

def axial_matrix_bytes(batch, num_heads, height, width, bytes_per_element=4):
    return int(batch * num_heads * height * width * (height + width) * bytes_per_element)
'''


def _axial(old: str, new: str) -> str:
    """A right axial attention (rows, then columns) with ``old`` replaced by ``new``."""
    assert _AXIAL.count(old) == 1, old
    return _AXIAL.replace(old, new)


WRONG_ANSWERS: dict[str, dict[str, str]] = {
    "q1": {
        "reshape without the transpose (channels and pixels scrambled)": '''
def pixels_to_heads(x, num_heads):
    B, C, H, W = x.shape
    return x.reshape(B, num_heads, H * W, C // num_heads)
''',
        "column-major pixels (H and W swapped)": '''
def pixels_to_heads(x, num_heads):
    B, C, H, W = x.shape
    return x.transpose(-1, -2).reshape(B, num_heads, C // num_heads, H * W).transpose(-1, -2)
''',
    },
    "q2": {
        "reshape without the transpose": '''
def heads_to_pixels(tokens, height, width):
    B, heads, HW, d = tokens.shape
    return tokens.reshape(B, heads * d, height, width)
''',
        "interleaves the heads' channels (channel = d * heads + h)": '''
def heads_to_pixels(tokens, height, width):
    B, heads, HW, d = tokens.shape
    return tokens.permute(0, 3, 1, 2).reshape(B, heads * d, height, width)
''',
    },
    "q3": {
        "softmax over the queries (dim=-2), not the keys": '''
def pixel_self_attention(x, num_heads):
    B, C, H, W = x.shape
    t = pixels_to_heads(x, num_heads)
    weights = torch.softmax(t @ t.transpose(-2, -1) / math.sqrt(t.shape[-1]), dim=-2)
    return heads_to_pixels(weights @ t, H, W)
''',
        "scales by sqrt(C), the channels of all heads": '''
def pixel_self_attention(x, num_heads):
    B, C, H, W = x.shape
    t = pixels_to_heads(x, num_heads)
    weights = torch.softmax(t @ t.transpose(-2, -1) / math.sqrt(C), dim=-1)
    return heads_to_pixels(weights @ t, H, W)
''',
        "scales after the softmax": '''
def pixel_self_attention(x, num_heads):
    B, C, H, W = x.shape
    t = pixels_to_heads(x, num_heads)
    weights = torch.softmax(t @ t.transpose(-2, -1), dim=-1) / math.sqrt(t.shape[-1])
    return heads_to_pixels(weights @ t, H, W)
''',
    },
    "q4": {
        "flat index row * H + col (height for width)": '''
def pixel_attention_map(x, row, col, num_heads):
    B, C, H, W = x.shape
    t = pixels_to_heads(x, num_heads)
    query = t[:, :, row * H + col]
    weights = ((t @ query[..., None])[..., 0] / math.sqrt(t.shape[-1])).softmax(dim=-1)
    return weights.reshape(B, num_heads, H, W)
''',
        "no 1/sqrt(d) scale": '''
def pixel_attention_map(x, row, col, num_heads):
    B, C, H, W = x.shape
    t = pixels_to_heads(x, num_heads)
    query = t[:, :, row * W + col]
    weights = (t @ query[..., None])[..., 0].softmax(dim=-1)
    return weights.reshape(B, num_heads, H, W)
''',
    },
    "q5": {
        "forgets the heads": '''
def attention_matrix_bytes(batch, num_heads, height, width, bytes_per_element=4):
    return int(batch * (height * width) ** 2 * bytes_per_element)
''',
        "H * W per matrix instead of (H * W) squared": '''
def attention_matrix_bytes(batch, num_heads, height, width, bytes_per_element=4):
    return int(batch * num_heads * height * width * bytes_per_element)
''',
    },
    "q6": {
        "columns first, then rows": _axial(".permute(0, 1, 3, 4, 2)", ".permute(0, 1, 4, 3, 2)").replace(
            "t.permute(0, 1, 4, 2, 3).reshape", "t.permute(0, 1, 4, 3, 2).reshape"),
        "reshape without the permute (channels read as pixels)": _axial(
            "x.reshape(B, num_heads, d, H, W).permute(0, 1, 3, 4, 2)", "x.reshape(B, num_heads, H, W, d)").replace(
            "t.permute(0, 1, 4, 2, 3).reshape", "t.reshape"),
        "rows twice (the transpose to columns forgotten); full attention's bytes": _axial(
            "t = (weights @ t).transpose(2, 3)", "t = weights @ t").replace(
            "height * width * (height + width)", "(height * width) ** 2"),
    },
}
