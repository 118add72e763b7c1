"""The decoding page's (chapter 6, second page) plausible wrong answers: each must earn 0 on its
question's hidden tests."""

_PRUNE = '''
def prune_beams(scores, lengths, log_probs, done, alpha, pad):
    B, K, V = log_probs.shape
    only_pad = torch.full((V,), float("-inf"), dtype=log_probs.dtype)
    only_pad[pad] = 0.0
    log_probs = torch.where(done[..., None], only_pad, log_probs)
    new_scores = (scores[..., None] + log_probs).reshape(B, K * V)
    grown = lengths + (~done).to(lengths.dtype)
    new_lengths = grown[..., None].expand(B, K, V).reshape(B, K * V)
    ranking = new_scores / new_lengths.to(new_scores.dtype) ** alpha
    index = ranking.topk(K, dim=-1).indices
    return index // V, index % V, new_scores.gather(1, index), new_lengths.gather(1, index)
'''

_WINDOW = '''
def window_cache_attention(q, k, v, cache_k, cache_v, window):
    c, L = cache_k.shape[2], q.shape[2]
    keys = torch.cat([cache_k, k], dim=2)
    values = torch.cat([cache_v, v], dim=2)
    i = torch.arange(L, device=q.device)[:, None] + c
    j = torch.arange(c + L, device=q.device)[None, :]
    sees = (j <= i) & (j > i - window)
    scores = q @ keys.transpose(-2, -1) / math.sqrt(q.shape[-1])
    out = scores.masked_fill(~sees, float("-inf")).softmax(dim=-1) @ values
    B, h, _, d = out.shape
    return out.transpose(1, 2).reshape(B, L, h * d), keys[:, :, -window:], values[:, :, -window:]
'''


def _window(old: str, new: str) -> str:
    """The right sliding-window cache step with one mistake: ``old`` replaced by ``new``."""
    assert _WINDOW.count(old) == 1, old
    return _WINDOW.replace(old, new)


def _prune(old: str, new: str) -> str:
    """The right beam pruning with one line's mistake: ``old`` replaced by ``new``."""
    assert _PRUNE.count(old) == 1, old
    return _PRUNE.replace(old, new)


WRONG_ANSWERS: dict[str, dict[str, str]] = {
    "q1": {
        "keeps the start token": """
def hypothesis_ids(row, eos, pad):
    ids = list(row)
    if eos in ids:
        ids = ids[:ids.index(eos)]
    return [t for t in ids if t != pad]
""",
        "stops at the last eos, not the first": """
def hypothesis_ids(row, eos, pad):
    ids = list(row[1:])
    if eos in ids:
        ids = ids[:len(ids) - 1 - ids[::-1].index(eos)]
    return [t for t in ids if t != pad]
""",
        "keeps the eos": """
def hypothesis_ids(row, eos, pad):
    ids = list(row[1:])
    if eos in ids:
        ids = ids[:ids.index(eos) + 1]
    return [t for t in ids if t != pad]
""",
        "drops only trailing padding": """
def hypothesis_ids(row, eos, pad):
    ids = list(row[1:])
    if eos in ids:
        ids = ids[:ids.index(eos)]
    while ids and ids[-1] == pad:
        ids.pop()
    return ids
""",
        "without eos returns nothing": """
def hypothesis_ids(row, eos, pad):
    ids = list(row[1:])
    if eos not in ids:
        return []
    return [t for t in ids[:ids.index(eos)] if t != pad]
""",
    },
    "q2": {
        "a finished row still adds its best log-probability": """
def greedy_step(log_probs, scores, done, pad, eos):
    best, tokens = log_probs.max(dim=-1)
    tokens = tokens.masked_fill(done, pad)
    return tokens, scores + best, done | (tokens == eos)
""",
        "a finished row writes its argmax, not pad": """
def greedy_step(log_probs, scores, done, pad, eos):
    best, tokens = log_probs.max(dim=-1)
    return tokens, scores + best.masked_fill(done, 0.0), done | (tokens == eos)
""",
        "done forgets the rows finished before": """
def greedy_step(log_probs, scores, done, pad, eos):
    best, tokens = log_probs.max(dim=-1)
    tokens = tokens.masked_fill(done, pad)
    return tokens, scores + best.masked_fill(done, 0.0), tokens == eos
""",
        "done is never updated": """
def greedy_step(log_probs, scores, done, pad, eos):
    best, tokens = log_probs.max(dim=-1)
    tokens = tokens.masked_fill(done, pad)
    return tokens, scores + best.masked_fill(done, 0.0), done
""",
    },
    "q3": {
        "concatenates along the width, not the positions": _window(
            "keys = torch.cat([cache_k, k], dim=2)", "keys = torch.cat([cache_k, k], dim=-1)"),
        "concatenates along the heads": _window(
            "values = torch.cat([cache_v, v], dim=2)", "values = torch.cat([cache_v, v], dim=1)"),
        "the window one position too wide (sees W + 1 keys)": _window(
            "(j > i - window)", "(j >= i - window)"),
        "the window one position too narrow (sees W - 1 keys)": _window(
            "(j > i - window)", "(j > i - window + 1)"),
        "keeps W + 1 positions in the cache": _window(
            "keys[:, :, -window:], values[:, :, -window:]",
            "keys[:, :, -window - 1:], values[:, :, -window - 1:]"),
        "keeps W - 1 positions in the cache": _window(
            "keys[:, :, -window:], values[:, :, -window:]",
            "keys[:, :, -(window - 1):], values[:, :, -(window - 1):]"),
        "cuts the cache to W before the chunk attends (early chunk tokens lose keys)": _window(
            "    i = torch.arange(L, device=q.device)[:, None] + c",
            "    keys, values = keys[:, :, -window:], values[:, :, -window:]\n"
            "    c = keys.shape[2] - L\n"
            "    i = torch.arange(L, device=q.device)[:, None] + c"),
        "merges the heads by reshape without the transpose": _window(
            "out.transpose(1, 2).reshape(B, L, h * d)", "out.reshape(B, L, h * d)"),
        "no scaling by sqrt(d)": _window(
            "scores = q @ keys.transpose(-2, -1) / math.sqrt(q.shape[-1])",
            "scores = q @ keys.transpose(-2, -1)"),
        "no causal mask, as for one new token: a chunk's token sees its later ones": _window(
            "sees = (j <= i) & (j > i - window)", "sees = j > i - window"),
        "the causal mask without the cache's offset (new token i sees keys j <= i)": _window(
            "sees = (j <= i) & (j > i - window)", "sees = (j <= i - c) & (j > i - window)"),
    },
    "q4": {
        "ranks by the raw sum (the penalty only at the final choice)": _prune(
            "ranking = new_scores / new_lengths.to(new_scores.dtype) ** alpha", "ranking = new_scores"),
        "divides by the length before the new token": _prune(
            "ranking = new_scores / new_lengths.to(new_scores.dtype) ** alpha",
            "ranking = new_scores / lengths[..., None].expand(B, K, V).reshape(B, K * V).to(new_scores.dtype) ** alpha"),
        "a finished beam's length keeps growing": _prune(
            "grown = lengths + (~done).to(lengths.dtype)", "grown = lengths + 1"),
        "returns the normalised scores instead of the raw sums": _prune(
            "new_scores.gather(1, index), new_lengths", "ranking.gather(1, index), new_lengths"),
        "parent = index % K (the flat index split the wrong way)": _prune(
            "return index // V, index % V,", "return index % K, index // K,"),
        "a finished beam pays the model's log-probability of pad instead of 0": _prune(
            "log_probs = torch.where(done[..., None], only_pad, log_probs)",
            "log_probs = torch.where(done[..., None], log_probs + only_pad, log_probs)"),
        "an unfinished beam may not write pad": _prune(
            "new_scores = (scores[..., None] + log_probs).reshape(B, K * V)",
            "log_probs[..., pad] = torch.where(done, log_probs[..., pad], float('-inf'))\n"
            "    new_scores = (scores[..., None] + log_probs).reshape(B, K * V)"),
        "GNMT's length penalty ((5 + length) / 6) ** alpha instead of length ** alpha": _prune(
            "ranking = new_scores / new_lengths.to(new_scores.dtype) ** alpha",
            "ranking = new_scores / ((5 + new_lengths.to(new_scores.dtype)) / 6) ** alpha"),
    },
}

RIGHT_ANSWERS: dict[str, dict[str, str]] = {
    "q2": {
        "the page's lines, updating scores and done in place (scores +=, done |=)": """
def greedy_step(log_probs, scores, done, pad, eos):
    best, tokens = log_probs.max(dim=-1)
    tokens = tokens.masked_fill(done, pad)
    scores += best.masked_fill(done, 0.0)
    done |= tokens == eos
    return tokens, scores, done
""",
    },
    "q4": {
        "in float32 (the question names no dtype), the returned sums float32": """
def prune_beams(scores, lengths, log_probs, done, alpha, pad):
    B, K, V = log_probs.shape
    log_probs = log_probs.float()
    only_pad = torch.full((V,), float("-inf"))
    only_pad[pad] = 0.0
    new_scores = (scores.float()[..., None] + torch.where(done[..., None], only_pad, log_probs)).reshape(B, K * V)
    new_lengths = (lengths + (~done).long())[..., None].expand(B, K, V).reshape(B, K * V)
    index = (new_scores / new_lengths.float() ** alpha).topk(K, dim=-1).indices
    return index // V, index % V, new_scores.gather(1, index), new_lengths.gather(1, index)
""",
        "in float64 whatever the inputs' dtype": """
def prune_beams(scores, lengths, log_probs, done, alpha, pad):
    B, K, V = log_probs.shape
    log_probs = log_probs.double()
    only_pad = torch.full((V,), float("-inf"), dtype=torch.float64)
    only_pad[pad] = 0.0
    new_scores = (scores.double()[..., None] + torch.where(done[..., None], only_pad, log_probs)).reshape(B, K * V)
    new_lengths = (lengths + (~done).long())[..., None].expand(B, K, V).reshape(B, K * V)
    index = (new_scores / new_lengths.double() ** alpha).topk(K, dim=-1).indices
    return index // V, index % V, new_scores.gather(1, index), new_lengths.gather(1, index)
""",
        "the page's style, masking the finished beams' log_probs in place": """
def prune_beams(scores, lengths, log_probs, done, alpha, pad):
    B, K, V = log_probs.shape
    log_probs[done] = float("-inf")
    log_probs[..., pad] = torch.where(done, 0.0, log_probs[..., pad])
    new_scores = (scores[..., None] + log_probs).reshape(B, K * V)
    new_lengths = (lengths + (~done).long())[..., None].expand(B, K, V).reshape(B, K * V)
    index = (new_scores / new_lengths.to(new_scores.dtype) ** alpha).topk(K, dim=-1).indices
    return index // V, index % V, new_scores.gather(1, index), new_lengths.gather(1, index)
""",
    },
    "q3": {
        "token by token, each new query over the slice of its own last window keys": """
def window_cache_attention(q, k, v, cache_k, cache_v, window):
    keys, values = torch.cat([cache_k, k], 2), torch.cat([cache_v, v], 2)
    c, L = cache_k.shape[2], q.shape[2]
    outs = []
    for i in range(L):
        end = c + i + 1
        start = max(end - window, 0)
        w = (q[:, :, i:i + 1] @ keys[:, :, start:end].transpose(-2, -1) / q.shape[-1] ** 0.5).softmax(-1)
        outs.append(w @ values[:, :, start:end])
    out = torch.cat(outs, 2)
    out = torch.cat([out[:, head] for head in range(out.shape[1])], -1)
    n = min(c + L, window)
    return out, keys[:, :, c + L - n:], values[:, :, c + L - n:]
""",
    },
}
