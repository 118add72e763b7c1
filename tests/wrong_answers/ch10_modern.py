"""Chapter 10's plausible wrong answers: each must earn 0 on its question's hidden tests."""

WRONG_ANSWERS: dict[str, dict[str, str]] = {
    "q1": {
        "subtracts the mean first (LayerNorm, not RMSNorm)": '''
def rms_norm(x, weight, eps=1e-6):
    x = x - x.mean(dim=-1, keepdim=True)
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight
''',
        "adds eps outside the square root": '''
def rms_norm(x, weight, eps=1e-6):
    return x / (x.pow(2).mean(dim=-1, keepdim=True).sqrt() + eps) * weight
''',
        "sums the squares instead of averaging them": '''
def rms_norm(x, weight, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).sum(dim=-1, keepdim=True) + eps) * weight
''',
    },
    "q2": {
        "rotates the halves (i, i + d/2) instead of the pairs (2i, 2i + 1)": '''
def rope(x, start=0, base=10000.0):
    L, d = x.shape[-2:]
    omega = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = torch.arange(start, start + L, dtype=torch.float64)[:, None] * omega
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    a, b = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
''',
        "ignores start (every call begins at position 0)": '''
def rope(x, start=0, base=10000.0):
    L, d = x.shape[-2:]
    omega = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = torch.arange(L, dtype=torch.float64)[:, None] * omega
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)
''',
        "frequencies base^(-i/d) instead of base^(-2i/d)": '''
def rope(x, start=0, base=10000.0):
    L, d = x.shape[-2:]
    omega = base ** (-torch.arange(0, d // 2, dtype=torch.float64) / d)
    angle = torch.arange(start, start + L, dtype=torch.float64)[:, None] * omega
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)
''',
        "angles in float32 (torch.arange's default dtype), though the question asks for float64": '''
def rope(x, start=0, base=10000.0):
    L, d = x.shape[-2:]
    omega = base ** (-torch.arange(0, d, 2) / d)
    angle = torch.arange(start, start + L)[:, None] * omega
    out = x.clone()
    out[..., 0::2] = x[..., 0::2] * angle.cos() - x[..., 1::2] * angle.sin()
    out[..., 1::2] = x[..., 0::2] * angle.sin() + x[..., 1::2] * angle.cos()
    return out
''',
    },
    "q3": {
        "gates the value branch (SiLU on x V^T, not on x W^T)": '''
def swiglu(x, w, v, w2):
    value = x @ v.T
    return (value * torch.sigmoid(value) * (x @ w.T)) @ w2.T
''',
        "a sigmoid gate (GLU) instead of SiLU": '''
def swiglu(x, w, v, w2):
    return (torch.sigmoid(x @ w.T) * (x @ v.T)) @ w2.T
''',
    },
    "q4": {
        "interleaves the heads (head h reads kv head h % kv_heads)": '''
def repeat_kv(kv, num_heads):
    B, kv_heads, L, d_h = kv.shape
    if num_heads % kv_heads:
        raise ValueError(f"num_heads={num_heads} is not a multiple of kv_heads={kv_heads}")
    return kv.repeat(1, num_heads // kv_heads, 1, 1)
''',
        "no check: 3 kv heads for 4 heads fail with a RuntimeError, not a ValueError": '''
def repeat_kv(kv, num_heads):
    B, kv_heads, L, d_h = kv.shape
    group = max(num_heads // kv_heads, 1)
    return kv.repeat_interleave(group, dim=1)
''',
    },
    "q5": {
        "interleaved groups: query head h reads kv head h % G": '''
def gqa_step(x, wq, wk, wv, k_cache, v_cache, num_heads):
    B, G, T, d_h = k_cache.shape
    group = num_heads // G
    q = (x @ wq.T).view(B, group, G, d_h).transpose(1, 2)
    k_cache = torch.cat([k_cache, (x @ wk.T).view(B, G, 1, d_h)], dim=2)
    v_cache = torch.cat([v_cache, (x @ wv.T).view(B, G, 1, d_h)], dim=2)
    out = torch.softmax(q @ k_cache.transpose(-2, -1) / math.sqrt(d_h), dim=-1) @ v_cache
    return out.transpose(1, 2).reshape(B, 1, num_heads * d_h), k_cache, v_cache
''',
        "attends before appending: the new token does not see itself": '''
def gqa_step(x, wq, wk, wv, k_cache, v_cache, num_heads):
    B, G, T, d_h = k_cache.shape
    group = num_heads // G
    q = (x @ wq.T).view(B, G, group, d_h)
    out = torch.softmax(q @ k_cache.transpose(-2, -1) / math.sqrt(d_h), dim=-1) @ v_cache
    k_cache = torch.cat([k_cache, (x @ wk.T).view(B, G, 1, d_h)], dim=2)
    v_cache = torch.cat([v_cache, (x @ wv.T).view(B, G, 1, d_h)], dim=2)
    return out.reshape(B, 1, num_heads * d_h), k_cache, v_cache
''',
        "scales the scores by the model width D, not the head size": '''
def gqa_step(x, wq, wk, wv, k_cache, v_cache, num_heads):
    B, G, T, d_h = k_cache.shape
    group = num_heads // G
    q = (x @ wq.T).view(B, G, group, d_h)
    k_cache = torch.cat([k_cache, (x @ wk.T).view(B, G, 1, d_h)], dim=2)
    v_cache = torch.cat([v_cache, (x @ wv.T).view(B, G, 1, d_h)], dim=2)
    out = torch.softmax(q @ k_cache.transpose(-2, -1) / math.sqrt(x.shape[-1]), dim=-1) @ v_cache
    return out.reshape(B, 1, num_heads * d_h), k_cache, v_cache
''',
        "right outputs, but calls its own repeat_kv (Question 4) on the caches": '''
def gqa_step(x, wq, wk, wv, k_cache, v_cache, num_heads):
    B, G, T, d_h = k_cache.shape
    q = (x @ wq.T).view(B, num_heads, 1, d_h)
    k_cache = torch.cat([k_cache, (x @ wk.T).view(B, G, 1, d_h)], dim=2)
    v_cache = torch.cat([v_cache, (x @ wv.T).view(B, G, 1, d_h)], dim=2)
    k, v = repeat_kv(k_cache, num_heads), repeat_kv(v_cache, num_heads)
    out = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_h), dim=-1) @ v
    return out.reshape(B, 1, num_heads * d_h), k_cache, v_cache
''',
        "right outputs, but repeats the cache inline with repeat_interleave": '''
def gqa_step(x, wq, wk, wv, k_cache, v_cache, num_heads):
    B, G, T, d_h = k_cache.shape
    q = (x @ wq.T).view(B, num_heads, 1, d_h)
    k_cache = torch.cat([k_cache, (x @ wk.T).view(B, G, 1, d_h)], dim=2)
    v_cache = torch.cat([v_cache, (x @ wv.T).view(B, G, 1, d_h)], dim=2)
    k = k_cache.repeat_interleave(num_heads // G, dim=1)
    v = v_cache.repeat_interleave(num_heads // G, dim=1)
    out = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_h), dim=-1) @ v
    return out.reshape(B, 1, num_heads * d_h), k_cache, v_cache
''',
        "right outputs, but scores as a broadcast product over d_h (a repeated-size tensor)": '''
def gqa_step(x, wq, wk, wv, k_cache, v_cache, num_heads):
    B, G, T, d_h = k_cache.shape
    group = num_heads // G
    q = (x @ wq.T).view(B, G, group, 1, d_h)
    k_cache = torch.cat([k_cache, (x @ wk.T).view(B, G, 1, d_h)], dim=2)
    v_cache = torch.cat([v_cache, (x @ wv.T).view(B, G, 1, d_h)], dim=2)
    scores = (q * k_cache[:, :, None]).sum(-1) / math.sqrt(d_h)  # (B, G, group, T + 1)
    out = torch.softmax(scores, dim=-1) @ v_cache
    return out.reshape(B, 1, num_heads * d_h), k_cache, v_cache
''',
    },
    "q6": {
        "multiplies the base by scale (the slowest pair slows by less than scale)": '''
def ntk_base(base, scale, head_dim):
    return float(base * scale)
''',
        "inverts the exponent: scale^((d-2)/d)": '''
def ntk_base(base, scale, head_dim):
    return float(base * scale ** ((head_dim - 2) / head_dim))
''',
        "divides the base (speeds the rotations up)": '''
def ntk_base(base, scale, head_dim):
    return float(base / scale ** (head_dim / (head_dim - 2)))
''',
        "the right base, but head_dim 4 rejected (<= 4 instead of < 4)": '''
def ntk_base(base, scale, head_dim):
    if scale < 1 or head_dim <= 4 or head_dim % 2:
        raise ValueError(f"bad arguments: scale={scale}, head_dim={head_dim}")
    return float(base * scale ** (head_dim / (head_dim - 2)))
''',
        "the right base, but head_dim 4 rejected (< 5)": '''
def ntk_base(base, scale, head_dim):
    if scale < 1 or head_dim < 5 or head_dim % 2:
        raise ValueError(f"bad arguments: scale={scale}, head_dim={head_dim}")
    return float(base * scale ** (head_dim / (head_dim - 2)))
''',
        "the right base, but head_dim 2 accepted (only the parity checked)": '''
def ntk_base(base, scale, head_dim):
    if scale < 1 or head_dim % 2:
        raise ValueError(f"bad arguments: scale={scale}, head_dim={head_dim}")
    return float(base * scale ** (head_dim / (head_dim - 2)))
''',
        "the right base, but scale 1 rejected (<= 1 instead of < 1)": '''
def ntk_base(base, scale, head_dim):
    if scale <= 1 or head_dim < 4 or head_dim % 2:
        raise ValueError(f"bad arguments: scale={scale}, head_dim={head_dim}")
    return float(base * scale ** (head_dim / (head_dim - 2)))
''',
        "the right base, but a scale just below 1 accepted (< 0.5)": '''
def ntk_base(base, scale, head_dim):
    if scale < 0.5 or head_dim < 4 or head_dim % 2:
        raise ValueError(f"bad arguments: scale={scale}, head_dim={head_dim}")
    return float(base * scale ** (head_dim / (head_dim - 2)))
''',
    },
}

RIGHT_ANSWERS: dict[str, dict[str, str]] = {  # other methods than the solution's: every point
    "q2": {
        "angles in x's dtype (float64 here), written into a clone by slices": '''
def rope(x, start=0, base=10000.0):
    L, d = x.shape[-2:]
    omega = base ** (-torch.arange(0, d, 2, dtype=x.dtype) / d)
    angle = torch.arange(start, start + L, dtype=x.dtype)[:, None] * omega
    out = x.clone()
    out[..., 0::2] = x[..., 0::2] * angle.cos() - x[..., 1::2] * angle.sin()
    out[..., 1::2] = x[..., 0::2] * angle.sin() + x[..., 1::2] * angle.cos()
    return out
''',
    },
    "q5": {
        "one query head at a time, each reading its kv head (no copy of the cache)": '''
def gqa_step(x, wq, wk, wv, k_cache, v_cache, num_heads):
    B, G, T, d_h = k_cache.shape
    group = num_heads // G
    q = (x @ wq.T).view(B, num_heads, d_h)
    k_cache = torch.cat([k_cache, (x @ wk.T).view(B, G, 1, d_h)], dim=2)
    v_cache = torch.cat([v_cache, (x @ wv.T).view(B, G, 1, d_h)], dim=2)
    heads = []
    for h in range(num_heads):
        k, v = k_cache[:, h // group], v_cache[:, h // group]  # (B, T + 1, d_h)
        scores = (k @ q[:, h, :, None]).squeeze(-1) / math.sqrt(d_h)  # (B, T + 1)
        weights = torch.softmax(scores, dim=-1)
        heads.append((weights[:, None, :] @ v).squeeze(1))  # (B, d_h)
    out = torch.stack(heads, dim=1)  # (B, H, d_h)
    return out.reshape(B, 1, num_heads * d_h), k_cache, v_cache
''',
    },
}
