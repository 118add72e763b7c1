"""Chapter 2's plausible wrong answers: each must fail every hidden test of its question."""

LECTURE = '''
def lecture_as_full(head_weights, head_biases):
    if len({{tuple(w.shape) for w in head_weights}}) != 1:
        raise ValueError("heads of different sizes")
    {body}
'''
CIRCUITS = '''
def circuits(in_proj_weight, out_proj_weight, num_heads):
    M = in_proj_weight.shape[1]
    s = M // num_heads
    W_Q, W_K, W_V = (w.view(num_heads, s, M) for w in in_proj_weight.chunk(3))
    W_O = {w_o}
    QK = W_Q.transpose(1, 2) @ W_K / math.sqrt({scale})
    OV = {ov}
    return QK, OV
'''
W_O = "out_proj_weight.view(M, num_heads, s).transpose(0, 1)"
OV = "W_V.transpose(1, 2) @ W_O.transpose(1, 2)"

WRONG_ANSWERS: dict[str, dict[str, str]] = {
    "q1": {
        "reshape to (B, num_heads, L, s) without the transpose": '''
def split_heads(x, num_heads):
    B, L, M = x.shape
    if M % num_heads:
        raise ValueError(f"width {M} is not divisible by num_heads={num_heads}")
    return x.reshape(B, num_heads, L, M // num_heads)
''',
        "heads take every num_heads-th column (strided, not contiguous)": '''
def split_heads(x, num_heads):
    B, L, M = x.shape
    if M % num_heads:
        raise ValueError(f"width {M} is not divisible by num_heads={num_heads}")
    return x.reshape(B, L, M // num_heads, num_heads).permute(0, 3, 1, 2)
''',
    },
    "q2": {
        "reshape without the transpose back": '''
def merge_heads(x):
    B, H, L, s = x.shape
    return x.reshape(B, L, H * s)
''',
        "interleaves the heads' columns": '''
def merge_heads(x):
    B, H, L, s = x.shape
    return x.permute(0, 2, 3, 1).reshape(B, L, H * s)
''',
    },
    "q3": {
        "scales by sqrt(M), the lecture's formula, not sqrt(s_qkv)": '''
def multihead_self_attention(x, in_proj_weight, out_proj_weight, num_heads):
    q, k, v = (split_heads(t, num_heads) for t in (x @ in_proj_weight.T).chunk(3, dim=-1))
    weights = (q @ k.transpose(-2, -1) / math.sqrt(x.shape[-1])).softmax(dim=-1)
    return merge_heads(weights @ v) @ out_proj_weight.T
''',
        "x @ W instead of x @ W.T (nn.Linear's convention missed)": '''
def multihead_self_attention(x, in_proj_weight, out_proj_weight, num_heads):
    M = x.shape[-1]
    q, k, v = (split_heads(x @ w, num_heads) for w in in_proj_weight.T.chunk(3, dim=-1))
    weights = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(dim=-1)
    return merge_heads(weights @ v) @ out_proj_weight
''',
        "forgets the output projection": '''
def multihead_self_attention(x, in_proj_weight, out_proj_weight, num_heads):
    q, k, v = (split_heads(t, num_heads) for t in (x @ in_proj_weight.T).chunk(3, dim=-1))
    weights = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(dim=-1)
    return merge_heads(weights @ v)
''',
    },
    "q4": {
        "one scale for all heads: sqrt of the mean head size": '''
def uneven_heads_attention(x, in_proj_weight, out_proj_weight, head_sizes):
    if sum(head_sizes) != x.shape[-1]:
        raise ValueError(f"head sizes {head_sizes} add up to {sum(head_sizes)}, expected {x.shape[-1]}")
    q, k, v = (x @ in_proj_weight.T).chunk(3, dim=-1)
    scale = math.sqrt(x.shape[-1] / len(head_sizes))
    outs = []
    for qh, kh, vh in zip(*(t.split(list(head_sizes), dim=-1) for t in (q, k, v))):
        outs.append((qh @ kh.transpose(-2, -1) / scale).softmax(dim=-1) @ vh)
    return torch.cat(outs, dim=-1) @ out_proj_weight.T
''',
        "splits x, not the projections (the lecture's slices)": '''
def uneven_heads_attention(x, in_proj_weight, out_proj_weight, head_sizes):
    if sum(head_sizes) != x.shape[-1]:
        raise ValueError(f"head sizes {head_sizes} add up to {sum(head_sizes)}, expected {x.shape[-1]}")
    W_Q, W_K, W_V = in_proj_weight.chunk(3)
    outs, start = [], 0
    for s in head_sizes:
        xs, rows = x[..., start:start + s], slice(start, start + s)
        qh, kh, vh = (xs @ W[rows, start:start + s].T for W in (W_Q, W_K, W_V))
        outs.append((qh @ kh.transpose(-2, -1) / math.sqrt(s)).softmax(dim=-1) @ vh)
        start += s
    return torch.cat(outs, dim=-1) @ out_proj_weight.T
''',
    },
    "q5": {
        "forgets the output projection's weights": '''
def mha_parameter_count(M, num_heads, bias=True):
    return 3 * M * M + (3 * M if bias else 0)
''',
        "counts per head: 4 M s_qkv weights in each": '''
def mha_parameter_count(M, num_heads, bias=True):
    return 4 * M * (M // num_heads) + (4 * M if bias else 0)
''',
    },
    "q6": {
        "block_diag of the whole (3s, s) weights: Q, K, V interleaved by head": LECTURE.format(body='''
    return torch.block_diag(*head_weights), torch.cat(list(head_biases))'''),
        "right weights, biases left in head order": LECTURE.format(body='''
    parts = [[w.chunk(3, dim=0)[i] for w in head_weights] for i in range(3)]
    return torch.cat([torch.block_diag(*blocks) for blocks in parts]), torch.cat(list(head_biases))'''),
        "each head's block copied along the whole diagonal of W_Q, W_K, W_V (full, not sliced)": LECTURE.format(body='''
    M = sum(w.shape[1] for w in head_weights)
    parts = [torch.cat([w.chunk(3, dim=0)[i] for w in head_weights]) for i in range(3)]
    weight = torch.cat([p.repeat(1, len(head_weights)) for p in parts])
    bias = torch.cat([torch.cat([b.chunk(3)[i] for b in head_biases]) for i in range(3)])
    return weight, bias'''),
    },
    "q7": {
        "QK scaled by sqrt(M), not sqrt(s_qkv)": CIRCUITS.format(w_o=W_O, scale="M", ov=OV),
        "W_O's head rows, not its head columns": CIRCUITS.format(
            w_o="out_proj_weight.view(num_heads, s, M).transpose(1, 2)", scale="s", ov=OV),
        "OV without W_O (the head's own value map)": CIRCUITS.format(
            w_o=W_O, scale="s", ov="W_V.transpose(1, 2) @ W_V"),
    },
}
