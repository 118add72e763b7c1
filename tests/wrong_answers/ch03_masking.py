"""Chapter 3's plausible wrong answers: each must fail every hidden test of its question."""

PASSES = '''
def truncated_passes(x, W_Q, W_K, W_V):
    rows = []
    for t in range(x.shape[0]):
        part = {truncated}
        weights = ((part @ W_Q) @ (part @ W_K).T{scale}).softmax(dim=-1)
        rows.append((weights @ (part @ W_V))[t])
    return torch.stack(rows)


def zeroed_passes(x, W_Q, W_K, W_V):
    rows = []
    for t in range(x.shape[0]):
        part = x.clone()
        part[{zeroed}:] = 0
        weights = ((part @ W_Q) @ (part @ W_K).T{scale}).softmax(dim=-1)
        rows.append((weights @ (part @ W_V))[t])
    return torch.stack(rows)
'''
SCALED = " / math.sqrt(W_K.shape[1])"

WRONG_ANSWERS: dict[str, dict[str, str]] = {
    "q1": {
        "keeps the upper triangle (the future, not the past)": '''
def causal_mask(length):
    return torch.ones(length, length, dtype=torch.bool).triu()
''',
        "hides the diagonal too (a position may not see itself)": '''
def causal_mask(length):
    return torch.ones(length, length, dtype=torch.bool).tril(-1)
''',
        "an additive float mask (0 and -inf), not a bool one": '''
def causal_mask(length):
    return torch.full((length, length), float("-inf")).triu(1)
''',
    },
    "q2": {
        "off by one: keeps lengths[b] + 1 positions": '''
def padding_mask(lengths, length):
    lengths = torch.as_tensor(lengths)
    return torch.arange(length)[None, :] <= lengths[:, None]
''',
        "True on the padding (the mask of what to hide)": '''
def padding_mask(lengths, length):
    lengths = torch.as_tensor(lengths)
    return torch.arange(length)[None, :] >= lengths[:, None]
''',
    },
    "q3": {
        "softmax first, then zero the masked weights (rows no longer sum to 1)": '''
def masked_attention_weights(q, k, mask):
    weights = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(dim=-1)
    return weights.masked_fill(~mask, 0.0)
''',
        "masks with a large negative number before scaling, no empty-row rule": '''
def masked_attention_weights(q, k, mask):
    scores = (q @ k.transpose(-2, -1)).masked_fill(~mask, -1e4) / math.sqrt(q.shape[-1])
    return scores.softmax(dim=-1)
''',
        "masks the scores with zero instead of -inf": '''
def masked_attention_weights(q, k, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    weights = scores.masked_fill(~mask, 0.0).softmax(dim=-1)
    return weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
''',
    },
    "q4": {
        "prompt rows see everything, generated tokens included": '''
def prefix_lm_mask(length, prefix):
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    return (j <= i) | (i < prefix)
''',
        "off by one: the prompt reaches one token too far": '''
def prefix_lm_mask(length, prefix):
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    return (j <= i) | (j <= prefix)
''',
    },
    "q5": {
        "the window counts the query itself (keys i - window + 1 .. i)": '''
def sliding_window_mask(length, window):
    if window < 0:
        raise ValueError(f"window must be >= 0, got {window}")
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    return (j <= i) & (j > i - window)
''',
        "a symmetric band: forgets causality": '''
def sliding_window_mask(length, window):
    if window < 0:
        raise ValueError(f"window must be >= 0, got {window}")
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    return (i - j).abs() <= window
''',
        "no check of the window (a negative one gives an empty mask)": '''
def sliding_window_mask(length, window):
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    return (j <= i) & (j >= i - window)
''',
    },
    "q6": {
        "no 1 / sqrt(d_k) in either pass": PASSES.format(truncated="x[: t + 1]", zeroed="t + 1", scale=""),
        "off by one: both keep position t + 1": PASSES.format(truncated="x[: t + 2]", zeroed="t + 2",
                                                               scale=SCALED),
        "the two schemes swapped": '''
def truncated_passes(x, W_Q, W_K, W_V):
    rows = []
    for t in range(x.shape[0]):
        part = x.clone()
        part[t + 1:] = 0
        weights = ((part @ W_Q) @ (part @ W_K).T / math.sqrt(W_K.shape[1])).softmax(dim=-1)
        rows.append((weights @ (part @ W_V))[t])
    return torch.stack(rows)


def zeroed_passes(x, W_Q, W_K, W_V):
    rows = []
    for t in range(x.shape[0]):
        part = x[: t + 1]
        weights = ((part @ W_Q) @ (part @ W_K).T / math.sqrt(W_K.shape[1])).softmax(dim=-1)
        rows.append((weights @ (part @ W_V))[t])
    return torch.stack(rows)
''',
    },    "q7": {
        "causal only: documents see each other": '''
def packed_causal_mask(segment_ids):
    ids = torch.as_tensor(segment_ids)
    L = ids.shape[-1]
    return torch.ones(L, L, dtype=torch.bool).tril().expand(ids.shape[0], L, L)
''',
        "same document only: forgets the order": '''
def packed_causal_mask(segment_ids):
    ids = torch.as_tensor(segment_ids)
    return ids[:, :, None] == ids[:, None, :]
''',
        "a key sees its query (the transposed triangle)": '''
def packed_causal_mask(segment_ids):
    ids = torch.as_tensor(segment_ids)
    L = ids.shape[-1]
    return (ids[:, :, None] == ids[:, None, :]) & torch.ones(L, L, dtype=torch.bool).triu()
''',
    },
}
