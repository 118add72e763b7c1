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
def flash_forward_kernel(Q, K, V, O, LSE, L_q, L_k, scale,
                         IS_CAUSAL: tl.constexpr, BLOCK: tl.constexpr, D: tl.constexpr):
    qb, bh = tl.program_id(0), tl.program_id(1)
    rows = qb * BLOCK + tl.arange(0, BLOCK)
    cols = tl.arange(0, BLOCK)
    feats = tl.arange(0, D)
    q = tl.load(Q + bh * L_q * D + rows[:, None] * D + feats[None, :], mask=rows[:, None] < L_q, other=0.0)
    k_ptrs = K + bh * L_k * D + cols[:, None] * D + feats[None, :]
    v_ptrs = V + bh * L_k * D + cols[:, None] * D + feats[None, :]
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    l = tl.full([BLOCK], 0.0, tl.float32)
    acc = tl.full([BLOCK, D], 0.0, tl.float32)
'''

_KERNEL_TAIL = '''    tl.store(O + bh * L_q * D + rows[:, None] * D + feats[None, :], acc / l[:, None], mask=rows[:, None] < L_q)
    tl.store(LSE + bh * L_q + rows, m + tl.log(l), mask=rows < L_q)


def flash_forward(q, k, v, is_causal):
    q, k, v = (x.contiguous() for x in (q, k, v))
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[:2], dtype=torch.float32)
    grid = (triton.cdiv(q.shape[1], 16), q.shape[0])
    flash_forward_kernel[grid](q, k, v, out, lse, q.shape[1], k.shape[1], 1 / math.sqrt(q.shape[-1]),
                               IS_CAUSAL=bool(is_causal), BLOCK=16, D=q.shape[-1])
    return out, lse
'''

_LOADS = '''        keys = start + cols
        k = tl.load(k_ptrs + start * D, mask=keys[:, None] < L_k, other=0.0)
        v = tl.load(v_ptrs + start * D, mask=keys[:, None] < L_k, other=0.0)
'''

_MASKED = '''        allowed = keys[None, :] < L_k
        if IS_CAUSAL:
            allowed = allowed & (keys[None, :] <= rows[:, None])
        s = tl.where(allowed, s, float("-inf"))
'''

_ONLINE = '''        m_new = tl.maximum(m, tl.max(s, axis=1))
        shrink = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])
        l = l * shrink + tl.sum(p, axis=1)
        acc = acc * shrink[:, None] + tl.dot(p, v, input_precision="ieee")
        m = m_new
'''

_SCORES = '''        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
'''

_ALL_BLOCKS = '''    end = tl.minimum(L_k, (qb + 1) * BLOCK) if IS_CAUSAL else L_k
    for start in range(0, end, BLOCK):
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
        "no running maximum: exp of the raw scores": _kernel(_ALL_BLOCKS + _LOADS + _SCORES + _MASKED + '''        p = tl.exp(s)
        l = l + tl.sum(p, axis=1)
        acc = acc + tl.dot(p, v, input_precision="ieee")
    m = tl.full([BLOCK], 0.0, tl.float32)
'''),
        "each block's own maximum, the old sums never rescaled": _kernel(_ALL_BLOCKS + _LOADS + _SCORES + _MASKED + '''        m = tl.maximum(m, tl.max(s, axis=1))
        p = tl.exp(s - m[:, None])
        l = l + tl.sum(p, axis=1)
        acc = acc + tl.dot(p, v, input_precision="ieee")
'''),
        "causal skip one block early: stops before the diagonal block": _kernel('''    end = tl.minimum(L_k, qb * BLOCK) if IS_CAUSAL else L_k
    for start in range(0, end, BLOCK):
''' + _LOADS + _SCORES + _MASKED + _ONLINE),
        "causal skip one block late: loads a block after the last query": _kernel('''    end = tl.minimum(L_k, (qb + 2) * BLOCK) if IS_CAUSAL else L_k
    for start in range(0, end, BLOCK):
''' + _LOADS + _SCORES + _MASKED + _ONLINE),
        "no scale: the raw dot products": _kernel(_ALL_BLOCKS + _LOADS + '''        s = tl.dot(q, tl.trans(k), input_precision="ieee")
''' + _MASKED + _ONLINE),
        "scales by 1/d, not 1/sqrt(d)": _kernel(_ALL_BLOCKS + _LOADS + '''        s = tl.dot(q, tl.trans(k), input_precision="ieee") / D
''' + _MASKED + _ONLINE),
        "the last partial key block unmasked: its padding keys score 0": _kernel(_ALL_BLOCKS + _LOADS + _SCORES + '''        if IS_CAUSAL:
            s = tl.where(keys[None, :] <= rows[:, None], s, float("-inf"))
''' + _ONLINE),
    },
}
