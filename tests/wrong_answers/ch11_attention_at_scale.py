"""Chapter 11's plausible wrong answers: each must earn 0 on its question's hidden tests."""

_ALIBI_HEAD = '''
def alibi_backward(q, k, v, out, lse, grad_out, slope):
    scale = 1 / math.sqrt(q.shape[-1])
    rows = torch.arange(q.shape[-2], dtype=q.dtype)[:, None]
    cols = torch.arange(k.shape[-2], dtype=q.dtype)[None, :]
    distance = (rows - cols).abs()
'''

_DROPOUT_FORWARD = '''
def dropout_attention_forward(q, k, v, p, seed):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    lse = scores.logsumexp(dim=-1)
    keep = torch.rand(scores.shape, generator=torch.Generator().manual_seed(seed), dtype=q.dtype) >= p
    out = (torch.exp(scores - lse[..., None]) * keep / (1 - p)) @ v
    return out, {"q": q, "k": k, "v": v, "out": out, "lse": lse, "p": p, "seed": seed}
'''

_DROPOUT_BACKWARD_HEAD = '''
def dropout_attention_backward(saved, grad_out):
    q, k, v, out, lse = (saved[name] for name in ("q", "k", "v", "out", "lse"))
    scale = 1 / math.sqrt(q.shape[-1])
    scores = q @ k.transpose(-2, -1) * scale
    generator = torch.Generator().manual_seed(saved["seed"])
    kept = (torch.rand(scores.shape, generator=generator, dtype=q.dtype) >= saved["p"]) / (1 - saved["p"])
    probs = torch.exp(scores - lse[..., None])
'''

_DROPOUT_BACKWARD = _DROPOUT_BACKWARD_HEAD + '''
    dv = (probs * kept).transpose(-2, -1) @ grad_out
    ds = probs * ((grad_out @ v.transpose(-2, -1)) * kept - (grad_out * out).sum(dim=-1, keepdim=True))
    return ds @ k * scale, ds.transpose(-2, -1) @ q * scale, dv
'''

_SAVED_TO_BACKWARD = '''        saved = {"q": q, "k": k, "v": v, "out": out, "lse": lse, "p": ctx.p, "seed": ctx.seed}
        return (*dropout_attention_backward(saved, grad_out), None, None)
'''  # the end of a Function's backward: q, k, v, out, lse rebuilt into question 6's dict

_GRADS = '''
def dropout_attention_grads(q, k, v, p, seed, grad_out):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = SeededDropoutAttention.apply(q, k, v, p, seed)
    saved_shapes = [tuple(t.shape) for t in out.grad_fn.saved_tensors]
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), grad_out)
    return out.detach(), dq, dk, dv, saved_shapes
'''

_KERNEL_HEAD = '''
@triton.jit
def decode_split_kernel(Q, K, V, LENGTHS, M, L, ACC, L_k, scale,
                        CHUNK: tl.constexpr, BLOCK: tl.constexpr, D: tl.constexpr):
    split = tl.program_id(axis=0)
    bh = tl.program_id(axis=1)
    dims = tl.arange(0, D)  # (D,)
    offsets = tl.arange(0, BLOCK)[:, None] * D + dims[None, :]  # (BLOCK, D): a block of keys, from its first
    head_keys, head_values = K + bh * L_k * D, V + bh * L_k * D
    query = tl.load(Q + bh * D + dims) * scale  # (D,), scaled once
    n_real = tl.load(LENGTHS + bh)  # keys from n_real on are padding: never read them
    l, acc = tl.zeros([], tl.float32), tl.zeros([D], tl.float32)  # the chunk's partial result so far:
    m = l - float("inf")  # nothing seen
'''

_KERNEL_TAIL = '''    part = bh * tl.num_programs(0) + split  # this split's row of M, L and ACC
    tl.store(M + part, m)
    tl.store(L + part, l)
    tl.store(ACC + part * D + dims, acc)


def decode_partials(q, k, v, lengths, chunk):
    \"\"\"(m, l, acc) of every split of every head: q (BH, d), k and v (BH, L_k, d) float32 on the CPU,
    lengths (BH,) ints; splits of `chunk` keys (a multiple of 16), blocks of 16 inside them.\"\"\"
    q, k, v = (x.contiguous() for x in (q, k, v))
    bh, L_k, d = k.shape
    n_splits = triton.cdiv(L_k, chunk)
    m, l = torch.empty(bh, n_splits), torch.empty(bh, n_splits)
    acc = torch.empty(bh, n_splits, d)
    decode_split_kernel[(n_splits, bh)](q, k, v, torch.as_tensor(lengths, dtype=torch.int32), m, l, acc, L_k,
                                        1 / math.sqrt(d), CHUNK=chunk, BLOCK=16, D=d)
    return m, l, acc'''

_RANGE = '''    begin = CHUNK * split
    stop = tl.minimum(begin + CHUNK, n_real)
    for block in range(0, tl.cdiv(stop - begin, BLOCK)):
        first = begin + block * BLOCK
        real = first + tl.arange(0, BLOCK) < stop
'''

_LOADS = '''        keys = tl.load(head_keys + first * D + offsets, mask=real[:, None], other=0.0)
        values = tl.load(head_values + first * D + offsets, mask=real[:, None], other=0.0)
'''

_SCORES = '''        scores = tl.where(real, tl.sum(keys * query[None, :], axis=1), float("-inf"))
'''

_ONLINE = '''        m_block = tl.max(scores, axis=0)
        weights = tl.exp(scores - m_block)
        l_block, acc_block = tl.sum(weights, axis=0), tl.sum(weights[:, None] * values, axis=0)
        m_both = tl.maximum(m, m_block)
        old, new = tl.exp(m - m_both), tl.exp(m_block - m_both)
        m, l, acc = m_both, old * l + new * l_block, old * acc + new * acc_block
'''


def _kernel(loop: str) -> str:
    """The answer cell of question 8 with ``loop`` as the part the student writes."""
    return _KERNEL_HEAD + loop + _KERNEL_TAIL


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
        "the whole L_q x L_k matrix: the softmax the question forbids": '''
def tiled_attention(q, k, v, block):
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v
''',
        "tiles only the queries: a strip of block queries against every key": '''
def tiled_attention(q, k, v, block):
    q = q / math.sqrt(q.shape[-1])
    return torch.cat([torch.softmax(q[..., qs:qs + block, :] @ k.transpose(-2, -1), dim=-1) @ v
                      for qs in range(0, q.shape[-2], block)], dim=-2)
''',
        "tiles the keys only: all queries against a block of keys, with running statistics": '''
def tiled_attention(q, k, v, block):
    q = q / math.sqrt(q.shape[-1])
    m = torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype)
    l = torch.zeros(q.shape[:-1], dtype=q.dtype)
    acc = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    for ks in range(0, k.shape[-2], block):
        s = q @ k[..., ks:ks + block, :].transpose(-2, -1)
        m_new = torch.maximum(m, s.amax(-1))
        p, shrink = torch.exp(s - m_new[..., None]), torch.exp(m - m_new)
        l = shrink * l + p.sum(-1)
        acc = shrink[..., None] * acc + p @ v[..., ks:ks + block, :]
        m = m_new
    return acc / l[..., None]
''',
        "one query at a time against every key: no key tiles, no running statistics": '''
def tiled_attention(q, k, v, block):
    scale = 1 / math.sqrt(q.shape[-1])
    return torch.cat([torch.softmax(q[..., i:i + 1, :] @ k.transpose(-2, -1) * scale, dim=-1) @ v
                      for i in range(q.shape[-2])], dim=-2)
''',
        "strips of d queries against every key: within the size of k": '''
def tiled_attention(q, k, v, block):
    scale, d = 1 / math.sqrt(q.shape[-1]), q.shape[-1]
    return torch.cat([torch.softmax(q[..., i:i + d, :] @ k.transpose(-2, -1) * scale, dim=-1) @ v
                      for i in range(0, q.shape[-2], d)], dim=-2)
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
        "the last query block not capped at L_q: its last query taken as qs + block_q - 1": '''
def causal_tiles(L_q, L_k, block_q, block_k):
    n_k = -(-L_k // block_k)
    computed = 0
    for qs in range(0, L_q, block_q):
        computed += min(n_k, (qs + block_q - 1) // block_k + 1)
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
        "a floating-point square root: exact only while the numbers fit in 53 bits": '''
def explicit_peak_bytes(B, H, L, element_size):
    return 2 * B * H * L * L * element_size

def longest_sequence(budget_bytes, B, H, element_size):
    return int(math.sqrt(budget_bytes // (2 * B * H * element_size)))
''',
        "three L x L matrices (scores, scaled copy, weights)": '''
def explicit_peak_bytes(B, H, L, element_size):
    return 3 * B * H * L * L * element_size

def longest_sequence(budget_bytes, B, H, element_size):
    return math.isqrt(budget_bytes // (3 * B * H * element_size))
''',
        "divides by the element size instead of multiplying": '''
def explicit_peak_bytes(B, H, L, element_size):
    return 2 * B * H * L * L // element_size

def longest_sequence(budget_bytes, B, H, element_size):
    return math.isqrt(budget_bytes * element_size // (2 * B * H))
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
    "q6": {
        "keeps the mask: saved holds an L_q x L_k tensor": '''
def dropout_attention_forward(q, k, v, p, seed):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    lse = scores.logsumexp(dim=-1)
    keep = torch.rand(scores.shape, generator=torch.Generator().manual_seed(seed), dtype=q.dtype) >= p
    out = (torch.exp(scores - lse[..., None]) * keep / (1 - p)) @ v
    return out, {"q": q, "k": k, "v": v, "out": out, "lse": lse, "p": p, "keep": keep}

def dropout_attention_backward(saved, grad_out):
    q, k, v, out, lse = (saved[name] for name in ("q", "k", "v", "out", "lse"))
    scale = 1 / math.sqrt(q.shape[-1])
    kept = saved["keep"] / (1 - saved["p"])
    probs = torch.exp(q @ k.transpose(-2, -1) * scale - lse[..., None])
    ds = probs * ((grad_out @ v.transpose(-2, -1)) * kept - (grad_out * out).sum(dim=-1, keepdim=True))
    return ds @ k * scale, ds.transpose(-2, -1) @ q * scale, (probs * kept).transpose(-2, -1) @ grad_out
''',
        "keeps the mask inside a tuple in saved": '''
def dropout_attention_forward(q, k, v, p, seed):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    lse = scores.logsumexp(dim=-1)
    keep = torch.rand(scores.shape, generator=torch.Generator().manual_seed(seed), dtype=q.dtype) >= p
    out = (torch.exp(scores - lse[..., None]) * keep / (1 - p)) @ v
    return out, {"q": q, "k": k, "v": v, "out": out, "lse": lse, "rate": (p, keep)}

def dropout_attention_backward(saved, grad_out):
    q, k, v, out, lse = (saved[name] for name in ("q", "k", "v", "out", "lse"))
    p, keep = saved["rate"]
    scale = 1 / math.sqrt(q.shape[-1])
    kept = keep / (1 - p)
    probs = torch.exp(q @ k.transpose(-2, -1) * scale - lse[..., None])
    ds = probs * ((grad_out @ v.transpose(-2, -1)) * kept - (grad_out * out).sum(dim=-1, keepdim=True))
    return ds @ k * scale, ds.transpose(-2, -1) @ q * scale, (probs * kept).transpose(-2, -1) @ grad_out
''',
        "keeps the mask as a NumPy array": '''
def dropout_attention_forward(q, k, v, p, seed):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    lse = scores.logsumexp(dim=-1)
    keep = torch.rand(scores.shape, generator=torch.Generator().manual_seed(seed), dtype=q.dtype) >= p
    out = (torch.exp(scores - lse[..., None]) * keep / (1 - p)) @ v
    return out, {"q": q, "k": k, "v": v, "out": out, "lse": lse, "p": p, "keep": keep.numpy()}

def dropout_attention_backward(saved, grad_out):
    q, k, v, out, lse = (saved[name] for name in ("q", "k", "v", "out", "lse"))
    scale = 1 / math.sqrt(q.shape[-1])
    kept = torch.from_numpy(saved["keep"]) / (1 - saved["p"])
    probs = torch.exp(q @ k.transpose(-2, -1) * scale - lse[..., None])
    ds = probs * ((grad_out @ v.transpose(-2, -1)) * kept - (grad_out * out).sum(dim=-1, keepdim=True))
    return ds @ k * scale, ds.transpose(-2, -1) @ q * scale, (probs * kept).transpose(-2, -1) @ grad_out
''',
        "does not divide the kept weights by 1 - p": '''
def dropout_attention_forward(q, k, v, p, seed):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    lse = scores.logsumexp(dim=-1)
    keep = torch.rand(scores.shape, generator=torch.Generator().manual_seed(seed), dtype=q.dtype) >= p
    out = (torch.exp(scores - lse[..., None]) * keep) @ v
    return out, {"q": q, "k": k, "v": v, "out": out, "lse": lse, "p": p, "seed": seed}
''' + _DROPOUT_BACKWARD_HEAD + '''
    kept = kept * (1 - saved["p"])
    dv = (probs * kept).transpose(-2, -1) @ grad_out
    ds = probs * ((grad_out @ v.transpose(-2, -1)) * kept - (grad_out * out).sum(dim=-1, keepdim=True))
    return ds @ k * scale, ds.transpose(-2, -1) @ q * scale, dv
''',
        "D from P and dO V^T, leaving the mask out": _DROPOUT_FORWARD + _DROPOUT_BACKWARD_HEAD + '''
    dv = (probs * kept).transpose(-2, -1) @ grad_out
    dp = grad_out @ v.transpose(-2, -1)
    ds = probs * (dp * kept - (probs * dp).sum(dim=-1, keepdim=True))
    return ds @ k * scale, ds.transpose(-2, -1) @ q * scale, dv
''',
        "dV through P instead of the dropped weights": _DROPOUT_FORWARD + _DROPOUT_BACKWARD_HEAD + '''
    dv = probs.transpose(-2, -1) @ grad_out
    ds = probs * ((grad_out @ v.transpose(-2, -1)) * kept - (grad_out * out).sum(dim=-1, keepdim=True))
    return ds @ k * scale, ds.transpose(-2, -1) @ q * scale, dv
''',
        "one L_q x L_k mask shared by every head": '''
def dropout_attention_forward(q, k, v, p, seed):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    lse = scores.logsumexp(dim=-1)
    keep = torch.rand(scores.shape[-2:], generator=torch.Generator().manual_seed(seed), dtype=q.dtype) >= p
    out = (torch.exp(scores - lse[..., None]) * keep / (1 - p)) @ v
    return out, {"q": q, "k": k, "v": v, "out": out, "lse": lse, "p": p, "seed": seed}

def dropout_attention_backward(saved, grad_out):
    q, k, v, out, lse = (saved[name] for name in ("q", "k", "v", "out", "lse"))
    scale = 1 / math.sqrt(q.shape[-1])
    scores = q @ k.transpose(-2, -1) * scale
    generator = torch.Generator().manual_seed(saved["seed"])
    kept = (torch.rand(scores.shape[-2:], generator=generator, dtype=q.dtype) >= saved["p"]) / (1 - saved["p"])
    probs = torch.exp(scores - lse[..., None])
    dv = (probs * kept).transpose(-2, -1) @ grad_out
    ds = probs * ((grad_out @ v.transpose(-2, -1)) * kept - (grad_out * out).sum(dim=-1, keepdim=True))
    return ds @ k * scale, ds.transpose(-2, -1) @ q * scale, dv
''',
    },
    "q7": {
        "saves the mask with ctx.save_for_backward": '''
class SeededDropoutAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, p, seed):
        out, saved = dropout_attention_forward(q, k, v, p, seed)
        keep = torch.rand(q.shape[:-1] + k.shape[-2:-1], generator=torch.Generator().manual_seed(seed),
                          dtype=q.dtype) >= p
        ctx.save_for_backward(q, k, v, out, saved["lse"], keep)
        ctx.p, ctx.seed = p, seed
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse, keep = ctx.saved_tensors
''' + _SAVED_TO_BACKWARD + _GRADS,
        "saves q, k, v, out, lse, and keeps the mask as an attribute of ctx": '''
class SeededDropoutAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, p, seed):
        out, saved = dropout_attention_forward(q, k, v, p, seed)
        ctx.save_for_backward(q, k, v, out, saved["lse"])
        ctx.keep = torch.rand(q.shape[:-1] + k.shape[-2:-1], generator=torch.Generator().manual_seed(seed),
                              dtype=q.dtype) >= p
        ctx.p, ctx.seed = p, seed
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        scale = 1 / math.sqrt(q.shape[-1])
        kept = ctx.keep / (1 - ctx.p)
        probs = torch.exp(q @ k.transpose(-2, -1) * scale - lse[..., None])
        ds = probs * ((grad_out @ v.transpose(-2, -1)) * kept - (grad_out * out).sum(dim=-1, keepdim=True))
        return ds @ k * scale, ds.transpose(-2, -1) @ q * scale, (probs * kept).transpose(-2, -1) @ grad_out, None, None
''' + _GRADS,
        "saves the weights instead of the log-sum-exp": '''
class SeededDropoutAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, p, seed):
        out, saved = dropout_attention_forward(q, k, v, p, seed)
        weights = torch.exp(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) - saved["lse"][..., None])
        ctx.save_for_backward(q, k, v, out, weights)
        ctx.p, ctx.seed = p, seed
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, weights = ctx.saved_tensors
        lse = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) - weights.log())[..., 0]
''' + _SAVED_TO_BACKWARD + _GRADS,
        "backward returns no gradients for p and seed": '''
class SeededDropoutAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, p, seed):
        out, saved = dropout_attention_forward(q, k, v, p, seed)
        ctx.save_for_backward(q, k, v, out, saved["lse"])
        ctx.p, ctx.seed = p, seed
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        saved = {"q": q, "k": k, "v": v, "out": out, "lse": lse, "p": ctx.p, "seed": ctx.seed}
        return dropout_attention_backward(saved, grad_out)
''' + _GRADS,
        "autograd through the explicit forward, no Function": '''
def dropout_attention_grads(q, k, v, p, seed, grad_out):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out, saved = dropout_attention_forward(q, k, v, p, seed)
    saved_shapes = [tuple(t.shape) for t in out.grad_fn.saved_tensors]
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), grad_out)
    return out.detach(), dq, dk, dv, saved_shapes
''',
    },
    "q8": {
        "no running maximum: exp of the raw scores, m left at 0": _kernel(_RANGE + _LOADS + _SCORES + '''        weights = tl.exp(scores)
        l = l + tl.sum(weights, axis=0)
        acc = acc + tl.sum(weights[:, None] * values, axis=0)
    m = tl.where(l > 0, 0.0, float("-inf"))
'''),
        "each block's own maximum, the old sums never rescaled": _kernel(_RANGE + _LOADS + _SCORES + '''        m = tl.maximum(m, tl.max(scores, axis=0))
        weights = tl.exp(scores - m)
        l = l + tl.sum(weights, axis=0)
        acc = acc + tl.sum(weights[:, None] * values, axis=0)
'''),
        "loops over the whole chunk and masks the padding: an empty chunk gets exp(-inf + inf) = NaN": _kernel(
            '''    begin = CHUNK * split
    for block in range(0, CHUNK // BLOCK):
        first = begin + block * BLOCK
        real = (first + tl.arange(0, BLOCK) < n_real) & (first + tl.arange(0, BLOCK) < L_k)
''' + _LOADS + _SCORES + _ONLINE),
        "stops at L_k, not at the head's length: reads the padding": _kernel('''    begin = CHUNK * split
    stop = tl.minimum(begin + CHUNK, L_k)
    for block in range(0, tl.cdiv(stop - begin, BLOCK)):
        first = begin + block * BLOCK
        real = first + tl.arange(0, BLOCK) < stop
''' + _LOADS + _SCORES + _ONLINE),
        "one key too many: keys up to the length itself": _kernel('''    begin = CHUNK * split
    stop = tl.minimum(tl.minimum(begin + CHUNK, n_real + 1), L_k)
    for block in range(0, tl.cdiv(stop - begin, BLOCK)):
        first = begin + block * BLOCK
        real = first + tl.arange(0, BLOCK) < stop
''' + _LOADS + _SCORES + _ONLINE),
        "the chunk starts at split * BLOCK, not split * CHUNK": _kernel('''    begin = BLOCK * split
    stop = tl.minimum(begin + CHUNK, n_real)
    for block in range(0, tl.cdiv(stop - begin, BLOCK)):
        first = begin + block * BLOCK
        real = first + tl.arange(0, BLOCK) < stop
''' + _LOADS + _SCORES + _ONLINE),
        "the scale applied twice (query already scaled)": _kernel(_RANGE + _LOADS + '''        scores = tl.where(real, tl.sum(keys * query[None, :], axis=1) * scale, float("-inf"))
''' + _ONLINE),
        "the query unscaled: the raw dot products": _kernel(_RANGE + _LOADS + '''        scores = tl.where(real, tl.sum(keys * query[None, :], axis=1) / scale, float("-inf"))
''' + _ONLINE),
        "divides by l inside the chunk: stores the chunk's output, not its unnormalised sum": _kernel(
            _RANGE + _LOADS + _SCORES + _ONLINE + '''    acc = acc / tl.maximum(l, 1e-30)
'''),
    },
}


# Right answers by another method than the solution's: each must earn every point.
RIGHT_ANSWERS: dict[str, dict[str, str]] = {
    "q6": {
        "keeps the generator's state, as FlashAttention keeps rng_state, and draws the mask from it": '''
def dropout_attention_forward(q, k, v, p, seed):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    lse = scores.logsumexp(dim=-1)
    generator = torch.Generator().manual_seed(seed)
    state = generator.get_state()
    keep = torch.rand(scores.shape, generator=generator, dtype=q.dtype) >= p
    out = (torch.exp(scores - lse[..., None]) * keep / (1 - p)) @ v
    return out, {"q": q, "k": k, "v": v, "out": out, "lse": lse, "p": p, "rng_state": state}

def dropout_attention_backward(saved, grad_out):
    q, k, v, out, lse = (saved[name] for name in ("q", "k", "v", "out", "lse"))
    scale = 1 / math.sqrt(q.shape[-1])
    scores = q @ k.transpose(-2, -1) * scale
    generator = torch.Generator()
    generator.set_state(saved["rng_state"])
    kept = (torch.rand(scores.shape, generator=generator, dtype=q.dtype) >= saved["p"]) / (1 - saved["p"])
    probs = torch.exp(scores - lse[..., None])
    dv = (probs * kept).transpose(-2, -1) @ grad_out
    ds = probs * ((grad_out @ v.transpose(-2, -1)) * kept - (grad_out * out).sum(dim=-1, keepdim=True))
    return ds @ k * scale, ds.transpose(-2, -1) @ q * scale, dv
''',
    },
    "q4": {
        "Newton's method on integers instead of math.isqrt": '''
def explicit_peak_bytes(B, H, L, element_size):
    return 2 * B * H * L * L * element_size

def longest_sequence(budget_bytes, B, H, element_size):
    n = budget_bytes // (2 * B * H * element_size)
    if n < 1:
        return 0
    x = n
    while x * x > n:
        x = (x + n // x) // 2
    return x
''',
    },
    "q2": {
        "queries outside, keys inside, the scale on the scores of each tile": '''
def tiled_attention(q, k, v, block):
    scale = 1 / math.sqrt(q.shape[-1])
    out = torch.empty(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    for qs in range(0, q.shape[-2], block):
        qb = q[..., qs:qs + block, :]
        m = torch.full(qb.shape[:-1], float("-inf"), dtype=q.dtype)
        l = torch.zeros(qb.shape[:-1], dtype=q.dtype)
        acc = torch.zeros(*qb.shape[:-1], v.shape[-1], dtype=q.dtype)
        for ks in range(0, k.shape[-2], block):
            s = (qb @ k[..., ks:ks + block, :].transpose(-2, -1)) * scale
            m_new = torch.maximum(m, s.amax(-1))
            p = torch.exp(s - m_new[..., None])
            shrink = torch.exp(m - m_new)
            l = l * shrink + p.sum(-1)
            acc = acc * shrink[..., None] + p @ v[..., ks:ks + block, :]
            m = m_new
        out[..., qs:qs + block, :] = acc / l[..., None]
    return out
''',
    },
}
