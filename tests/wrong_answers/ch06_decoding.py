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
        "no scaling by sqrt(d)": """
def cached_attention(q, k, v, keep):
    scores = (q @ k.transpose(-2, -1)).masked_fill(~keep[:, None, None, :], float("-inf"))
    return scores.softmax(dim=-1) @ v
""",
        "padding not masked": """
def cached_attention(q, k, v, keep):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return scores.softmax(dim=-1) @ v
""",
        "scaled by sqrt(t), the number of keys": """
def cached_attention(q, k, v, keep):
    scores = q @ k.transpose(-2, -1) / math.sqrt(k.shape[-2])
    scores = scores.masked_fill(~keep[:, None, None, :], float("-inf"))
    return scores.softmax(dim=-1) @ v
""",
        "a causal mask of its own (the one query sees only the first key)": """
def cached_attention(q, k, v, keep):
    t = k.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    allowed = torch.ones(1, t, dtype=torch.bool).tril() & keep[:, None, None, :]
    return scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1) @ v
""",
        "the mean of the values (uniform weights)": """
def cached_attention(q, k, v, keep):
    w = keep[:, None, None, :].to(v.dtype)
    return (w / w.sum(-1, keepdim=True)) @ v
""",
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
