"""Chapter 11's plausible wrong answers: each must earn 0 on its question's hidden tests."""

_ALIBI_HEAD = '''
def alibi_backward(q, k, v, out, lse, grad_out, slope):
    scale = 1 / math.sqrt(q.shape[-1])
    rows = torch.arange(q.shape[-2], dtype=q.dtype)[:, None]
    cols = torch.arange(k.shape[-2], dtype=q.dtype)[None, :]
    distance = (rows - cols).abs()
'''

WRONG_ANSWERS: dict[str, dict[str, str]] = {
    "q1": {
        "adds the sums without rescaling them to the common maximum": '''
def merge(a, b):
    (m_a, l_a, acc_a), (m_b, l_b, acc_b) = a, b
    return torch.maximum(m_a, m_b), l_a + l_b, acc_a + acc_b
''',
        "rescales only the second part (assumes the first holds the maximum)": '''
def merge(a, b):
    (m_a, l_a, acc_a), (m_b, l_b, acc_b) = a, b
    s_b = torch.exp(m_b - m_a)
    return m_a, l_a + s_b * l_b, acc_a + s_b[..., None] * acc_b
''',
    },
    "q2": {
        "never rescales the running sums when the maximum grows": '''
def tiled_attention(q, k, v, block):
    q = q / math.sqrt(q.shape[-1])
    outs = []
    for qs in range(0, q.shape[-2], block):
        qb = q[..., qs:qs + block, :]
        m = torch.full(qb.shape[:-1], float("-inf"), dtype=q.dtype)
        l = torch.zeros(qb.shape[:-1], dtype=q.dtype)
        acc = torch.zeros(*qb.shape[:-1], v.shape[-1], dtype=q.dtype)
        for ks in range(0, k.shape[-2], block):
            s = qb @ k[..., ks:ks + block, :].transpose(-2, -1)
            m = torch.maximum(m, s.amax(-1))
            p = torch.exp(s - m[..., None])
            l = l + p.sum(-1)
            acc = acc + p @ v[..., ks:ks + block, :]
        outs.append(acc / l[..., None])
    return torch.cat(outs, dim=-2)
''',
        "averages the tiles' own softmax outputs": '''
def tiled_attention(q, k, v, block):
    q = q / math.sqrt(q.shape[-1])
    outs = []
    for qs in range(0, q.shape[-2], block):
        qb = q[..., qs:qs + block, :]
        parts = [torch.softmax(qb @ k[..., ks:ks + block, :].transpose(-2, -1), dim=-1) @ v[..., ks:ks + block, :]
                 for ks in range(0, k.shape[-2], block)]
        outs.append(sum(parts) / len(parts))
    return torch.cat(outs, dim=-2)
''',
    },
    "q3": {
        "a triangle of square blocks: n(n + 1)/2 whatever the sizes": '''
def causal_tiles(L_q, L_k, block_q, block_k):
    n_q, n_k = -(-L_q // block_q), -(-L_k // block_k)
    computed = n_q * (n_q + 1) // 2
    return computed, n_q * n_k - computed
''',
        "decides by the block's first query, not its last (drops the diagonal's partial tiles)": '''
def causal_tiles(L_q, L_k, block_q, block_k):
    n_k = -(-L_k // block_k)
    computed = 0
    for qs in range(0, L_q, block_q):
        computed += min(n_k, qs // block_k + 1)
    return computed, -(-L_q // block_q) * n_k - computed
''',
        "floor instead of ceiling: a last partial block is not counted": '''
def causal_tiles(L_q, L_k, block_q, block_k):
    n_k = L_k // block_k
    computed = 0
    for qs in range(0, L_q - block_q + 1, block_q):
        computed += min(n_k, (qs + block_q - 1) // block_k + 1)
    return computed, (L_q // block_q) * n_k - computed
''',
    },
    "q4": {
        "one L x L matrix, not two (scores and weights)": '''
def explicit_peak_bytes(B, H, L, element_size):
    return B * H * L * L * element_size

def longest_sequence(budget_bytes, B, H, element_size):
    return math.isqrt(budget_bytes // (B * H * element_size))
''',
        "rounds the square root up: one more than fits": '''
def explicit_peak_bytes(B, H, L, element_size):
    return 2 * B * H * L * L * element_size

def longest_sequence(budget_bytes, B, H, element_size):
    return math.ceil(math.sqrt(budget_bytes / (2 * B * H * element_size)))
''',
        "forgets the heads": '''
def explicit_peak_bytes(B, H, L, element_size):
    return 2 * B * L * L * element_size

def longest_sequence(budget_bytes, B, H, element_size):
    return math.isqrt(budget_bytes // (2 * B * element_size))
''',
    },
    "q5": {
        "forgets D: dS = P * dP": _ALIBI_HEAD + '''
    p = torch.exp(q @ k.transpose(-2, -1) * scale - slope * distance - lse[..., None])
    dp = grad_out @ v.transpose(-2, -1)
    ds = p * dp
    return ds @ k * scale, ds.transpose(-2, -1) @ q * scale, p.transpose(-2, -1) @ grad_out, -(ds * distance).sum()
''',
        "D = rowsum(dP) instead of rowsum(dO * O)": _ALIBI_HEAD + '''
    p = torch.exp(q @ k.transpose(-2, -1) * scale - slope * distance - lse[..., None])
    dp = grad_out @ v.transpose(-2, -1)
    ds = p * (dp - dp.sum(dim=-1, keepdim=True))
    return ds @ k * scale, ds.transpose(-2, -1) @ q * scale, p.transpose(-2, -1) @ grad_out, -(ds * distance).sum()
''',
        "dslope with the wrong sign (the bias is subtracted)": _ALIBI_HEAD + '''
    p = torch.exp(q @ k.transpose(-2, -1) * scale - slope * distance - lse[..., None])
    dp = grad_out @ v.transpose(-2, -1)
    ds = p * (dp - (grad_out * out).sum(dim=-1, keepdim=True))
    return ds @ k * scale, ds.transpose(-2, -1) @ q * scale, p.transpose(-2, -1) @ grad_out, (ds * distance).sum()
''',
        "recomputes P without the bias": _ALIBI_HEAD + '''
    p = torch.exp(q @ k.transpose(-2, -1) * scale - lse[..., None])
    dp = grad_out @ v.transpose(-2, -1)
    ds = p * (dp - (grad_out * out).sum(dim=-1, keepdim=True))
    return ds @ k * scale, ds.transpose(-2, -1) @ q * scale, p.transpose(-2, -1) @ grad_out, -(ds * distance).sum()
''',
        "dq and dk without the 1/sqrt(d) of the scores": _ALIBI_HEAD + '''
    p = torch.exp(q @ k.transpose(-2, -1) * scale - slope * distance - lse[..., None])
    dp = grad_out @ v.transpose(-2, -1)
    ds = p * (dp - (grad_out * out).sum(dim=-1, keepdim=True))
    return ds @ k, ds.transpose(-2, -1) @ q, p.transpose(-2, -1) @ grad_out, -(ds * distance).sum()
''',
    },
}
