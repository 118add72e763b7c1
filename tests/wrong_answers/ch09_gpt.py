"""Chapter 9's plausible wrong answers: each must earn 0 on its question's hidden tests."""

WRONG_ANSWERS: dict[str, dict[str, str]] = {
    "q1": {
        "shifted the wrong way (the target comes before its input)": '''
def next_token_pairs(tokens, pad_id=0):
    inputs, targets = tokens[:, 1:], tokens[:, :-1]
    return inputs, targets, targets != pad_id
''',
        "the padding mask read from the inputs, not the targets": '''
def next_token_pairs(tokens, pad_id=0):
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    return inputs, targets, inputs != pad_id
''',
    },
    "q2": {
        "averages over every position, padding included": '''
def lm_loss_from_logits(logits, targets, pad_id=0):
    log_p = logits.log_softmax(-1).gather(-1, targets[..., None]).squeeze(-1)
    return -log_p.mean()
''',
        "sums instead of averaging": '''
def lm_loss_from_logits(logits, targets, pad_id=0):
    log_p = logits.log_softmax(-1).gather(-1, targets[..., None]).squeeze(-1)
    return -(log_p * (targets != pad_id)).sum()
''',
        "log-softmax over the positions (dim=1), not the vocabulary": '''
def lm_loss_from_logits(logits, targets, pad_id=0):
    log_p = logits.log_softmax(1).gather(-1, targets[..., None]).squeeze(-1)
    real = targets != pad_id
    return -(log_p * real).sum() / real.sum()
''',
    },
    "q3": {
        "multiplies the logits by the temperature": '''
def sampling_distribution(logits, temperature=1.0, top_k=None):
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    logits = logits * temperature
    if top_k is not None:
        kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return logits.softmax(-1)
''',
        "zeroes the probabilities outside the top k without renormalising": '''
def sampling_distribution(logits, temperature=1.0, top_k=None):
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    probs = (logits / temperature).softmax(-1)
    if top_k is not None:
        kth = probs.topk(min(top_k, probs.shape[-1]), dim=-1).values[..., -1:]
        probs = probs * (probs >= kth)
    return probs
''',
        "accepts T = 0 (raises only for T < 0)": '''
def sampling_distribution(logits, temperature=1.0, top_k=None):
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    logits = logits / max(temperature, 1e-6)
    if top_k is not None:
        kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return logits.softmax(-1)
''',
    },
    "q4": {
        "an absolute threshold (p >= p_min), not one relative to the top probability": '''
def min_p_distribution(logits, p_min):
    if not 0 < p_min <= 1:
        raise ValueError(f"p_min must be in (0, 1], got {p_min}")
    probs = logits.softmax(dim=-1)
    kept = probs * (probs >= p_min)
    return kept / kept.sum(dim=-1, keepdim=True)
''',
        "no renormalisation after filtering": '''
def min_p_distribution(logits, p_min):
    if not 0 < p_min <= 1:
        raise ValueError(f"p_min must be in (0, 1], got {p_min}")
    probs = logits.softmax(dim=-1)
    return probs * (probs >= p_min * probs.amax(dim=-1, keepdim=True))
''',
        "the threshold on the logits (logit >= p_min * top logit)": '''
def min_p_distribution(logits, p_min):
    if not 0 < p_min <= 1:
        raise ValueError(f"p_min must be in (0, 1], got {p_min}")
    kept = logits.masked_fill(logits < p_min * logits.amax(dim=-1, keepdim=True), float("-inf"))
    return kept.softmax(dim=-1)
''',
    },
    "q5": {
        "masks the padded queries (rows) instead of the padded keys": '''
def causal_padding_mask(tokens, pad_id):
    L = tokens.shape[-1]
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    return causal & (tokens != pad_id)[:, None, :, None]
''',
        "triu: each query sees the future, not the past": '''
def causal_padding_mask(tokens, pad_id):
    L = tokens.shape[-1]
    causal = torch.ones(L, L, dtype=torch.bool).triu()
    return causal & (tokens != pad_id)[:, None, None, :]
''',
    },
    "q6": {
        "divides every generated logit (a negative one moves up)": '''
def repetition_penalty(logits, generated, penalty):
    if penalty < 1:
        raise ValueError(f"penalty must be >= 1, got {penalty}")
    seen = torch.zeros(logits.shape, dtype=torch.bool)
    seen.scatter_(-1, generated, True)
    return torch.where(seen, logits / penalty, logits)
''',
        "penalises once per occurrence (penalty ** count)": '''
def repetition_penalty(logits, generated, penalty):
    if penalty < 1:
        raise ValueError(f"penalty must be >= 1, got {penalty}")
    counts = torch.zeros(logits.shape, dtype=logits.dtype)
    counts.scatter_add_(-1, generated, torch.ones(generated.shape, dtype=logits.dtype))
    factor = penalty ** counts
    return torch.where(logits > 0, logits / factor, logits * factor)
''',
        "one history for the whole batch": '''
def repetition_penalty(logits, generated, penalty):
    if penalty < 1:
        raise ValueError(f"penalty must be >= 1, got {penalty}")
    seen = torch.zeros(logits.shape[-1], dtype=torch.bool)
    seen[generated.flatten()] = True
    pushed = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, pushed, logits)
''',
        "returns float32 whatever the dtype of logits": '''
def repetition_penalty(logits, generated, penalty):
    if penalty < 1:
        raise ValueError(f"penalty must be >= 1, got {penalty}")
    seen = torch.zeros(logits.shape, dtype=torch.bool)
    seen.scatter_(-1, generated, True)
    pushed = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, pushed, logits).float()
''',
    },
}
